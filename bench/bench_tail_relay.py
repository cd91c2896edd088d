"""What the transport alone allows goal 3: a storage-free relay beside seglog and the floor.

    .venv/bin/python bench/bench_tail_relay.py [--records 4000] [--repeats 3] [--rates 500,2000]

Goal 3 of the lookups-and-latency issue asks produce -> consume at 2,000 records/s within 1.5x
(p50) and 3x (p99) of the floor: one ping-pong on an open gRPC bidi stream with an empty handler
(``bench/peers/floor.py``). A record on its way from a producer to a consumer crosses the same
transport twice and is answered once more: the producer's message to the service, the service's
acknowledgement back, the service's push to the consumer. This benchmark measures that shape with
nothing of seglog in it, so the goal can be read against what grpcio's Python bindings allow on
this machine:

- the relay: a grpc.aio server on uvloop (as seglog's) whose bidi ``Produce`` answers every
  message with a one-byte acknowledgement and hands the message to every open ``Consume`` stream,
  raw bytes throughout (no protobuf, no storage, no checks);
- ``relay-async``: its client on one uvloop loop, the producer paced by
  ``bench.peers.common.steady_ticks``, a task reading the acknowledgements, another the pushes
  (the most favourable client there is);
- ``relay-threads``: the shape of seglog's synchronous client, which bench/peers drives: the
  caller's thread paced by ``bench.peers.common.paced`` hands each message to a loop thread
  (``call_soon_threadsafe``), the loop writes it, and a reading thread takes the pushes from the
  loop through a ``threading.Event``;
- ``seglog``: bench/peers' goal-3 workload itself (``SeglogSystem.latency``: a synchronous
  ``Producer(linger_ms=0)`` and ``Consumer(mode="stream")``, a fresh service each repeat);
- the floor of the same repeat.

Each repeat runs them all in turn at each rate; printed: per rate and shape, the medians over the
repeats of p50 and p99 (ms), their ratios to the repeat's floor p50, and the CPU a record of the
server process and of this client process. The machine's load is printed with each repeat.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # bench.peers

from bench.peers import common, floor  # noqa: E402
from bench.peers.proc import client_cpu_s, server_cpu_s  # noqa: E402

_PRODUCE = "/bench.Relay/Produce"
_CONSUME = "/bench.Relay/Consume"
_ACK = b"a"
_WARMUP = 200
_JOIN_TIMEOUT_S = 60


def _identity(data: bytes) -> bytes:
    return data


# -- the relay's server (its own process) ----------------------------------------------------------

async def _serve(port: int) -> None:
    import grpc

    subscribers: list[asyncio.Queue[bytes]] = []

    async def produce(requests, context):
        async for message in requests:
            for queue in subscribers:
                queue.put_nowait(message)
            yield _ACK

    async def consume(request, context):
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        subscribers.append(queue)
        try:
            yield b""  # subscribed: the client produces only after this
            while True:
                yield await queue.get()
        finally:
            subscribers.remove(queue)

    handler = grpc.method_handlers_generic_handler("bench.Relay", {
        "Produce": grpc.stream_stream_rpc_method_handler(
            produce, request_deserializer=_identity, response_serializer=_identity),
        "Consume": grpc.unary_stream_rpc_method_handler(
            consume, request_deserializer=_identity, response_serializer=_identity),
    })
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


class _Relay:
    def __init__(self) -> None:
        port = common.free_port()
        self.process = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
        common.wait_port(port, self.process)
        self.address = f"127.0.0.1:{port}"

    def stop(self) -> None:
        common.stop_process(self.process)


# -- the relay's clients ---------------------------------------------------------------------------

async def _warm_up(produce, pushes) -> None:
    """The consume stream subscribed (its first, empty message), then both directions warmed."""
    await pushes.read()
    for _ in range(_WARMUP):
        await produce.write(common.stamped_payload())
        await produce.read()
        await pushes.read()


async def _relay_async(address: str, count: int, rate: float) -> tuple[list[float], float]:
    import grpc

    async with grpc.aio.insecure_channel(address) as channel:
        pushes = channel.unary_stream(_CONSUME, request_serializer=_identity, response_deserializer=_identity)(b"")
        produce = channel.stream_stream(_PRODUCE, request_serializer=_identity, response_deserializer=_identity)()
        await _warm_up(produce, pushes)
        latencies: list[float] = []

        async def read_pushes() -> None:
            while len(latencies) < count:
                latencies.append(common.latency_ms(await pushes.read()))

        async def read_acks() -> None:
            for _ in range(count):
                await produce.read()

        readers = [asyncio.create_task(read_pushes()), asyncio.create_task(read_acks())]
        started = time.monotonic()
        async for _ in common.steady_ticks(count, rate):
            await produce.write(common.stamped_payload())
        await asyncio.wait_for(asyncio.gather(*readers), _JOIN_TIMEOUT_S)
        achieved = count / (time.monotonic() - started)
        await produce.done_writing()
        pushes.cancel()
        return latencies, achieved


def _relay_threads(address: str, count: int, rate: float) -> tuple[list[float], float]:
    """The synchronous client's shape: caller thread -> loop thread -> the wire; pushes -> the
    loop thread -> a reading thread woken by a threading.Event."""
    import grpc

    import uvloop

    loop = uvloop.new_event_loop()  # as the synchronous client's loop thread, where uvloop is installed
    looping = threading.Thread(target=loop.run_forever, name="relay-loop", daemon=True)
    looping.start()
    taken: collections.deque[bytes] = collections.deque()
    ready = threading.Event()
    latencies: list[float] = []

    async def open_streams():
        channel = grpc.aio.insecure_channel(address)
        pushes = channel.unary_stream(_CONSUME, request_serializer=_identity, response_deserializer=_identity)(b"")
        produce = channel.stream_stream(_PRODUCE, request_serializer=_identity, response_deserializer=_identity)()
        await _warm_up(produce, pushes)
        return channel, produce, pushes

    channel, produce, pushes = asyncio.run_coroutine_threadsafe(open_streams(), loop).result(_JOIN_TIMEOUT_S)
    writes: collections.deque[bytes] = collections.deque()
    writing = False

    async def write_all() -> None:  # one writer at a time (grpc.aio allows one write under way)
        nonlocal writing
        while writes:
            await produce.write(writes.popleft())
        writing = False

    def hand_over(payload: bytes) -> None:  # on the loop
        nonlocal writing
        writes.append(payload)
        if not writing:
            writing = True
            loop.create_task(write_all())

    async def read_pushes() -> None:
        for _ in range(count):
            taken.append(await pushes.read())
            ready.set()

    async def read_acks() -> None:
        for _ in range(count):
            await produce.read()

    reading = [asyncio.run_coroutine_threadsafe(read_pushes(), loop),
               asyncio.run_coroutine_threadsafe(read_acks(), loop)]

    def poll() -> None:
        deadline = time.monotonic() + count / rate + _JOIN_TIMEOUT_S
        while len(latencies) < count and time.monotonic() < deadline:
            if ready.wait(0.5):
                ready.clear()
                while taken:
                    latencies.append(common.latency_ms(taken.popleft()))

    poller = threading.Thread(target=poll, name="relay-poll")
    poller.start()
    started = time.monotonic()
    for index in range(count):
        due = started + index / rate
        while (wait := due - time.monotonic()) > 0:
            time.sleep(min(wait, 0.0005))
        loop.call_soon_threadsafe(hand_over, common.stamped_payload())
    achieved = count / (time.monotonic() - started)
    poller.join()
    for future in reading:
        future.result(_JOIN_TIMEOUT_S)

    async def close() -> None:
        await produce.done_writing()
        pushes.cancel()
        await channel.close()

    asyncio.run_coroutine_threadsafe(close(), loop).result(_JOIN_TIMEOUT_S)
    loop.call_soon_threadsafe(loop.stop)
    looping.join()
    loop.close()
    return latencies, achieved


# -- seglog ----------------------------------------------------------------------------------------

def _seglog(count: int, rate: float, root: pathlib.Path) -> tuple[list[float], float, float, int]:
    from bench.peers.seglog_system import SeglogSystem

    common.LATENCY_RATE_PER_S = rate  # paced() reads it at each call
    system = SeglogSystem(root)
    try:
        before = server_cpu_s(system.pid)
        client_before = client_cpu_s()
        latencies, _acks, achieved = system.latency(count)
        return latencies, achieved, server_cpu_s(system.pid) - before, client_cpu_s() - client_before
    finally:
        system.stop()


def _measure(shape: str, count: int, rate: float, root: pathlib.Path) -> dict[str, float]:
    if shape == "seglog":
        latencies, achieved, server_s, client_s = _seglog(count, rate, root)
    else:
        relay = _Relay()
        try:
            before, client_before = server_cpu_s(relay.process.pid), client_cpu_s()
            if shape == "relay-async":
                import uvloop

                latencies, achieved = uvloop.run(_relay_async(relay.address, count, rate))
            else:
                latencies, achieved = _relay_threads(relay.address, count, rate)
            server_s, client_s = server_cpu_s(relay.process.pid) - before, client_cpu_s() - client_before
        finally:
            relay.stop()
    if len(latencies) < count:
        raise SystemExit(f"{shape}: {len(latencies)} of {count} records arrived")
    return {"p50": common.percentile(latencies, 50), "p99": common.percentile(latencies, 99),
            "rate": achieved, "server_us": server_s / count * 1e6, "client_us": client_s / count * 1e6}


SHAPES = ("relay-async", "relay-threads", "seglog")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rates", default="500,2000")
    parser.add_argument("--floor-calls", type=int, default=3000)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args()
    if args.serve is not None:
        import uvloop

        uvloop.run(_serve(args.serve))
        return
    rates = [float(rate) for rate in args.rates.split(",")]
    shapes = args.shapes.split(",")
    results: dict[tuple[float, str], list[dict[str, float]]] = collections.defaultdict(list)
    for repeat in range(args.repeats):
        floor_p50 = common.percentile(floor.measure(args.floor_calls), 50)
        print(f"repeat {repeat + 1}: floor p50 {floor_p50:.3f} ms, load {os.getloadavg()[0]:.1f}", flush=True)
        order = shapes[repeat % len(shapes):] + shapes[:repeat % len(shapes)]  # rotated each repeat
        for rate in rates:
            for shape in order:
                with tempfile.TemporaryDirectory(prefix="seglog-relay-") as root:
                    figures = _measure(shape, args.records, rate, pathlib.Path(root))
                figures["p50_x"] = figures["p50"] / floor_p50
                figures["p99_x"] = figures["p99"] / floor_p50
                results[(rate, shape)].append(figures)
                print(f"  {rate:,.0f}/s {shape:13} p50 {figures['p50']:.3f} ms ({figures['p50_x']:.2f}x) "
                      f"p99 {figures['p99']:.3f} ms ({figures['p99_x']:.2f}x), server {figures['server_us']:.0f} "
                      f"client {figures['client_us']:.0f} us a record, load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"\nmedians over {args.repeats} repeat(s), {args.records:,} records each (ratios to each repeat's floor p50):")
    for rate in rates:
        for shape in shapes:
            runs = results[(rate, shape)]

            def median(key: str, runs: list[dict[str, float]] = runs) -> float:
                return statistics.median(run[key] for run in runs)

            print(f"  {rate:,.0f}/s {shape:13} p50 {median('p50'):.3f} ms {median('p50_x'):.2f}x  "
                  f"p99 {median('p99'):.3f} ms {median('p99_x'):.2f}x  "
                  f"server {median('server_us'):.0f} client {median('client_us'):.0f} us a record")


if __name__ == "__main__":
    main()
