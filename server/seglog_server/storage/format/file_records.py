"""FileRecords: a segment's ``.log`` file of concatenated v2 record batches.

A thin shell around one file descriptor (opened lazily, so a log of thousands of segments opens
none of them until they are read) and the ``fs`` seam. It appends with one ``pwritev``, reads
byte ranges with one ``pread``, and walks batch headers with the codec's bounded ``BatchWalk``
(Kafka's ``FileLogInputStream`` rules, section 2.7 of the storage spec, plus the v2 minimum):

- at most ``HEADER_SIZE_UP_TO_MAGIC`` (17) bytes left -> stop silently;
- a length field below ``MIN_LENGTH`` (14), or below a v2 header in a batch that fits ->
  ``CorruptRecordError``;
- a batch running past the end -> stop silently in ``raw_headers`` (the loader's walk: a torn
  tail is for recovery to cut), ``CorruptRecordError`` in the searches reads use.

The batch layout itself is declared once, in ``seglog.records`` (``HEADER``); walks here unpack
that struct and name the fields they use through ``HeaderField``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from seglog.records import (
    BASE_OFFSET_OFFSET,
    HEADER,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    BatchStop,
    BatchWalk,
    CodecError,
    vouch_batches,
)

from ..base.errors import CorruptRecordError
from ..base.fs import REAL_FS, FileSystem

__all__ = [
    "HEADER_SIZE_UP_TO_MAGIC",
    "MIN_LENGTH",
    "BatchHeader",
    "FileRecords",
    "HeaderField",
    "OffsetBounds",
    "TimestampAndOffset",
]

# baseOffset + length + partitionLeaderEpoch + magic: the bytes a reader needs before it can
# tell anything about a batch (Kafka's FileLogInputStream.HEADER_SIZE_UP_TO_MAGIC).
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1
# Kafka's smallest legal length field (a v0 record's overhead); below it the length is garbage.
MIN_LENGTH = 14
# Header walks read this much at a time: one pread covers the ~4 KiB of log between two index
# entries at the default index.interval.bytes, plus the header of the batch that straddles it.
_SCAN_CHUNK_BYTES = 16 * 1024
# Positions are int32 in Kafka's format (and in the offset index): a segment stays below 2 GiB.
_SEGMENT_BYTES_MAX = 2**31 - 1
# A timestamp target every batch meets: no timestamp is below int64's minimum.
_NO_TIMESTAMP_TARGET = -(2**63)
# A single pread/pwrite on Linux moves at most 0x7ffff000 bytes.
_IO_BYTES_MAX = 0x7FFFF000


class HeaderField:
    """Positions in the tuple ``HEADER.unpack_from`` returns (the order of ``HEADER``). Plain
    ints, not an IntEnum: indexing a tuple with an enum member costs ten times more, and these
    sit on the append and recovery paths."""

    BASE_OFFSET = 0
    LENGTH = 1
    PARTITION_LEADER_EPOCH = 2
    MAGIC = 3
    CRC = 4
    ATTRIBUTES = 5
    LAST_OFFSET_DELTA = 6
    BASE_TIMESTAMP = 7
    MAX_TIMESTAMP = 8
    PRODUCER_ID = 9
    PRODUCER_EPOCH = 10
    BASE_SEQUENCE = 11
    RECORDS_COUNT = 12


assert HeaderField.RECORDS_COUNT + 1 == len(HEADER.unpack(bytes(HEADER.size)))
assert HEADER.size == RECORD_BATCH_OVERHEAD and LOG_OVERHEAD == LENGTH_OFFSET + 4
assert BASE_OFFSET_OFFSET == 0




class BatchHeader(NamedTuple):
    """Where a batch sits in the file and the header fields the storage engine uses."""

    position: int
    base_offset: int
    size_in_bytes: int
    last_offset: int
    max_timestamp: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


class OffsetBounds(NamedTuple):
    """The offsets a segment's batches may hold: from its base offset (inclusive) to the next
    segment's base offset (exclusive)."""

    base_offset: int
    offset_limit: int


# No next segment: any int64 offset is below this.
_OFFSET_LIMIT = 2**63 - 1
_new_tuple = tuple.__new__


class TimestampAndOffset(NamedTuple):
    timestamp_ms: int
    offset: int


def _header_at(fields: tuple, position: int) -> BatchHeader:
    return BatchHeader(
        position,
        fields[HeaderField.BASE_OFFSET],
        fields[HeaderField.LENGTH] + LOG_OVERHEAD,
        fields[HeaderField.BASE_OFFSET] + fields[HeaderField.LAST_OFFSET_DELTA],
        fields[HeaderField.MAX_TIMESTAMP],
    )


class FileRecords:
    """The ``.log`` file of one segment. Not thread-safe: the owning log's lock guards it."""

    def __init__(self, path: str, *, fs: FileSystem = REAL_FS, size_in_bytes: int | None = None):
        """Wraps an existing file; ``size_in_bytes`` when known spares a stat at first use."""
        self._path = path
        self._fs = fs
        self._fd: int | None = None
        self._size = size_in_bytes
        # A sealed file no longer grows or shrinks (an inactive segment). It is still read with
        # preads, never through a mapping: a file cut short from outside the process (a full
        # disk's repair, an operator, another program) makes a read through a mapping past the
        # new end SIGBUS, which kills the whole service, where a pread returns short and the
        # read fails as damage to this one partition (CorruptRecordError). The cost, one pread
        # per scan chunk instead of none, is measured in docs/reliability.md.
        self._sealed = False

    @classmethod
    def create(cls, path: str, *, fs: FileSystem = REAL_FS, preallocate_bytes: int = 0) -> FileRecords:
        """Creates an empty file (preallocated to ``preallocate_bytes`` when asked)."""
        records = cls(path, fs=fs, size_in_bytes=0)
        records._fd = fs.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        if preallocate_bytes > 0:
            fs.ftruncate(records._fd, preallocate_bytes)
        return records

    # -- state ------------------------------------------------------------------------------
    @property
    def path(self) -> str:
        return self._path

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    @property
    def is_sealed(self) -> bool:
        return self._sealed

    def seal(self) -> None:
        """Declares the file final: nothing will be appended or cut until ``unseal``."""
        self._sealed = True

    def unseal(self) -> None:
        """Before an append or a truncation."""
        self._sealed = False

    @property
    def size_in_bytes(self) -> int:
        """Bytes of batches (the logical end; a preallocated file is longer)."""
        if self._size is None:
            if self._fd is not None:
                self._size = self._fs.fsize(self._fd)
            else:  # a size question alone does not keep a descriptor open
                fd = self._fs.open(self._path, os.O_RDONLY)
                try:
                    self._size = self._fs.fsize(fd)
                finally:
                    self._fs.close(fd)
        return self._size

    def _open(self) -> int:
        if self._fd is None:
            self._fd = self._fs.open(self._path, os.O_RDWR)
        return self._fd

    # -- writes -----------------------------------------------------------------------------
    def append(self, buffers: Sequence[bytes | bytearray | memoryview]) -> int:
        """Writes ``buffers`` back to back at the end with one pwritev; returns the byte count."""
        assert not self._sealed, f"{self._path} is sealed"
        fd = self._open()
        position = self.size_in_bytes
        total = sum(len(buffer) for buffer in buffers)
        if position + total > _SEGMENT_BYTES_MAX:
            raise ValueError(
                f"{self._path}: appending {total} bytes at {position} would pass the 2 GiB "
                f"segment limit"
            )
        try:
            written = self._fs.pwritev(fd, buffers, position)
            if written != total:  # a short write (disk full, signal): finish or fail loudly
                self._finish_short_write(fd, buffers, position, written, total)
        except OSError:
            self._cut_failed_write(fd, position)
            raise
        self._size = position + total
        return total

    def append_patched(self, head: bytes, rest: memoryview) -> int:
        """``append((head, rest))`` for the append path: one pwritev, no generic bookkeeping."""
        assert not self._sealed, f"{self._path} is sealed"
        fd = self._fd if self._fd is not None else self._open()
        position = self.size_in_bytes
        total = len(head) + len(rest)
        if position + total > _SEGMENT_BYTES_MAX:
            raise ValueError(
                f"{self._path}: appending {total} bytes at {position} would pass the 2 GiB "
                f"segment limit"
            )
        try:
            written = self._fs.pwritev(fd, (head, rest), position)
            if written != total:
                self._finish_short_write(fd, (head, rest), position, written, total)
        except OSError:
            self._cut_failed_write(fd, position)
            raise
        self._size = position + total
        return total

    def _finish_short_write(self, fd: int, buffers: Sequence, position: int, written: int, total: int):
        rest = memoryview(b"".join(bytes(buffer) for buffer in buffers))
        while written < total:
            count = self._fs.pwrite(fd, rest[written:], position + written)
            if count <= 0:
                raise OSError(f"{self._path}: write made no progress at {position + written}")
            written += count

    def _cut_failed_write(self, fd: int, position: int) -> None:
        """After a failed append (ENOSPC half-way): the bytes that did land go, so the file ends
        where the batches end and a restart never reads half a batch as the log's tail."""
        try:
            if self._fs.fsize(fd) > position:
                self._fs.ftruncate(fd, position)
        except OSError:
            pass  # the write's own error is the one to report; recovery cuts a torn tail anyway

    def truncate_to(self, size_in_bytes: int) -> int:
        """Cuts the file to ``size_in_bytes``; returns the bytes removed."""
        original = self.size_in_bytes
        if size_in_bytes > original or size_in_bytes < 0:
            raise ValueError(
                f"{self._path}: cannot truncate to {size_in_bytes} bytes, the file holds {original}"
            )
        self.unseal()
        fd = self._open()
        if size_in_bytes < original or self._fs.fsize(fd) != size_in_bytes:
            self._fs.ftruncate(fd, size_in_bytes)
        self._size = size_in_bytes
        return original - size_in_bytes

    def trim(self) -> None:
        """Cuts a preallocated tail off the file (no-op for files that were never preallocated)."""
        if self._fd is not None and self._fs.fsize(self._fd) != self.size_in_bytes:
            self._fs.ftruncate(self._fd, self.size_in_bytes)

    def flush(self) -> None:
        """fsync; a file whose descriptor was released is synced through a temporary one."""
        if self._fd is not None:
            self._fs.fsync(self._fd)
            return
        fd = self._fs.open(self._path, os.O_RDONLY)
        try:
            self._fs.fsync(fd)
        finally:
            self._fs.close(fd)

    # -- reads ------------------------------------------------------------------------------
    def read(self, position: int, size_in_bytes: int) -> bytes:
        """Up to ``size_in_bytes`` bytes from ``position`` (fewer at the end of the batches).
        ``CorruptRecordError`` when the file ends before ``size_in_bytes`` says (truncated or
        damaged under the open segment): a walk would otherwise ask for the same bytes forever."""
        size_in_bytes = min(size_in_bytes, self.size_in_bytes - position)
        if size_in_bytes <= 0:
            return b""
        fd = self._open()
        if size_in_bytes <= _IO_BYTES_MAX:
            data = self._fs.pread(fd, size_in_bytes, position)
            if len(data) == size_in_bytes:
                return data
        buffer = bytearray(size_in_bytes)
        got = self._fs.preadinto(fd, buffer, position)
        if got < size_in_bytes:
            raise self._ends_early(position + got)
        return bytes(buffer)

    def _ends_early(self, end: int) -> CorruptRecordError:
        return CorruptRecordError(
            f"{self._path}: the file ends at {end}, before the {self.size_in_bytes} bytes of batches it held"
        )

    def read_into(self, buffer: bytearray | memoryview, position: int) -> int:
        """Fills ``buffer`` from ``position``, never past the batches' end; returns the count."""
        view = memoryview(buffer)[: max(0, self.size_in_bytes - position)]
        if not len(view):
            return 0
        return self._fs.preadinto(self._open(), view, position)

    def batch_headers(
        self, start_position: int = 0, charge: Callable[[int], None] | None = None
    ) -> Iterator[BatchHeader]:
        """Headers of the complete batches from ``start_position`` on (FileLogInputStream rules).
        ``charge``: as ``raw_headers``'s."""
        for position, fields in self.raw_headers(start_position, charge):
            yield _header_at(fields, position)

    def raw_headers(
        self, start_position: int = 0, charge: Callable[[int], None] | None = None
    ) -> Iterator[tuple[int, tuple]]:
        """(position, unpacked ``HEADER`` tuple) of each complete batch from ``start_position``:
        the codec's bounded ``BatchWalk`` over 16 KiB preads (a batch longer than a read needs
        only its header inside it). A partial trailing batch stops the walk quietly (Kafka's
        FileLogInputStream); a length no batch can have raises ``CorruptRecordError``.
        ``charge(size)`` is called before each read (a bounded lookup's budget, which may raise)."""
        end = self.size_in_bytes
        position = start_position
        while True:
            if charge is not None:
                charge(max(min(_SCAN_CHUNK_BYTES, end - position), 0))
            chunk = self.read(position, _SCAN_CHUNK_BYTES)
            walk = BatchWalk(chunk, region_end=end - position, origin=position)
            with self._corruption_named():
                for offset_in_chunk, fields in walk:
                    yield position + offset_in_chunk, fields
            if walk.stop is not BatchStop.NEED_BYTES:
                return
            position += walk.position

    @contextlib.contextmanager
    def _corruption_named(self) -> Iterator[None]:
        """The codec's error about these bytes, as the storage's, naming the file."""
        try:
            yield
        except CodecError as exc:
            raise CorruptRecordError(f"{self._path}: {exc}") from exc

    # -- searches ---------------------------------------------------------------------------
    def search_for_offset_with_size(
        self,
        target_offset: int,
        start_position: int,
        scan_bytes: int = _SCAN_CHUNK_BYTES,
        bounds: OffsetBounds | None = None,
    ) -> BatchHeader | None:
        """The first batch from ``start_position`` whose last offset is >= ``target_offset``.
        The hot half of every offset lookup; ``scan_bytes`` sizes the first read (about the
        index interval, where the batch sought usually is)."""
        found = self._scan(start_position, scan_bytes, target_offset, _NO_TIMESTAMP_TARGET, bounds)
        return None if found is None else found[0]

    def search_for_timestamp(
        self,
        timestamp_ms: int,
        start_position: int,
        starting_offset: int,
        scan_bytes: int = _SCAN_CHUNK_BYTES,
        bounds: OffsetBounds | None = None,
    ) -> tuple[BatchHeader, bytes] | None:
        """The first batch from ``start_position`` with a max timestamp >= ``timestamp_ms`` and a
        last offset >= ``starting_offset``, with its bytes (a view of the read chunk when the
        batch lies inside it, else one more pread)."""
        found = self.find_batch_for_timestamp(timestamp_ms, start_position, starting_offset, scan_bytes, bounds)
        return None if found is None else (found[0], self.batch_bytes(*found))

    def find_batch_for_timestamp(
        self,
        timestamp_ms: int,
        start_position: int,
        starting_offset: int,
        scan_bytes: int = _SCAN_CHUNK_BYTES,
        bounds: OffsetBounds | None = None,
        charge: Callable[[int], None] | None = None,
    ) -> tuple[BatchHeader, bytes, int] | None:
        """``search_for_timestamp``'s batch without its bytes: (header, the chunk holding at least
        its header, where the batch starts in it). ``batch_bytes`` reads the rest when needed (a
        lookup answered from the batch's table needs none). ``charge(size)`` is called before
        each chunk's read (a bounded lookup's budget, which may raise to stop the scan there)."""
        return self._scan(start_position, scan_bytes, starting_offset, timestamp_ms, bounds, charge)

    def batch_bytes(self, header: BatchHeader, chunk: bytes, offset_in_chunk: int) -> bytes:
        """The bytes of the batch ``find_batch_for_timestamp`` found."""
        if offset_in_chunk + header.size_in_bytes <= len(chunk):
            return chunk[offset_in_chunk : offset_in_chunk + header.size_in_bytes]
        return self.read(header.position, header.size_in_bytes)

    def _scan(
        self,
        start_position: int,
        scan_bytes: int,
        target_offset: int,
        target_timestamp: int,
        bounds: OffsetBounds | None = None,
        charge: Callable[[int], None] | None = None,
    ) -> tuple[BatchHeader, bytes, int] | None:
        """The first batch from ``start_position`` with a last offset >= ``target_offset`` and a
        max timestamp >= ``target_timestamp``; with the chunk holding its header. The codec's
        bounded ``BatchWalk`` over each pread chunk, sealed files too (never a mapping: see
        ``__init__``). The batches before the end of the file must be whole: a length running past it
        is ``CorruptRecordError`` here, never a quiet stop that would send a read on to the next
        segment. With ``bounds``, every batch walked must also have offsets inside them."""
        end = self.size_in_bytes
        offset_min, offset_limit = (None, _OFFSET_LIMIT) if bounds is None else bounds
        position = start_position
        f_base, f_delta, f_max_timestamp, f_length = (
            HeaderField.BASE_OFFSET, HeaderField.LAST_OFFSET_DELTA, HeaderField.MAX_TIMESTAMP, HeaderField.LENGTH,
        )
        while True:
            fd = self._fd if self._fd is not None else self._open()
            want = min(scan_bytes, end - position)
            if charge is not None:
                charge(want)
            chunk, chunk_start = self._fs.pread(fd, want, position), position
            if len(chunk) < want:  # read again to the end (a file shorter than its size: below)
                buffer = bytearray(want)
                chunk = bytes(buffer[: self._fs.preadinto(fd, buffer, position)])
            in_chunk = position - chunk_start
            if offset_min is not None:  # the common case: one tight loop (the rules' fast path)
                found, in_chunk, offset_min, checked = vouch_batches(
                    chunk, in_chunk, min(len(chunk), end - chunk_start), end - chunk_start, offset_min,
                    offset_limit, target_offset, target_timestamp,
                )
                if found >= 0:
                    base_offset, length, _, delta, max_timestamp = checked
                    header = _new_tuple(  # BatchHeader(...) without its Python-level __new__
                        BatchHeader,
                        (chunk_start + found, base_offset, length + LOG_OVERHEAD, base_offset + delta, max_timestamp),
                    )
                    return header, chunk, found
            walk = BatchWalk(
                chunk, in_chunk, end - chunk_start, region_end=end - chunk_start, origin=chunk_start,
                torn_tail_ok=False, offset_min=offset_min, offset_limit=offset_limit,
            )
            with self._corruption_named():
                for offset_in_chunk, fields in walk:  # from where seek stopped: the rules
                    last_offset = fields[f_base] + fields[f_delta]
                    if last_offset >= target_offset and fields[f_max_timestamp] >= target_timestamp:
                        header = BatchHeader(
                            chunk_start + offset_in_chunk,
                            fields[f_base],
                            fields[f_length] + LOG_OVERHEAD,
                            last_offset,
                            fields[f_max_timestamp],
                        )
                        return header, chunk, offset_in_chunk
            if walk.stop is not BatchStop.NEED_BYTES:
                return None
            if len(chunk) < want:
                raise self._ends_early(chunk_start + len(chunk))  # the next batch is past the file's end
            position = chunk_start + walk.position
            if offset_min is not None:
                offset_min = walk.last_offset + 1
            scan_bytes = _SCAN_CHUNK_BYTES

    def largest_timestamp_after(self, start_position: int) -> TimestampAndOffset:
        """The largest batch max timestamp from ``start_position`` on and that batch's last offset."""
        best = TimestampAndOffset(-1, -1)
        for _, fields in self.raw_headers(start_position):
            max_timestamp = fields[HeaderField.MAX_TIMESTAMP]
            if max_timestamp > best.timestamp_ms:
                last = fields[HeaderField.BASE_OFFSET] + fields[HeaderField.LAST_OFFSET_DELTA]
                best = TimestampAndOffset(max_timestamp, last)
        return best

    # -- names ------------------------------------------------------------------------------
    def rename_to(self, path: str) -> None:
        """Renames the file (the descriptor stays valid)."""
        self._fs.replace(self._path, path)
        self._path = path

    def last_modified_ms(self) -> int:
        return self._fs.getmtime_ms(self._path)

    def set_last_modified_ms(self, mtime_ms: int) -> None:
        self._fs.set_mtime_ms(self._path, mtime_ms)

    def close(self) -> None:
        """Trims a preallocated tail and closes the descriptor; no fsync (flush first)."""
        if self._fd is not None:
            try:
                self.trim()
            finally:
                self.close_handler()

    def close_handler(self) -> None:
        """Closes the descriptor without touching the file (used when the disk failed)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            self._fs.close(fd)

    def delete_if_exists(self) -> bool:
        self.close_handler()
        try:
            self._fs.unlink(self._path)
        except FileNotFoundError:
            return False
        return True

    def __repr__(self) -> str:
        return f"FileRecords({self._path!r}, size={self._size})"
