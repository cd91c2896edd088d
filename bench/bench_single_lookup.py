"""Single time lookups against the floor, interleaved in one run, optionally A/B between checkouts.

    .venv/bin/python -m bench.bench_single_lookup [--records 200000] [--lookups 3000] [--repeats 5]
        [--tree NAME=PATH ...] [--profile-client DIR] [--profile-service DIR]

The floor (``bench/peers/floor.py``: one empty message each way on an open grpc.aio bidi stream
whose handler does nothing) and seglog's single lookup (``AsyncAdmin.offsets_for_times`` of one
partition, one message on the connection's open LookupStream) are measured alternately: each
repeat runs ``--lookups`` floor round trips, then ``--lookups`` single lookups at every tree, each
in a fresh client process, so the machine's load moves them together. It prints each repeat's
p50/p99 and their ratio to that repeat's floor, then the medians over the repeats.

``--tree NAME=PATH`` (repeatable; default: this checkout as "seglog") runs the service and the
client of the source tree at PATH (its ``client`` and ``server`` directories put first on
PYTHONPATH; e.g. ``git archive <commit> | tar -x -C PATH`` and copy in the built
``_walk_c*.so``): before/after figures in the same run. Each tree gets its own service, on a log
of ``--records`` records in 512 KiB batches (``Producer.send_many``, about 4,000 a batch).

``--per-call N`` makes each of the ``--lookups`` calls ``Admin.offsets_for_times_many`` of N
random targets: the batched call's latency and its CPU on both sides (ratios to the floor then
say only how far a call is from one round trip).

``--profile-client DIR`` runs each tree's lookups under cProfile (DIR/NAME-client.prof, and a
text summary beside it); ``--profile-service DIR`` samples each service with py-spy (1,000 Hz,
every thread) during its lookups (DIR/NAME-service.txt, collapsed stacks), and the floor's
server during its round trips (DIR/floor-service.txt); ``--native`` adds grpc core's and
uvloop's frames. Profiled repeats' timings are not figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench.peers.common import free_port, percentile, stop_process, wait_port

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOPIC = "single-lookups"
VALUE_BYTES = 100
KEY_BYTES = 16
LARGE_BATCH_BYTES = 512 * 1024
SEND_SLICE = 10_000
# Round trips (or lookups) before the measured ones: the stream opens, caches and the index warm.
WARMUP = 200


def _environ(tree: pathlib.Path | None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
    if tree is not None:
        paths = [str(tree / "client"), str(tree / "server")]
        environ["PYTHONPATH"] = os.pathsep.join(paths + [environ["PYTHONPATH"]] if environ.get("PYTHONPATH") else paths)
    return environ


def _start_service(workdir: pathlib.Path, tree: pathlib.Path | None) -> tuple[subprocess.Popen, str]:
    from seglog_server.__main__ import MALLOC_TUNING

    workdir.mkdir(parents=True)
    ready = workdir / "ready"
    command = [sys.executable, "-m", "seglog_server", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
               "--data-dir", str(workdir / "data")]
    environ = _environ(tree)
    environ.update(MALLOC_TUNING)  # set already: the service does not re-exec (its pid stays the one sampled)
    log = open(workdir / "service.log", "wb")
    process = subprocess.Popen(command, stdout=log, stderr=log, env=environ, cwd=tree or ROOT)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"service failed to start: {(workdir / 'service.log').read_text()}")
        time.sleep(0.02)
    return process, ready.read_text().strip()


def _worker(tree: pathlib.Path | None, *arguments: str) -> Any:
    command = [sys.executable, "-m", "bench.bench_single_lookup", "--worker", *arguments]
    done = subprocess.run(command, env=_environ(tree), cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def _cpu_s(pid: int) -> float:
    """A process's CPU time so far (user + system), from /proc."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed(pid: int, tree: pathlib.Path | None, *arguments: str) -> tuple[list[float], float, float]:
    """A worker's latencies, its own CPU time per sample (us) and the server's (us)."""
    before = _cpu_s(pid)
    answer = _worker(tree, *arguments)
    samples = answer["latencies_ms"]
    return samples, answer["cpu_s"] / len(samples) * 1e6, (_cpu_s(pid) - before) / len(samples) * 1e6


# -- the workers (each in its own process) ------------------------------------------------------


def _produce(address: str, count: int) -> list[int]:
    from seglog import Admin, Producer

    rng = random.Random(7)
    keys = [rng.randbytes(KEY_BYTES) for _ in range(1024)]
    values = [rng.randbytes(VALUE_BYTES) for _ in range(1024)]
    first_ms = int(time.time() * 1000)
    with Admin(address) as admin:
        admin.create_topic(TOPIC, 1)
    with Producer(address, linger_ms=5, batch_size=LARGE_BATCH_BYTES) as producer:
        for start in range(0, count, SEND_SLICE):
            chunk = range(start, min(count, start + SEND_SLICE))
            producer.send_many(TOPIC, [values[i % 1024] for i in chunk], [keys[i % 1024] for i in chunk], partition=0)
        producer.flush()
    with Admin(address) as admin:
        last_ms = admin.max_timestamp_offsets(TOPIC)[0].timestamp_ms
    return [first_ms, last_ms]


async def _lookups(address: str, warmup_ms: list[int], calls_ms: list[list[int]], profiler: Any) -> dict[str, Any]:
    from seglog import AsyncAdmin, TopicPartition

    partition = TopicPartition(TOPIC, 0)
    latencies = []
    async with AsyncAdmin(address) as admin:
        for timestamp_ms in warmup_ms:
            await admin.offsets_for_times({partition: timestamp_ms})
        if profiler is not None:
            profiler.enable()
        cpu_started = time.process_time()
        for targets_ms in calls_ms:
            started = time.perf_counter()
            if len(targets_ms) > 1:
                found = await admin.offsets_for_times_many([(partition, t) for t in targets_ms])
            else:
                found = list((await admin.offsets_for_times({partition: targets_ms[0]})).values())
            latencies.append((time.perf_counter() - started) * 1000)
            assert all(one is not None for one in found), targets_ms
        cpu_s = time.process_time() - cpu_started
        if profiler is not None:
            profiler.disable()
    return {"latencies_ms": latencies, "cpu_s": cpu_s}


async def _floor(address: str, count: int) -> dict[str, Any]:
    from bench.peers.floor import ping_pong_ms

    cpu_started = time.process_time()  # the warm-up's round trips too: a close enough share
    latencies = await ping_pong_ms(address, count)
    return {"latencies_ms": latencies, "cpu_s": (time.process_time() - cpu_started) * count / (count + WARMUP)}


def _work(arguments: argparse.Namespace) -> Any:
    kind, address = arguments.worker
    if kind == "produce":
        return _produce(address, arguments.records)
    if kind == "floor":
        return asyncio.run(_floor(address, arguments.lookups))
    assert kind == "lookups", kind
    first, last = arguments.time_range
    rng = random.Random(arguments.seed)
    warmup = [rng.randint(first, last) for _ in range(WARMUP)]
    calls = [[rng.randint(first, last) for _ in range(arguments.per_call)] for _ in range(arguments.lookups)]
    if arguments.profile_client is None:
        return asyncio.run(_lookups(address, warmup, calls, None))
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    answer = asyncio.run(_lookups(address, warmup, calls, profiler))
    profiler.dump_stats(arguments.profile_client)
    with open(f"{arguments.profile_client}.txt", "w") as summary:
        stats = pstats.Stats(profiler, stream=summary)
        stats.sort_stats("tottime").print_stats(50)
        stats.sort_stats("cumulative").print_stats(50)
    return answer


# -- the run ------------------------------------------------------------------------------------


def _sample(pid: int, output: pathlib.Path, native: bool) -> subprocess.Popen:
    """py-spy sampling ``pid`` (1,000 Hz, every thread, collapsed stacks) until ``_stop_sampler``."""
    command = [str(pathlib.Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid),
               "--rate", "1000", "--format", "raw", "--output", str(output)]
    command += ["--native"] if native else ["--nonblocking"]  # --native needs the process paused
    sampler = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches
    return sampler


def _stop_sampler(sampler: subprocess.Popen | None) -> None:
    if sampler is not None:
        sampler.send_signal(signal.SIGINT)
        sampler.wait(60)


def _figures(samples: list[float]) -> tuple[float, float]:
    return percentile(samples, 50), percentile(samples, 99)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--lookups", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a source tree (repeatable)")
    parser.add_argument("--per-call", type=int, default=1,
                        help="targets a call (Admin.offsets_for_times_many) instead of single lookups")
    parser.add_argument("--profile-client", type=pathlib.Path, default=None)
    parser.add_argument("--native", action="store_true",
                        help="--profile-service with native frames (grpc core, uvloop; pauses the process a sample)")
    parser.add_argument("--profile-service", type=pathlib.Path, default=None)
    parser.add_argument("--worker", nargs=2, metavar=("KIND", "ADDRESS"), help=argparse.SUPPRESS)
    parser.add_argument("--time-range", type=int, nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=11, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.worker:
        print(json.dumps(_work(arguments)))
        return
    trees = {name: pathlib.Path(path).resolve() for name, path in (t.split("=", 1) for t in arguments.tree)}
    if not trees:
        trees = {"seglog": None}
    for directory in (arguments.profile_client, arguments.profile_service):
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    floor = subprocess.Popen([sys.executable, "-m", "bench.peers.floor", "--port", str(port)], cwd=ROOT)
    services: dict[str, tuple[subprocess.Popen, str, list[float]]] = {}
    loads = []
    with tempfile.TemporaryDirectory(prefix="seglog-single-") as directory:
        try:
            wait_port(port, floor)
            for name, tree in trees.items():
                process, address = _start_service(pathlib.Path(directory) / name, tree)
                services[name] = (process, address, _worker(tree, "produce", address, "--records", str(arguments.records)))
            rows: dict[str, list[tuple[float, ...]]] = {"floor": []} | {name: [] for name in trees}
            for repeat in range(arguments.repeats):
                sampler = None
                if repeat == arguments.repeats - 1 and arguments.profile_service is not None:
                    sampler = _sample(floor.pid, arguments.profile_service / "floor-service.txt", arguments.native)
                samples, client_us, server_us = _timed(floor.pid, None, "floor", f"127.0.0.1:{port}",
                                                       "--lookups", str(arguments.lookups))
                _stop_sampler(sampler)
                floor_p50, floor_p99 = _figures(samples)
                rows["floor"].append((floor_p50, floor_p99, client_us, server_us))
                line = [f"repeat {repeat + 1}: floor p50 {floor_p50:.3f} p99 {floor_p99:.3f} ms "
                        f"(CPU us client {client_us:.0f} server {server_us:.0f})"]
                for name, tree in trees.items():
                    process, address, (first, last) = services[name]
                    extra = ["--seed", str(11 + repeat)]
                    profiled = repeat == arguments.repeats - 1
                    if profiled and arguments.profile_client is not None:
                        extra += ["--profile-client", str(arguments.profile_client / f"{name}-client.prof")]
                    sampler = None
                    if profiled and arguments.profile_service is not None:
                        sampler = _sample(process.pid, arguments.profile_service / f"{name}-service.txt", arguments.native)
                    samples, client_us, server_us = _timed(
                        process.pid, tree, "lookups", address, "--lookups", str(arguments.lookups),
                        "--per-call", str(arguments.per_call), "--time-range", str(first), str(last), *extra)
                    _stop_sampler(sampler)
                    p50, p99 = _figures(samples)
                    rows[name].append((p50 / floor_p50, p99 / floor_p99, client_us, server_us))
                    line.append(f"{name} p50 {p50:.3f} ({p50 / floor_p50:.2f}x) p99 {p99:.3f} ({p99 / floor_p99:.2f}x) "
                                f"(CPU us client {client_us:.0f} service {server_us:.0f})")
                loads.append(os.getloadavg()[0])
                print("; ".join(line) + f"; load {loads[-1]:.2f}", flush=True)

            def median(name: str, column: int) -> float:
                return statistics.median(row[column] for row in rows[name])

            print(f"floor: p50 {median('floor', 0):.3f} ms, p99 {median('floor', 1):.3f} ms, CPU a round trip: "
                  f"client {median('floor', 2):.0f} us, server {median('floor', 3):.0f} us "
                  f"(medians over {arguments.repeats} repeats)")
            for name in trees:
                print(f"{name}: p50 {median(name, 0):.2f}x the floor, p99 {median(name, 1):.2f}x (medians of each "
                      f"repeat's ratio); CPU a lookup: client {median(name, 2):.0f} us, service {median(name, 3):.0f} us")
            print(f"load during the run: {min(loads):.2f}-{max(loads):.2f} (1-minute average)")
        finally:
            for process, _, _ in services.values():
                stop_process(process, 60)
            stop_process(floor)


if __name__ == "__main__":
    main()
