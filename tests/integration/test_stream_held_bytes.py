"""A LookupStream whose client does not read its large answers, against a service on loopback:
the service stops reading its requests once the answers written and not confirmed plus those
queued pass STREAM_HELD_BYTES_MAX, not after STREAM_IN_FLIGHT_MAX answers (64 answers of up to
response_bytes_max each held per stream); read, every answer comes in order. And a stream whose
answer's write failed works on nothing it reads after."""

from __future__ import annotations

import asyncio
import tempfile

import grpc
import pytest
from tests.support.in_process_service import served_on_loopback, servicer_in
from tests.support.integration_helpers import CHANNEL_OPTIONS

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration


def _servicer(directory: str):
    from seglog_server.rpc.log_service import LogServicerLimits

    return servicer_in(directory, LogServicerLimits(1 << 20, 1000, 64 << 20, 4 << 20))


def _large_lookup(correlation_id: int) -> pb.LookupStreamRequest:
    """A request whose answer is about 430 KB: a thousand unknown topics, each answered with an error."""
    request = pb.LookupStreamRequest(correlation_id=correlation_id)
    request.offsets_for_times.partitions.extend(
        [pb.PartitionTimestamp(topic="nope-" + "x" * 200, partition=0, timestamp_ms=-1)] * 1000
    )
    return request


def test_a_client_that_does_not_read_large_answers_holds_the_stream_at_the_byte_bound():
    from seglog_server.rpc.streams import STREAM_HELD_BYTES_MAX, STREAM_IN_FLIGHT_MAX

    async def run(directory: str) -> None:
        with _servicer(directory) as (_manager, servicer):
            served = 0
            real = servicer.lookups.offsets_for_times

            async def counting(request, response=None):
                nonlocal served
                served += 1
                return await real(request, response)

            servicer.lookups.offsets_for_times = counting
            async with (
                served_on_loopback(servicer) as address,
                grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel,
            ):
                call = pb_grpc.LogServiceStub(channel).LookupStream()
                total = STREAM_IN_FLIGHT_MAX + 36

                async def write_all() -> None:  # one write at a time (a grpc.aio rule)
                    for i in range(total):
                        await call.write(_large_lookup(i))
                    await call.done_writing()

                writer = asyncio.ensure_future(write_all())
                # Until the service has stopped reading (what it served stays put for a second).
                last, still = -1, 0
                while still < 20:
                    await asyncio.sleep(0.05)
                    last, still = served, (still + 1 if served == last else 0)
                assert not writer.done()
                # Stopped by bytes: a few answers in the transport's windows and buffers, the held
                # ones under the bound; before, it read on until 64 answers were owed.
                assert served < STREAM_IN_FLIGHT_MAX // 2
                answers = [answer async for answer in call]  # read: the service reads on
                await writer
                answer_bytes = max(answer.ByteSize() for answer in answers)
                assert answer_bytes > STREAM_HELD_BYTES_MAX
                assert [answer.correlation_id for answer in answers] == list(range(total))
                assert all(len(answer.offsets_for_times.results) == 1000 for answer in answers)
                assert served == total
                assert STREAM_HELD_BYTES_MAX <= servicer.streams.stream_held_bytes_high
                assert servicer.streams.stream_held_bytes_high <= STREAM_HELD_BYTES_MAX + answer_bytes

    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(run(directory))


def test_a_stream_whose_answer_failed_to_write_appends_nothing_it_reads_after(monkeypatch):
    """The write of the first batch's answer fails after it started (a fault injected at the
    stream's write, once the answer reached the client); the next batch read then is not
    appended, and the stream ends with a status. Before, it was appended and never
    acknowledged: the failure was raised only at that batch's answer."""
    from tests.support.integration_helpers import make_batch

    from seglog_server.rpc import streams

    failed = asyncio.Event()

    class FailingLater(streams.OrderedReplies):
        def __init__(self, write, *args, **kwargs):
            async def write_then_fail(message):
                await write(message)  # the answer reached the transport
                failed.set()
                raise ConnectionError("the stream's transport failed after the write")

            super().__init__(write_then_fail, *args, **kwargs)

    monkeypatch.setattr(streams, "OrderedReplies", FailingLater)

    async def run(directory: str) -> None:
        with _servicer(directory) as (manager, servicer):
            manager.create_topic("t", 1, {})
            async with (
                served_on_loopback(servicer) as address,
                grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel,
            ):
                call = pb_grpc.LogServiceStub(channel).ProduceStream()

                def batch(cid: int) -> pb.ProduceStreamRequest:
                    return pb.ProduceStreamRequest(
                        correlation_id=cid, produce=pb.ProduceRequest(topic="t", records=make_batch([b"%d" % cid]))
                    )

                await call.write(batch(1))
                first = await call.read()
                assert first.correlation_id == 1 and first.produce.base_offset == 0
                await failed.wait()  # the service recorded the failure
                try:
                    await call.write(batch(2))
                except grpc.aio.AioRpcError:
                    pass  # the stream may already have ended
                with pytest.raises(grpc.aio.AioRpcError):
                    while True:
                        answer = await call.read()
                        assert answer is not grpc.aio.EOF, "the stream ended OK after a failed write"
                        raise AssertionError(f"answered after a failed write: {answer}")
                assert await call.code() != grpc.StatusCode.OK
                assert manager.get_log("t", 0).log_end_offset == 1  # the second batch was not appended
                # The service serves on: a new stream appends.
                again = pb_grpc.LogServiceStub(channel).ProduceStream()
                await again.write(batch(3))
                assert (await again.read()).produce.base_offset == 1
                await again.done_writing()

    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(run(directory))
