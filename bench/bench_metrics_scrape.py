"""How long one /metrics scrape takes with 10,000 partitions.

    .venv/bin/python bench/bench_metrics_scrape.py [--partitions 10000] [--runs 15]

Builds a LogManager with ``--partitions`` partitions (100 topics; one record in each, every
partition's indexes holding an entry, so each has residency series), serves its metrics with the
service's own endpoint (``MetricsServer`` on loopback) and scrapes it over HTTP as Prometheus
does (OpenMetrics ``Accept`` header, gzip). The partitions' descriptors fit under the process's
limit through the storage's open-segment budget, as in the service.

Per cap on per-partition series (the default 1,000, all of them, and 0: off), interleaved round
by round, it reports the median, min and max of:

  scrape      the HTTP scrape, client side: what Prometheus waits for (goal: <= 250 ms)
  in-process  ``metrics.text.exposition`` alone (collect + text, no HTTP, no gzip)
  before      the same registry through prometheus_client's ``generate_latest`` and gzip level 9:
              what the endpoint did before the fast path (the baseline, same process, same run)

each as wall time and as the process's CPU time (``time.process_time``: on a loaded machine wall
time counts the waits for a core, CPU time much less so).

The residency sample (mincore over up to RESIDENCY_FILES_MAX index files) is taken by the first
scrape, and later on a thread of its own when stale; its time is reported apart.
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable

from prometheus_client import generate_latest

from seglog.records import RecordBatchBuilder
from seglog_server.metrics import PARTITION_SERIES_MAX_DEFAULT, Metrics
from seglog_server.metrics.server import MetricsServer
from seglog_server.metrics.text import exposition
from seglog_server.storage import LogManager
from seglog_server.storage.segment.open_segments import open_segments_max_for

GOAL_MS = 250
TOPICS = 100
# What Prometheus 2.x/3.x sends (it prefers OpenMetrics) and its gzip request.
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def build(manager: LogManager, partition_count: int) -> None:
    """TOPICS topics with one record in each partition; an index entry for every batch."""
    builder = RecordBatchBuilder()
    builder.append(b"x" * 100)
    batch = builder.build()
    per_topic = partition_count // TOPICS
    for topic in range(TOPICS):
        name = f"topic-{topic:03d}"
        manager.create_topic(name, per_topic, {"index.interval.bytes": "1"})
        for partition in range(per_topic):
            manager.get_log(name, partition).append(batch)


def scrape(address: str) -> int:
    request = urllib.request.Request(f"http://{address}/metrics", headers={
        "Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return len(response.read())


def before(metrics: Metrics) -> int:
    return len(gzip.compress(generate_latest(metrics.registry), compresslevel=9))


def timed(action: Callable[[], object], cpu: list[float] | None = None) -> float:
    """Wall milliseconds of ``action``; its process CPU milliseconds appended to ``cpu``."""
    started, started_cpu = time.perf_counter(), time.process_time()
    action()
    if cpu is not None:
        cpu.append((time.process_time() - started_cpu) * 1000)
    return (time.perf_counter() - started) * 1000


def summary(times_ms: list[float]) -> str:
    return f"{statistics.median(times_ms):7.1f} ms (min {min(times_ms):6.1f}, max {max(times_ms):6.1f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory(prefix="seglog-bench-scrape-") as directory:
        started = time.perf_counter()
        manager = LogManager([directory], open_segments_max=open_segments_max_for(hard))
        manager.startup()
        servers: dict[int, tuple[Metrics, MetricsServer]] = {}
        try:
            build(manager, args.partitions)
            print(f"seglog bench_metrics_scrape: {args.partitions} partitions built in "
                  f"{time.perf_counter() - started:.1f} s; {os.cpu_count()} cores; "
                  f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
            for cap in (PARTITION_SERIES_MAX_DEFAULT, args.partitions, 0):
                metrics = Metrics(partition_series_max=cap, residency_interval_s=3600)
                metrics.manager = manager
                server = MetricsServer.start("127.0.0.1:0", metrics)
                servers[cap] = (metrics, server)
                first_ms = timed(lambda: scrape(server.address))  # noqa: B023 - called at once
                print(f"cap {cap:>6}: first scrape (takes the residency sample) {first_ms:.1f} ms")
            times = {cap: {"scrape": [], "in-process": [], "before": []} for cap in servers}
            cpu = {cap: {"scrape": [], "in-process": [], "before": []} for cap in servers}
            sizes: dict[int, int] = {}
            for _ in range(args.runs):
                for cap, (metrics, server) in servers.items():
                    actions = {  # each called at once, inside this iteration
                        "scrape": lambda: sizes.__setitem__(cap, scrape(server.address)),  # noqa: B023
                        "in-process": lambda: exposition(metrics.registry, PROMETHEUS_ACCEPT),  # noqa: B023
                        "before": lambda: before(metrics),  # noqa: B023
                    }
                    for what, action in actions.items():
                        times[cap][what].append(timed(action, cpu[cap][what]))
            load = os.getloadavg()
            for cap, figures in times.items():
                shown = min(cap, args.partitions)
                scrape_ms = statistics.median(figures["scrape"])
                ratio = statistics.median(figures["before"]) / scrape_ms
                print(f"per-partition series for {shown:>6} of {args.partitions} partitions "
                      f"({sizes[cap] / 1024:.0f} KiB gzip):")
                print(f"    scrape     {summary(figures['scrape'])}, CPU {summary(cpu[cap]['scrape'])}  goal <= "
                      f"{GOAL_MS} ms: {'met' if scrape_ms <= GOAL_MS else 'NOT met'}")
                print(f"    in-process {summary(figures['in-process'])}, CPU {summary(cpu[cap]['in-process'])}")
                print(f"    before     {summary(figures['before'])}, CPU {summary(cpu[cap]['before'])}  "
                      f"({ratio:.1f}x the scrape)")
            print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
            metrics = servers[args.partitions][0]
            partitions = manager.statistics(partition_detail=False).partition_summaries
            sample_ms = [timed(lambda: metrics.residency_sampler.sample(partitions)) for _ in range(3)]
            print(f"residency sample (own thread, at most every metrics_residency_interval_ms): {summary(sample_ms)}")
        finally:
            for _, server in servers.values():
                server.stop()
            manager.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
