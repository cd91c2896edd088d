"""The service's CPU a time-lookup call and the lookups/s, through the public client, A/B between
source trees in interleaved pairs:

    .venv/bin/python -m bench.bench_lookup_service_ab --tree before=PATH --tree after=PATH
        [--records 200000] [--calls 2000] [--repeats 6] [--shape NAME ...]

Each ``--tree NAME=PATH`` (a checkout's root, e.g. ``git archive <commit> | tar -x -C PATH`` with
the built ``client/seglog/records/_*.so`` copied in) gets a service of its own, run from its
``server`` and ``client`` directories (``python -m seglog_server``, fresh data directory; without
``--tree`` this checkout alone). This process is the one client of every tree (the same client
code for all: what differs is the service), the sync ``Admin``, one connection a service.
Each service holds the same records, produced with the public ``Producer`` in 100-record
batches (100-byte values, 16-byte keys): ``--records`` on topic ``one`` (one partition) and as
many over the ten partitions of topic ``ten``. The shapes (each ``--calls`` calls of
``Admin.offsets_for_times_many``, random times within those each service's records were
produced in, the same draws at every tree):

    batched   100 targets a call on ``one`` (the packed form: goal 1's call)
    spread    one target on each of the ten partitions of ``ten`` a call (a group seeking its
              partitions to a time: the old form, a target a partition)
    single    one target a call on ``one``

Each repeat runs every shape at every tree, the trees' order swapped every other repeat (so
the machine's load moves both alike); after one untimed round for warm-up, every repeat is one
pair per shape. Prints each pair (lookups/s, the service's CPU a call from /proc: every thread
of its process, read in 10 ms clock ticks: the 2,000 calls a pair by default keep one tick
within about 1 % of a batched pair's figure), then per shape the medians, the ratio of the
medians, the median of the pairs' ratios and in how many pairs the second tree's service CPU
was lower, and the load.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench.bench_single_lookup import _environ  # a tree's client and server first on PYTHONPATH

ROOT = pathlib.Path(__file__).resolve().parent.parent
PARTITIONS = 10
BATCH_RECORDS = 100
VALUE_BYTES = 100
KEY_BYTES = 16
SHAPES = ("batched", "spread", "single")
BATCHED_TARGETS = 100


def _start(workdir: pathlib.Path, tree: pathlib.Path | None) -> tuple[subprocess.Popen, str]:
    from seglog_server.__main__ import MALLOC_TUNING

    workdir.mkdir(parents=True)
    ready = workdir / "ready"
    environ = _environ(tree)
    environ.update(MALLOC_TUNING)  # set already: the service does not re-exec (its pid stays the one measured)
    with open(workdir / "service.log", "wb") as log:  # the service holds its own copy of the descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "seglog_server", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
             "--data-dir", str(workdir / "data")], stdout=log, stderr=log, env=environ, cwd=tree or ROOT)
    deadline = time.monotonic() + 60
    while not ready.exists() or not ready.read_text().strip():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()  # one that hung past the deadline must not outlive the run
            process.wait(60)
            raise SystemExit(f"service failed to start: {(workdir / 'service.log').read_text()}")
        time.sleep(0.02)
    return process, ready.read_text().strip()


def _cpu_s(pid: int) -> float:
    """A process's CPU time so far (user and system, every thread), from /proc."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _produce(address: str, records: int) -> tuple[int, int]:
    """``records`` on topic one and as many over topic ten's partitions; the times produced."""
    from seglog import Admin, Producer

    rng = random.Random(7)
    keys = [rng.randbytes(KEY_BYTES) for _ in range(1024)]
    values = [rng.randbytes(VALUE_BYTES) for _ in range(1024)]
    first_ms = int(time.time() * 1000)
    with Admin(address) as admin:
        admin.create_topic("one", 1)
        admin.create_topic("ten", PARTITIONS)
    with Producer(address, linger_ms=5, batch_size=1 << 20) as producer:
        for start in range(0, records, BATCH_RECORDS):
            chunk = range(start, min(records, start + BATCH_RECORDS))
            batch_values, batch_keys = [values[i % 1024] for i in chunk], [keys[i % 1024] for i in chunk]
            producer.send_many("one", batch_values, batch_keys, partition=0)
            producer.send_many("ten", batch_values, batch_keys, partition=(start // BATCH_RECORDS) % PARTITIONS)
            producer.flush()  # one batch a slice and partition
    with Admin(address) as admin:  # (the last time every partition reaches: each target finds a record)
        last_ms = min(found.timestamp_ms for topic in ("one", "ten") for found in admin.max_timestamp_offsets(topic).values())
    return first_ms, last_ms


def _calls(shape: str, count: int, first_ms: int, last_ms: int, seed: int) -> list[list[Any]]:
    from seglog import TopicPartition

    rng = random.Random(seed)
    one = TopicPartition("one", 0)
    ten = [TopicPartition("ten", p) for p in range(PARTITIONS)]
    if shape == "batched":
        return [[(one, rng.randint(first_ms, last_ms)) for _ in range(BATCHED_TARGETS)] for _ in range(count)]
    if shape == "spread":
        return [[(tp, rng.randint(first_ms, last_ms)) for tp in ten] for _ in range(count)]
    return [[(one, rng.randint(first_ms, last_ms))] for _ in range(count)]


def _timed(admin: Any, pid: int, calls: list[list[Any]]) -> tuple[float, float]:
    """Lookups/s and the service's CPU a call (us) of ``calls``."""
    targets = sum(map(len, calls))
    cpu, started = _cpu_s(pid), time.perf_counter()
    for targets_of_call in calls:
        found = admin.offsets_for_times_many(targets_of_call)
        assert None not in found
    elapsed = time.perf_counter() - started
    return targets / elapsed, (_cpu_s(pid) - cpu) / len(calls) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a source tree (repeatable)")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--calls", type=int, default=2000)  # enough CPU ticks a pair: see the docstring
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--shape", action="append", choices=SHAPES, default=None)
    arguments = parser.parse_args()
    from seglog import Admin

    trees = {name: pathlib.Path(path).resolve() for name, path in (t.split("=", 1) for t in arguments.tree)}
    names = list(trees) or ["this"]
    shapes = arguments.shape or list(SHAPES)
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    loads = []
    with tempfile.TemporaryDirectory(prefix="seglog-lookup-ab-") as directory:
        services: dict[str, tuple[subprocess.Popen, str]] = {}
        admins = {}
        try:
            for name in names:  # inside the try: a second service that fails to start stops the first
                services[name] = _start(pathlib.Path(directory) / name, trees.get(name))
            times = {name: _produce(address, arguments.records) for name, (_, address) in services.items()}
            admins = {name: Admin(address) for name, (_, address) in services.items()}
            for repeat in range(arguments.repeats + 1):  # the first: warm-up, not kept
                order = names if repeat % 2 else names[::-1]
                for shape in shapes:
                    # The same draws at each tree, within the times its records were produced in.
                    figures = {name: _timed(admins[name], services[name][0].pid,
                                            _calls(shape, arguments.calls, *times[name], seed=repeat)) for name in order}
                    if repeat == 0:
                        continue
                    for name in names:
                        rows.setdefault((shape, name), []).append(figures[name])
                    loads.append(os.getloadavg()[0])
                    print(f"repeat {repeat} {shape}: " + "; ".join(
                        f"{name} {figures[name][0]:,.0f} lookups/s, service {figures[name][1]:.0f} us a call"
                        for name in order) + f" (load {loads[-1]:.1f})", flush=True)
        finally:
            for admin in admins.values():
                admin.close()
            for process, _ in services.values():
                process.terminate()
                process.wait(60)
    for shape in shapes:
        line = [f"{shape}:"]
        for name in names:
            rates, cpus = zip(*rows[(shape, name)])
            line.append(f"{name} {statistics.median(rates):,.0f} lookups/s, service {statistics.median(cpus):.0f} us a call;")
        if len(names) == 2:
            (a_rates, a_cpus), (b_rates, b_cpus) = (zip(*rows[(shape, name)]) for name in names)
            cpu_ratios = [b / a for a, b in zip(a_cpus, b_cpus)]
            rate_ratios = [b / a for a, b in zip(a_rates, b_rates)]
            line.append(
                f"{names[1]}/{names[0]}: service CPU {statistics.median(b_cpus) / statistics.median(a_cpus):.3f} "
                f"(pairs' median {statistics.median(cpu_ratios):.3f}, lower in {sum(r < 1 for r in cpu_ratios)}"
                f"/{len(cpu_ratios)}), lookups/s {statistics.median(b_rates) / statistics.median(a_rates):.3f} "
                f"(pairs' median {statistics.median(rate_ratios):.3f}, higher in {sum(r > 1 for r in rate_ratios)}"
                f"/{len(rate_ratios)})")
        print(" ".join(line))
    print(f"load during the run: {min(loads):.1f}-{max(loads):.1f} (1-minute average)")


if __name__ == "__main__":
    main()
