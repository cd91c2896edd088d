"""What the metrics cost on the produce and fetch paths: the same service with metrics on and off.

    .venv/bin/python bench/bench_metrics_cost.py [--runs 7] [--requests 2000]

Two services run side by side, one with ``--metrics-listen none`` (no observer installed: the
storage skips every clock read and getrusage) and one with metrics on, scraped every second by a
thread of this benchmark as Prometheus would. Each round measures every workload on both, in
alternating order, so drift and noise on this shared 2-core machine fall on both sides (scrapes
every 5 s); the table
gives medians over ``--runs`` rounds and the ratio on/off. Goal: >= 0.97 (at most 3 % slower).

Workloads (the per-request paths, where a fixed cost per request weighs most):
  produce small   one 1-record batch per Produce, sequential (requests/s)
  produce large   4,000-record batches (0.5 MiB), 4 in flight (records/s)
  fetch tail      Fetch of the last offset, one batch, sequential (requests/s)
  fetch catch-up  sequential Fetch of a 100 MB partition from offset 0 (MB/s)
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable

import grpc

from bench_service import fetch_catch_up, produce_throughput  # noqa: E402
from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

GOAL_RATIO = 0.97
CATCH_UP_RECORDS = 800_000  # ~ 100 MB of 130-byte records
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024),
                   ("grpc.max_send_message_length", 64 * 1024 * 1024)]


class Service:
    def __init__(self, workdir: pathlib.Path, metrics: bool) -> None:
        workdir.mkdir()
        ready, metrics_ready = workdir / "ready", workdir / "metrics-ready"
        listen = ["--metrics-listen", "127.0.0.1:0", "--metrics-ready-file", str(metrics_ready)] if metrics \
            else ["--metrics-listen", "none"]
        command = [sys.executable, "-m", "seglog_server", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
                   "--data-dir", str(workdir / "data"), *listen]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
        self.log = open(workdir / "service.log", "wb")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=self.log, env=environ)
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit((workdir / "service.log").read_text())
            time.sleep(0.02)
        self.metrics_address = metrics_ready.read_text().strip() if metrics else None
        self.channel = grpc.insecure_channel(ready.read_text().strip(), options=CHANNEL_OPTIONS)
        self.stub = pb_grpc.LogServiceStub(self.channel)
        for topic in ("small", "large", "catchup"):
            self.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1))

    def stop(self) -> None:
        self.channel.close()
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()


SCRAPE_INTERVAL_S = 5.0  # a third of deploy/prometheus's 15 s: scrapes weigh more than in production


class Scraper(threading.Thread):
    """Scrapes /metrics every SCRAPE_INTERVAL_S, as Prometheus would."""

    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.stopping = threading.Event()
        self.scrape_seconds: list[float] = []

    def run(self) -> None:
        while not self.stopping.wait(SCRAPE_INTERVAL_S):
            started = time.perf_counter()
            with urllib.request.urlopen(f"http://{self.address}/metrics", timeout=10) as response:
                response.read()
            self.scrape_seconds.append(time.perf_counter() - started)


def one_record_batch() -> bytes:
    builder = codec.RecordBatchBuilder()
    builder.append(b"v" * 100, key=b"k" * 16)
    return builder.build()


def produce_small(stub: pb_grpc.LogServiceStub, count: int) -> float:
    request = pb.ProduceRequest(topic="small", records=one_record_batch())
    started = time.perf_counter()
    for _ in range(count):
        stub.Produce(request)
    return count / (time.perf_counter() - started)


def fetch_tail(stub: pb_grpc.LogServiceStub, count: int) -> float:
    end = stub.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic="small", partition=0, timestamp_ms=-1)])).results[0].offset
    request = pb.FetchRequest(topic="small", offset=end - 1, max_bytes=1)
    started = time.perf_counter()
    for _ in range(count):
        stub.Fetch(request)
    return count / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--aa", action="store_true",
                        help="A/A check of the harness: the 'on' service runs with metrics off too")
    args = parser.parse_args()
    print(f"seglog bench_metrics_cost: Linux {platform.release()}, {os.cpu_count()} cores, {args.runs} rounds")
    with tempfile.TemporaryDirectory(prefix="seglog-bench-metrics-") as directory:
        services = {"off": Service(pathlib.Path(directory) / "off", False),
                    "on": Service(pathlib.Path(directory) / "on", not args.aa)}
        scraper = Scraper(services["on"].metrics_address)  # type: ignore[arg-type]
        if not args.aa:
            scraper.start()
        try:
            for service in services.values():
                produce_throughput(service.stub, "catchup", CATCH_UP_RECORDS)
            workloads: dict[str, Callable[[pb_grpc.LogServiceStub], float]] = {
                "produce small (requests/s)": lambda stub: produce_small(stub, args.requests),
                "produce large (records/s)": lambda stub: produce_throughput(stub, "large", 80_000),
                "fetch tail (requests/s)": lambda stub: fetch_tail(stub, args.requests),
                "fetch catch-up (MB/s)": lambda stub: fetch_catch_up(stub, "catchup", CATCH_UP_RECORDS)[1],
            }
            samples = {name: {"on": [], "off": []} for name in workloads}
            for round_number in range(args.runs):
                order = ("on", "off") if round_number % 2 == 0 else ("off", "on")
                for name, workload in workloads.items():
                    for side in order:
                        samples[name][side].append(workload(services[side].stub))
        finally:
            scraper.stopping.set()
            if scraper.is_alive():
                scraper.join()
            for service in services.values():
                service.stop()
    print(f"{'workload':30}{'metrics off':>14}{'metrics on':>14}{'on/off':>9}  goal >= {GOAL_RATIO}")
    for name, sides in samples.items():
        off, on = statistics.median(sides["off"]), statistics.median(sides["on"])
        ratio = on / off
        print(f"{name:30}{off:14,.0f}{on:14,.0f}{ratio:9.3f}  {'met' if ratio >= GOAL_RATIO else 'NOT met'}")
    if scraper.scrape_seconds:
        print(f"scrapes during the run: {len(scraper.scrape_seconds)}, median "
              f"{statistics.median(scraper.scrape_seconds) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
