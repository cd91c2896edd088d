"""What idempotent produce costs the service: ``Log.append`` of plain batches against batches with
a producer id and sequence (the producer-state check, the duplicate search, the state update),
and a duplicate answered from the state. Also the snapshot write at roll and the state rebuild.

    .venv/bin/python bench/bench_idempotence.py [--batches 20000] [--records 10] [--runs 7]

Each run appends ``--batches`` batches of ``--records`` 100-byte records to a fresh Log in a
temporary directory (no fsync), plain and idempotent interleaved (A, B, A, B ...); the rows are
medians over ``--runs`` of the microseconds per append, with the min-max. ``retry`` resends the
last batch ``--batches`` times (each answered from the state, nothing written). ``snapshot``
times a roll's snapshot with ``--producers`` producers; ``rebuild`` the load of a log whose
snapshots were deleted (the header replay), per batch. The machine is shared: compare rows of
the same run.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time

from seglog.records import RecordBatchBuilder
from seglog_server.storage.log import Log
from seglog_server.storage.log_config import LogConfig
from seglog_server.storage.producer_state_loader import list_snapshot_offsets
from seglog_server.storage.producer_snapshot import snapshot_path
from seglog_server.storage.fs import REAL_FS

VALUE = b"x" * 100


def build(records: int, sequence: int | None, producer_id: int = 1000) -> bytes:
    if sequence is None:
        builder = RecordBatchBuilder()
    else:
        builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
    builder.extend([None] * records, [VALUE] * records, 1_700_000_000_000)
    return builder.build()


def open_log(directory: str) -> Log:
    return Log.load(directory, "bench", 0, LogConfig(), had_clean_shutdown=True,
                    flush_scheduler=lambda task: None, rng=random.Random(1))


def run_appends(batch_count: int, records: int, idempotent: bool) -> float:
    batches = [build(records, i * records if idempotent else None) for i in range(batch_count)]
    with tempfile.TemporaryDirectory() as directory:
        log = open_log(directory)
        started = time.perf_counter()
        for data in batches:
            log.append(data)
        elapsed = time.perf_counter() - started
        log.close()
    return elapsed / batch_count * 1e6


def run_retries(batch_count: int, records: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        log = open_log(directory)
        last = build(records, 0)
        log.append(last)
        started = time.perf_counter()
        for _ in range(batch_count):
            log.append(last)
        elapsed = time.perf_counter() - started
        log.close()
    return elapsed / batch_count * 1e6


def run_snapshot(producers: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        log = open_log(directory)
        for pid in range(producers):
            log.append(build(1, 0, producer_id=pid))
        started = time.perf_counter()
        log.roll()
        elapsed = time.perf_counter() - started
        log.close()
    return elapsed * 1e3


def run_rebuild(batch_count: int, records: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        log = open_log(directory)
        for i in range(batch_count):
            log.append(build(records, i * records))
        log.close()
        for offset in list_snapshot_offsets(REAL_FS, directory):
            os.unlink(snapshot_path(directory, offset))
        started = time.perf_counter()
        log = Log.load(directory, "bench", 0, LogConfig(), had_clean_shutdown=False,
                       flush_scheduler=lambda task: None)
        elapsed = time.perf_counter() - started
        assert log.producer_state_statistics().producer_count == 1
        log.close()
    return elapsed / batch_count * 1e6


def row(name: str, samples: list[float], unit: str) -> str:
    return f"{name:<22} {statistics.median(samples):9.2f} {unit}  ({min(samples):.2f}-{max(samples):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--producers", type=int, default=10_000)
    args = parser.parse_args()
    plain, idempotent, retries, snapshot, rebuild = [], [], [], [], []
    for _ in range(args.runs):
        plain.append(run_appends(args.batches, args.records, False))
        idempotent.append(run_appends(args.batches, args.records, True))
        retries.append(run_retries(args.batches, args.records))
        snapshot.append(run_snapshot(args.producers))
        rebuild.append(run_rebuild(args.batches, args.records))
    print(f"Log.append, {args.batches} batches of {args.records} x 100-byte records, {args.runs} runs (median, min-max)")
    print(row("plain append", plain, "us/batch"))
    print(row("idempotent append", idempotent, "us/batch"))
    ratios = [b / a for a, b in zip(plain, idempotent)]
    print(f"{'ratio (same run)':<22} {statistics.median(ratios):9.3f} x      ({min(ratios):.3f}-{max(ratios):.3f})")
    print(row("duplicate answered", retries, "us/batch"))
    print(row(f"roll snapshot {args.producers}p", snapshot, "ms"))
    print(row("rebuild by replay", rebuild, "us/batch"))


if __name__ == "__main__":
    main()
