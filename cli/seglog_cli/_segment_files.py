"""Kafka segment files read offline: the index formats and the checks of ``seglog dump --verify``.

A partition directory holds segments named by their base offset (20 digits):
``<base>.log`` (v2 record batches, parsed with ``seglog.records``), ``<base>.index`` and
``<base>.timeindex``. The index formats are declared here with plain ``struct`` so the client needs
nothing from the server:

    .index      8-byte entries, big-endian, one per ~index.interval.bytes of log:
                  relative_offset  int32   entry offset - base offset
                  position         int32   byte position of a batch start in the .log
    .timeindex  12-byte entries, big-endian:
                  timestamp_ms     int64   largest timestamp in the segment up to offset
                  relative_offset  int32   the last offset of the batch that holds it

Index files are preallocated with zeros (``segment.index.bytes``) while their segment is active,
so trailing all-zero slots are free space, not entries. Everything here works on ``bytes``/mmap
buffers; ``dump.py`` opens the files and prints.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from seglog.records import RecordBatch, errors as codec_errors, iter_batches

__all__ = [
    "OFFSET_INDEX_ENTRY",
    "TIME_INDEX_ENTRY",
    "IndexEntry",
    "LogBatch",
    "LogScan",
    "Problem",
    "base_offset_from_name",
    "read_offset_index",
    "read_time_index",
    "scan_log",
    "verify_offset_index",
    "verify_time_index",
]

OFFSET_INDEX_ENTRY = struct.Struct(
    ">"
    "i"  # relative_offset: entry offset - segment base offset
    "i"  # position: byte position of the batch start in the .log
)
TIME_INDEX_ENTRY = struct.Struct(
    ">"
    "q"  # timestamp_ms: the largest timestamp up to the entry's offset
    "i"  # relative_offset: last offset of the batch holding that timestamp - base offset
)
# Kafka names segment files by their base offset rendered in 20 decimal digits.
FILE_NAME_DIGITS = 20


@dataclass(frozen=True)
class Problem:
    """One inconsistency found in a file (where: a byte position in a .log or an index slot)."""

    path: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.where}: {self.message}"


@dataclass(frozen=True)
class IndexEntry:
    slot: int
    # offset index: the absolute offset and a .log position; time index: timestamp and offset.
    key: int
    value: int


@dataclass(frozen=True)
class IndexRead:
    entries: list[IndexEntry]
    free_slots: int  # all-zero preallocated slots after the last entry
    problems: list[Problem]


@dataclass(frozen=True)
class LogBatch:
    """What the index checks need to know about one batch of the .log."""

    position: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    size_bytes: int


@dataclass
class LogScan:
    path: str
    base_offset: int
    size_bytes: int
    batches: list[LogBatch] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    record_count: int = 0


def base_offset_from_name(path: str) -> int:
    """The base offset a segment file is named after (``00000000000000000045.index`` -> 45)."""
    prefix = os.path.basename(path).split(".", 1)[0]
    if len(prefix) != FILE_NAME_DIGITS or not prefix.isdigit():
        raise ValueError(f"{path}: not a segment file name (expected {FILE_NAME_DIGITS} digits, then a suffix)")
    return int(prefix)


# -- indexes ----------------------------------------------------------------------------------------


def read_offset_index(path: str, buffer: bytes, base_offset: int) -> IndexRead:
    """Entries as (slot, absolute offset, position)."""
    return _read_index(path, buffer, base_offset, OFFSET_INDEX_ENTRY, offset_field=0)


def read_time_index(path: str, buffer: bytes, base_offset: int) -> IndexRead:
    """Entries as (slot, timestamp_ms, absolute offset)."""
    return _read_index(path, buffer, base_offset, TIME_INDEX_ENTRY, offset_field=1)


def _read_index(path: str, buffer: bytes, base_offset: int, entry: struct.Struct, offset_field: int) -> IndexRead:
    problems: list[Problem] = []
    whole_bytes = len(buffer) - len(buffer) % entry.size
    if whole_bytes != len(buffer):
        problems.append(
            Problem(path, "file size", f"{len(buffer)} bytes is not a multiple of the {entry.size}-byte entry size")
        )
    used_bytes = len(bytes(buffer[:whole_bytes]).rstrip(b"\0"))
    used_slots = -(-used_bytes // entry.size)  # a slot whose last bytes are zero is still an entry
    entries = []
    for slot, fields in enumerate(entry.iter_unpack(buffer[: used_slots * entry.size])):
        absolute = list(fields)
        absolute[offset_field] += base_offset
        entries.append(IndexEntry(slot, absolute[0], absolute[1]))
    return IndexRead(entries, whole_bytes // entry.size - used_slots, problems)


def verify_offset_index(path: str, index: IndexRead, log: LogScan) -> list[Problem]:
    """Every entry: offsets increase, the position starts a batch whose last offset is the entry's."""
    problems = list(index.problems)
    by_position = {batch.position: batch for batch in log.batches}
    previous: IndexEntry | None = None
    for entry in index.entries:
        offset, position = entry.key, entry.value
        where = f"slot {entry.slot}"
        if previous is not None and offset <= previous.key:
            problems.append(Problem(path, where, f"offset {offset} does not increase (slot {previous.slot} has {previous.key})"))
        if previous is not None and position <= previous.value:
            problems.append(
                Problem(path, where, f"position {position} does not increase (slot {previous.slot} has {previous.value})")
            )
        previous = entry
        batch = by_position.get(position)
        if batch is None:
            problems.append(Problem(path, where, f"offset {offset} points at position {position}, {_not_a_batch(position, log)}"))
        elif batch.last_offset != offset:
            problems.append(
                Problem(
                    path,
                    where,
                    f"offset {offset} points at position {position}, where the batch's last offset is "
                    f"{batch.last_offset}",
                )
            )
    return problems


def verify_time_index(path: str, index: IndexRead, log: LogScan) -> list[Problem]:
    """Every entry: timestamps increase, offsets do not decrease, the offset ends a batch whose max
    timestamp is the entry's, and no batch up to it has a larger one."""
    problems = list(index.problems)
    by_last_offset = {batch.last_offset: (slot, batch) for slot, batch in enumerate(log.batches)}
    running_max = _running_max_timestamps(log.batches)
    previous: IndexEntry | None = None
    for entry in index.entries:
        timestamp_ms, offset = entry.key, entry.value
        where = f"slot {entry.slot}"
        if previous is not None and timestamp_ms <= previous.key:
            problems.append(
                Problem(path, where, f"timestamp {timestamp_ms} does not increase (slot {previous.slot} has {previous.key})")
            )
        if previous is not None and offset < previous.value:
            problems.append(Problem(path, where, f"offset {offset} decreases (slot {previous.slot} has {previous.value})"))
        previous = entry
        found = by_last_offset.get(offset)
        if found is None:
            problems.append(Problem(path, where, f"offset {offset} is not the last offset of any batch in {log.path}"))
            continue
        batch_slot, batch = found
        if batch.max_timestamp != timestamp_ms:
            problems.append(
                Problem(
                    path,
                    where,
                    f"timestamp {timestamp_ms} for offset {offset}, but the batch at position {batch.position} "
                    f"has max timestamp {batch.max_timestamp}",
                )
            )
        elif running_max[batch_slot] > timestamp_ms:
            problems.append(
                Problem(
                    path,
                    where,
                    f"timestamp {timestamp_ms} for offset {offset}, but a batch at or before it has the larger "
                    f"timestamp {running_max[batch_slot]}",
                )
            )
    return problems


def _running_max_timestamps(batches: list[LogBatch]) -> list[int]:
    running, result = -1, []
    for batch in batches:
        running = max(running, batch.max_timestamp)
        result.append(running)
    return result


def _not_a_batch(position: int, log: LogScan) -> str:
    if position >= log.size_bytes:
        return f"past the end of {log.path} ({log.size_bytes} bytes)"
    return "which is not the start of a batch"


# -- the log ----------------------------------------------------------------------------------------


def scan_log(
    path: str,
    buffer: bytes,
    base_offset: int,
    *,
    deep: bool = False,
    on_batch: Callable[[RecordBatch], None] | None = None,
) -> LogScan:
    """Walk every batch: CRC, magic, offsets above the base and increasing, the bytes after the
    last whole batch; with ``deep``, decode every record too. ``on_batch`` sees each batch."""
    scan = LogScan(path, base_offset, len(buffer))
    end = 0
    previous_last = base_offset - 1
    try:
        for batch in iter_batches(buffer):
            end = batch.position + batch.size_in_bytes
            scan.problems.extend(_check_batch(path, batch, previous_last, deep))
            previous_last = max(previous_last, batch.last_offset)
            scan.batches.append(
                LogBatch(batch.position, batch.base_offset, batch.last_offset, batch.max_timestamp, batch.size_in_bytes)
            )
            scan.record_count += batch.records_count
            if on_batch is not None:
                on_batch(batch)
    except codec_errors.CodecError as error:
        if _is_zero(buffer, end):  # preallocated space (preallocate=true) reads as a bad length
            return scan
        scan.problems.append(Problem(path, f"position {end}", f"unreadable batch: {error}"))
        return scan
    if not _is_zero(buffer, end):
        scan.problems.append(
            Problem(
                path,
                f"position {end}",
                f"{len(buffer) - end} bytes after the last whole batch do not form a batch (a torn write?)",
            )
        )
    return scan


def _check_batch(path: str, batch: RecordBatch, previous_last: int, deep: bool) -> Iterator[Problem]:
    where = f"position {batch.position}"
    if batch.magic != 2:
        yield Problem(path, where, f"magic {batch.magic}, expected 2")
        return
    if not batch.is_valid():
        yield Problem(
            path,
            where,
            f"CRC mismatch in the batch at offset {batch.base_offset}: stored {batch.crc:#010x}, "
            f"computed {batch.compute_crc():#010x}",
        )
    if batch.base_offset <= previous_last:
        yield Problem(path, where, f"base offset {batch.base_offset} is not above the previous last offset {previous_last}")
    if batch.last_offset_delta < 0:
        yield Problem(path, where, f"last offset delta {batch.last_offset_delta} is negative")
    if deep:
        try:
            for _ in batch.records():
                pass
        except codec_errors.CodecError as error:
            yield Problem(path, where, f"records do not decode: {error}")


def _is_zero(buffer: bytes, start: int) -> bool:
    """Whether every byte from ``start`` to the end is zero (true for an empty tail)."""
    return not bytes(buffer[start:]).strip(b"\0")
