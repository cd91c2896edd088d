"""The client's cost of a time-lookup call, A/B between source trees, in interleaved pairs.

    PYTHONPATH=. .venv/bin/python bench/bench_client_lookup_ab.py --tree before=PATH --tree after=PATH
        [--mode sync|async] [--per-call 100] [--calls 2000] [--pairs 6]

One service (this checkout's) holds a log of 100,000 records in 100-record batches (the peers
benchmark's small batches); each ``--tree NAME=PATH`` is a source tree (``git archive <commit>
client | tar -x -C PATH``, with the built ``*.so`` copied beside their sources, else the tree
runs the Python fallbacks) whose ``client`` directory goes first on the worker's PYTHONPATH.
Each pair runs every tree once, in a fresh client process, the order swapped every other pair
so the machine's load moves them together: ``--calls`` calls of ``--per-call`` random targets
of the one partition after 300 warm-up calls, through ``Admin.offsets_for_times_many`` (``--mode
sync``: the synchronous client's hand-off to its loop thread included, as goal 1 asks them) or
``AsyncAdmin.offsets_for_times_many`` on uvloop (``--mode async``). Printed per pair: each
tree's wall time and client CPU (the whole process, grpc's threads included) a call; then the
medians, the lookups a second, and each tree's ratio to the first tree pair by pair (median,
and in how many pairs it was lower), with the load average over the run.

Each worker first checks that every seglog module it loaded (the compiled ones included) comes
from its own tree, and refuses to run otherwise: with PYTHONPATH=<tree>/client, an editable
install's finder still maps seglog's children to the checkout it was installed from, so a tree
without its own ``_answers_c`` would silently measure the checkout's. The first pair prints each
tree's ``_answers_c.__file__`` and ``COMPILED``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import time

TOPIC = "client-lookups"
RECORDS = 100_000
BATCH_BYTES = 100 * 131  # 100 records of a 100-byte value and a 16-byte key a batch
WARMUP_CALLS = 300


def _modules_from(tree: str) -> dict[str, object]:
    """The compiled answers' file and COMPILED as this worker loaded them; SystemExit when any
    seglog module loaded so far lies outside ``tree`` (its figures would be another tree's)."""
    from seglog import _lookup_answers

    root = pathlib.Path(tree).resolve()
    outside = sorted(f"{name} ({module.__file__})" for name, module in list(sys.modules.items())
                     if (name == "seglog" or name.startswith("seglog.")) and getattr(module, "__file__", None)
                     and not pathlib.Path(module.__file__).resolve().is_relative_to(root))
    if outside:
        raise SystemExit(f"worker of {tree}: modules from outside the tree: " + ", ".join(outside))
    answers_c = sys.modules.get("seglog._answers_c")
    return {"answers_c": getattr(answers_c, "__file__", None), "compiled": _lookup_answers.COMPILED}


def _worker(address: str, mode: str, per_call: int, calls: int, first_ms: int, last_ms: int,
            tree: str) -> dict[str, object]:
    from seglog import Admin, AsyncAdmin, TopicPartition

    loaded = _modules_from(tree)

    partition = TopicPartition(TOPIC, 0)
    rng = random.Random(3)
    targets = [[(partition, rng.randint(first_ms, last_ms)) for _ in range(per_call)]
               for _ in range(WARMUP_CALLS + calls)]
    if mode == "sync":
        with Admin(address) as admin:
            for call in targets[:WARMUP_CALLS]:
                admin.offsets_for_times_many(call)
            cpu_started, started = time.process_time(), time.perf_counter()
            for call in targets[WARMUP_CALLS:]:
                admin.offsets_for_times_many(call)
            return {"wall_us": (time.perf_counter() - started) / calls * 1e6,
                    "cpu_us": (time.process_time() - cpu_started) / calls * 1e6, **loaded}
    import uvloop

    async def lookups() -> dict[str, object]:
        async with AsyncAdmin(address) as admin:
            for call in targets[:WARMUP_CALLS]:
                await admin.offsets_for_times_many(call)
            cpu_started, started = time.process_time(), time.perf_counter()
            for call in targets[WARMUP_CALLS:]:
                await admin.offsets_for_times_many(call)
            return {"wall_us": (time.perf_counter() - started) / calls * 1e6,
                    "cpu_us": (time.process_time() - cpu_started) / calls * 1e6, **loaded}

    return uvloop.run(lookups())


def _start_service(workdir: pathlib.Path) -> tuple[subprocess.Popen, str]:
    ready = workdir / "ready"
    service = subprocess.Popen(
        [sys.executable, "-m", "seglog_server", "--data-dir", str(workdir / "data"), "--listen", "127.0.0.1:0",
         "--ready-file", str(ready)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not ready.exists() or not ready.read_text().strip():
        if service.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the service did not start")
        time.sleep(0.05)
    return service, ready.read_text().strip()


def _produce(address: str) -> tuple[int, int]:
    from seglog import Admin, Producer

    with Admin(address) as admin:
        admin.create_topic(TOPIC, 1)
    first_ms = int(time.time() * 1000)
    with Producer(address, batch_size=BATCH_BYTES) as producer:
        for number in range(RECORDS):
            producer.send(TOPIC, b"v" * 100, key=b"k%015d" % number, partition=0)
        producer.flush()
    with Admin(address) as admin:
        last_ms = admin.max_timestamp_offsets(TOPIC)[0].timestamp_ms
    return first_ms, last_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a source tree (two or more)")
    parser.add_argument("--mode", choices=("sync", "async"), default="sync")
    parser.add_argument("--per-call", type=int, default=100)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.worker:
        address, mode, per_call, first_ms, last_ms = arguments.worker
        (tree,) = (tree.split("=", 1)[1] for tree in arguments.tree)
        print(json.dumps(_worker(address, mode, int(per_call), arguments.calls, int(first_ms), int(last_ms), tree)))
        return
    trees = dict(tree.split("=", 1) for tree in arguments.tree)
    with tempfile.TemporaryDirectory() as workdir:
        service, address = _start_service(pathlib.Path(workdir))
        try:
            first_ms, last_ms = _produce(address)
            figures: dict[str, list[dict]] = {name: [] for name in trees}
            loads = []
            for pair in range(arguments.pairs):
                for name in list(trees) if pair % 2 == 0 else list(trees)[::-1]:
                    environ = dict(os.environ, PYTHONPATH=str(pathlib.Path(trees[name]) / "client"))
                    done = subprocess.run(
                        [sys.executable, __file__, "--calls", str(arguments.calls), "--tree", f"{name}={trees[name]}",
                         "--worker", address, arguments.mode, str(arguments.per_call), str(first_ms), str(last_ms)],
                        env=environ, capture_output=True, text=True)
                    if done.returncode != 0:
                        raise SystemExit(f"the worker of {name} failed: {done.stderr.strip()}")
                    figures[name].append(json.loads(done.stdout))
                    if pair == 0:
                        print(f"{name}: seglog._answers_c {figures[name][-1]['answers_c']}, "
                              f"COMPILED {figures[name][-1]['compiled']}", flush=True)
                loads.append(os.getloadavg()[0])
                print(f"pair {pair}: " + ", ".join(
                    f"{name} {runs[-1]['wall_us']:.0f} us wall, {runs[-1]['cpu_us']:.0f} us CPU"
                    for name, runs in figures.items()) + f" (load {loads[-1]:.2f})", flush=True)
        finally:
            service.terminate()
            service.wait()
    first = next(iter(trees))
    for name, runs in figures.items():
        wall = statistics.median(run["wall_us"] for run in runs)
        line = (f"{name}: wall {wall:.0f} us a call ({arguments.per_call / wall * 1e6:,.0f} lookups/s), "
                f"client CPU {statistics.median(run['cpu_us'] for run in runs):.0f} us a call")
        if name != first:
            for figure in ("wall_us", "cpu_us"):
                ratios = [run[figure] / base[figure] for run, base in zip(runs, figures[first])]
                line += (f"; {figure[:-3]} / {first} median {statistics.median(ratios):.3f}"
                         f" (lower in {sum(ratio < 1 for ratio in ratios)} of {len(ratios)})")
        print(line)
    print(f"{arguments.mode}, {arguments.per_call} targets a call, load {min(loads):.2f}-{max(loads):.2f}")


if __name__ == "__main__":
    main()
