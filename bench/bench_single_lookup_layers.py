"""The Python layers of a single time lookup on each side, in process, warm (no gRPC):

    service  ``LookupRpcs.offsets_for_times`` of one target (LookupStream's call, the stream's own
             layers left out) on a log of 50,000 records in 4,000-record batches whose time-step
             tables the appends fed, the service's metrics observer installed;
    client   ``AsyncAdmin.offsets_for_times`` of one partition above a LookupStream whose ``ask``
             answers at once (a canned answer): the admin, router and transport layers.

Prints the wall time a lookup in us for each (the median of 7 rounds).

    PYTHONPATH=client:server:. .venv/bin/python bench/bench_single_lookup_layers.py [--side service|client]

For an A/B between checkouts run it in each tree (``PYTHONPATH=TREE/client:TREE/server:TREE``)
alternately, and compare each pair."""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time

FIRST_MS = 1_700_000_000_000
LOOKUPS = 2000
ROUNDS = 7


async def _service() -> float:
    from seglog import records as codec
    from seglog.v1 import log_service_pb2 as pb
    from seglog_server.metrics.instruments import MetricsObserver
    from seglog_server.storage.base.observer import install_observer
    from seglog_server.storage.manager.log_manager import LogManager
    from tests.support.servicer_support import servicer_over

    with tempfile.TemporaryDirectory() as directory:
        manager = LogManager([directory])
        manager.startup()
        manager.create_topic("t", 1)
        log = manager.get_log("t", 0)
        for first in range(0, 48_000, 4000):
            builder = codec.RecordBatchBuilder()
            for number in range(4000):
                builder.append(b"v" * 100, key=b"k" * 16, timestamp_ms=FIRST_MS + first + number)
            log.append(builder.build())
        service, calls = servicer_over(manager)
        previous = install_observer(MetricsObserver())
        try:
            draw = random.Random(1)
            requests = []
            for _ in range(LOOKUPS):
                request = pb.OffsetsForTimesRequest()
                target = request.partitions.add()
                target.topic, target.partition, target.timestamp_ms = "t", 0, FIRST_MS + draw.randrange(48_000)
                requests.append(request)
            lookup = service.lookups.offsets_for_times
            for request in requests[:200]:  # the first lookup checks the segments (pooled)
                await lookup(request, pb.OffsetsForTimesResponse())
            rounds = []
            for _ in range(ROUNDS):
                started = time.perf_counter()
                for request in requests:
                    await lookup(request, pb.OffsetsForTimesResponse())
                rounds.append((time.perf_counter() - started) / len(requests) * 1e6)
            return statistics.median(rounds)
        finally:
            install_observer(previous)
            calls.shutdown()
            manager.shutdown()


async def _client() -> float:
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
    rounds = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for number in range(10 * LOOKUPS):
            await admin.offsets_for_times({tp: FIRST_MS + number})
        rounds.append((time.perf_counter() - started) / (10 * LOOKUPS) * 1e6)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=["service", "client", "both"], default="both")
    arguments = parser.parse_args()
    if arguments.side in ("service", "both"):
        print(f"service: {asyncio.run(_service()):.2f} us a lookup")
    if arguments.side in ("client", "both"):
        print(f"client: {asyncio.run(_client()):.2f} us a lookup")


if __name__ == "__main__":
    main()
