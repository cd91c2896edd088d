"""What idempotent produce costs the service: ``Log.append`` of plain batches against batches with
a producer id and sequence (the producer-state check, the duplicate search, the state update),
and a duplicate answered from the state. Also the snapshot write at roll and the state rebuild.

    .venv/bin/python bench/bench_idempotence.py [--batches 20000] [--records 10] [--runs 7]
    .venv/bin/python bench/bench_idempotence.py --end-to-end [--e2e-records 300000] [--runs 5]

Each run appends ``--batches`` batches of ``--records`` 100-byte records to a fresh Log in a
temporary directory (no fsync), plain and idempotent interleaved (A, B, A, B ...); the rows are
medians over ``--runs`` of the microseconds per append, with the min-max. ``retry`` resends the
last batch ``--batches`` times (each answered from the state, nothing written). ``snapshot``
times a roll's snapshot with ``--producers`` producers; ``rebuild`` the load of a log whose
snapshots were deleted (the header replay), per batch. The machine is shared: compare rows of
the same run.

``--end-to-end`` instead starts a service (``bench_service.Service``) and sends
``--e2e-records`` 100-byte records with ``Producer.send_many`` (16 KiB batches, the default
size, so the per-batch state cost shows) to one partition, idempotent and not, interleaved:
records/s medians and the ratio within each pair.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time

from seglog.records import RecordBatchBuilder
from seglog_server.storage.log.unified_log import Log
from seglog_server.storage.base.log_config import LogConfig
from seglog_server.storage.producers.producer_state_loader import list_snapshot_offsets
from seglog_server.storage.producers.producer_snapshot import snapshot_path
from seglog_server.storage.base.fs import REAL_FS

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


def end_to_end(record_count: int, runs: int) -> None:
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import bench_service

    from seglog import Admin, Producer

    values = [os.urandom(100) for _ in range(1024)]
    values = [values[i % 1024] for i in range(record_count)]

    def send(address: str, topic: str, idempotent: bool) -> float:
        started = time.perf_counter()
        with Producer(address, linger_ms=5, enable_idempotence=idempotent) as producer:
            for start in range(0, record_count, 10_000):
                producer.send_many(topic, values[start : start + 10_000], partition=0)
            producer.flush()
        return record_count / (time.perf_counter() - started)

    with tempfile.TemporaryDirectory() as root:
        service = bench_service.Service(pathlib.Path(root), "e2e", [])
        try:
            with Admin(service.address) as admin:
                plain, idempotent = [], []
                for run in range(runs):
                    for flag, samples in ((False, plain), (True, idempotent)):
                        topic = f"t{run}-{int(flag)}"
                        admin.create_topic(topic, partitions=1)
                        samples.append(send(service.address, topic, flag))
        finally:
            service.stop()
    print(f"Producer.send_many end to end, {record_count} x 100-byte records, {runs} runs interleaved")
    print(row("plain producer", [r / 1000 for r in plain], "k rec/s"))
    print(row("idempotent producer", [r / 1000 for r in idempotent], "k rec/s"))
    ratios = [b / a for a, b in zip(plain, idempotent)]
    print(f"{'ratio (same run)':<22} {statistics.median(ratios):9.3f} x      ({min(ratios):.3f}-{max(ratios):.3f})")


def row(name: str, samples: list[float], unit: str) -> str:
    return f"{name:<22} {statistics.median(samples):9.2f} {unit}  ({min(samples):.2f}-{max(samples):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--producers", type=int, default=10_000)
    parser.add_argument("--end-to-end", action="store_true")
    parser.add_argument("--e2e-records", type=int, default=300_000)
    args = parser.parse_args()
    if args.end_to_end:
        end_to_end(args.e2e_records, args.runs)
        return
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
