"""A burst of concurrent calls beyond gRPC core's own queue of calls not yet taken up (1,000,
hard limit 3,000 by default) reaches the service's admission, against a real service process:
every call is answered OK or a retriable RESOURCE_EXHAUSTED naming the limit, with the
``seglog-error`` trailer, never CANCELLED by gRPC core without one (app.py's pending-request
options)."""

from __future__ import annotations

import asyncio
import collections

import grpc
import pytest
from tests.support.integration_helpers import make_batch

from seglog.errors import ServiceOverloadedError, error_from_rpc
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

BURST = 3000
WAITERS_MAX = 2000


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


@pytest.mark.slow
async def test_a_burst_of_long_polls_past_the_waiter_limit_is_refused_retriably(start_service):
    service = start_service(["--long-poll-waiters-max", str(WAITERS_MAX),
                             "--long-poll-waiters-per-client-max", str(WAITERS_MAX)])
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="quiet", partitions=1))
    async with grpc.aio.insecure_channel(service.address) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        outcomes = await asyncio.gather(*(_outcome(stub.Fetch(
            pb.FetchRequest(topic="quiet", offset=0, max_wait_ms=3000), timeout=60))
            for _ in range(BURST)))
    codes = _codes(outcomes)
    assert codes == {"OK": WAITERS_MAX, "RESOURCE_EXHAUSTED": BURST - WAITERS_MAX}, codes
    for refused in (o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)):
        assert dict(refused.trailing_metadata())["seglog-error"] == "OverloadedError"
        assert f"long_poll_waiters_max={WAITERS_MAX}" in refused.details()
        error = error_from_rpc(refused)
        assert isinstance(error, ServiceOverloadedError) and error.retriable
