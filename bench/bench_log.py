"""The per-partition Log: append throughput, small appends per second, two-level lookups, recovery.

    .venv/bin/python bench/bench_log.py [--quick] [--runs N] [--dir DIR]

Phases (``os.sync()`` between them, every figure a median over ``--runs`` runs):

1. Large appends: ``Log.append`` of a pre-built 1 MiB batch, N times, against ``os.write`` of the
   same bytes to a fresh file in the same directory, in the same run. Goal: >= 0.5 of raw.
2. Small appends: ``Log.append`` of a pre-built 1 KiB batch (10 records) per call. Goal:
   >= 100,000 appends/s. The append path is broken down stage by stage (validation with the
   CRC, lock, roll decision, pwritev, index bookkeeping) by timing each alone.
3. Lookups through both levels on a log of 1,000 segments: ``Log.position_of`` (segment map,
   offset index, batch-header scan) and ``Log.offset_for_timestamp`` (running max over segments,
   time index, offset index, scan, record decode of one batch) for random targets over the whole
   log, each call timed alone. Goal: median <= 10 us. Measured with every segment's files open
   (``open_segments_max`` >= segments) and with the default budget of 64 open segments, where
   random targets mostly reopen a segment first.
4. Recovery after an unclean shutdown: ``Log.load`` with no recovery point checks the CRC of
   every batch and rebuilds every index. Goal: >= 500 MB/s (16 KiB batches, Kafka's default
   producer batch.size); 1 MiB and 1 KiB batches shown for comparison. Page cache warm.

The machine is shared and noisy (+-30-50 %): compare rows of one run, not runs of one row.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from seglog.records import (
    ATTRIBUTES_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    CRC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    RecordBatchBuilder,
    crc32c,
)
from seglog_server.storage.log.unified_log import Log
from seglog_server.storage.base.log_config import LogConfig
from seglog_server.storage.log.log_validator import LogValidator

MIB = 1024 * 1024
BASE_TIMESTAMP_MS = 1_700_000_000_000


def build_batch(total_bytes: int, record_count: int, timestamp_ms: int = BASE_TIMESTAMP_MS) -> bytes:
    """A batch of ``record_count`` equal records, about ``total_bytes`` long (never above)."""
    overhead = len(_batch_of(record_count, 0, timestamp_ms))
    value_bytes = max(0, (total_bytes - overhead) // record_count)
    while True:
        built = _batch_of(record_count, value_bytes, timestamp_ms)
        if len(built) <= total_bytes:
            return built
        value_bytes -= 1


def _batch_of(record_count: int, value_bytes: int, timestamp_ms: int) -> bytes:
    builder = RecordBatchBuilder()
    payload = os.urandom(value_bytes)
    for index in range(record_count):
        builder.append(payload, timestamp_ms=timestamp_ms + index)
    return builder.build()


def no_background(task: Callable[[], None]) -> None:
    """Roll flushes are not part of these measurements."""


def open_log(directory: str, config: LogConfig, **kwargs) -> Log:
    return Log.load(directory, "bench", 0, config, had_clean_shutdown=True, flush_scheduler=no_background, **kwargs)


def fresh_dir(root: str, name: str) -> str:
    path = os.path.join(root, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def settle() -> None:
    os.sync()  # background writeback of one phase must not slow the next


# -- 1. large appends ------------------------------------------------------------------------------
def large_appends(root: str, runs: int, count: int) -> tuple[float, float]:
    """(Log MB/s, raw os.write MB/s) medians."""
    batch = build_batch(MIB, 16)
    config = LogConfig(max_message_bytes=len(batch))
    log_rates, raw_rates = [], []
    for _ in range(runs):
        directory = fresh_dir(root, "large")
        settle()
        log = open_log(directory, config)
        started = time.perf_counter()
        for _ in range(count):
            log.append(batch)
        log_rates.append(count * len(batch) / (time.perf_counter() - started) / 1e6)
        log.close()
        directory = fresh_dir(root, "large")
        settle()
        fd = os.open(os.path.join(directory, "raw"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        started = time.perf_counter()
        for _ in range(count):
            os.write(fd, batch)
        raw_rates.append(count * len(batch) / (time.perf_counter() - started) / 1e6)
        os.close(fd)
    shutil.rmtree(os.path.join(root, "large"), ignore_errors=True)
    return statistics.median(log_rates), statistics.median(raw_rates)


# -- 2. small appends ------------------------------------------------------------------------------
def small_appends(root: str, runs: int, count: int) -> tuple[float, float]:
    """(Log appends/s, raw os.write calls/s) medians."""
    batch = build_batch(1024, 10)
    log_rates, raw_rates = [], []
    for _ in range(runs):
        directory = fresh_dir(root, "small")
        settle()
        log = open_log(directory, LogConfig())
        started = time.perf_counter()
        for _ in range(count):
            log.append(batch)
        log_rates.append(count / (time.perf_counter() - started))
        log.close()
        directory = fresh_dir(root, "small")
        settle()
        fd = os.open(os.path.join(directory, "raw"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        started = time.perf_counter()
        for _ in range(count):
            os.write(fd, batch)
        raw_rates.append(count / (time.perf_counter() - started))
        os.close(fd)
    shutil.rmtree(os.path.join(root, "small"), ignore_errors=True)
    return statistics.median(log_rates), statistics.median(raw_rates)


def append_breakdown(root: str, count: int) -> list[tuple[str, float]]:
    """Microseconds per call of each stage of the 1 KiB append path, timed alone."""
    batch = build_batch(1024, 10)
    view = memoryview(batch)
    directory = fresh_dir(root, "breakdown")
    log = open_log(directory, LogConfig())
    validator = LogValidator(LogConfig(), "bench-0")
    lock = threading.RLock()
    segment = log.segments_snapshot()[-1]
    next_offset = [0]

    def locked() -> None:
        with lock:
            pass

    def roll_decision() -> None:
        segment.should_roll(
            max_segment_bytes=2**30, max_segment_ms=2**40, messages_bytes=len(batch),
            max_timestamp_ms=BASE_TIMESTAMP_MS, last_offset=next_offset[0] + 9, now_ms=BASE_TIMESTAMP_MS,
        )

    def segment_append() -> None:
        offset = next_offset[0]
        segment.append_batch(view, offset, offset + 9, BASE_TIMESTAMP_MS)
        next_offset[0] = offset + 10

    whole_log = open_log(fresh_dir(root, "breakdown-whole"), LogConfig())
    stages = [
        ("validate (header + CRC-32C of 1 KiB)", lambda: validator.validate(batch, BASE_TIMESTAMP_MS)),
        ("per-log lock acquire + release", locked),
        ("roll decision", roll_decision),
        ("segment append (pwritev + index bookkeeping)", segment_append),
        ("whole Log.append", lambda: whole_log.append(batch)),
    ]
    results = []
    for name, call in stages:
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter_ns()
            for _ in range(count):
                call()
            best = min(best, (time.perf_counter_ns() - started) / count / 1000)
        results.append((name, best))
    log.close()
    whole_log.close()
    shutil.rmtree(directory, ignore_errors=True)
    shutil.rmtree(os.path.join(root, "breakdown-whole"), ignore_errors=True)
    return results


# -- 3. lookups ------------------------------------------------------------------------------------
def build_lookup_log(root: str, segment_count: int, segment_bytes: int) -> tuple[str, LogConfig, int]:
    """A log of ``segment_count`` segments of 1 KiB batches (10 records one ms apart, each batch
    10 ms after the previous one)."""
    directory = fresh_dir(root, "lookups")
    config = LogConfig(segment_bytes=segment_bytes)
    log = open_log(directory, config)
    template = bytearray(build_batch(1024, 10))
    timestamp = BASE_TIMESTAMP_MS
    while log.segment_count < segment_count or log.segments_snapshot()[-1].size_in_bytes < segment_bytes // 2:
        log.append(retimed(template, timestamp))
        timestamp += 10
    end_offset = log.log_end_offset
    log.flush()
    log.close()
    return directory, config, end_offset


def retimed(batch: bytearray, base_timestamp_ms: int) -> bytes:
    """``batch`` with every record moved to start at ``base_timestamp_ms`` (header fields and
    CRC rewritten; re-encoding each batch would dominate the build)."""
    max_delta = struct.unpack_from(">q", batch, MAX_TIMESTAMP_OFFSET)[0] - struct.unpack_from(
        ">q", batch, BASE_TIMESTAMP_OFFSET
    )[0]
    struct.pack_into(">q", batch, BASE_TIMESTAMP_OFFSET, base_timestamp_ms)
    struct.pack_into(">q", batch, MAX_TIMESTAMP_OFFSET, base_timestamp_ms + max_delta)
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def lookup_latencies(directory: str, config: LogConfig, end_offset: int, calls: int, open_segments_max: int) -> dict[str, float]:
    log = open_log(directory, config, open_segments_max=open_segments_max)
    rng = random.Random(1)
    last_timestamp = log.offset_for_timestamp(-3).timestamp_ms
    offsets = [rng.randrange(end_offset) for _ in range(calls)]
    timestamps = [rng.randrange(BASE_TIMESTAMP_MS, last_timestamp + 1) for _ in range(calls)]
    tail_start = log.segments_snapshot()[-1].base_offset
    tail_offsets = [rng.randrange(tail_start, end_offset) for _ in range(calls)]
    for offset, timestamp in zip(offsets, timestamps):  # warm: open and map what the budget allows
        log.position_of(offset)
        log.offset_for_timestamp(timestamp)
    results = {
        "offset": _median_call_us(log.position_of, offsets),
        "timestamp": _median_call_us(log.offset_for_timestamp, timestamps),
        "tail offset": _median_call_us(log.position_of, tail_offsets),
        "segments": log.segment_count,
    }
    log.close()
    return results


def _median_call_us(call: Callable[[int], object], targets: list[int]) -> float:
    samples = []
    clock = time.perf_counter_ns
    for target in targets:
        started = clock()
        call(target)
        samples.append(clock() - started)
    return statistics.median(samples) / 1000


# -- 4. recovery -----------------------------------------------------------------------------------
def recovery_rate(root: str, runs: int, total_bytes: int, batch_bytes: int) -> float:
    """MB/s of Log.load recovering every segment after an unclean shutdown."""
    directory = fresh_dir(root, "recovery")
    records = max(1, min(64, batch_bytes // 256))
    batch = build_batch(batch_bytes, records)
    config = LogConfig(segment_bytes=128 * MIB, max_message_bytes=max(len(batch), 1_048_588))
    log = open_log(directory, config)
    for _ in range(max(1, total_bytes // len(batch))):
        log.append(batch)
    size = log.size_in_bytes
    log.flush()
    log.close()
    settle()
    rates = []
    for _ in range(runs):
        started = time.perf_counter()
        recovered = Log.load(
            directory, "bench", 0, config, had_clean_shutdown=False, recovery_point=0, flush_scheduler=no_background
        )
        elapsed = time.perf_counter() - started
        assert recovered.statistics().loaded_truncated_bytes == 0
        recovered.close()
        rates.append(size / elapsed / 1e6)
    shutil.rmtree(directory, ignore_errors=True)
    return statistics.median(rates)


# -- report ----------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer runs (about a minute)")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir under /tmp)")
    args = parser.parse_args()
    runs = args.runs or (3 if args.quick else 5)
    root = tempfile.mkdtemp(prefix="bench_log_", dir=args.dir)
    large_count = 128 if args.quick else 512
    small_count = 50_000 if args.quick else 200_000
    lookup_segment_bytes = 128 * 1024 if args.quick else 512 * 1024
    lookup_calls = 5_000 if args.quick else 20_000
    recovery_bytes = 128 * MIB if args.quick else 512 * MIB
    rows: list[tuple[str, str, str, str]] = []
    try:
        log_mb, raw_mb = large_appends(root, runs, large_count)
        ratio = log_mb / raw_mb
        rows.append(("large appends vs raw os.write", ">= 0.50", f"{ratio:.2f} ({log_mb:,.0f} vs {raw_mb:,.0f} MB/s)", _ok(ratio >= 0.5)))
        settle()
        per_s, raw_per_s = small_appends(root, runs, small_count)
        rows.append(("1 KiB appends/s", ">= 100,000", f"{per_s:,.0f} (raw os.write {raw_per_s:,.0f}/s)", _ok(per_s >= 100_000)))
        breakdown = append_breakdown(root, 20_000)
        settle()
        directory, config, end_offset = build_lookup_log(root, 1_000, lookup_segment_bytes)
        settle()
        warm = lookup_latencies(directory, config, end_offset, lookup_calls, open_segments_max=2_000)
        budget = lookup_latencies(directory, config, end_offset, lookup_calls // 4, open_segments_max=64)
        segments = warm["segments"]
        rows.append((f"offset lookup median us ({segments} segments, all open)", "<= 10", f"{warm['offset']:.1f}", _ok(warm["offset"] <= 10)))
        rows.append((f"timestamp lookup median us ({segments} segments, all open)", "<= 10", f"{warm['timestamp']:.1f}", _ok(warm["timestamp"] <= 10)))
        rows.append(("tail offset lookup median us", "-", f"{warm['tail offset']:.1f}", ""))
        rows.append(("offset lookup median us (64 open of 1,000)", "-", f"{budget['offset']:.1f}", ""))
        rows.append(("timestamp lookup median us (64 open of 1,000)", "-", f"{budget['timestamp']:.1f}", ""))
        shutil.rmtree(directory, ignore_errors=True)
        settle()
        for batch_bytes, label, goal in ((16 * 1024, "16 KiB", True), (MIB, "1 MiB", False), (1024, "1 KiB", False)):
            rate = recovery_rate(root, runs, recovery_bytes if batch_bytes > 1024 else recovery_bytes // 8, batch_bytes)
            rows.append((f"recovery MB/s ({label} batches)", ">= 500" if goal else "-", f"{rate:,.0f}", _ok(rate >= 500) if goal else ""))
            settle()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    _print_table(["measure", "goal", "measured", ""], rows)
    print()
    _print_table(["1 KiB append stage", "us per call"], [(name, f"{us:.2f}") for name, us in breakdown])
    return 0


def _ok(passed: bool) -> str:
    return "ok" if passed else "BELOW GOAL"


def _print_table(header: list[str], rows: list) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    print("  ".join(str(cell).ljust(width) for cell, width in zip(header, widths)))
    print("  ".join("-" * width for width in widths))
    for row in rows:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)))


if __name__ == "__main__":
    sys.exit(main())
