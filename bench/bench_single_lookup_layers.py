"""The Python layers of a single time lookup on each side, in process, warm (no gRPC):

    service  ``LookupRpcs.offsets_for_times`` of one target (LookupStream's call, the stream's own
             layers left out) on a log of 50,000 records in 4,000-record batches whose time-step
             tables the appends fed, the service's metrics observer installed;
    stream   the service's ``LookupStream`` handler fed one such target a message by an in-memory
             stream context (the stream's layers, admission and metrics included, grpc left
             out), beside the floor's echo handler (bench/peers/floor.py) on the same context;
    client   ``AsyncAdmin.offsets_for_times`` of one partition above a LookupStream whose ``ask``
             answers at once (a canned answer): the admin, router and transport layers.

Prints the wall time a lookup in us for each (the median of 7 rounds). ``--calls`` adds the
Python function calls a lookup makes (cProfile's count, builtins included, one more round
profiled): the same on any machine whatever its load, so a change to a path can be weighed
where its wall time is lost in the noise.

    PYTHONPATH=client:server:. .venv/bin/python bench/bench_single_lookup_layers.py [--side service|client] [--calls]

``--in-memory`` measures the storage's part alone, in one process: ``lookup_timestamp_inline``
on the same log with its in-memory step (``timestamp_lookups.lookup_one_in_memory``: the
time-step table's answer without the bounded search's layers) and with that step switched off
(every lookup through ``lookup_one_bounded``), alternately, 15 rounds of 5,000 lookups: one
process, so the machine's load moves both alike.

For an A/B between checkouts run it in each tree (``PYTHONPATH=TREE/client:TREE/server:TREE``)
alternately, and compare each pair."""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

FIRST_MS = 1_700_000_000_000
LOOKUPS = 2000
ROUNDS = 7


class _StreamContext:
    """What a stream handler touches of grpc.aio's ServicerContext, in memory: ``read`` hands
    out the requests given, then EOF; ``write`` keeps nothing."""

    def __init__(self, requests: list[Any]) -> None:
        self._requests = iter(requests)

    def invocation_metadata(self) -> tuple[()]:
        return ()

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    def set_trailing_metadata(self, metadata: Any) -> None:
        pass

    async def send_initial_metadata(self, metadata: Any) -> None:
        pass

    async def read(self) -> Any:
        import grpc

        return next(self._requests, grpc.aio.EOF)

    async def write(self, message: Any) -> None:
        pass


async def _echo(context: Any) -> None:
    """The floor's handler on a stream context: one answer a message."""
    import grpc

    from seglog.v1 import log_service_pb2 as pb

    while True:
        request = await context.read()
        if request is grpc.aio.EOF:
            return
        await context.write(pb.LookupStreamResponse(correlation_id=request.correlation_id))


async def _measured(run: Callable[[], Awaitable[Any]], count: int, calls: bool) -> tuple[float, float | None]:
    """The median wall time a lookup of ``run()`` (``count`` lookups) over the rounds, in us,
    and with ``calls`` the Python function calls a lookup (one more round, profiled)."""
    rounds = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        await run()
        rounds.append((time.perf_counter() - started) / count * 1e6)
    counted = None
    if calls:
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            await run()
        finally:
            profiler.disable()
        counted = pstats.Stats(profiler).total_calls / count
    return statistics.median(rounds), counted


def _filled_log(directory: str):
    """A started LogManager over ``directory`` whose topic t's partition 0 holds 48,000 records
    (100-byte values, 16-byte keys, timestamps FIRST_MS on, a millisecond apart) in batches of
    4,000: the manager and that log."""
    from seglog import records as codec
    from seglog_server.storage.manager.log_manager import LogManager

    manager = LogManager([directory])
    manager.startup()
    manager.create_topic("t", 1)
    log = manager.get_log("t", 0)
    for first in range(0, 48_000, 4000):
        builder = codec.RecordBatchBuilder()
        for number in range(4000):
            builder.append(b"v" * 100, key=b"k" * 16, timestamp_ms=FIRST_MS + first + number)
        log.append(builder.build())
    return manager, log


async def _service(calls: bool) -> dict[str, tuple[float, float | None]]:
    from seglog.v1 import log_service_pb2 as pb
    from seglog_server.metrics.instruments import MetricsObserver
    from seglog_server.storage.base.observer import install_observer
    from tests.support.servicer_support import servicer_over

    with tempfile.TemporaryDirectory() as directory:
        manager, log = _filled_log(directory)
        service, storage_calls = servicer_over(manager)
        previous = install_observer(MetricsObserver())
        try:
            draw = random.Random(1)
            messages = []
            for number in range(LOOKUPS):
                message = pb.LookupStreamRequest(correlation_id=number + 1)
                target = message.offsets_for_times.partitions.add()
                target.topic, target.partition, target.timestamp_ms = "t", 0, FIRST_MS + draw.randrange(48_000)
                messages.append(message)
            requests = [message.offsets_for_times for message in messages]
            lookup = service.lookups.offsets_for_times
            for request in requests[:200]:  # the first lookup checks the segments (pooled)
                await lookup(request, pb.OffsetsForTimesResponse())

            async def lookups() -> None:
                for request in requests:
                    await lookup(request, pb.OffsetsForTimesResponse())

            return {
                "service": await _measured(lookups, len(requests), calls),
                "stream": await _measured(lambda: service.LookupStream(None, _StreamContext(messages)),
                                          len(messages), calls),
                "echo": await _measured(lambda: _echo(_StreamContext(messages)), len(messages), calls),
            }
        finally:
            install_observer(previous)
            storage_calls.shutdown()
            manager.shutdown()


async def _client(calls: bool) -> tuple[float, float | None]:
    from seglog import AsyncAdmin, TopicPartition
    from seglog._streams import RequestStream
    from seglog.v1 import log_service_pb2 as pb

    answer = pb.OffsetsForTimesResponse()
    result = answer.results.add()
    result.topic, result.partition, result.offset, result.timestamp_ms = "t", 0, 123, FIRST_MS + 123

    async def ask(self: RequestStream, message: object, timeout_s: float | None = None) -> object:
        return answer

    RequestStream.ask = ask  # type: ignore[method-assign]  # the stream answers at once
    admin = AsyncAdmin("127.0.0.1:9")  # never connected: the stream is stubbed
    await admin.start()
    admin._transport.choosing = False
    tp = TopicPartition("t", 0)
    for number in range(1000):
        await admin.offsets_for_times({tp: FIRST_MS + number})

    async def lookups() -> None:
        for number in range(10 * LOOKUPS):
            await admin.offsets_for_times({tp: FIRST_MS + number})

    return await _measured(lookups, 10 * LOOKUPS, calls)


def _in_memory_ab() -> None:
    """``--in-memory``: the storage call of a single lookup with and without its in-memory step."""
    from seglog_server.metrics.instruments import MetricsObserver
    from seglog_server.storage.base.observer import install_observer
    from seglog_server.storage.log import log_time_lookups

    with tempfile.TemporaryDirectory() as directory:
        manager, log = _filled_log(directory)
        previous = install_observer(MetricsObserver())
        in_memory = log_time_lookups.lookup_one_in_memory
        try:
            log.lookup_timestamps([-3])  # the segments' first-use checks
            draw = random.Random(1)
            targets = [FIRST_MS + draw.randrange(48_000) for _ in range(5000)]
            ways = {"in_memory": in_memory, "bounded": lambda *arguments: None}
            rounds: dict[str, list[float]] = {name: [] for name in ways}
            for number in range(15):
                for name in sorted(ways, reverse=bool(number % 2)):
                    log_time_lookups.lookup_one_in_memory = ways[name]
                    inline = log.lookup_timestamp_inline
                    started = time.perf_counter()
                    for target in targets:
                        inline(target, 1 << 20)
                    rounds[name].append((time.perf_counter() - started) / len(targets) * 1e6)
        finally:
            log_time_lookups.lookup_one_in_memory = in_memory
            install_observer(previous)
            manager.shutdown()
    for name, figures in rounds.items():
        print(f"storage, {name}: {statistics.median(figures):.2f} us a lookup (median of {len(figures)} rounds)")
    print(f"in_memory / bounded: {statistics.median(rounds['in_memory']) / statistics.median(rounds['bounded']):.3f}")


def _line(name: str, figures: tuple[float, float | None]) -> str:
    wall_us, calls = figures
    return f"{name}: {wall_us:.2f} us a lookup" + ("" if calls is None else f", {calls:.1f} Python calls a lookup")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=["service", "client", "both"], default="both")
    parser.add_argument("--calls", action="store_true", help="also count the Python function calls a lookup")
    parser.add_argument("--in-memory", action="store_true",
                        help="only the storage call, with and without its in-memory step, alternately")
    arguments = parser.parse_args()
    if arguments.in_memory:
        _in_memory_ab()
        return
    if arguments.side in ("service", "both"):
        for name, figures in asyncio.run(_service(arguments.calls)).items():
            print(_line(name, figures))
    if arguments.side in ("client", "both"):
        print(_line("client", asyncio.run(_client(arguments.calls))))


if __name__ == "__main__":
    main()
