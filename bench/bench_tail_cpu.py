"""The goal-3 workload at several rates, with each thread's CPU and wake-ups per record.

    .venv/bin/python bench/bench_tail_cpu.py [--rates 500,1000,2000] [--records 3000] [--repeats 1]

bench/peers' latency workload (``SeglogSystem.latency``: a sync ``Producer(linger_ms=0)`` sending
one record every 1/rate s from the main thread, a sync ``Consumer(mode="stream")`` polling in a
second thread, one process) beside the ping-pong floor measured in the same repeat. For each rate:
produce -> consume and acknowledgement p50/p99, and per record, for each thread of the client
(by Python thread name; grpc's own threads by their OS names) and of the service process: CPU
(``/proc/<pid>/task/<tid>/stat`` utime + stime, clock ticks) and voluntary context switches (a
thread's sleeps, so its wake-ups). A thread that ended during the run (the consumer's reader) is
not counted. If the acknowledgement fell to the floor at a low rate, the figure would be a queue
on a saturated thread; it does not (see docs/performance.md). To compare checkouts, run it with
``PYTHONPATH=<tree>/server:<tree>/client`` alternately.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import threading

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # bench.peers

from bench.peers import common, floor  # noqa: E402
from bench.peers.seglog_system import SeglogSystem  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def _threads(pid: int) -> dict[str, tuple[str, float, int]]:
    """tid -> (name, CPU seconds, voluntary context switches) of each thread of ``pid``."""
    names = {str(thread.native_id): thread.name for thread in threading.enumerate()} if pid == os.getpid() else {}
    found = {}
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            name = names.get(tid) or pathlib.Path(f"{base}/{tid}/comm").read_text().strip()
            fields = pathlib.Path(f"{base}/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            switches = next(int(line.split()[1]) for line in pathlib.Path(f"{base}/{tid}/status").read_text().splitlines()
                            if line.startswith("voluntary_ctxt_switches"))
        except (OSError, StopIteration):
            continue
        found[tid] = (name, (int(fields[11]) + int(fields[12])) / _TICK, switches)
    return found


def _per_record(before: dict, after: dict, count: int) -> str:
    by_name: dict[str, list[float]] = {}
    for tid, (name, cpu, switches) in after.items():
        _, cpu_before, switches_before = before.get(tid, (name, 0.0, 0))
        total = by_name.setdefault(name, [0.0, 0.0])
        total[0] += cpu - cpu_before
        total[1] += switches - switches_before
    rows = sorted(by_name.items(), key=lambda row: -row[1][0])
    return ", ".join(f"{name} {cpu / count * 1e6:.0f} us {woken / count:.2f} wake-ups" for name, (cpu, woken) in rows
                     if woken > 0)


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="500,1000,2000", help="records a second, comma-separated")
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--floor-calls", type=int, default=2000)
    args = parser.parse_args()
    system = SeglogSystem(pathlib.Path(tempfile.mkdtemp(prefix="tail-cpu-")))
    try:
        for repeat in range(args.repeats):
            samples = floor.measure(args.floor_calls)
            print(f"repeat {repeat + 1}: floor p50 {_percentile(samples, 50):.3f} ms p99 {_percentile(samples, 99):.3f}, "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
            for rate in (int(one) for one in args.rates.split(",")):
                common.LATENCY_RATE_PER_S = rate
                client, service = _threads(os.getpid()), _threads(system.pid)
                latencies, acks, achieved = system.latency(args.records)
                client_after, service_after = _threads(os.getpid()), _threads(system.pid)
                print(f"  {rate}/s ({achieved:.0f} achieved): produce -> consume p50 {_percentile(latencies, 50):.3f} ms "
                      f"p99 {_percentile(latencies, 99):.3f}, acknowledgement p50 {_percentile(acks, 50):.3f} "
                      f"p99 {_percentile(acks, 99):.3f}, load {os.getloadavg()[0]:.1f}", flush=True)
                print(f"    client a record: {_per_record(client, client_after, args.records)}")
                print(f"    service a record: {_per_record(service, service_after, args.records)}", flush=True)
    finally:
        system.stop()


if __name__ == "__main__":
    main()
