"""RecordBatch, a zero-copy view of one v2 batch in a buffer, and iter_batches over a buffer.

A RecordBatch reads the 61-byte header once, when it is created, and nothing else: records
are decoded (and decompressed) only when records() is called, and the CRC is checked only
by ensure_valid() / is_valid(), as in Kafka.  The buffer may be bytes, bytearray,
mmap or a byte-formatted memoryview (the default format of memoryview(bytes)); the view
keeps a reference to it but holds no exported memoryview between calls, so an mmap under it
can still be closed or resized.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from .attributes import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    Compression,
    TimestampType,
)
from .compression import DECOMPRESSED_BYTES_MAX, check_compression, decompress
from .crc import crc32c
from .errors import CorruptRecordError, InvalidCrcError
from .header import (
    ATTRIBUTES_FIELD,
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_FIELD,
    BASE_SEQUENCE_FIELD,
    BASE_TIMESTAMP_FIELD,
    CRC_FIELD,
    HEADER,
    LAST_OFFSET_DELTA_FIELD,
    LENGTH_FIELD,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_FIELD,
    MAX_TIMESTAMP_FIELD,
    PARTITION_LEADER_EPOCH_FIELD,
    PRODUCER_EPOCH_FIELD,
    PRODUCER_ID_FIELD,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_FIELD,
    RECORDS_OFFSET,
)
from .record import Record
from .columns import RecordColumns, decode_columns
from .record_codec import decode_records
from .walk import BatchWalk

_unpack_header = HEADER.unpack_from
_new_batch = object.__new__
_COMPRESSIONS = tuple(Compression)  # indexed by codec id: faster than calling the enum
_TIMESTAMP_TYPES = tuple(TimestampType)


def _unpack_short_header(buffer, position: int) -> tuple:
    """The header fields of a batch that has fewer than 61 bytes left in its buffer, read as
    if zero-padded: only a batch too short to be valid gets here, and ensure_valid() and
    records() will say so; the file iterator still needs its length."""
    available = len(buffer) - position
    if available < LOG_OVERHEAD:
        raise CorruptRecordError(
            f"Truncated batch at position {position}: expected at least {LOG_OVERHEAD} bytes "
            f"for baseOffset and length, found {max(available, 0)}"
        )
    head = bytes(memoryview(buffer)[position:])
    return HEADER.unpack(head + bytes(RECORD_BATCH_OVERHEAD - len(head)))


class RecordBatch:
    """A view of the v2 batch at `position` of `buffer` (bytes, bytearray, memoryview, mmap).

    Header fields are read when the view is created: after patching a mutable buffer, make a
    new view to see the new values.
    """

    __slots__ = ("_buffer", "position", "_header")

    def __init__(self, buffer, position: int = 0) -> None:
        if position < 0:  # struct would count a negative position from the end
            raise ValueError(f"a batch position must be >= 0, found {position}")
        self._buffer = buffer
        self.position = position
        try:
            self._header = _unpack_header(buffer, position)
        except struct.error:
            self._header = _unpack_short_header(buffer, position)

    def __repr__(self) -> str:
        return (
            f"RecordBatch(position={self.position}, base_offset={self.base_offset}, "
            f"last_offset_delta={self.last_offset_delta}, records_count={self.records_count}, "
            f"size_in_bytes={self.size_in_bytes}, magic={self.magic}, attributes={self.attributes:#x})"
        )

    # -- header fields -------------------------------------------------------------------

    @property
    def base_offset(self) -> int:
        return self._header[BASE_OFFSET_FIELD]

    @property
    def length(self) -> int:
        """The length field: bytes after it, i.e. size_in_bytes - 12."""
        return self._header[LENGTH_FIELD]

    @property
    def size_in_bytes(self) -> int:
        return self._header[LENGTH_FIELD] + LOG_OVERHEAD

    @property
    def partition_leader_epoch(self) -> int:
        return self._header[PARTITION_LEADER_EPOCH_FIELD]

    @property
    def magic(self) -> int:
        return self._header[MAGIC_FIELD]

    @property
    def crc(self) -> int:
        """The stored CRC-32C."""
        return self._header[CRC_FIELD]

    @property
    def attributes(self) -> int:
        return self._header[ATTRIBUTES_FIELD]

    @property
    def last_offset_delta(self) -> int:
        return self._header[LAST_OFFSET_DELTA_FIELD]

    @property
    def base_timestamp(self) -> int:
        return self._header[BASE_TIMESTAMP_FIELD]

    @property
    def max_timestamp(self) -> int:
        return self._header[MAX_TIMESTAMP_FIELD]

    @property
    def producer_id(self) -> int:
        return self._header[PRODUCER_ID_FIELD]

    @property
    def producer_epoch(self) -> int:
        return self._header[PRODUCER_EPOCH_FIELD]

    @property
    def base_sequence(self) -> int:
        return self._header[BASE_SEQUENCE_FIELD]

    @property
    def records_count(self) -> int:
        return self._header[RECORDS_COUNT_FIELD]

    # -- derived fields ------------------------------------------------------------------

    @property
    def last_offset(self) -> int:
        return self._header[BASE_OFFSET_FIELD] + self._header[LAST_OFFSET_DELTA_FIELD]

    @property
    def next_offset(self) -> int:
        return self._header[BASE_OFFSET_FIELD] + self._header[LAST_OFFSET_DELTA_FIELD] + 1

    @property
    def compression(self) -> Compression:
        """The codec of the records area; UnsupportedCompressionError for ids 5..7."""
        codec = self._header[ATTRIBUTES_FIELD] & COMPRESSION_MASK
        if codec < len(_COMPRESSIONS):
            return _COMPRESSIONS[codec]
        return check_compression(codec)

    @property
    def timestamp_type(self) -> TimestampType:
        return _TIMESTAMP_TYPES[(self._header[ATTRIBUTES_FIELD] & TIMESTAMP_TYPE_MASK) != 0]

    @property
    def is_transactional(self) -> bool:
        return (self._header[ATTRIBUTES_FIELD] & TRANSACTIONAL_MASK) != 0

    @property
    def is_control(self) -> bool:
        return (self._header[ATTRIBUTES_FIELD] & CONTROL_MASK) != 0

    @property
    def delete_horizon_ms(self) -> int | None:
        """The delete horizon (baseTimestamp) when attribute bit 6 is set, else None."""
        if self._header[ATTRIBUTES_FIELD] & DELETE_HORIZON_MASK:
            return self._header[BASE_TIMESTAMP_FIELD]
        return None

    @property
    def view(self) -> memoryview:
        """A memoryview of exactly this batch's bytes (release it before closing an mmap)."""
        self._check_complete()
        start = self.position
        return memoryview(self._buffer)[start : start + self.size_in_bytes]

    # -- validation ----------------------------------------------------------------------

    def _where(self) -> str:
        return f"batch at position {self.position} (base offset {self.base_offset})"

    def _check_complete(self) -> None:
        """Raise unless the batch is at least a header long and wholly inside its buffer."""
        size = self._header[LENGTH_FIELD] + LOG_OVERHEAD
        if size < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"Record batch is corrupt ({self._where()}): expected a size of at least "
                f"{RECORD_BATCH_OVERHEAD} bytes (the header), found {size}"
            )
        available = len(self._buffer) - self.position
        if size > available:
            raise CorruptRecordError(
                f"Truncated {self._where()}: expected {size} bytes (length field "
                f"{size - LOG_OVERHEAD}), found {available} left in the buffer"
            )

    def _check_magic(self) -> None:
        magic = self._header[MAGIC_FIELD]
        if magic != MAGIC:
            raise CorruptRecordError(f"Unsupported record format in {self._where()}: expected magic {MAGIC}, found {magic}")

    def compute_crc(self) -> int:
        """CRC-32C of the bytes the stored CRC covers: attributes to the end of the batch."""
        self._check_complete()
        start = self.position
        return crc32c(memoryview(self._buffer)[start + ATTRIBUTES_OFFSET : start + LOG_OVERHEAD + self._header[LENGTH_FIELD]])

    def ensure_valid(self) -> None:
        """Raise CorruptRecordError unless this is a whole v2 batch (size, magic), and
        InvalidCrcError unless its stored CRC matches the computed one."""
        header = self._header
        start = self.position
        end = start + LOG_OVERHEAD + header[LENGTH_FIELD]
        if end - start < RECORD_BATCH_OVERHEAD or end > len(self._buffer) or header[MAGIC_FIELD] != MAGIC:
            self._check_complete()
            self._check_magic()
        computed = crc32c(memoryview(self._buffer)[start + ATTRIBUTES_OFFSET : end])
        if computed != header[CRC_FIELD]:
            raise InvalidCrcError(
                f"Record is corrupt ({self._where()}): stored crc = {header[CRC_FIELD]}, computed crc = {computed}"
            )

    def is_valid(self) -> bool:
        """Whether ensure_valid() would pass."""
        try:
            self.ensure_valid()
        except CorruptRecordError:
            return False
        return True

    # -- records -------------------------------------------------------------------------

    def records(self, decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX) -> list[Record]:
        """The batch's records, decompressed (DecompressionLimitError past
        ``decompressed_bytes_max``) and decoded, with absolute offsets and timestamps (every
        record of a LogAppendTime batch reads maxTimestamp).  The CRC is not checked here (call
        ensure_valid() first for untrusted bytes)."""
        return self._decode(decode_records, decompressed_bytes_max)

    def columns(self, decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX) -> RecordColumns:
        """The same records as ``records()``, as columns (offsets, timestamps_ms, keys, values,
        headers lists): several times cheaper per record for batches of like-shaped records
        (columns.py)."""
        return self._decode(decode_columns, decompressed_bytes_max)

    def _decode(self, decoder, decompressed_bytes_max: int):
        self._check_complete()
        self._check_magic()
        header = self._header
        start = self.position + RECORDS_OFFSET
        end = self.position + LOG_OVERHEAD + header[LENGTH_FIELD]
        compression = self.compression
        buffer = self._buffer
        # Byte positions in decoding errors count from the start of `area`.
        if compression is not Compression.NONE:
            buffer = decompress(compression, memoryview(buffer)[start:end], decompressed_bytes_max)
            start, end, area = 0, len(buffer), "decompressed records area"
        elif type(buffer) is bytes:  # decoded in place
            area = "buffer"
        else:  # one copy into bytes, whose indexing is the fastest byte access Python has
            buffer = bytes(memoryview(buffer)[start:end])
            start, end, area = 0, len(buffer), "records area"
        log_append_time_ms = header[MAX_TIMESTAMP_FIELD] if header[ATTRIBUTES_FIELD] & TIMESTAMP_TYPE_MASK else None
        try:
            return decoder(
                buffer,
                start,
                end,
                header[RECORDS_COUNT_FIELD],
                header[BASE_OFFSET_FIELD],
                header[BASE_TIMESTAMP_FIELD],
                log_append_time_ms,
            )
        except CorruptRecordError as exc:
            raise type(exc)(f"{exc} (in the {area} of the {self._where()})") from None

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())


def iter_batches(buffer, position: int = 0, end: int | None = None) -> Iterator[RecordBatch]:
    """The batches in buffer[position:end], walked by the bounded BatchWalk (walk.py): stop
    quietly when 17 or fewer bytes remain or the next batch does not fit before `end` (a partial
    trailing batch); CorruptRecordError when a length field is below 14, or below the 49 bytes
    of a v2 header in a batch that fits.  No CRC check and no magic check here: call
    ensure_valid() on each batch for that."""
    for batch_position, fields in BatchWalk(buffer, position, end):
        batch = _new_batch(RecordBatch)
        batch._buffer, batch.position, batch._header = buffer, batch_position, fields
        yield batch
