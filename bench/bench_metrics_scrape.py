"""How long one /metrics scrape takes with 10,000 partitions.

    .venv/bin/python bench/bench_metrics_scrape.py [--partitions 10000] [--runs 7]

Builds a LogManager with ``--partitions`` partitions (100 topics; one record in each), then times
``generate_latest`` on the service's registry (what the /metrics handler runs: statistics of every
partition, every family, the text format) with per-partition series capped at the default 1,000
and uncapped. The residency sample (mincore over index files) is included once per scrape here:
the service takes it at most every metrics_residency_interval_ms. Goal: a scrape under 250 ms.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time

from prometheus_client import generate_latest

from seglog.records import RecordBatchBuilder
from seglog_server.metrics import PARTITION_SERIES_MAX_DEFAULT, Metrics
from seglog_server.storage import LogManager

GOAL_MS = 250
TOPICS = 100


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    # Each open partition holds its active segment's log and index descriptors (2-3 each).
    # Root may raise the hard limit; others get what the hard limit allows.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (65536, 65536))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory(prefix="seglog-bench-scrape-") as directory:
        manager = LogManager([directory])
        manager.startup()
        try:
            started = time.perf_counter()
            builder = RecordBatchBuilder()
            builder.append(b"x" * 100)
            batch = builder.build()
            for topic in range(TOPICS):
                name = f"topic-{topic:03d}"
                manager.create_topic(name, args.partitions // TOPICS, {})
                for partition in range(args.partitions // TOPICS):
                    manager.get_log(name, partition).append(batch)
            print(f"seglog bench_metrics_scrape: {args.partitions} partitions built in "
                  f"{time.perf_counter() - started:.1f} s")
            for cap in (PARTITION_SERIES_MAX_DEFAULT, args.partitions):
                metrics = Metrics(partition_series_max=cap, residency_interval_s=0)
                metrics.manager = manager
                times, size = [], 0
                for _ in range(args.runs):
                    started = time.perf_counter()
                    size = len(generate_latest(metrics.registry))
                    times.append(time.perf_counter() - started)
                median_ms = statistics.median(times) * 1000
                print(f"per-partition series for {cap:>6} partitions: scrape median {median_ms:7.1f} ms "
                      f"(min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f}), {size / 1024:.0f} KiB, "
                      f"goal < {GOAL_MS} ms: {'met' if median_ms < GOAL_MS else 'NOT met'}")
        finally:
            manager.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
