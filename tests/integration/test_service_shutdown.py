"""SIGTERM under load: in-flight calls finish within the grace, anything cut is UNAVAILABLE
(retriable), never CANCELLED, and every acknowledged record is there after the restart."""

from __future__ import annotations

import asyncio
import signal

import grpc
from tests.support.integration_helpers import make_batch, records_of

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

PRODUCERS = 30
RETRIABLE = {grpc.StatusCode.UNAVAILABLE}


async def _producer(stub, index: int, acked: list, errors: list, started: asyncio.Event) -> None:
    acks = pb.ACKS_FSYNCED if index % 3 == 0 else pb.ACKS_WRITTEN
    sequence = 0
    while True:
        value = b"p%02d-%06d" % (index, sequence)
        try:
            response = await stub.Produce(pb.ProduceRequest(
                topic="load", partition=index % 3, records=make_batch([value]), acks=acks))
        except grpc.aio.AioRpcError as error:
            errors.append((index, error.code(), error.details()))
            return
        acked.append((index % 3, response.base_offset, value))
        sequence += 1
        if sequence == 5:
            started.set()


async def _long_poll(stub, outcomes: list) -> None:
    try:
        response = await stub.Fetch(pb.FetchRequest(topic="quiet", offset=0, max_wait_ms=60_000))
        outcomes.append(("answered", response.next_offset))
    except grpc.aio.AioRpcError as error:
        outcomes.append((error.code(), error.details()))


async def _stream(stub, outcomes: list) -> None:
    try:
        async for _ in stub.Consume(pb.ConsumeRequest(topic="quiet",
                                                      position=pb.START_POSITION_LATEST)):
            pass
        outcomes.append(("ended", None))
    except grpc.aio.AioRpcError as error:
        outcomes.append((error.code(), error.details()))


async def test_sigterm_under_thirty_producers_cancels_nothing_and_loses_nothing(start_service):
    service = start_service(["--shutdown-grace-ms", "5000"])
    acked: list = []
    errors: list = []
    waits: list = []
    async with grpc.aio.insecure_channel(service.address) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        await stub.CreateTopic(pb.CreateTopicRequest(topic="load", partitions=3))
        await stub.CreateTopic(pb.CreateTopicRequest(topic="quiet", partitions=1))
        started = [asyncio.Event() for _ in range(PRODUCERS)]
        tasks = [asyncio.ensure_future(_producer(stub, i, acked, errors, started[i]))
                 for i in range(PRODUCERS)]
        tasks += [asyncio.ensure_future(_long_poll(stub, waits)) for _ in range(5)]
        tasks += [asyncio.ensure_future(_stream(stub, waits)) for _ in range(5)]
        for event in started:
            await asyncio.wait_for(event.wait(), 60)
        service.signal(signal.SIGTERM)
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    assert await asyncio.to_thread(service.wait) == 0, service.log()

    assert len(errors) == PRODUCERS  # each producer ran until the service stopped
    codes = {code for _, code, _ in errors}
    assert codes <= RETRIABLE, "\n".join(map(str, errors)) + service.log()
    assert all(code in RETRIABLE or code == "answered" for code, _ in waits), waits
    assert len(waits) == 10

    restarted = start_service(data_dirs=service.data_dirs, workdir=service.workdir)
    for partition in range(3):
        stored = {}
        offset = 0
        while True:
            records = records_of(restarted.stub.Fetch(pb.FetchRequest(
                topic="load", partition=partition, offset=offset)))
            if not records:
                break
            stored.update((r.offset, r.value) for r in records)
            offset = records[-1].offset + 1
        mine = [(o, v) for p, o, v in acked if p == partition]
        assert all(stored.get(o) == v for o, v in mine), "an acknowledged record is missing"
        assert sorted(stored) == list(range(len(stored)))  # no gaps, no reused offsets
    assert restarted.stop() == 0
