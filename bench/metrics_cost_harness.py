"""The service's handler path in one process, with metrics on or off: for bench_metrics_cost.py.

A real LogManager on a temporary directory, the service's LogServicer (boundary, admission, call
gate, conversions, StorageCalls inline), driven on one event loop without the gRPC transport:
the transport's cost is the same with metrics on and off, and leaving it out leaves the
difference to measure against the rest of the request's work. "On" is what the service does with
``--metrics-listen``: the metrics observer installed in the storage and the servicer's metrics
hook set; "off" is ``--metrics-listen none``: neither.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from typing import Any

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog_server.metrics import Metrics
from seglog_server.rpc.log_service import LogServicer, LogServicerLimits
from seglog_server.rpc.storage_calls import StorageCalls
from seglog_server.storage import LogManager, install_observer

# Records in the "behind" partition: the behind fetch starts 60 % of the way in, in the cold zone
# of the offset index (one index entry per batch).
BEHIND_RECORDS = 20_000
BEHIND_BATCH_RECORDS = 20
# The "lookups" partition, laid out as bench_streams.py lays out its lookup topic: 1,000 records
# of 100-byte values in batches of 10, a millisecond apart, the default index interval.
LOOKUP_RECORDS = 1_000
LOOKUP_BATCH_RECORDS = 10
LOOKUP_BASE_MS = 1_700_000_000_000


class _Context:
    """What the handler path asks of a grpc.aio ServicerContext on a successful call."""

    def invocation_metadata(self) -> tuple[()]:
        return ()

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    def auth_context(self) -> dict[str, Any]:
        return {}

    def set_trailing_metadata(self, metadata: Any) -> None:
        pass

    async def abort(self, code: Any, message: str, trailing_metadata: Any = ()) -> None:
        raise RuntimeError(f"the benchmark's call failed: {code} {message}")


def _batch(count: int, value_bytes: int = 100) -> bytes:
    builder = codec.RecordBatchBuilder()
    for _ in range(count):
        builder.append(b"v" * value_bytes, key=b"k" * 16)
    return builder.build()


class Harness:
    WORKLOADS = ("produce small", "fetch tail", "fetch behind", "time lookup")

    def __init__(self) -> None:
        self._directory = tempfile.TemporaryDirectory(prefix="seglog-bench-metrics-cost-")
        self.manager = LogManager([self._directory.name])
        self.manager.startup()
        self.metrics = Metrics()
        self.metrics.manager = self.manager
        # Every call inline on the loop, as small produce and fetch calls run in the service.
        self._calls = StorageCalls(thread_count=1, inline_io_bytes_max=1 << 20)
        limits = LogServicerLimits(fetch_bytes_max=1 << 20, fetch_wait_ms_max=30_000,
                                   response_bytes_max=4 << 20, message_bytes_max=4 << 20)
        self.servicer = LogServicer(self.manager, self._calls, limits)
        self.metrics.servicer = self.servicer
        self.loop = asyncio.new_event_loop()
        self._context = _Context()
        for topic in ("small", "behind"):
            self.manager.create_topic(topic, 1, {"index.interval.bytes": "1"})
        behind = self.manager.get_log("behind", 0)
        for _ in range(BEHIND_RECORDS // BEHIND_BATCH_RECORDS):
            behind.append(_batch(BEHIND_BATCH_RECORDS))
        self.manager.create_topic("lookups", 1, {})
        lookups = self.manager.get_log("lookups", 0)
        for first in range(0, LOOKUP_RECORDS, LOOKUP_BATCH_RECORDS):
            builder = codec.RecordBatchBuilder()
            for number in range(first, first + LOOKUP_BATCH_RECORDS):
                builder.append(b"v" * 100, key=b"k%d" % number, timestamp_ms=LOOKUP_BASE_MS + number)
            lookups.append(builder.build())
        self._lookup = pb.OffsetsForTimesRequest(partitions=[pb.PartitionTimestamp(topic="lookups")])
        self._lookup_number = 0
        self._produce = pb.ProduceRequest(topic="small", records=_batch(1))
        self.run("produce small", 10)
        self._fetch_tail = pb.FetchRequest(topic="small", offset=0, max_bytes=1)
        self._fetch_behind = pb.FetchRequest(topic="behind", offset=BEHIND_RECORDS * 6 // 10, max_bytes=64 << 10)

    def set_metrics(self, on: bool) -> None:
        install_observer(self.metrics.observer if on else None)
        self.servicer.metrics = self.metrics if on else None

    def workloads(self) -> dict[str, Callable[[], Any]]:
        servicer, context = self.servicer, self._context

        def fetch_tail() -> Any:
            self._fetch_tail.offset = self.manager.get_log("small", 0).log_end_offset - 1
            return servicer.Fetch(self._fetch_tail, context)

        def time_lookup() -> Any:
            # One target a call, spread over the partition as bench_streams.py spreads them.
            self._lookup_number += 1
            target = self._lookup.partitions[0]
            target.timestamp_ms = LOOKUP_BASE_MS + (self._lookup_number * 7919) % LOOKUP_RECORDS
            return servicer.OffsetsForTimes(self._lookup, context)

        return {
            "produce small": lambda: servicer.Produce(self._produce, context),
            "fetch tail": fetch_tail,
            "fetch behind": lambda: servicer.Fetch(self._fetch_behind, context),
            "time lookup": time_lookup,
        }

    def run(self, workload: str, count: int) -> None:
        make_call = self.workloads()[workload]

        async def calls() -> None:
            for _ in range(count):
                await make_call()

        self.loop.run_until_complete(calls())

    def close(self) -> None:
        install_observer(None)
        self.loop.close()
        self._calls.shutdown()
        self.manager.shutdown()
        self._directory.cleanup()
