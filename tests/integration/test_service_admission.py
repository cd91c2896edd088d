"""Idle long polls and streams never lock other callers out (rpc/admission.py), against a real
service process: waiting Fetches and open Consume streams hold their own named limits, not the
request budget, and past those limits the answer is a clear, retriable RESOURCE_EXHAUSTED."""

from __future__ import annotations

import asyncio

import grpc
import psutil
from tests.support.integration_helpers import make_batch

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

WAITERS = 800
STREAMS = 200
EXTRA_FETCHES = 25
EXTRA_STREAMS = 5
REQUEST_MAX = 20  # far below the 1,000 idle calls: before admission, these locked everyone out

LIMITS = [
    "--rpc-concurrency-max", str(REQUEST_MAX),
    "--long-poll-waiters-max", str(WAITERS), "--long-poll-waiters-per-client-max", str(WAITERS),
    "--consume-streams-max", str(STREAMS), "--consume-streams-per-client-max", str(STREAMS),
]


def _rss_mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / (1 << 20)


async def _outcome(call) -> object:
    try:
        return await call
    except grpc.aio.AioRpcError as error:
        return error


async def _stream_outcome(stream) -> object:
    try:
        async for response in stream:
            return response
    except grpc.aio.AioRpcError as error:
        return error
    return None


async def test_a_thousand_idle_long_polls_and_streams_leave_produce_and_admin_served(start_service):
    service = start_service(LIMITS)
    rss_before = _rss_mib(service.process.pid)
    async with grpc.aio.insecure_channel(service.address) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        await stub.CreateTopic(pb.CreateTopicRequest(topic="idle", partitions=1))
        await stub.CreateTopic(pb.CreateTopicRequest(topic="busy", partitions=1))
        streams = [stub.Consume(pb.ConsumeRequest(topic="idle", position=pb.START_POSITION_LATEST))
                   for _ in range(STREAMS + EXTRA_STREAMS)]
        stream_tasks = [asyncio.ensure_future(_stream_outcome(s)) for s in streams]
        fetches = [asyncio.ensure_future(_outcome(stub.Fetch(
            pb.FetchRequest(topic="idle", offset=0, max_wait_ms=120_000))))
            for _ in range(WAITERS + EXTRA_FETCHES)]
        # Exactly the calls above the limits are refused, whichever they are: the others wait.
        refused_fetches = await _wait_refusals(fetches, EXTRA_FETCHES)
        refused_streams = await _wait_refusals(stream_tasks, EXTRA_STREAMS)
        for error in refused_fetches:
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "long_poll_waiters_max=800" in error.details(), error.details()
            assert dict(error.trailing_metadata())["seglog-error"] == "OverloadedError"
        for error in refused_streams:
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "consume_streams_max=200" in error.details(), error.details()
        rss_waiting = _rss_mib(service.process.pid)

        # With 1,000 calls parked, work goes on: each of these is a request of its own.
        for i in range(3 * REQUEST_MAX):
            response = await stub.Produce(pb.ProduceRequest(topic="busy", records=make_batch([b"x"])))
            assert response.base_offset == i
        listed = await stub.ListTopics(pb.ListTopicsRequest())
        assert {t.topic for t in listed.topics} >= {"idle", "busy"}
        assert sum(not f.done() for f in fetches) == WAITERS
        assert sum(not t.done() for t in stream_tasks) == STREAMS

        # One append wakes every waiter and every stream with the record.
        await stub.Produce(pb.ProduceRequest(topic="idle", records=make_batch([b"wake"])))
        answered = [f.result() for f in await _all(fetches)]
        woken = [a for a in answered if isinstance(a, pb.FetchResponse)]
        assert len(woken) == WAITERS
        assert all(r.next_offset == 1 for r in woken)
        streamed = [t.result() for t in await _all(stream_tasks)]
        assert len([s for s in streamed if isinstance(s, pb.FetchResponse)]) == STREAMS
        for stream in streams:
            stream.cancel()
    print(f"\nservice RSS: {rss_before:.1f} MiB idle, {rss_waiting:.1f} MiB with "
          f"{WAITERS} waiting Fetches and {STREAMS} streams "
          f"({(rss_waiting - rss_before) * 1024 / (WAITERS + STREAMS):.1f} KiB each)")


async def _wait_refusals(tasks, count: int) -> list:
    """Waits until ``count`` of ``tasks`` have finished (refused) and returns their outcomes."""
    pending = set(tasks)
    finished = []
    while len(finished) < count:
        done, pending = await asyncio.wait(pending, timeout=60, return_when=asyncio.FIRST_COMPLETED)
        assert done, f"only {len(finished)} of {count} calls were refused"
        finished.extend(task.result() for task in done)
    return finished


async def _all(tasks):
    done, pending = await asyncio.wait(tasks, timeout=60)
    assert not pending
    return tasks
