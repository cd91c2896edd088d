"""Builders shared by the segment, loader and log tests: batches made with the codec's
RecordBatchBuilder, logs in tmp_path with a FakeClock and synchronous background flushes."""

from __future__ import annotations

import contextlib
import errno
import os
import random
import struct
from collections.abc import Iterable, Iterator, Sequence

from seglog.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    RECORDS_OFFSET,
    Compression,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    crc32c,
    iter_batches,
)
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.fs import REAL_FS, FileSystem
from seglog_server.storage.log.unified_log import Log
from seglog_server.storage.base.log_config import LogConfig
from seglog_server.storage.base.observer import StorageObserver
from seglog_server.storage.segment import segment_time_lookups
from seglog_server.storage.segment.batch_directory import DirectoryBudget
from seglog_server.storage.segment.log_segment import LogSegment

NOW_MS = 1_700_000_000_000


def batch(
    *values: bytes | None,
    base_offset: int = 0,
    timestamps: Sequence[int] | int | None = None,
    keys: Sequence[bytes | None] | None = None,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    **builder_args,
) -> bytes:
    """One v2 batch of ``values`` (default one value ``b"v"``)."""
    if not values:
        values = (b"v",)
    if timestamps is None:
        timestamps = [NOW_MS] * len(values)
    elif isinstance(timestamps, int):
        timestamps = [timestamps] * len(values)
    builder = RecordBatchBuilder(
        compression=compression, timestamp_type=timestamp_type, base_offset=base_offset, **builder_args
    )
    for index, value in enumerate(values):
        key = keys[index] if keys is not None else None
        builder.append(value, key=key, timestamp_ms=timestamps[index])
    return builder.build()


def sized_batch(size_in_bytes: int, *, base_offset: int = 0, timestamp_ms: int = NOW_MS, record_count: int = 1) -> bytes:
    """A batch of ``record_count`` records padded to exactly ``size_in_bytes`` bytes."""
    probe = batch(*([b""] * record_count), base_offset=base_offset, timestamps=timestamp_ms)
    padding = size_in_bytes - len(probe)
    assert padding >= 0, f"{size_in_bytes} bytes cannot hold {record_count} records"
    for extra in range(padding, -1, -1):  # varint lengths grow with the value: search down
        values = [b"x" * extra] + [b""] * (record_count - 1)
        built = batch(*values, base_offset=base_offset, timestamps=timestamp_ms)
        if len(built) == size_in_bytes:
            return built
    raise AssertionError(f"cannot build a batch of exactly {size_in_bytes} bytes")


def config(**overrides) -> LogConfig:
    return LogConfig().replace(**overrides)


def run_now(task) -> None:
    task()


def open_log(
    directory: os.PathLike | str,
    clock: FakeClock,
    log_config: LogConfig | None = None,
    *,
    had_clean_shutdown: bool = True,
    recovery_point: int = 0,
    log_start_offset: int = 0,
    fs: FileSystem = REAL_FS,
) -> Log:
    return Log.load(
        os.fspath(directory),
        "topic",
        0,
        log_config or LogConfig(),
        clock=clock,
        fs=fs,
        had_clean_shutdown=had_clean_shutdown,
        recovery_point=recovery_point,
        log_start_offset=log_start_offset,
        rng=random.Random(7),
        flush_scheduler=run_now,
    )


def reopen(log: Log, clock: FakeClock, *, clean: bool = True, **kwargs) -> Log:
    """Closes ``log`` (after a flush when ``clean``) and loads its directory again."""
    if clean:
        log.flush()
        recovery_point = log.recovery_point
    else:
        recovery_point = kwargs.pop("recovery_point", log.recovery_point)
    log_start_offset = kwargs.pop("log_start_offset", log.log_start_offset)
    log.close()
    return open_log(
        log.dir,
        clock,
        kwargs.pop("log_config", log.config),
        had_clean_shutdown=clean,
        recovery_point=recovery_point,
        log_start_offset=log_start_offset,
        **kwargs,
    )


def offsets_of(records: bytes) -> list[int]:
    """Every record offset in a buffer of batches."""
    return [record.offset for one in iter_batches(records) for record in one]


def batch_offsets(records: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of each batch in a buffer."""
    return [(one.base_offset, one.last_offset) for one in iter_batches(records)]


def values_of(records: bytes) -> list[bytes | None]:
    return [record.value for one in iter_batches(records) for record in one]


def segment_files(directory: os.PathLike | str) -> list[str]:
    # (producer-state .snapshot files share the digits but are not a segment's files)
    return sorted(name for name in os.listdir(directory) if name[:1].isdigit() and not name.endswith(".snapshot"))


def all_offsets(log: Log) -> list[int]:
    """Every record offset readable from the log start offset (one read per segment)."""
    offsets: list[int] = []
    position = log.log_start_offset
    while position < log.log_end_offset:
        batches = list(iter_batches(log.read(position, 2**31 - 1).records))
        if not batches:  # an offset gap up to the log end offset (after a truncation)
            break
        offsets.extend(record.offset for one in batches for record in one if record.offset >= position)
        position = batches[-1].next_offset
    return offsets


def append_all(log: Log, batches: Iterable[bytes]) -> None:
    for one in batches:
        log.append(one)


def records_of(data: bytes) -> list:
    return [record for one in iter_batches(data) for record in one]


def new_segment(directory, base_offset: int, clock: FakeClock, log_config: LogConfig | None = None, **kwargs) -> LogSegment:
    return LogSegment.open(os.fspath(directory), base_offset, log_config or LogConfig(), clock=clock, create=True, **kwargs)


def first_batch(data: bytes) -> RecordBatch:
    return next(iter(iter_batches(data)))


def with_second_record_running_past_the_batch(data: bytes) -> bytes:
    """``data`` (three or more uncompressed records) with record 1's one-byte length raised to 63
    and the CRC recomputed: the CRC passes, the framing does not."""
    buf = bytearray(data)
    second = RECORDS_OFFSET + 1 + buf[RECORDS_OFFSET] // 2
    assert buf[second] < 0x80  # a one-byte length
    buf[second] = 0x7E  # zigzag 63
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(bytes(buf[ATTRIBUTES_OFFSET:])))
    return bytes(buf)


# The packers poke takes for a batch header's big-endian int32 and int64 fields.
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")


def poke(path: str, position: int, packer: struct.Struct, value: int) -> None:
    """Overwrite ``packer.pack(value)`` at ``position`` of the file at ``path`` (damage, in place)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, packer.pack(value), position)
    finally:
        os.close(fd)


@contextlib.contextmanager
def scans_only(log: Log) -> Iterator[None]:
    """Lookups by time inside the block search through the indexes and header scans only, as if
    no segment had a batch directory or a time-step table (the per-target oracle their answers
    are held to); each segment's directory and table are back afterwards."""
    from seglog_server.storage.segment import segment_time_lookups

    saved = [(segment, segment._directory_ref, segment._directory_targets, segment._directory_refused,
              segment._steps_ref, segment._steps_targets, segment._steps_refused)
             for segment in log._local.segments.values()]
    for segment, *_ in saved:
        segment._directory_ref, segment._directory_refused = segment_time_lookups._no_directory, True
        segment._steps_ref, segment._steps_refused = segment_time_lookups._no_directory, True
    try:
        yield
    finally:
        for segment, ref, targets, refused, steps_ref, steps_targets, steps_refused in saved:
            segment._steps_ref, segment._steps_targets, segment._steps_refused = steps_ref, steps_targets, steps_refused
            segment._directory_ref, segment._directory_targets, segment._directory_refused = ref, targets, refused


def batch_positions(path: str) -> list[int]:
    """The file position of each batch of the segment file at ``path``."""
    with open(path, "rb") as file:
        return [one.position for one in iter_batches(file.read())]


class FailingFs(FileSystem):
    """Counts preads; the next ``fail`` of them raise EIO."""

    def __init__(self) -> None:
        self.preads = 0
        self.fail = 0

    def pread(self, fd: int, size: int, position: int) -> bytes:
        self.preads += 1
        if self.fail:
            self.fail -= 1
            raise OSError(errno.EIO, "injected")
        return super().pread(fd, size, position)


def budget_installer(monkeypatch, name: str):
    """``use(bytes_max)``: a DirectoryBudget of the test's own (the process's is shared) put in
    place of segment_time_lookups's ``name`` (``"DIRECTORIES"`` or ``"TIME_STEPS"``) and returned."""
    assert isinstance(getattr(segment_time_lookups, name), DirectoryBudget), name

    def use(bytes_max: int = 1 << 30) -> DirectoryBudget:
        made = DirectoryBudget(bytes_max)
        monkeypatch.setattr(segment_time_lookups, name, made)
        return made

    return use


class PhaseCalls(StorageObserver):
    """An observer without histograms: every lap a ``phase`` call, counted."""

    enabled = True

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def phase(self, operation: str, phase: str, seconds: float) -> None:
        self.counts[operation, phase] = self.counts.get((operation, phase), 0) + 1


def lap_counts(observer) -> dict[tuple[str, str], int]:
    """The laps an observer counted, ``(operation, phase) -> count``: a PhaseCalls' calls, or a
    MetricsObserver's non-empty phase histograms."""
    if isinstance(observer, PhaseCalls):
        return dict(observer.counts)
    return {(operation, phase): sum(histogram.counts) for operation, row in observer.phase_histograms.items()
            for phase, histogram in row.items() if sum(histogram.counts)}
