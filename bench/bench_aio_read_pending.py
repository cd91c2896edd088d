"""Does a read pending on a grpc.aio bidi call make its writes dearer? One client, one server.

    .venv/bin/python bench/bench_aio_read_pending.py [--count 3000] [--repeats 5] [--size 120] [--rate 0]

The floor's server (``bench.peers.floor``: an empty answer a message) and a grpc.aio client on
uvloop (as the client's loop thread runs) writing one message of ``--size`` bytes and waiting for
its answer, one at a time (or paced at ``--rate`` a second), in two ways, interleaved repeat by
repeat:

- ``sequential``: the task writes, then reads its answer itself (the floor's client; a
  ``RequestStream(caller_reads=True)`` ask);
- ``pending``: a reader task keeps a ``call.read()`` awaiting while the task writes, and hands
  each answer over through a future (a ``RequestStream`` without ``caller_reads``: the
  ProduceStream's).

Each repeat prints, for each way: the round trip's p50, the wall time of ``await call.write()``
(p50), the loop thread's CPU a round trip (``time.thread_time``) and the process's (every
thread: grpc's poller too) a round trip. Medians of the repeats and the pending/sequential ratios
close the run, with the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository root: bench.peers
from bench.peers.common import free_port, stop_process, wait_port  # noqa: E402
from bench.peers.floor import METHOD  # noqa: E402

WARMUP = 200


def _identity(data: bytes) -> bytes:
    return data


async def _round_trips(address: str, way: str, count: int, size: int, rate: float) -> dict[str, float]:
    import grpc

    payload = b"x" * size
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.stream_stream(METHOD, request_serializer=_identity, response_deserializer=_identity)()
        loop = asyncio.get_running_loop()
        owed: list[asyncio.Future[bytes]] = []

        async def reader() -> None:  # the `pending` way's reader: always a read awaiting
            while True:
                answer = await call.read()
                if answer is grpc.aio.EOF:
                    return
                owed.pop(0).set_result(answer)

        reading = loop.create_task(reader()) if way == "pending" else None
        trips, writes = [], []
        interval = 1.0 / rate if rate else 0.0
        next_at = time.perf_counter()
        cpu_thread = cpu_process = 0.0
        for index in range(WARMUP + count):
            if interval:
                next_at += interval
                delay = next_at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            if index == WARMUP:
                cpu_thread, cpu_process = time.thread_time(), time.process_time()
            started = time.perf_counter()
            if reading is None:
                await call.write(payload)
                written = time.perf_counter()
                await call.read()
            else:
                future = loop.create_future()
                owed.append(future)
                await call.write(payload)
                written = time.perf_counter()
                await future
            ended = time.perf_counter()
            if index >= WARMUP:
                trips.append((ended - started) * 1e6)
                writes.append((written - started) * 1e6)
        cpu_thread = (time.thread_time() - cpu_thread) / count * 1e6
        cpu_process = (time.process_time() - cpu_process) / count * 1e6
        await call.done_writing()
        if reading is not None:
            await reading
        return {
            "trip_p50_us": statistics.median(trips), "write_p50_us": statistics.median(writes),
            "loop_cpu_us": cpu_thread, "process_cpu_us": cpu_process,
        }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size", type=int, default=120, help="bytes a message (a one-record batch: about 120)")
    parser.add_argument("--rate", type=float, default=0.0, help="round trips a second (0: back to back)")
    arguments = parser.parse_args(argv)
    import uvloop

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "bench.peers.floor", "--port", str(port)])
    results: dict[str, list[dict[str, float]]] = {"sequential": [], "pending": []}
    loads = []
    try:
        wait_port(port, server)
        for repeat in range(arguments.repeats):
            ways = ("sequential", "pending") if repeat % 2 == 0 else ("pending", "sequential")
            for way in ways:
                loads.append(os.getloadavg()[0])
                figures = uvloop.run(_round_trips(
                    f"127.0.0.1:{port}", way, arguments.count, arguments.size, arguments.rate))
                results[way].append(figures)
                print(f"repeat {repeat} {way:10s} " + " ".join(f"{k} {v:7.1f}" for k, v in figures.items())
                      + f" load {loads[-1]:.2f}", flush=True)
    finally:
        stop_process(server)
    print(f"medians of {arguments.repeats} repeats, {arguments.count} round trips each, {arguments.size} B,"
          f" rate {arguments.rate or 'back to back'}, load {min(loads):.2f}-{max(loads):.2f}:")
    for key in results["sequential"][0]:
        base = statistics.median(r[key] for r in results["sequential"])
        pending = statistics.median(r[key] for r in results["pending"])
        print(f"  {key:15s} sequential {base:7.1f}  pending {pending:7.1f}  ratio {pending / base:.2f}")


if __name__ == "__main__":
    main()
