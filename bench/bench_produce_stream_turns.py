"""The service's side of a ProduceStream message, A/B between checkouts of the service.

    .venv/bin/python bench/bench_produce_stream_turns.py [--tree NAME=DIR ...] [--rounds 8] [--count 500]

One service per tree (``DIR/server`` first on its PYTHONPATH; this checkout's without ``--tree``),
each with a Consume stream parked at its topic's tail (a raw stub, read in a task), and one raw
grpc.aio client (the same for all, on uvloop) sending one-record batches on a ProduceStream:

- ``ping``: one message at a time, the next written once the answer is read (the floor's shape);
- ``paced``: a message every 0.5 ms (2,000/s, paced by a thread as bench/peers does), answers
  read by a task, so a message may arrive while the service completes the last answer's write.

Per message: the answer's round trip (``ack``) and, paced, the record's arrival on the parked
Consume stream after the message was written (``push``). The trees take turns, ``--count``
messages each round, for ``--rounds`` rounds (order swapped every round); printed: each tree's
median of the rounds' p50s and p90s, and the ratio to the first tree, with the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.bench_group_commit import Service  # noqa: E402
from seglog.records import RecordBatchBuilder  # noqa: E402
from seglog.v1 import log_service_pb2 as pb  # noqa: E402
from seglog.v1 import log_service_pb2_grpc as pb_grpc  # noqa: E402

TOPIC = "turns"


def _service(root: pathlib.Path, tree: str | None) -> Service:
    """The service of ``tree`` (this checkout's when None): no metrics listener, topics flushed every second."""
    pythonpath = [f"{tree}/server", f"{tree}/client"] if tree else None
    return Service(root, ["--metrics-listen", "none", "--topic-default", "flush.ms=1000"], pythonpath)


def _batch() -> bytes:
    builder = RecordBatchBuilder()
    builder.append(b"v" * 100, key=b"k")
    return builder.build()


def _batch_count(records: bytes) -> int:
    """How many record batches ``records`` holds (each: base offset, then its length, int32 at 8)."""
    count = position = 0
    while position + 12 <= len(records):
        position += 12 + int.from_bytes(records[position + 8:position + 12], "big")
        count += 1
    return count


class Connection:
    """The client's stream, a parked Consume stream, and the stamps of both."""

    def __init__(self, address: str) -> None:
        import grpc

        self.channel = grpc.aio.insecure_channel(address)
        self.stub = pb_grpc.LogServiceStub(self.channel)
        self.records = _batch()
        self.next_id = 1
        self.pushed: asyncio.Queue[int] = asyncio.Queue()

    async def open(self) -> None:
        await self.stub.CreateTopic(pb.CreateTopicRequest(topic=TOPIC, partitions=1))
        self.produce = self.stub.ProduceStream()
        await self.produce.initial_metadata()
        self.consume = self.stub.Consume(pb.ConsumeRequest(
            topic=TOPIC, partition=0, position=pb.START_POSITION_EARLIEST, max_bytes=1 << 20, max_wait_ms=1000,
            min_bytes=1))
        self.reader = asyncio.ensure_future(self._read_pushes())

    async def _read_pushes(self) -> None:
        async for response in self.consume:
            at = time.perf_counter_ns()
            for _ in range(_batch_count(response.records)):  # a push may carry several (one record each)
                self.pushed.put_nowait(at)

    def message(self) -> pb.ProduceStreamRequest:
        message = pb.ProduceStreamRequest(correlation_id=self.next_id)
        self.next_id += 1
        request = message.produce
        request.topic, request.partition, request.records = TOPIC, 0, self.records
        return message

    async def ping(self, count: int) -> dict[str, list[float]]:
        acks = []
        for _ in range(count):
            started = time.perf_counter_ns()
            await self.produce.write(self.message())
            await self.produce.read()
            acks.append((time.perf_counter_ns() - started) / 1e3)
            await self.pushed.get()
        return {"ack": acks}

    async def paced(self, count: int) -> dict[str, list[float]]:
        loop = asyncio.get_running_loop()
        ticks: asyncio.Queue[int] = asyncio.Queue()

        def tick() -> None:
            due = time.monotonic()
            for index in range(count):
                time.sleep(max(0.0, due - time.monotonic()))
                loop.call_soon_threadsafe(ticks.put_nowait, index)
                due += 0.0005

        written: list[int] = []
        acks: list[float] = []

        async def answers() -> None:
            for index in range(count):
                await self.produce.read()
                acks.append((time.perf_counter_ns() - written[index]) / 1e3)

        reading = asyncio.ensure_future(answers())
        thread = threading.Thread(target=tick, daemon=True)
        thread.start()
        for _ in range(count):
            await ticks.get()
            written.append(time.perf_counter_ns())
            await self.produce.write(self.message())
        await reading
        thread.join()
        pushes = [((await self.pushed.get()) - at) / 1e3 for at in written]
        return {"ack": acks, "push": pushes}

    async def close(self) -> None:
        await self.produce.done_writing()
        self.consume.cancel()
        await asyncio.gather(self.reader, return_exceptions=True)
        await self.channel.close()


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


async def measure(services: dict[str, Service], rounds: int, count: int) -> dict[str, dict[str, list[float]]]:
    connections = {name: Connection(service.address) for name, service in services.items()}
    for connection in connections.values():
        await connection.open()
        await connection.ping(100)  # warm
    figures: dict[str, dict[str, list[float]]] = {name: {} for name in services}
    names = list(services)
    loads = []
    for index in range(rounds):
        order = names if index % 2 == 0 else names[::-1]
        loads.append(os.getloadavg()[0])
        for name in order:
            for way in ("ping", "paced"):
                samples = await getattr(connections[name], way)(count)
                for kind, values in samples.items():
                    figures[name].setdefault(f"{way} {kind} p50", []).append(statistics.median(values))
                    figures[name].setdefault(f"{way} {kind} p90", []).append(_percentile(values, 0.9))
    for connection in connections.values():
        await connection.close()
    print(f"{rounds} rounds of {count} messages a way, load {min(loads):.1f}-{max(loads):.1f}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", default=[], help="NAME=DIR: a checkout whose server/ to run")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--count", type=int, default=500)
    arguments = parser.parse_args()
    trees = {"this checkout": None}
    for item in arguments.tree:
        name, _, path = item.partition("=")
        trees[name] = path
    import uvloop

    services = {}
    try:
        for name, tree in trees.items():
            services[name] = _service(pathlib.Path(tempfile.mkdtemp(prefix="turns-")), tree)
        figures = uvloop.run(measure(services, arguments.rounds, arguments.count))
    finally:
        for service in services.values():
            service.stop()
    first = next(iter(figures))
    for key in figures[first]:
        base = statistics.median(figures[first][key])
        line = f"  {key:16s}" + "".join(
            f"  {name} {statistics.median(values[key]):7.0f} us ({statistics.median(values[key]) / base:.2f}x)"
            for name, values in figures.items())
        print(line)


if __name__ == "__main__":
    main()
