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
DESCRIPTORS_PER_PARTITION = 3
DESCRIPTOR_SLACK = 500  # the interpreter's own files, sockets, libraries


def build(manager: LogManager, partition_count: int) -> None:
    """TOPICS topics with one record in each partition."""
    builder = RecordBatchBuilder()
    builder.append(b"x" * 100)
    batch = builder.build()
    per_topic = partition_count // TOPICS
    for topic in range(TOPICS):
        name = f"topic-{topic:03d}"
        manager.create_topic(name, per_topic, {})
        for partition in range(per_topic):
            manager.get_log(name, partition).append(batch)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    # Each open partition holds 3 descriptors (its active segment's log and two index files, until
    # the descriptor budget lands): a process limited to N descriptors holds about N / 3. When the
    # limit is below what --partitions needs, the bench measures as many as fit and extrapolates.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    fitting = (hard - DESCRIPTOR_SLACK) // DESCRIPTORS_PER_PARTITION // TOPICS * TOPICS
    partitions = min(args.partitions, fitting)
    if partitions < args.partitions:
        print(f"descriptor limit {hard}: measuring {partitions} partitions, extrapolating to {args.partitions}")
    with tempfile.TemporaryDirectory(prefix="seglog-bench-scrape-") as directory:
        started = time.perf_counter()
        manager = LogManager([directory])
        manager.startup()
        try:
            build(manager, partitions)
            print(f"seglog bench_metrics_scrape: {partitions} partitions built in "
                  f"{time.perf_counter() - started:.1f} s")
            for cap in (PARTITION_SERIES_MAX_DEFAULT, partitions):
                # The first scrape takes the residency sample; the next ones reuse it, as scrapes
                # within metrics_residency_interval_ms do.
                metrics = Metrics(partition_series_max=cap, residency_interval_s=3600)
                metrics.manager = manager
                times, size = [], 0
                for _ in range(args.runs + 1):
                    started = time.perf_counter()
                    size = len(generate_latest(metrics.registry))
                    times.append(time.perf_counter() - started)
                sampled_ms, median_ms = times[0] * 1000, statistics.median(times[1:]) * 1000
                scaled_ms = median_ms * args.partitions / partitions
                print(f"per-partition series for {cap:>6} of {partitions} partitions: scrape median {median_ms:7.1f} ms "
                      f"(min {min(times[1:]) * 1000:.1f}, max {max(times[1:]) * 1000:.1f}), with a residency "
                      f"sample {sampled_ms:.1f} ms, {size / 1024:.0f} KiB; scaled to {args.partitions} partitions "
                      f"{scaled_ms:.1f} ms; goal < {GOAL_MS} ms: {'met' if scaled_ms < GOAL_MS else 'NOT met'}")
        finally:
            manager.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
