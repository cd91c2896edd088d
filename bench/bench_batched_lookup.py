"""Batched time lookups through the public client, on large and small batches, optionally profiled.

    .venv/bin/python bench/bench_batched_lookup.py [--records 200000] [--lookups 20000]
        [--per-request 1000] [--runs 3] [--profile lookups.txt]
    PYTHONPATH=. .venv/bin/python bench/bench_batched_lookup.py --storage

``--storage`` measures the storage alone, in this process (thread CPU per lookup, the median of
five interleaved repeats, on a million records in 291 batches of 3,436 and in 10,000 batches of
100): single lookups and batched ones (100 and 1,000 targets a call), with the segments'
time-step tables (fed by the appends), as before them (the batch directories, built by the
warm-up's batched calls, and record-time tables from 64 records a batch), and as before the
directories (tables from 256, every target searched through the indexes and a header scan); and
the append's CPU a batch with the active segment's table fed and without.
Run from the repository's root with ``PYTHONPATH=.`` (it builds its logs with the tests' helpers).

Starts a service (``python -m seglog_server``, fresh data directory), produces ``--records``
records twice (100-byte values, 16-byte keys): once with ``Producer.send_many`` and a 512 KiB
batch size (about 4,000 records a batch, the issue's large batches) and once in 100-record
batches, then asks ``Admin.offsets_for_times_many`` for ``--lookups`` random times in requests of
``--per-request``, and prints lookups/s per log, the CPU a call of the client's process and
of the service's (each the median of ``--runs``), and each run's first call's wall time beside
the median of the others' (the first is the connection's first call of that size: the cold
one). With ``--profile`` py-spy samples the service (every thread, 1,000 Hz) while it answers the
lookups and writes the collapsed stacks to that file, suffixed by the log's name (sampling
slows the service a little: the rates printed then are not figures). cProfile would see only
the event loop's thread, not the storage pool's threads where the searches run.

``--pauses`` measures instead the calls that follow an idle pause (0, 10 ms, 50 ms, 200 ms, 1 s;
three calls after each, ``--runs`` rounds, on the small-batch log of ``--records``): each call's
wall time, the first after the pause beside the second and third, and the same for one round
trip of a 1 KiB message on an open bidi stream of the peers' floor (``bench/peers/floor.py``: grpc.aio
on both sides, an empty handler), so what an idle pause costs grpc itself is measured beside it.
Run from the repository's root with ``PYTHONPATH=.`` (it starts the floor's server).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from seglog import Admin, Producer, TopicPartition
from seglog_server.__main__ import MALLOC_TUNING

VALUE_BYTES = 100
KEY_BYTES = 16
LARGE_BATCH_BYTES = 512 * 1024
SMALL_BATCH_RECORDS = 100
SEND_SLICE = 10_000


def _start(workdir: pathlib.Path) -> tuple[subprocess.Popen, str]:
    ready = workdir / "ready"
    command = [sys.executable, "-m", "seglog_server", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
               "--data-dir", str(workdir / "data")]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
    environ.update(MALLOC_TUNING)  # set already: the service does not re-exec (its pid stays the one sampled)
    log = open(workdir / "service.log", "wb")
    process = subprocess.Popen(command, stdout=log, stderr=log, env=environ)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"service failed to start: {(workdir / 'service.log').read_text()}")
        time.sleep(0.02)
    return process, ready.read_text().strip()


def _produce(address: str, topic: str, count: int, small: bool) -> tuple[int, int]:
    rng = random.Random(7)
    keys = [rng.randbytes(KEY_BYTES) for _ in range(1024)]
    values = [rng.randbytes(VALUE_BYTES) for _ in range(1024)]
    first_ms = int(time.time() * 1000)
    with Admin(address) as admin:
        admin.create_topic(topic, 1)
    with Producer(address, linger_ms=5, batch_size=LARGE_BATCH_BYTES) as producer:
        slice_records = SMALL_BATCH_RECORDS if small else SEND_SLICE
        for start in range(0, count, slice_records):
            chunk = range(start, min(count, start + slice_records))
            producer.send_many(topic, [values[i % 1024] for i in chunk], [keys[i % 1024] for i in chunk], partition=0)
            if small:
                producer.flush()  # one batch per slice
        producer.flush()
    with Admin(address) as admin:
        last_ms = admin.max_timestamp_offsets(topic)[0].timestamp_ms
    return first_ms, last_ms


def _cpu_s(pid: int) -> float:
    """A process's CPU time so far (user and system, every thread), in seconds."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _lookups(address: str, topic: str, times: list[int], per_request: int,
             service_pid: int) -> tuple[float, float, float, float, float]:
    """Lookups/s, the client's and the service's CPU a call (us; both processes whole), and the
    first call's wall time and the median of the others' (ms): the first asks on a connection
    whose only lookup was one target (the old form), as the peers' small-batch log's did."""
    partition = TopicPartition(topic, 0)
    with Admin(address) as admin:
        admin.offsets_for_times_many([(partition, times[0])])  # connects
        walls = []
        started, client_cpu, service_cpu = time.perf_counter(), time.process_time(), _cpu_s(service_pid)
        for start in range(0, len(times), per_request):
            asked = time.perf_counter()
            found = admin.offsets_for_times_many([(partition, t) for t in times[start : start + per_request]])
            walls.append(time.perf_counter() - asked)
            assert all(f is not None for f in found)
        elapsed = time.perf_counter() - started
        calls = -(-len(times) // per_request)
        return (len(times) / elapsed, (time.process_time() - client_cpu) / calls * 1e6,
                (_cpu_s(service_pid) - service_cpu) / calls * 1e6, walls[0] * 1e3,
                statistics.median(walls[1:] or walls) * 1e3)


PAUSES_S = (0.0, 0.01, 0.05, 0.2, 1.0)
_CALLS_AFTER_A_PAUSE = 3
_FLOOR_MESSAGE = b"x" * 1024


def _after_pauses(call: Callable[[], object], rounds: int) -> dict[float, list[list[float]]]:
    """Per pause, per round, the wall times (ms) of the calls made right after it."""
    walls: dict[float, list[list[float]]] = {pause: [] for pause in PAUSES_S}
    for _ in range(rounds):
        for pause in PAUSES_S:
            time.sleep(pause)
            round_walls = []
            for _ in range(_CALLS_AFTER_A_PAUSE):
                started = time.perf_counter()
                call()
                round_walls.append((time.perf_counter() - started) * 1e3)
            walls[pause].append(round_walls)
    return walls


def _print_pauses(name: str, walls: dict[float, list[list[float]]]) -> None:
    for pause, rounds in walls.items():
        print(f"{name}, after {pause * 1e3:g} ms idle: " + ", ".join(
            f"call {n + 1} {statistics.median(r[n] for r in rounds):.2f} ms" for n in range(_CALLS_AFTER_A_PAUSE))
            + f" (medians of {len(rounds)}; load {os.getloadavg()[0]:.2f})", flush=True)


def pause_costs(address: str, records: int, per_request: int, rounds: int) -> None:
    """``--pauses`` (see the module docstring)."""
    import asyncio

    import grpc

    from bench.peers.common import free_port, stop_process, wait_port
    from bench.peers.floor import METHOD, _identity

    first, last = _produce(address, "lookups-pauses", records, small=True)
    rng = random.Random(5)
    partition = TopicPartition("lookups-pauses", 0)
    with Admin(address) as admin:
        admin.offsets_for_times_many([(partition, rng.randint(first, last)) for _ in range(per_request)])
        _print_pauses("seglog, Admin.offsets_for_times_many", _after_pauses(
            lambda: admin.offsets_for_times_many([(partition, rng.randint(first, last)) for _ in range(per_request)]),
            rounds))
    port = free_port()
    floor = subprocess.Popen([sys.executable, "-m", "bench.peers.floor", "--port", str(port)],
                             cwd=pathlib.Path(__file__).resolve().parents[1])
    try:
        wait_port(port, floor)

        async def measured() -> dict[float, list[list[float]]]:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stream = channel.stream_stream(METHOD, request_serializer=_identity, response_deserializer=_identity)()

                async def ping() -> None:
                    await stream.write(_FLOOR_MESSAGE)
                    await stream.read()

                for _ in range(200):
                    await ping()
                # The pauses block the loop's thread, as the synchronous client's caller idles.
                walls: dict[float, list[list[float]]] = {pause: [] for pause in PAUSES_S}
                for _ in range(rounds):
                    for pause in PAUSES_S:
                        time.sleep(pause)
                        round_walls = []
                        for _ in range(_CALLS_AFTER_A_PAUSE):
                            started = time.perf_counter()
                            await ping()
                            round_walls.append((time.perf_counter() - started) * 1e3)
                        walls[pause].append(round_walls)
                await stream.done_writing()
                return walls

        _print_pauses("the floor, a 1 KiB round trip", asyncio.run(measured()))
    finally:
        stop_process(floor)


def storage_costs(repeats: int = 5) -> None:
    import tempfile

    from seglog_server.storage.base.clock import FakeClock
    from seglog_server.storage.format import record_timestamps
    from seglog_server.storage.segment import batch_directory, segment_time_lookups
    from tests.support.log_test_support import NOW_MS, batch, config, open_log

    from seglog_server.storage.segment import time_steps

    # Each mode: (record-time tables, batch directories, time-step tables). "before: ..." are the
    # storage before the time-step tables (the directory answers) and before the directory
    # (tables from 256 records a batch, every target searched by the scans).
    modes = {
        "time-step tables": (record_timestamps.RecordTimesCache(records_min=64), batch_directory.DirectoryBudget(),
                             batch_directory.DirectoryBudget(time_steps.TIME_STEPS_BYTES_MAX)),
        "before: directory, tables from 64 records": (record_timestamps.RecordTimesCache(records_min=64),
                                                      batch_directory.DirectoryBudget(),
                                                      batch_directory.DirectoryBudget(0)),
        "before: no directory, tables from 256 records": (record_timestamps.RecordTimesCache(records_min=256),
                                                          batch_directory.DirectoryBudget(0),
                                                          batch_directory.DirectoryBudget(0)),
    }
    rng = random.Random(7)
    values = [rng.randbytes(VALUE_BYTES) for _ in range(64)]
    keys = [rng.randbytes(KEY_BYTES) for _ in range(64)]
    # The logs: a million records in ~290 batches of 3,436 (send_many's) or in 10,000 of 100.
    for per_batch, batches in ((3436, 291), (100, 10_000)):
        made = []
        span = 0
        for _ in range(batches):
            made.append(batch(*[values[i % 64] for i in range(per_batch)], keys=[keys[i % 64] for i in range(per_batch)],
                              timestamps=[NOW_MS + span + i // 4 for i in range(per_batch)]))
            span += per_batch // 4
        # The append's cost with the active segment's table fed and without (a budget of none):
        # fresh logs, alternately, the first 50 batches each.
        appends: dict[str, list[float]] = {}
        for _ in range(repeats):
            for fed, budget in (("fed", time_steps.TIME_STEPS), ("not fed", batch_directory.DirectoryBudget(0))):
                segment_time_lookups.TIME_STEPS = budget
                with tempfile.TemporaryDirectory() as directory:
                    log = open_log(pathlib.Path(directory), FakeClock(NOW_MS), config(segment_bytes=1 << 30))
                    started = time.thread_time()
                    for one in made[:50]:
                        log.append(one)
                    appends.setdefault(fed, []).append((time.thread_time() - started) / 50 * 1e6)
                    log.close()
        print(f"{per_batch}-record batches, append: " + ", ".join(
            f"table {fed} {statistics.median(costs):.1f} us" for fed, costs in appends.items())
            + f" of CPU a batch (medians of {repeats}; load {os.getloadavg()[0]:.2f})", flush=True)
        segment_time_lookups.TIME_STEPS = modes["time-step tables"][2]
        with tempfile.TemporaryDirectory() as directory:
            log = open_log(pathlib.Path(directory), FakeClock(NOW_MS), config(segment_bytes=1 << 30))
            for one in made:
                log.append(one)
            targets = [NOW_MS + rng.randrange(span) for _ in range(20_000)]
            shapes = {
                "single": (3000, lambda: [log.offset_for_timestamp(t) for t in targets[:3000]]),
                "100 a call": (len(targets), lambda: [log.offsets_for_timestamps(targets[s : s + 100])
                                                      for s in range(0, len(targets), 100)]),
                "1,000 a call": (len(targets), lambda: [log.offsets_for_timestamps(targets[s : s + 1000])
                                                        for s in range(0, len(targets), 1000)]),
            }
            costs: dict[tuple[str, str], list[float]] = {}
            segment = log._local.segments.at(0)
            assert len(log._local.segments) == 1
            # Each mode's directory, kept beside it (a segment holds one): (weak ref, targets, refused).
            # The table the appends fed is the time-step mode's; the others have none.
            held = {mode: (segment_time_lookups._no_directory, 0, budget.bytes_max == 0) + (
                (segment._steps_ref, 0, False) if steps.bytes_max else (segment_time_lookups._no_directory, 0, True))
                for mode, (_, budget, steps) in modes.items()}
            print(f"{per_batch}-record batches: {len(segment._steps_ref())} time steps for "
                  f"{per_batch * batches:,} records", flush=True)

            def use(mode: str) -> None:
                segment_time_lookups.RECORD_TIMES, segment_time_lookups.DIRECTORIES, segment_time_lookups.TIME_STEPS = modes[mode]
                (segment._directory_ref, segment._directory_targets, segment._directory_refused,
                 segment._steps_ref, segment._steps_targets, segment._steps_refused) = held[mode]

            def keep(mode: str) -> None:
                held[mode] = (segment._directory_ref, segment._directory_targets, segment._directory_refused,
                              segment._steps_ref, segment._steps_targets, segment._steps_refused)

            for mode in modes:  # warm each mode once (tables, directory)
                use(mode)
                shapes["100 a call"][1]()
                shapes["100 a call"][1]()
                keep(mode)
            for _ in range(repeats):  # interleaved: each repeat runs every mode and shape
                for mode in modes:
                    use(mode)
                    for shape, (count, call) in shapes.items():
                        started = time.thread_time()
                        call()
                        costs.setdefault((mode, shape), []).append((time.thread_time() - started) / count * 1e6)
                    keep(mode)
            for mode in modes:
                print(f"{per_batch}-record batches, {mode}: "
                      + ", ".join(f"{shape} {statistics.median(costs[mode, shape]):.1f} us" for shape in shapes)
                      + f" of CPU a lookup (medians of {repeats}; load {os.getloadavg()[0]:.2f})", flush=True)
            log.close()
    segment_time_lookups.RECORD_TIMES, segment_time_lookups.DIRECTORIES = record_timestamps.RECORD_TIMES, batch_directory.DIRECTORIES
    segment_time_lookups.TIME_STEPS = time_steps.TIME_STEPS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--lookups", type=int, default=20_000)
    parser.add_argument("--per-request", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", type=pathlib.Path, default=None)
    parser.add_argument("--only", choices=("large", "small"), default=None)
    parser.add_argument("--storage", action="store_true", help="the storage alone, in this process (see above)")
    parser.add_argument("--pauses", action="store_true", help="calls after idle pauses, and the floor's (see above)")
    arguments = parser.parse_args()
    if arguments.storage:
        storage_costs()
        return
    with tempfile.TemporaryDirectory(prefix="seglog-lookups-") as directory:
        process, address = _start(pathlib.Path(directory))
        try:
            if arguments.pauses:
                pause_costs(address, arguments.records, arguments.per_request, arguments.runs)
                return
            for name in ("large", "small"):
                if arguments.only not in (None, name):
                    continue
                first, last = _produce(address, f"lookups-{name}", arguments.records, small=name == "small")
                rng = random.Random(11)
                times = [rng.randint(first, last) for _ in range(arguments.lookups)]
                sampler = None
                if arguments.profile is not None:
                    out = arguments.profile.with_name(f"{arguments.profile.stem}-{name}{arguments.profile.suffix}")
                    sampler = subprocess.Popen(
                        [str(pathlib.Path(sys.executable).with_name("py-spy")), "record", "--pid", str(process.pid),
                         "--rate", "1000", "--nonblocking", "--format", "raw", "--output", str(out)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1.0)  # py-spy attaches
                runs = [_lookups(address, f"lookups-{name}", times, arguments.per_request, process.pid)
                        for _ in range(arguments.runs)]
                rates = [run[0] for run in runs]
                if sampler is not None:
                    sampler.send_signal(signal.SIGINT)
                    sampler.wait(60)
                print(f"{name} batches: {statistics.median(rates):,.0f} lookups/s "
                      f"(runs {', '.join(f'{r:,.0f}' for r in rates)}; load {os.getloadavg()[0]:.2f}); CPU a call "
                      f"of {arguments.per_request}: client {statistics.median(run[1] for run in runs):,.0f} us, "
                      f"service {statistics.median(run[2] for run in runs):,.0f} us; a call's wall: the first "
                      f"{', '.join(f'{run[3]:.2f}' for run in runs)} ms, the others "
                      f"{statistics.median(run[4] for run in runs):.2f} ms (median)", flush=True)
        finally:
            process.terminate()
            process.wait(60)


if __name__ == "__main__":
    main()
