"""Offsets and timestamps of the records in a batch, without decoding keys, values or headers.

A lookup by timestamp ends inside one batch: the first record with a timestamp >= T (or, for
MAX_TIMESTAMP, == T). Decoding the whole batch with the codec builds every key, value and header
(about 23 us for ten 90-byte records); reading only each record's length, timestampDelta and
offsetDelta and skipping the rest takes a few microseconds, and usually stops at the first
record. A compressed batch is decompressed (within the codec's limit) and its records area
walked the same way.

The lookup's walk is the codec's ``seek_record``: compiled where the install built it (a few
nanoseconds a record instead of a few hundred: a lookup on a 3,400-record batch that
``send_many`` wrote walked some 150 µs in Python), the Python walk otherwise, both equal to
the bounded ``walk_records``: every record's length is checked against the
records area and every key, value and header length against its record before the walk moves,
so a batch whose records area is garbage (a valid CRC over bad framing, or bytes corrupted on
disk with the CRC rewritten) raises the codec's ``CorruptRecordError``, which the segment turns
into the storage's corrupt-batch error; the walk never runs past the batch or loops on a count.

The record layout is the codec's (``seglog.records``, kafka-storage.md 2.3); the walk yields
the two leading fields a lookup needs::

    length          varint   bytes that follow in this record
    attributes      int8     unused
    timestampDelta  varlong  record timestamp = batch baseTimestamp + delta
    offsetDelta     varint   record offset = batch baseOffset + delta
    ...                      key, value, headers: skipped
"""

from __future__ import annotations

import struct
import threading
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Iterator

from seglog.records import (
    DECOMPRESSED_BYTES_MAX,
    CodecError,
    HEADER,
    LOG_OVERHEAD,
    RECORDS_OFFSET,
    Compression,
    decompress,
    record_times,
    seek_record,
    seek_records,
    walk_records,
)

from .file_records import HeaderField

__all__ = ["RecordTimesCache", "TABLE_RECORDS_MIN", "first_record_at_or_after", "first_records_at_or_after",
           "offsets_and_timestamps"]

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08  # LogAppendTime: every record reads the batch maxTimestamp
_NO_COMPRESSION = int(Compression.NONE)
# Timestamp targets (as deltas) every record reaches, and none does: a LogAppendTime batch's
# records all carry its maxTimestamp, so either all reach the target or none.
_EVERY_RECORD = -(1 << 64)
_NO_RECORD = 1 << 64


def _records_area(batch: bytes | memoryview, fields: tuple) -> tuple[bytes | memoryview, int, int]:
    """(buffer, start, end) of the batch's records, decompressed when the batch is compressed
    (the codec's DecompressionLimitError past its limit)."""
    end = fields[HeaderField.LENGTH] + LOG_OVERHEAD
    compression = fields[HeaderField.ATTRIBUTES] & _COMPRESSION_MASK
    if compression == _NO_COMPRESSION:
        return batch, RECORDS_OFFSET, end
    area = decompress(compression, memoryview(batch)[RECORDS_OFFSET:end], DECOMPRESSED_BYTES_MAX)
    return area, 0, len(area)


def offsets_and_timestamps(batch: bytes | memoryview) -> Iterator[tuple[int, int]]:
    """(offset, timestamp_ms) of each record of one complete batch, in order."""
    fields = HEADER.unpack_from(batch, 0)
    base_offset = fields[HeaderField.BASE_OFFSET]
    base_timestamp = fields[HeaderField.BASE_TIMESTAMP]
    log_append_time = (
        fields[HeaderField.MAX_TIMESTAMP] if fields[HeaderField.ATTRIBUTES] & _TIMESTAMP_TYPE_BIT else None
    )
    data, start, end = _records_area(batch, fields)
    for timestamp_delta, offset_delta in walk_records(data, start, end, fields[HeaderField.RECORDS_COUNT]):
        timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
        yield base_offset + offset_delta, timestamp


def first_record_at_or_after(
    batch: bytes | memoryview, timestamp_ms: int, starting_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp_ms) of the first record with a timestamp >= ``timestamp_ms`` and an
    offset >= ``starting_offset``, or None. Stops at the first match: the records after it are
    not walked (CorruptRecordError for a lie before it, as ``walk_records`` names it)."""
    fields = HEADER.unpack_from(batch, 0)
    base_offset, base_timestamp = fields[HeaderField.BASE_OFFSET], fields[HeaderField.BASE_TIMESTAMP]
    data, start, end = _records_area(batch, fields)
    log_append_time = fields[HeaderField.ATTRIBUTES] & _TIMESTAMP_TYPE_BIT
    if log_append_time:
        max_timestamp = fields[HeaderField.MAX_TIMESTAMP]
        target_delta = _EVERY_RECORD if max_timestamp >= timestamp_ms else _NO_RECORD
    else:
        target_delta = timestamp_ms - base_timestamp
    found = seek_record(data, start, end, fields[HeaderField.RECORDS_COUNT], target_delta, starting_offset - base_offset)
    if found is None:
        return None
    offset_delta, timestamp_delta = found
    timestamp = max_timestamp if log_append_time else base_timestamp + timestamp_delta
    return base_offset + offset_delta, timestamp


def first_records_at_or_after(
    batch: bytes | memoryview, timestamps_ms: list[int], starting_offset: int
) -> list[tuple[int, int] | None]:
    """``first_record_at_or_after`` for each of ``timestamps_ms`` (ascending), in one walk of
    the batch's records (to the last target's record): a batched lookup sends many targets to
    one large batch, and walking it once for all of them is what makes that cheap.
    CorruptRecordError when the walk of any of them alone would raise."""
    fields = HEADER.unpack_from(batch, 0)
    base_offset, base_timestamp = fields[HeaderField.BASE_OFFSET], fields[HeaderField.BASE_TIMESTAMP]
    data, start, end = _records_area(batch, fields)
    log_append_time = fields[HeaderField.ATTRIBUTES] & _TIMESTAMP_TYPE_BIT
    if log_append_time:
        max_timestamp = fields[HeaderField.MAX_TIMESTAMP]
        target_deltas = [_EVERY_RECORD if max_timestamp >= t else _NO_RECORD for t in timestamps_ms]
    else:
        target_deltas = [t - base_timestamp for t in timestamps_ms]
    found = seek_records(data, start, end, fields[HeaderField.RECORDS_COUNT], target_deltas,
                         starting_offset - base_offset)
    return [
        None if answer is None
        else (base_offset + answer[0], max_timestamp if log_append_time else base_timestamp + answer[1])
        for answer in found
    ]



# -- per-batch record-time tables ---------------------------------------------------------------

# Batches of fewer records are walked (a walk of a few dozen records costs a microsecond or two);
# from this many on, a lookup's first visit builds the batch's table and later ones bisect it.
# Once a segment's batch directory finds a target's batch without the index searches, the
# read and walk of a 100-record batch (12 KB) are most of what is left: tables from 64 records
# took batched lookups on 100-record batches from 16.9 to 12.1 us a target (256 before; medians
# of 5 interleaved runs of `bench_batched_lookup.py --storage`, load 8).
TABLE_RECORDS_MIN = 64
# All tables together, over every log (8 bytes a record, 16 with offset gaps: a 4,000-record
# batch takes 32 KB; a million records' tables 8 MB).
TABLES_BYTES_MAX = 16 * 1024 * 1024
_HEADER_BYTES = RECORDS_OFFSET
_RECORDS_COUNT_AT = RECORDS_OFFSET - 4
_RECORDS_COUNT = struct.Struct(">i")


class _RecordTimes:
    """One batch's records as a table: the running maximum of the timestamp deltas (the first
    record reaching a target is where the running maximum first does, and there the maximum is
    that record's own timestamp) and the offset deltas (None when they are 0, 1, 2, ...: the
    common batch, 8 bytes a record)."""

    __slots__ = ("header", "base_offset", "base_timestamp", "reach", "offsets", "offset_delta_min", "size")

    def __init__(self, header: bytes, fields: tuple, columns: tuple) -> None:
        _, offsets, reach = columns
        self.header = header
        self.base_offset = fields[HeaderField.BASE_OFFSET]
        self.base_timestamp = fields[HeaderField.BASE_TIMESTAMP]
        self.reach = reach
        self.offset_delta_min = min(offsets) if offsets else 0
        self.offsets = None if offsets == array("q", range(len(offsets))) else offsets
        self.size = reach.itemsize * len(reach) * (1 if self.offsets is None else 2) + 200

    def first_reaching(self, timestamps_ms: list[int], starting_offset: int) -> list[tuple[int, int] | None] | None:
        """``first_records_at_or_after``'s answers, or None when ``starting_offset`` falls after
        the batch's first offset (the walk answers those: rare, a log start inside the batch)."""
        if starting_offset - self.base_offset > self.offset_delta_min:
            return None
        reach, offsets, count = self.reach, self.offsets, len(self.reach)
        base_offset, base_timestamp = self.base_offset, self.base_timestamp
        answers: list[tuple[int, int] | None] = []
        for timestamp_ms in timestamps_ms:
            index = bisect_left(reach, timestamp_ms - base_timestamp)
            if index == count:
                answers.append(None)
            else:
                answers.append((base_offset + (index if offsets is None else offsets[index]),
                                base_timestamp + reach[index]))
        return answers


class RecordTimesCache:
    """The tables of large batches, least recently used first out, within ``bytes_max``.

    A table is keyed by the file and the batch's position, and kept with the batch's 61 header
    bytes (base offset, length, CRC, record count, timestamps...): a lookup uses it only when the
    batch now at that position has the same header, so a truncated and rewritten file, or a
    reused name, builds a new one. A table is built only from a batch whose every record passes
    the walk's checks (a damaged batch is walked, and refused, by every lookup); LogAppendTime
    batches need none (every record has the batch's timestamp). Thread-safe: lookups of
    different logs run on the storage pool's threads."""

    def __init__(self, bytes_max: int = TABLES_BYTES_MAX, records_min: int = TABLE_RECORDS_MIN) -> None:
        self.bytes_max = bytes_max
        self.records_min = records_min
        self.size = 0
        self._tables: OrderedDict[tuple[str, int], _RecordTimes] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._tables)

    def answers(
        self,
        path: str,
        chunk: bytes | memoryview,
        at: int,
        position: int,
        timestamps_ms: list[int],
        starting_offset: int,
        read_batch: Callable[[], bytes | memoryview],
    ) -> list[tuple[int, int] | None] | None:
        """The answers of ``first_records_at_or_after`` for the batch whose header is at ``at``
        in ``chunk`` (at ``position`` in the file ``path``) from its table, built on first use
        from ``read_batch()`` (its bytes); None when the walk must answer (a small, damaged or
        LogAppendTime batch, or a starting offset inside it)."""
        if len(chunk) < at + _HEADER_BYTES or _RECORDS_COUNT.unpack_from(chunk, at + _RECORDS_COUNT_AT)[0] < self.records_min:
            return None  # a small batch: walked, no table looked for
        header = bytes(chunk[at : at + _HEADER_BYTES])
        key = (path, position)
        with self._lock:
            table = self._tables.get(key)
            if table is not None:
                if table.header == header:
                    self._tables.move_to_end(key)
                else:
                    self._drop(key)
                    table = None
        if table is None:
            fields = HEADER.unpack_from(header, 0)
            if (fields[HeaderField.RECORDS_COUNT] < self.records_min
                    or fields[HeaderField.ATTRIBUTES] & _TIMESTAMP_TYPE_BIT):
                return None
            batch = read_batch()
            try:
                data, start, end = _records_area(batch, fields)
                columns = record_times(data, start, end, fields[HeaderField.RECORDS_COUNT])
            except CodecError:
                return None  # the walk answers, or refuses as each target's own walk does
            table = _RecordTimes(header, fields, columns)
            with self._lock:
                self._drop(key)
                self._tables[key] = table
                self.size += table.size
                while self.size > self.bytes_max and self._tables:
                    self._drop(next(iter(self._tables)))
        return table.first_reaching(timestamps_ms, starting_offset)

    def _drop(self, key: tuple[str, int]) -> None:
        table = self._tables.pop(key, None)
        if table is not None:
            self.size -= table.size


RECORD_TIMES = RecordTimesCache()
"""The process's tables (the storage's lookups share them)."""
