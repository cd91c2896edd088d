"""A record appended on the ProduceStream reaches the Consume streams parked at its partition's
tail before its producer's acknowledgement is written: the append wakes them, and the stream
gives them the loop for one turn first, so the push does not wait behind the answer's write.
With nobody parked, the answer goes at once. The order is observed at the two writes' entries in
a real service on loopback (in this process, so both are seen on one event loop)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from tests.support.in_process_service import HANG_S, consume_parked_at_the_tail, in_process_service
from tests.support.integration_helpers import records_of

from seglog.records import RecordBatchBuilder
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.rpc import fetch_rpcs, streams

pytestmark = pytest.mark.integration


@pytest.fixture
async def served(tmp_path, monkeypatch):
    """The service, and the order in which Consume pushes and ProduceStream answers started."""
    order: list[str] = []
    send_chunk = fetch_rpcs.FetchRpcs._send_chunk
    send_reply = streams.OrderedReplies.send

    async def pushed(self, *args, **kwargs):
        order.append("push")
        return await send_chunk(self, *args, **kwargs)

    async def answered(self, reply):
        order.append("ack")
        return await send_reply(self, reply)

    monkeypatch.setattr(fetch_rpcs.FetchRpcs, "_send_chunk", pushed)
    monkeypatch.setattr(streams.OrderedReplies, "send", answered)
    async with in_process_service(tmp_path) as (service, address):
        yield service, address, order


def _message(correlation_id: int, topic: str, value: bytes) -> pb.ProduceStreamRequest:
    builder = RecordBatchBuilder()
    builder.append(value)
    return pb.ProduceStreamRequest(
        correlation_id=correlation_id, produce=pb.ProduceRequest(topic=topic, partition=0, records=builder.build()))


async def test_a_stream_parked_at_the_tail_starts_its_push_before_the_producer_is_answered(served):
    service, address, order = served
    waiters = service.servicer.core.waiters
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        for topic in ("watched", "unwatched"):
            await stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1))
        consume = await consume_parked_at_the_tail(stub, service, "watched")
        produce = stub.ProduceStream()
        await produce.initial_metadata()

        await produce.write(_message(1, "unwatched", b"nobody waits"))
        answer = await asyncio.wait_for(produce.read(), HANG_S)
        assert (answer.correlation_id, answer.produce.base_offset, order) == (1, 0, ["ack"])

        woken = waiters.woken_count
        await produce.write(_message(2, "watched", b"pushed first"))
        answer = await asyncio.wait_for(produce.read(), HANG_S)
        pushed = await asyncio.wait_for(consume.read(), HANG_S)
        assert (answer.correlation_id, answer.produce.base_offset) == (2, 0)
        assert [record.value for record in records_of(pushed)] == [b"pushed first"]
        assert order == ["ack", "push", "ack"]
        assert waiters.woken_count == woken + 1
        await produce.done_writing()
        consume.cancel()
