"""What the cluster's epoch rule costs an append: ``Log.append(batch)`` (a single process: the
batch written as sent) against ``Log.append(batch, leader_epoch=E)`` (cluster mode: the epoch
compared under the log's lock, then stamped into bytes 12..16 of the header, outside the CRC).

    .venv/bin/python bench/bench_epoch_stamping.py [--batches 10000] [--pairs 15]

Each pair appends ``--batches`` one-record batches (100-byte value) to a fresh Log in a temporary
directory (no fsync), without then with an epoch. Prints appends/s medians of both and the median
of the ratio within each pair (the machine is shared: only the ratio within a pair compares).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from seglog.records import RecordBatchBuilder
from seglog_server.storage.base.log_config import LogConfig
from seglog_server.storage.log.unified_log import Log

EPOCH = 3


def _batch() -> bytes:
    builder = RecordBatchBuilder()
    builder.append(b"x" * 100, timestamp_ms=int(time.time() * 1000))
    return builder.build()


def _appends_per_second(batch: bytes, count: int, epoch: int | None) -> float:
    with tempfile.TemporaryDirectory() as directory:
        log = Log.load(os.path.join(directory, "t-0"), "t", 0, LogConfig(), had_clean_shutdown=True)
        try:
            started = time.perf_counter()
            if epoch is None:
                for _ in range(count):
                    log.append(batch)
            else:
                for _ in range(count):
                    log.append(batch, leader_epoch=epoch)
            return count / (time.perf_counter() - started)
        finally:
            log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--pairs", type=int, default=15)
    args = parser.parse_args()
    batch = _batch()
    plain, stamped, ratios = [], [], []
    for _ in range(args.pairs):
        a = _appends_per_second(batch, args.batches, None)
        b = _appends_per_second(batch, args.batches, EPOCH)
        plain.append(a)
        stamped.append(b)
        ratios.append(b / a)
    print(f"appends/s, median of {args.pairs} interleaved pairs of {args.batches} appends: "
          f"no epoch {statistics.median(plain):,.0f}, epoch {statistics.median(stamped):,.0f}; "
          f"median ratio within a pair {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main()
