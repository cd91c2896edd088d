"""The bounded walkers: the one way any layer of seglog steps through batches or records.

Every byte a walker reads may lie: a producer's request, a segment read back after a crash, a
file a disk rotted.  So each walker checks every length it reads against the bytes that remain
and against the region it came from *before* it moves, and every loop is bounded by the bytes
it walks (each step moves forward by at least one whole header or one byte of record), never by
a count read from the bytes.  A lie is a ``CorruptRecordError`` naming where it was found; no
walker raises anything else about its input, loops, or allocates more than the bytes it was
given.

BatchWalk: batches, by Kafka's FileLogInputStream rules plus the v2 minimum::

    at most 17 bytes left (HEADER_BYTES_UP_TO_MAGIC)    stop quietly: nothing more to read
    length < 14 (BATCH_LENGTH_MIN)                      CorruptRecordError
    length < 49 (V2 minimum) and the batch fits         CorruptRecordError (no v2 batch is so short)
    the batch runs past the region's end                a torn tail: stop quietly, or
                                                        CorruptRecordError with torn_tail_ok=False
    the header runs past the buffer, not the region     stop with NEED_BYTES (a chunked reader
                                                        reads on from ``position``)

With ``offset_min`` given (reads that hand batches out), each batch must also have magic 2, a
lastOffsetDelta >= 0, a base offset >= ``offset_min`` and above the previous batch's last
offset, and a last offset below ``offset_limit``: a base offset is not covered by the CRC, so
this is the only check that catches one that rotted.

walk_records: the records area of one uncompressed (or decompressed) batch, yielding each
record's (timestampDelta, offsetDelta) after checking that its key, value and header lengths
stay inside the record, that its varints end within 5 (10) bytes, and that the fields fill the
record exactly; after ``count`` records no byte may remain.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator

from .errors import CorruptRecordError
from .header import (
    BATCH_LENGTH_MIN,
    HEADER,
    HEADER_BYTES_UP_TO_MAGIC,
    LAST_OFFSET_DELTA_FIELD,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_FIELD,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_FIELD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    BASE_OFFSET_FIELD,
    RECORD_BATCH_OVERHEAD,
    V2_BATCH_LENGTH_MIN,
)
from .varint import ZIGZAG_DECODE, decode_varint, decode_varlong

__all__ = ["BatchStop", "BatchWalk", "vouch_batches", "walk_records"]

_unpack = HEADER.unpack_from
_INT64_MAX = (1 << 63) - 1
# The five header fields the checked fast loops (BatchWalk.skip and seek) read, in one unpack
# instead of HEADER's thirteen: derived from HEADER's offsets.
_CHECKED = struct.Struct(
    ">qi"  # baseOffset, length
    f"{MAGIC_OFFSET - LOG_OVERHEAD}x"  # partitionLeaderEpoch
    "b"  # magic
    f"{LAST_OFFSET_DELTA_OFFSET - MAGIC_OFFSET - 1}x"  # crc, attributes
    "i"  # lastOffsetDelta
    f"{MAX_TIMESTAMP_OFFSET - LAST_OFFSET_DELTA_OFFSET - 4}x"  # baseTimestamp
    "q"  # maxTimestamp
)
assert _CHECKED.size == MAX_TIMESTAMP_OFFSET + 8 <= RECORD_BATCH_OVERHEAD
# The four a skip reads: _CHECKED without maxTimestamp.
_SKIPPED = struct.Struct(_CHECKED.format[: -len(f"{MAX_TIMESTAMP_OFFSET - LAST_OFFSET_DELTA_OFFSET - 4}xq")])
assert _SKIPPED.size == LAST_OFFSET_DELTA_OFFSET + 4
# A target no batch reaches: seek() with it only skips.
_NEVER = 1 << 64


class BatchStop(enum.Enum):
    """Why a BatchWalk ended (``BatchWalk.stop`` once the iteration is over)."""

    END = "end"  # at most 17 bytes left in the region: nothing more to read
    TORN_TAIL = "torn_tail"  # a batch runs past the region's end (stopped quietly)
    NEED_BYTES = "need_bytes"  # the next header runs past the buffer but not the region


class BatchWalk:
    """The batches in ``buffer[position:end]``, as (position, HEADER fields) pairs.

    ``region_end`` (default ``end``) is where the bytes the buffer was read from end: a batch
    must fit before it, while only its header must be inside the buffer (so a chunked reader can
    walk headers of batches longer than its chunk).  ``origin`` is added to positions in error
    messages (the buffer's place in its file).  After iteration ``position`` is where the walk
    stopped (the end of the last batch yielded) and ``stop`` says why.
    """

    __slots__ = ("_buffer", "_end", "_region_end", "_origin", "_torn_tail_ok", "_offset_min", "_offset_limit",
                 "position", "stop", "last_offset")

    def __init__(
        self,
        buffer,
        position: int = 0,
        end: int | None = None,
        *,
        region_end: int | None = None,
        origin: int = 0,
        torn_tail_ok: bool = True,
        offset_min: int | None = None,
        offset_limit: int = _INT64_MAX,
    ) -> None:
        if position < 0:  # struct counts a negative position from the end
            raise ValueError(f"a walk must start at a position >= 0, found {position}")
        self._buffer = buffer
        self._end = len(buffer) if end is None else min(end, len(buffer))
        self._region_end = self._end if region_end is None else region_end
        assert self._region_end >= self._end, "the buffer holds part of the region, not more"
        self._origin = origin
        self._torn_tail_ok = torn_tail_ok
        self._offset_min = offset_min
        self._offset_limit = offset_limit
        self.position = position
        self.stop = BatchStop.END
        self.last_offset = -1 if offset_min is None else offset_min - 1  # of the last batch yielded

    def __iter__(self) -> Iterator[tuple[int, tuple]]:
        buffer, end, region_end = self._buffer, self._end, self._region_end
        check_offsets = self._offset_min is not None
        next_offset, offset_limit = self.last_offset + 1, self._offset_limit
        position = self.position
        unpack, header_bytes, overhead, v2_min = _unpack, RECORD_BATCH_OVERHEAD, LOG_OVERHEAD, V2_BATCH_LENGTH_MIN
        try:
            while region_end - position > HEADER_BYTES_UP_TO_MAGIC:
                if end - position < header_bytes:
                    if region_end > end:  # the header continues past the buffer: read on
                        self.stop = BatchStop.NEED_BYTES
                        return
                    self._short_tail(position)
                    return
                fields = unpack(buffer, position)
                length = fields[LENGTH_FIELD]
                batch_end = position + overhead + length
                if length < v2_min or batch_end > region_end:
                    if self._bad_length(length, position, batch_end):
                        return  # a torn tail
                if check_offsets:
                    base_offset = fields[BASE_OFFSET_FIELD]
                    last_offset = base_offset + fields[LAST_OFFSET_DELTA_FIELD]
                    if (
                        fields[MAGIC_FIELD] != MAGIC
                        or base_offset < next_offset
                        or last_offset < base_offset
                        or last_offset >= offset_limit
                    ):
                        self._bad_offsets(fields, position, next_offset)
                    next_offset = last_offset + 1
                yield position, fields
                position = batch_end
        finally:
            self.position = position
            if check_offsets:
                self.last_offset = next_offset - 1

    # -- the checked fast loops: offset-checked walks (``offset_min`` given) only ---------------
    def skip(self, batch_end_max: int | None = None) -> None:
        """Moves over the batches that end at or before ``batch_end_max`` (at most the region's
        end; default the buffer's end) that the iteration would yield, without yielding them:
        afterwards ``position`` and ``last_offset`` are as if they had been.  It stops before the
        first batch it cannot vouch for, so iterating on from there applies the walk's rules,
        and names what is wrong, to the rest."""
        self._vouch(self._end if batch_end_max is None else batch_end_max, _NEVER, _NEVER)

    def seek(self, target_offset: int, target_timestamp: int) -> int:
        """The position of the first batch from here that the iteration would yield with a last
        offset >= ``target_offset`` and a maxTimestamp >= ``target_timestamp``, having moved
        over (and checked) the ones before it; -1 when the fast loop stopped before finding it
        (iterate on from ``position`` for the rest and the rules)."""
        return self._vouch(self._region_end, target_offset, target_timestamp)

    def _vouch(self, batch_end_max: int, target_offset: int, target_timestamp: int) -> int:
        """skip and seek: ``vouch_batches`` from where the walk stands."""
        assert self._offset_min is not None, "the fast loops check offsets: give offset_min"
        assert batch_end_max <= self._region_end
        found, position, next_offset, _ = vouch_batches(
            self._buffer, self.position, min(self._end, batch_end_max), batch_end_max, self.last_offset + 1,
            self._offset_limit, target_offset, target_timestamp,
        )
        self.position, self.last_offset = position, next_offset - 1
        return found

    def _where(self, position: int) -> str:
        return f"the batch at position {self._origin + position}"

    def _short_tail(self, position: int) -> None:
        """Fewer bytes than a header left in the region: a torn tail unless its length lies."""
        length = int.from_bytes(bytes(self._buffer[position + LENGTH_OFFSET : position + LOG_OVERHEAD]), "big", signed=True)
        self._bad_length(length, position, position + LOG_OVERHEAD + length)

    def _bad_length(self, length: int, position: int, batch_end: int) -> bool:
        """Raise for a length no batch can have; True (stop) for a batch past the region's end."""
        if length < BATCH_LENGTH_MIN or (length < V2_BATCH_LENGTH_MIN and batch_end <= self._region_end):
            raise CorruptRecordError(
                f"Found record size {length} in the length field of {self._where(position)}: expected at "
                f"least {V2_BATCH_LENGTH_MIN} (a v2 batch header after baseOffset and length)"
            )
        if batch_end <= self._region_end:
            return False
        if self._torn_tail_ok:
            self.stop = BatchStop.TORN_TAIL
            return True
        raise CorruptRecordError(
            f"Truncated {self._where(position)}: its length field declares {length + LOG_OVERHEAD} bytes, "
            f"but only {self._region_end - position} remain in the region it was read from"
        )

    def _bad_offsets(self, fields: tuple, position: int, next_offset: int) -> None:
        base_offset, delta = fields[BASE_OFFSET_FIELD], fields[LAST_OFFSET_DELTA_FIELD]
        if fields[MAGIC_FIELD] != MAGIC:
            found = f"magic {fields[MAGIC_FIELD]}, expected {MAGIC}"
        elif base_offset < next_offset:
            found = f"base offset {base_offset}, expected at least {next_offset}"
        elif delta < 0:
            found = f"lastOffsetDelta {delta}, expected >= 0"
        else:
            found = f"last offset {base_offset + delta}, expected below {self._offset_limit}"
        raise CorruptRecordError(f"Corrupt header of {self._where(position)}: {found}")


def vouch_batches(
    buffer,
    position: int,
    end: int,
    batch_end_max: int,
    next_offset: int,
    offset_limit: int,
    target_offset: int = _NEVER,
    target_timestamp: int = _NEVER,
) -> tuple[int, int, int, tuple | None]:
    """The header checks of an offset-checked ``BatchWalk`` iteration in one tight loop, from
    ``position`` over the batches whose headers lie before ``end`` (in the buffer) and which
    end at or before ``batch_end_max`` (in the region), up to the first with a last offset >=
    ``target_offset`` and a maxTimestamp >= ``target_timestamp``.

    Returns (found, position, next_offset, fields): ``found`` the position of that batch (-1
    when the loop stopped first: at a batch it cannot vouch for, or at ``end``), ``position``
    and ``next_offset`` where an iteration goes on from (``BatchWalk(..., position,
    offset_min=next_offset)``), and the found batch's (baseOffset, length, magic,
    lastOffsetDelta, maxTimestamp). The offset limit is checked once, after the loop (last
    offsets only grow): when a batch passed breaks it, nothing is vouched for (the iteration
    from the start finds the first that does)."""
    start, start_next_offset = position, next_offset
    v2_min, overhead = V2_BATCH_LENGTH_MIN, LOG_OVERHEAD
    header_last = end - RECORD_BATCH_OVERHEAD  # the last position a header may start at
    if target_offset == _NEVER:  # a skip (a read's whole walk): the same loop, one field fewer
        unpack = _SKIPPED.unpack_from
        while position <= header_last:
            base_offset, length, magic, delta = unpack(buffer, position)
            batch_end = position + overhead + length
            if length < v2_min or batch_end > batch_end_max or magic != MAGIC or base_offset < next_offset or delta < 0:
                break
            next_offset = base_offset + delta + 1
            position = batch_end
        if next_offset > offset_limit:
            return -1, start, start_next_offset, None
        return -1, position, next_offset, None
    unpack = _CHECKED.unpack_from
    while position <= header_last:
        fields = unpack(buffer, position)
        base_offset, length, magic, delta, max_timestamp = fields
        batch_end = position + overhead + length
        last_offset = base_offset + delta
        if length < v2_min or batch_end > batch_end_max or magic != MAGIC or base_offset < next_offset or delta < 0:
            break
        if last_offset >= target_offset and max_timestamp >= target_timestamp:
            if last_offset >= offset_limit:
                return -1, start, start_next_offset, None
            return position, position, next_offset, fields
        next_offset = last_offset + 1
        position = batch_end
    if next_offset > offset_limit:  # some batch passed ends at or past the limit
        return -1, start, start_next_offset, None
    return -1, position, next_offset, None


# -- records --------------------------------------------------------------------------------

_CONTINUATION = 0x80
_NULL_LENGTH = -1


def _overrun(index: int, position: int, what: str, size: int, room: int) -> CorruptRecordError:
    if what == "record length":
        return CorruptRecordError(
            f"Invalid record length of record {index} at byte {position}: expected 1..{room} "
            f"(the bytes left in the records area), found {size}"
        )
    if room < 0:
        return CorruptRecordError(
            f"Invalid record {index}: its fields run {-room} bytes past its declared length before its {what} "
            f"(at byte {position})"
        )
    return CorruptRecordError(
        f"Invalid {what} of record {index} at byte {position}: {size} bytes declared, "
        f"expected -1..{room} (the bytes left in the record)"
    )


def walk_records(data, position: int, end: int, count: int) -> Iterator[tuple[int, int]]:
    """(timestampDelta, offsetDelta) of each of the ``count`` records in ``data[position:end]``
    (bytes: the fastest indexing Python has), every field checked against its record and the
    record against the area; CorruptRecordError on the first lie.  One- and two-byte varints
    are read from the codec's table inline, longer ones by decode_varint (5-byte limit)."""
    if count < 0:
        raise CorruptRecordError(f"Found invalid record count: expected >= 0, found {count}")
    if end > len(data) or position < 0 or position > end:
        raise CorruptRecordError(f"Records area [{position}, {end}) is outside the {len(data)} bytes given")
    table, more = ZIGZAG_DECODE, _CONTINUATION
    index = 0
    try:
        # Each record is at least 2 bytes and stays inside [position, end): at most
        # (end - position) // 2 iterations whatever ``count`` claims.
        for index in range(count):
            if position >= end:
                raise CorruptRecordError(
                    f"Incorrect declared batch size, premature EOF reached: expected {count} records, "
                    f"found {index} before the end of the records area"
                )
            first = data[position]
            if first < more:
                length, p = table[first], position + 1
            elif data[position + 1] < more:
                length, p = table[first + (data[position + 1] << 7)], position + 2
            else:
                length, p = decode_varint(data, position)
            record_end = p + length
            if length <= 0 or record_end > end:
                raise _overrun(index, position, "record length", length, end - p)
            p += 1  # attributes: unused
            first = data[p]
            if first < more:
                timestamp_delta, p = table[first], p + 1
            elif data[p + 1] < more:
                timestamp_delta, p = table[first + (data[p + 1] << 7)], p + 2
            else:
                timestamp_delta, p = decode_varlong(data, p)
            first = data[p]
            if first < more:
                offset_delta, p = table[first], p + 1
            else:
                offset_delta, p = decode_varint(data, p)
            first = data[p]  # keyLength
            if first < more:
                size, p = table[first], p + 1
            elif data[p + 1] < more:
                size, p = table[first + (data[p + 1] << 7)], p + 2
            else:
                size, p = decode_varint(data, p)
            if size > 0:
                p += size
            if p > record_end or size < _NULL_LENGTH:
                raise _overrun(index, p - max(size, 0), "key length", size, record_end - p + max(size, 0))
            first = data[p]  # valueLength
            if first < more:
                size, p = table[first], p + 1
            elif data[p + 1] < more:
                size, p = table[first + (data[p + 1] << 7)], p + 2
            else:
                size, p = decode_varint(data, p)
            if size > 0:
                p += size
            if p > record_end or size < _NULL_LENGTH:
                raise _overrun(index, p - max(size, 0), "value length", size, record_end - p + max(size, 0))
            first = data[p]
            if first:  # headers: rare, so the careful path
                p = _skip_headers(data, p, record_end, index)
            else:
                p += 1
            if p != record_end:
                raise CorruptRecordError(
                    f"Invalid record size of record {index} at byte {position}: expected its fields to fill "
                    f"{length} bytes, found them ending {p - record_end:+d} bytes from there"
                )
            yield timestamp_delta, offset_delta
            position = record_end
    except IndexError:  # a varint or field running past the end of ``data``
        raise CorruptRecordError(
            f"Truncated record {index} at byte {position}: a field runs past the end of the data"
        ) from None
    if position != end:
        raise CorruptRecordError(
            f"Incorrect declared batch size, records still remaining: expected the records area to end "
            f"after {count} records at byte {position}, found {end - position} more bytes"
        )


def _skip_headers(data, p: int, record_end: int, index: int) -> int:
    header_count, p = decode_varint(data, p)
    # Each header is at least two bytes (key length 0 and value length -1).
    if header_count < 0 or 2 * header_count > record_end - p:
        raise CorruptRecordError(
            f"Found invalid number of record headers in record {index}: expected 0..{(record_end - p) // 2}, "
            f"found {header_count}"
        )
    for _ in range(header_count):
        size, p = decode_varint(data, p)
        if size < 0 or p + size > record_end:
            raise _overrun(index, p, "header key length", size, record_end - p)
        # Header keys are strings (Kafka's Header.key()): the decoder refuses a key that is not
        # UTF-8, so the walk refuses it too, or produce would store a record no consumer can read.
        try:
            bytes(data[p : p + size]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"Invalid header key in record {index}: expected UTF-8, found {exc}") from None
        p += size
        size, p = decode_varint(data, p)
        if size < _NULL_LENGTH or p + size > record_end:
            raise _overrun(index, p, "header value length", size, record_end - p)
        if size > 0:
            p += size
    return p
