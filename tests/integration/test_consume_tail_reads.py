"""A Consume stream keeping up with its partition reads each record once: after a push that
reached the high watermark it parks on the partition's next append at once, without a read that
would come back empty (a storage read, a consume-buffer reservation and a stopwatch less per
record on the service's loop), and the append that wakes it hands it the batch just written, so
it does not read the log at all. Two records appended back to back both reach it, in order. Real
service on loopback, in this process."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from tests.support.in_process_service import HANG_S, consume_parked_at_the_tail, in_process_service, until
from tests.support.integration_helpers import records_of

from seglog.records import RecordBatchBuilder
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.rpc import fetch_rpcs

pytestmark = pytest.mark.integration


@pytest.fixture
async def served(tmp_path, monkeypatch):
    """The service, and the offsets its Consume streams read at: the log's (``reads``), and
    those served from the batch whose append woke the stream (``reads.appended``)."""
    reads = _Reads()
    read = fetch_rpcs.FetchRpcs._read
    read_appended = fetch_rpcs.FetchRpcs._read_appended

    async def counted(self, topic, partition, offset, max_bytes):
        reads.append(offset)
        return await read(self, topic, partition, offset, max_bytes)

    def counted_appended(self, log, appended, offset):
        data = read_appended(self, log, appended, offset)
        if data is not None:
            reads.appended.append(offset)
        return data

    monkeypatch.setattr(fetch_rpcs.FetchRpcs, "_read", counted)
    monkeypatch.setattr(fetch_rpcs.FetchRpcs, "_read_appended", counted_appended)
    async with in_process_service(tmp_path) as (service, address):
        yield service, address, reads


class _Reads(list):
    def __init__(self) -> None:
        super().__init__()
        self.appended: list[int] = []


def _message(correlation_id: int, value: bytes) -> pb.ProduceStreamRequest:
    builder = RecordBatchBuilder()
    builder.append(value)
    return pb.ProduceStreamRequest(
        correlation_id=correlation_id, produce=pb.ProduceRequest(topic="tail", partition=0, records=builder.build()))


async def test_a_stream_at_the_tail_reads_once_a_record_and_parks_without_an_empty_read(served):
    service, address, reads = served
    statistics = service.servicer.statistics
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        await stub.CreateTopic(pb.CreateTopicRequest(topic="tail", partitions=1))
        consume = await consume_parked_at_the_tail(stub, service, "tail")
        produce = stub.ProduceStream()
        await produce.initial_metadata()
        for index in range(5):
            await produce.write(_message(index, b"record %d" % index))
            answer = await asyncio.wait_for(produce.read(), HANG_S)
            pushed = await asyncio.wait_for(consume.read(), HANG_S)
            assert answer.produce.base_offset == index
            assert [record.offset for record in records_of(pushed)] == [index]
            await until(lambda: statistics().waiters.waiting_count == 1)  # parked again
        # Each record's own read, from the append that woke the stream; none at the tail.
        assert (reads, reads.appended) == ([], [0, 1, 2, 3, 4])

        # Two records appended back to back (the second written before the first's answer) both
        # reach the stream, in order: a plain check of the behaviour. It does not test the order
        # of taking the wake-up ticket and looking at the high watermark: both run on the
        # service's loop with no await between, as the append's notify does, so no append can
        # land between them whatever that order.
        await produce.write(_message(5, b"five"))
        await produce.write(_message(6, b"six"))
        offsets: list[int] = []
        while len(offsets) < 2:
            offsets += [record.offset for record in records_of(await asyncio.wait_for(consume.read(), HANG_S))]
        assert offsets == [5, 6]
        await produce.done_writing()
        consume.cancel()
