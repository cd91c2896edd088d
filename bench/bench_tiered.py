"""Tiered storage: upload throughput and remote catch-up reads beside a local read.

    .venv/bin/python bench/bench_tiered.py [--size-mib 64] [--segment-mib 8] [--runs 3]

A real S3-compatible server (weed, tests/support/s3_server.py) on loopback holds the store. Each
run, on a fresh data dir and key prefix, appends the same `--size-mib` MiB of batches (16
records of 4 KiB random bytes a batch, uncompressed) to a tiered topic (remote.storage.enable,
local.retention.bytes=1) and to a plain one, through LogManager, then times:

1. upload: one remote pass (``LogManager.run_remote_pass``) copying every closed segment with its
   indexes and producer snapshot, then the local retention that deletes the local copies: MB/s
   of segment bytes uploaded;
2. remote catch-up, cold cache: a log manager started afresh on the same data dir (its chunk
   cache empty; the start is not timed) reads the uploaded offsets from 0 with 1 MiB reads
   (``Log.read``: the remote offset index, then ranged GETs of 4 MiB chunks);
3. the same read again, warm cache (the cache, --cache-mib, holds every chunk);
4. local: the plain topic read over the same offsets (its files just written: in the page cache).

Every figure is a median of `--runs` runs; each run's figures and the 1-minute load average before
it are printed, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tests.support.log_test_support import batch  # noqa: E402
from tests.support.s3_server import CREDENTIALS_ENV, WeedServer  # noqa: E402

from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals  # noqa: E402
from seglog_server.storage.remote import ObjectStore, ObjectStoreConfig, RemoteStorageManager  # noqa: E402

BUCKET = "seglog-bench-tiered"
RECORD_BYTES = 4096
RECORDS_PER_BATCH = 16
READ_BYTES = 1 << 20  # a consumer's fetch.max.bytes-sized read
EVERY_PASS = MaintenanceIntervals(initial_delay_ms=0, retention_check_ms=0, flush_check_ms=0,
                                  recovery_point_checkpoint_ms=0, log_start_offset_checkpoint_ms=0)


def _manager(data_dir: str, endpoint: str, prefix: str, cache_bytes: int) -> LogManager:
    rsm = RemoteStorageManager(ObjectStore(ObjectStoreConfig(bucket=BUCKET, prefix=prefix, endpoint_url=endpoint)))
    manager = LogManager([data_dir], intervals=EVERY_PASS, remote_storage=rsm, remote_fetch_cache_bytes=cache_bytes)
    manager.startup()
    return manager


def _read_all(log, end: int) -> int:
    """Reads offsets [0, end) with READ_BYTES reads; returns the bytes read."""
    offset, total = 0, 0
    while offset < end:
        answer = log.read(offset, READ_BYTES)
        assert answer.records and answer.next_offset > offset, (offset, answer.next_offset)
        total += len(answer.records)
        offset = answer.next_offset
    return total


def _timed(function, *args) -> tuple[float, object]:
    started = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - started, result


def one_run(endpoint: str, size_bytes: int, segment_bytes: int, cache_bytes: int, work: str) -> dict[str, float]:
    data_dir = tempfile.mkdtemp(prefix="run-", dir=work)
    prefix = f"bench-{uuid.uuid4().hex[:10]}"
    manager = _manager(data_dir, endpoint, prefix, cache_bytes)
    # retention.ms=-1: the batches carry the helper's fixed old timestamps, which time retention
    # would otherwise delete, remote segments included.
    kept = {"segment.bytes": str(segment_bytes), "retention.ms": "-1"}
    manager.create_topic("tiered", 1, {**kept, "remote.storage.enable": "true", "local.retention.bytes": "1",
                                       "file.delete.delay.ms": "0"})
    manager.create_topic("plain", 1, kept)
    tiered, plain = manager.get_log("tiered", 0), manager.get_log("plain", 0)
    for _ in range(size_bytes // (RECORD_BYTES * RECORDS_PER_BATCH)):
        records = batch(*(os.urandom(RECORD_BYTES) for _ in range(RECORDS_PER_BATCH)))
        tiered.append(records)
        plain.append(records)
    upload_s, _ = _timed(manager.run_remote_pass)
    uploaded = manager.remote_uploaded_bytes
    end = tiered.remote_tier.highest_uploaded_offset + 1
    assert tiered.local_log_start_offset == end, "the local copies were not deleted"
    manager.shutdown()

    manager = _manager(data_dir, endpoint, prefix, cache_bytes)  # an empty chunk cache
    try:
        tiered, plain = manager.get_log("tiered", 0), manager.get_log("plain", 0)
        cold_s, cold_bytes = _timed(_read_all, tiered, end)
        warm_s, warm_bytes = _timed(_read_all, tiered, end)
        local_s, local_bytes = _timed(_read_all, plain, end)
        assert cold_bytes == warm_bytes == local_bytes, (cold_bytes, warm_bytes, local_bytes)
    finally:
        manager.shutdown()
    return {"upload": uploaded / upload_s / 1e6, "cold": cold_bytes / cold_s / 1e6,
            "warm": warm_bytes / warm_s / 1e6, "local": local_bytes / local_s / 1e6,
            "uploaded_mb": uploaded / 1e6, "read_mb": cold_bytes / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--segment-mib", type=int, default=8)
    parser.add_argument("--cache-mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    assert args.runs >= 1 and args.cache_mib > args.size_mib, "the warm read needs every chunk cached"
    os.environ.update(CREDENTIALS_ENV)
    work = tempfile.mkdtemp(prefix="seglog-bench-tiered-")
    server = WeedServer.start(os.path.join(work, "weed"))
    try:
        ObjectStore(ObjectStoreConfig(bucket=BUCKET, endpoint_url=server.endpoint)).create_bucket()
        print(f"{args.size_mib} MiB a run in {args.segment_mib} MiB segments, {args.runs} runs; "
              f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at the start")
        runs = []
        for number in range(args.runs):
            load = os.getloadavg()[0]
            figures = one_run(server.endpoint, args.size_mib << 20, args.segment_mib << 20, args.cache_mib << 20, work)
            runs.append(figures)
            print(f"run {number + 1} (load {load:.2f}): upload {figures['upload']:.1f} MB/s "
                  f"({figures['uploaded_mb']:.1f} MB), remote read cold {figures['cold']:.1f} MB/s, "
                  f"warm {figures['warm']:.1f} MB/s, local {figures['local']:.1f} MB/s ({figures['read_mb']:.1f} MB)")
        median = {name: statistics.median(run[name] for run in runs) for name in ("upload", "cold", "warm", "local")}
        print(f"medians: upload {median['upload']:.1f} MB/s; catch-up read: cold {median['cold']:.1f} MB/s "
              f"({median['cold'] / median['local']:.2f}x local), warm {median['warm']:.1f} MB/s "
              f"({median['warm'] / median['local']:.2f}x local), local {median['local']:.1f} MB/s; "
              f"load average {os.getloadavg()[0]:.2f} at the end")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
