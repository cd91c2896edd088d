"""A burst of concurrent calls beyond gRPC core's own queue of calls not yet taken up (1,000,
hard limit 3,000 by default) reaches the service's admission, against a real service process:
every call is answered OK or a retriable RESOURCE_EXHAUSTED naming the limit, with the
``seglog-error`` trailer, never CANCELLED by gRPC core without one (app.py's pending-request
options)."""

from __future__ import annotations

import asyncio
import collections
import time
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.integration_helpers import make_batch

from seglog.errors import ServiceOverloadedError, error_from_rpc
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

BURST = 3000
WAITERS_MAX = 2000
# Far longer than a burst takes to arrive, even on a loaded machine (a 3 s wait let the first
# waiters time out and free slots for later requests): the waiters are woken by an append instead.
LONG_POLL_WAIT_MS = 300_000  # the service's default fetch_wait_ms_max
# How long the burst may take to be all refused or waiting: generous, it is a bound, not a speed.
SETTLED_TIMEOUT_S = 240.0


async def _outcome(call) -> object:
    try:
        return await call
    except grpc.aio.AioRpcError as error:
        return error


def _codes(outcomes) -> collections.Counter:
    return collections.Counter("OK" if not isinstance(o, grpc.aio.AioRpcError) else o.code().name
                               for o in outcomes)


@pytest.mark.slow
async def test_a_burst_of_produces_is_answered_by_the_service_never_cancelled(start_service):
    service = start_service()
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="burst", partitions=1))
    batch = make_batch([b"x" * 100])
    async with grpc.aio.insecure_channel(service.address) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        outcomes = await asyncio.gather(*(_outcome(stub.Produce(
            pb.ProduceRequest(topic="burst", records=batch), timeout=60)) for _ in range(BURST)))
    codes = _codes(outcomes)
    assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED"}, codes
    for refused in (o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)):
        assert dict(refused.trailing_metadata())["seglog-error"] == "OverloadedError"
    fetched = service.stub.Fetch(pb.FetchRequest(topic="burst", offset=0, max_bytes=1))
    assert fetched.high_watermark == codes["OK"]


async def _waiting(metrics_address: str) -> int:
    """The service's seglog_fetch_waiters gauge: long polls parked waiting for an append now."""
    def scrape() -> int:
        with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10) as response:
            text = response.read().decode()
        (value,) = [sample.value for family in text_string_to_metric_families(text)
                    for sample in family.samples if sample.name == "seglog_fetch_waiters"]
        return int(value)
    return await asyncio.to_thread(scrape)


async def _until_settled(calls: list[asyncio.Task], metrics_address: str) -> None:
    """Until every call is answered (refused) or parked waiting, bounded by SETTLED_TIMEOUT_S."""
    deadline = time.monotonic() + SETTLED_TIMEOUT_S
    while True:
        answered = sum(call.done() for call in calls)
        waiting = await _waiting(metrics_address)
        if answered + waiting == len(calls):
            return
        assert time.monotonic() < deadline, f"not settled: {answered} answered, {waiting} waiting of {len(calls)}"
        await asyncio.sleep(0.2)


@pytest.mark.slow
async def test_a_burst_of_long_polls_past_the_waiter_limit_is_refused_retriably(start_service):
    service = start_service(["--long-poll-waiters-max", str(WAITERS_MAX),
                             "--long-poll-waiters-per-client-max", str(WAITERS_MAX)])
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="quiet", partitions=1))
    async with grpc.aio.insecure_channel(service.address) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        calls = [asyncio.ensure_future(_outcome(stub.Fetch(
            pb.FetchRequest(topic="quiet", offset=0, max_wait_ms=LONG_POLL_WAIT_MS),
            timeout=2 * LONG_POLL_WAIT_MS / 1000)))
            for _ in range(BURST)]
        try:
            await _until_settled(calls, service.metrics_address)
            assert not any(isinstance(call.result(), pb.FetchResponse) for call in calls if call.done())
            service.stub.Produce(pb.ProduceRequest(topic="quiet", records=make_batch([b"wake"])), timeout=10)
            outcomes = await asyncio.gather(*calls)
        finally:
            for call in calls:
                call.cancel()
    codes = _codes(outcomes)
    assert codes == {"OK": WAITERS_MAX, "RESOURCE_EXHAUSTED": BURST - WAITERS_MAX}, codes
    for answered in (o for o in outcomes if not isinstance(o, grpc.aio.AioRpcError)):
        assert answered.high_watermark == 1 and answered.records, answered  # woken by the append
    for refused in (o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)):
        assert dict(refused.trailing_metadata())["seglog-error"] == "OverloadedError"
        assert f"long_poll_waiters_max={WAITERS_MAX}" in refused.details()
        error = error_from_rpc(refused)
        assert isinstance(error, ServiceOverloadedError) and error.retriable
