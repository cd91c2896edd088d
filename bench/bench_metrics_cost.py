"""What the metrics cost on the produce and fetch paths: the same work with metrics on and off.

    .venv/bin/python bench/bench_metrics_cost.py [--rounds 15] [--requests 1000]   # CPU time
    .venv/bin/python bench/bench_metrics_cost.py --callgrind [--requests 300]      # instructions
    .venv/bin/python bench/bench_metrics_cost.py --service [--runs 7] [--aa]       # through gRPC

Goal: metrics cost at most 3 % of a request (on/off <= 1.03 in CPU per request, >= 0.97 in
throughput).

Default, CPU time per request: the service's handler path in this process (metrics_cost_harness.py:
a real LogManager, the LogServicer with its boundary, admission and call gate, calls inline, no
gRPC transport), the process's CPU time (``time.process_time``) over ``--requests`` calls. Each
round runs every workload with metrics off, on, and off again (an A/A control: what two identical
runs differ by), in an order that rotates round by round; the table gives medians of the per-round
ratios. CPU time, not wall time: on this shared 2-core machine wall time swings by 15-20 % with
the other processes, CPU time by a few percent. The denominator leaves out the gRPC transport
(tens of microseconds a call, the same with metrics on or off), so the ratio overstates the cost
for a request through the service.

``--callgrind``: instructions per request of the same handler path under valgrind's callgrind,
counting only the measured calls (``--toggle-collect`` on the ``itertools.starmap`` that runs them),
one process per workload and side. Repeatable to a fraction of a percent, whatever the load.

``--service``: two services side by side (one with ``--metrics-listen none``, one with metrics on,
scraped every 5 s), the same four workloads as bench_service.py's, alternating order; medians of
throughput and of the server process's CPU time per request (utime + stime from /proc), on/off.
``--aa`` runs both with metrics off (the A/A check of this harness).

Workloads (per-request paths, where a fixed cost per request weighs most):
  produce small   one 1-record batch per Produce
  fetch tail      Fetch of the last offset, one batch (a warm index lookup)
  fetch behind    Fetch of 64 KiB from 60 % into a 20,000-record partition (a cold lookup)
  time lookup     OffsetsForTimes of one timestamp in a partition laid out as bench_streams.py's
                  lookup topic (1,000 records, batches of 10, the default index interval)
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable

GOAL_RATIO = 1.03
BENCH = pathlib.Path(__file__).resolve().parent


# -- CPU time per request, in process ----------------------------------------------------------
def cpu_time(rounds: int, requests: int) -> None:
    from metrics_cost_harness import Harness

    harness = Harness()
    sides = {"off": False, "on": True, "off again": False}
    workloads = list(harness.workloads())
    samples = {(w, side): [] for w in workloads for side in sides}
    try:
        for w in workloads:  # warm every path once
            harness.run(w, 100)
        for round_number in range(rounds):
            order = list(sides)[round_number % 3:] + list(sides)[:round_number % 3]
            for w in workloads:
                for side in order:
                    harness.set_metrics(sides[side])
                    started = time.process_time()
                    harness.run(w, requests)
                    samples[w, side].append((time.process_time() - started) / requests * 1e6)
    finally:
        harness.close()
    print(f"seglog bench_metrics_cost (CPU time, handler path in process): {rounds} rounds x "
          f"{requests} requests; load average {_load()}")
    print(f"{'workload':16}{'off us/req':>12}{'on us/req':>11}{'on-off us':>11}{'on/off':>8}"
          f"{'A/A':>8}{'A/A spread':>12}  goal on/off <= {GOAL_RATIO}")
    for w in workloads:
        off, on, again = (samples[w, side] for side in sides)
        ratios = [b / a for a, b in zip(off, on)]
        controls = [b / a for a, b in zip(off, again)]
        ratio = statistics.median(ratios)
        quartiles = statistics.quantiles(controls, n=4)
        print(f"{w:16}{statistics.median(off):12.1f}{statistics.median(on):11.1f}"
              f"{statistics.median(on) - statistics.median(off):+11.1f}{ratio:8.3f}"
              f"{statistics.median(controls):8.3f}  {quartiles[0]:.3f}-{quartiles[2]:.3f}"
              f"  {'met' if ratio <= GOAL_RATIO else 'NOT met'}")


# -- instructions per request, under callgrind ----------------------------------------------------
def one_side(side: str, workload: str, requests: int) -> None:
    """Runs ``requests`` calls of ``workload`` inside itertools.starmap (what callgrind counts)."""
    from metrics_cost_harness import Harness

    harness = Harness()
    try:
        harness.set_metrics(side == "on")
        harness.run(workload, 50)
        collections.deque(itertools.starmap(harness.run, [(workload, requests)]), maxlen=0)
    finally:
        harness.close()


def callgrind(requests: int) -> None:
    from metrics_cost_harness import Harness

    workloads = list(Harness.WORKLOADS)
    with tempfile.TemporaryDirectory(prefix="seglog-bench-callgrind-") as directory:
        jobs = {}
        for workload, side in itertools.product(workloads, ("off", "on")):
            out = pathlib.Path(directory) / f"{workload.replace(' ', '-')}.{side}.out"
            command = ["valgrind", "--tool=callgrind", "--collect-atstart=no",
                       "--toggle-collect=starmap_next", f"--callgrind-out-file={out}",
                       sys.executable, str(pathlib.Path(__file__).resolve()), "--one-side", side,
                       "--workload", workload, "--requests", str(requests)]
            jobs[workload, side] = (subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                                     stderr=subprocess.DEVNULL), out)
        counts = {}
        for key, (process, out) in jobs.items():
            assert process.wait() == 0, f"callgrind run {key} failed"
            counts[key] = _instructions(out) / requests
    print(f"seglog bench_metrics_cost (callgrind, handler path in process): {requests} requests a run")
    print(f"{'workload':16}{'off instr/req':>15}{'on instr/req':>14}{'on-off':>10}{'on/off':>8}"
          f"  goal on/off <= {GOAL_RATIO}")
    for workload in workloads:
        off, on = counts[workload, "off"], counts[workload, "on"]
        print(f"{workload:16}{off:15,.0f}{on:14,.0f}{on - off:+10,.0f}{on / off:8.3f}"
              f"  {'met' if on / off <= GOAL_RATIO else 'NOT met'}")


def _instructions(out: pathlib.Path) -> int:
    match = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.M)
    assert match, f"no instruction total in {out}"
    return int(match.group(1))


# -- through the service ---------------------------------------------------------------------------
def service(runs: int, requests: int, aa: bool) -> None:
    import grpc

    from bench_service import fetch_catch_up, produce_throughput  # noqa: E402
    from seglog import records as codec
    from seglog.v1 import log_service_pb2 as pb
    from seglog.v1 import log_service_pb2_grpc as pb_grpc

    catch_up_records = 800_000  # ~ 100 MB of 130-byte records
    options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]

    class Service:
        def __init__(self, workdir: pathlib.Path, metrics: bool) -> None:
            workdir.mkdir()
            ready, metrics_ready = workdir / "ready", workdir / "metrics-ready"
            listen = (["--metrics-listen", "127.0.0.1:0", "--metrics-ready-file", str(metrics_ready)]
                      if metrics else ["--metrics-listen", "none"])
            command = [sys.executable, "-m", "seglog_server", "--listen", "127.0.0.1:0", "--ready-file",
                       str(ready), "--data-dir", str(workdir / "data"), *listen]
            environ = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
            self.log = open(workdir / "service.log", "wb")
            self.process = subprocess.Popen(command, stdout=self.log, stderr=self.log, env=environ)
            deadline = time.monotonic() + 60
            while not ready.exists():
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit((workdir / "service.log").read_text())
                time.sleep(0.02)
            self.metrics_address = metrics_ready.read_text().strip() if metrics else None
            self.channel = grpc.insecure_channel(ready.read_text().strip(), options=options)
            self.stub = pb_grpc.LogServiceStub(self.channel)
            for topic in ("small", "large", "catchup"):
                self.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1))

        def cpu_seconds(self) -> float:
            fields = pathlib.Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

        def stop(self) -> None:
            self.channel.close()
            self.process.terminate()
            self.process.wait(timeout=60)
            self.log.close()

    def one_record_batch() -> bytes:
        builder = codec.RecordBatchBuilder()
        builder.append(b"v" * 100, key=b"k" * 16)
        return builder.build()

    def produce_small(stub: pb_grpc.LogServiceStub) -> tuple[float, int]:
        request = pb.ProduceRequest(topic="small", records=one_record_batch())
        started = time.perf_counter()
        for _ in range(requests):
            stub.Produce(request)
        return requests / (time.perf_counter() - started), requests

    def fetch_tail(stub: pb_grpc.LogServiceStub) -> tuple[float, int]:
        end = stub.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[
            pb.PartitionTimestamp(topic="small", partition=0, timestamp_ms=-1)])).results[0].offset
        request = pb.FetchRequest(topic="small", offset=end - 1, max_bytes=1)
        started = time.perf_counter()
        for _ in range(requests):
            stub.Fetch(request)
        return requests / (time.perf_counter() - started), requests

    workloads: dict[str, Callable[[pb_grpc.LogServiceStub], tuple[float, int]]] = {
        "produce small (req/s)": produce_small,
        "produce large (rec/s)": lambda stub: (produce_throughput(stub, "large", 80_000), 20),
        "fetch tail (req/s)": fetch_tail,
        "fetch catch-up (MB/s)": lambda stub: (fetch_catch_up(stub, "catchup", catch_up_records)[1], 100),
    }
    with tempfile.TemporaryDirectory(prefix="seglog-bench-metrics-") as directory:
        services = {"off": Service(pathlib.Path(directory) / "off", False),
                    "on": Service(pathlib.Path(directory) / "on", not aa)}
        scraper = _Scraper(services["on"].metrics_address)
        if not aa:
            scraper.start()
        samples = {name: {"on": [], "off": []} for name in workloads}
        cpu = {name: {"on": [], "off": []} for name in workloads}
        try:
            for side in services.values():
                produce_throughput(side.stub, "catchup", catch_up_records)
            for round_number in range(runs):
                order = ("on", "off") if round_number % 2 == 0 else ("off", "on")
                for name, workload in workloads.items():
                    for side in order:
                        before = services[side].cpu_seconds()
                        rate, calls = workload(services[side].stub)
                        samples[name][side].append(rate)
                        cpu[name][side].append((services[side].cpu_seconds() - before) / calls * 1e6)
        finally:
            scraper.stopping.set()
            if scraper.is_alive():
                scraper.join()
            for side in services.values():
                side.stop()
    print(f"seglog bench_metrics_cost (--service{' --aa' if aa else ''}): Linux {platform.release()}, "
          f"{os.cpu_count()} cores, {runs} rounds; load average {_load()}")
    print(f"{'workload':24}{'off':>12}{'on':>12}{'on/off':>8}{'CPU/call off':>14}{'on':>8}{'on/off':>8}")
    for name, sides in samples.items():
        off, on = statistics.median(sides["off"]), statistics.median(sides["on"])
        cpu_off, cpu_on = statistics.median(cpu[name]["off"]), statistics.median(cpu[name]["on"])
        print(f"{name:24}{off:12,.0f}{on:12,.0f}{on / off:8.3f}{cpu_off:12.0f}us{cpu_on:8.0f}"
              f"{cpu_on / cpu_off if cpu_off else float('nan'):8.3f}")
    print("(CPU/call: the server process's CPU time per call; large produce per 4,000-record batch,"
          " catch-up per 1 MB.)")
    if scraper.scrape_seconds:
        print(f"scrapes during the run: {len(scraper.scrape_seconds)}, median "
              f"{statistics.median(scraper.scrape_seconds) * 1000:.1f} ms")


class _Scraper(threading.Thread):
    """Scrapes /metrics every 5 s (a third of deploy/prometheus's 15 s), as Prometheus would."""

    def __init__(self, address: str | None) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.stopping = threading.Event()
        self.scrape_seconds: list[float] = []

    def run(self) -> None:
        while not self.stopping.wait(5.0):
            started = time.perf_counter()
            with urllib.request.urlopen(f"http://{self.address}/metrics", timeout=10) as response:
                response.read()
            self.scrape_seconds.append(time.perf_counter() - started)


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--service", action="store_true")
    parser.add_argument("--aa", action="store_true", help="--service: both services with metrics off")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=7, help="--service rounds")
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--one-side", choices=("on", "off"), help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(BENCH))
    if args.one_side:
        one_side(args.one_side, args.workload, args.requests)
    elif args.callgrind:
        callgrind(args.requests or 300)
    elif args.service:
        service(args.runs, args.requests or 2000, args.aa)
    else:
        cpu_time(args.rounds, args.requests or 1000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
