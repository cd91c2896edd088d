"""Shared by the load-integrity tests: produce through a LogManager, damage files on disk the way
a torn copy, a full disk, a bad sector or an editor would, and read back what the files hold."""

from __future__ import annotations

import glob
import os
import struct

from seglog.records import RecordBatchBuilder, iter_batches
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import StorageError
from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals
from seglog.records import CodecError

NOW_MS = 1_700_000_000_000
_LENGTH = struct.Struct(">qi")

# Every periodic job due on every pass: tests move the clock, not the schedule.
EVERY_PASS = MaintenanceIntervals(
    initial_delay_ms=0,
    retention_check_ms=0,
    flush_check_ms=0,
    recovery_point_checkpoint_ms=0,
    log_start_offset_checkpoint_ms=0,
)


def start(log_dirs, clock: FakeClock | None = None, **kwargs) -> LogManager:
    kwargs.setdefault("intervals", EVERY_PASS)
    manager = LogManager(list(log_dirs), clock=clock or FakeClock(), **kwargs)
    manager.startup()
    return manager


def value(index: int) -> bytes:
    return b"record-%07d-" % index + b"x" * (index % 23)


def produce(log, first: int, count: int, per_batch: int = 7) -> list[int]:
    """Appends records value(first) .. value(first + count - 1), ``per_batch`` to a batch;
    returns the offset each got (acknowledged)."""
    offsets = []
    index = first
    while index < first + count:
        builder = RecordBatchBuilder()
        chunk = range(index, min(index + per_batch, first + count))
        for i in chunk:
            builder.append(value(i), key=None, timestamp_ms=NOW_MS + i)
        info = log.append(builder.build())
        offsets.extend(range(info.base_offset, info.last_offset + 1))
        index += len(chunk)
    return offsets


def read_values(log, start: int | None = None) -> list[tuple[int, bytes]]:
    """(offset, value) of every record the log serves from ``start`` (default: the log start
    offset), in order, CRC-checked; stops at the first read that fails (a corrupt batch reported
    as an error is not a silent loss)."""
    out: list[tuple[int, bytes]] = []
    offset = log.log_start_offset if start is None else max(start, log.log_start_offset)
    while offset < log.log_end_offset:
        try:
            data = log.read(offset, 1 << 20).records
        except StorageError:
            break
        progressed = False
        try:
            for batch in iter_batches(data):
                batch.ensure_valid()
                for record in batch:
                    if record.offset >= offset:
                        out.append((record.offset, record.value))
                offset = batch.next_offset
                progressed = True
        except CodecError:
            break  # the batches before the bad one are kept
        if not progressed:
            break
    return out


def segment_files(partition_dir: str, suffix: str) -> list[str]:
    return sorted(glob.glob(os.path.join(partition_dir, "*" + suffix)))


def offsets_in_files(partition_dir: str) -> int:
    """The greatest offset named by any whole batch header in any ``.log`` file (-1 if none):
    the log must never hand out an offset at or below it again."""
    greatest = -1
    for path in segment_files(partition_dir, ".log"):
        data = open(path, "rb").read()
        position = 0
        while len(data) - position >= 61:
            base, length = _LENGTH.unpack_from(data, position)
            if length < 49 or position + 12 + length > len(data):
                break
            last_delta = struct.unpack_from(">i", data, position + 23)[0]
            greatest = max(greatest, base + last_delta)
            position += 12 + length
    return greatest


def batch_ranges(path: str) -> list[tuple[int, int, int]]:
    """(position, end position, last offset) of each whole batch in a healthy ``.log``."""
    data = open(path, "rb").read()
    out, position = [], 0
    while len(data) - position >= 61:
        base, length = _LENGTH.unpack_from(data, position)
        last_delta = struct.unpack_from(">i", data, position + 23)[0]
        out.append((position, position + 12 + length, base + last_delta))
        position += 12 + length
    return out


def truncate_by(path: str, byte_count: int) -> None:
    os.truncate(path, max(0, os.path.getsize(path) - byte_count))


def append_bytes(path: str, data: bytes) -> None:
    with open(path, "ab") as file:
        file.write(data)


def flip_bit(path: str, position: int, bit: int) -> None:
    with open(path, "r+b") as file:
        file.seek(position)
        byte = file.read(1)[0]
        file.seek(position)
        file.write(bytes([byte ^ (1 << bit)]))
