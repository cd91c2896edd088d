"""ProduceStream and LookupStream against real services on loopback: answers in request order
with their correlation ids, per-message refusals that leave the stream and the service serving,
a message that does not parse, the read-ahead bound, cancellation, shutdown, the stream slots."""

from __future__ import annotations

import asyncio
import random
import signal
import tempfile

import grpc
import pytest
from tests.support.in_process_service import served_on_loopback, servicer_in
from tests.support.integration_helpers import CHANNEL_OPTIONS, make_batch, records_of

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration

_CODES = {code.value[0]: code for code in grpc.StatusCode}


def _produce(cid: int, topic: str, partition: int, value: bytes, acks=pb.ACKS_WRITTEN):
    return pb.ProduceStreamRequest(
        correlation_id=cid,
        produce=pb.ProduceRequest(topic=topic, partition=partition, records=make_batch([value]), acks=acks),
    )


def test_produce_stream_answers_in_request_order_with_each_correlation_id(stub, topic):
    stub.CreateTopic(pb.CreateTopicRequest(topic=topic + "-3", partitions=3))
    rng = random.Random(7)
    # Client-chosen ids: any int64, repeated or not; the service only echoes them.
    ids = [rng.choice([rng.randrange(-2**63, 2**63), 5]) for _ in range(300)]
    sent = [(cid, i % 3, b"v%d" % i, rng.choice([pb.ACKS_WRITTEN, pb.ACKS_FSYNCED])) for i, cid in enumerate(ids)]
    answers = list(stub.ProduceStream(
        iter([_produce(cid, topic + "-3", p, v, acks) for cid, p, v, acks in sent]), timeout=60
    ))
    assert [a.correlation_id for a in answers] == ids
    assert not any(a.HasField("error") for a in answers)
    for partition in range(3):
        offsets = [a.produce.base_offset for a, s in zip(answers, sent) if s[1] == partition]
        assert offsets == list(range(len(offsets)))  # appended in the order sent
        fetched = stub.Fetch(pb.FetchRequest(topic=topic + "-3", partition=partition, offset=0))
        assert [r.value for r in records_of(fetched)] == [s[2] for s in sent if s[1] == partition]


def test_refused_requests_get_their_own_error_and_the_stream_goes_on(stub, topic):
    corrupt = bytearray(make_batch([b"x"]))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    bad = [
        pb.ProduceStreamRequest(correlation_id=1, produce=pb.ProduceRequest(topic="no-such-topic", records=make_batch([b"x"]))),
        pb.ProduceStreamRequest(correlation_id=2, produce=pb.ProduceRequest(topic=topic, records=bytes(corrupt))),
        pb.ProduceStreamRequest(correlation_id=3, produce=pb.ProduceRequest(topic="", records=make_batch([b"x"]))),
        pb.ProduceStreamRequest(correlation_id=4, produce=pb.ProduceRequest(topic=topic, partition=-1, records=make_batch([b"x"]))),
        pb.ProduceStreamRequest(correlation_id=5),  # no produce request at all
        pb.ProduceStreamRequest(correlation_id=6, produce=pb.ProduceRequest(topic=topic, records=b"\x00" * 70)),
        _produce(7, topic, 0, b"after the refusals"),
    ]
    answers = list(stub.ProduceStream(iter(bad), timeout=30))
    codes = [(_CODES[a.error.code] if a.HasField("error") else grpc.StatusCode.OK) for a in answers]
    assert [a.correlation_id for a in answers] == [1, 2, 3, 4, 5, 6, 7]
    assert codes == [
        grpc.StatusCode.NOT_FOUND, grpc.StatusCode.DATA_LOSS, grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OK,
    ]
    assert "no-such-topic" in answers[0].error.message
    assert answers[0].error.error_class == "UnknownTopicOrPartitionError"
    assert answers[6].produce.base_offset == 0


def test_lookup_stream_answers_each_request_with_the_unary_answer(stub, topic):
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"a", b"b", b"c"], timestamps=[100, 200, 300])))
    targets = [150, 300, 301, -1, -2, -3]
    request = pb.OffsetsForTimesRequest(partitions=[
        *(pb.PartitionTimestamp(topic=topic, partition=0, timestamp_ms=t) for t in targets),
        pb.PartitionTimestamp(topic="no-such-topic", partition=0, timestamp_ms=1),
    ])
    unary = stub.OffsetsForTimes(request)
    messages = [pb.LookupStreamRequest(correlation_id=i, offsets_for_times=request) for i in range(3)]
    messages.append(pb.LookupStreamRequest(correlation_id=9, offsets_for_times=pb.OffsetsForTimesRequest(
        partitions=[pb.PartitionTimestamp(topic=topic, partition=0, timestamp_ms=-9)])))
    answers = list(stub.LookupStream(iter(messages), timeout=30))
    assert [a.correlation_id for a in answers] == [0, 1, 2, 9]
    for answer in answers[:3]:
        assert answer.offsets_for_times == unary
    assert [r.offset for r in unary.results[:6]] == [1, 2, -1, 3, 0, 2]
    assert _CODES[unary.results[6].error.code] is grpc.StatusCode.NOT_FOUND
    assert _CODES[answers[3].offsets_for_times.results[0].error.code] is grpc.StatusCode.INVALID_ARGUMENT


def test_a_message_that_does_not_parse_ends_the_stream_and_the_service_keeps_serving(service, stub, topic):
    channel = grpc.insecure_channel(service.address, options=CHANNEL_OPTIONS)
    raw = channel.stream_stream("/seglog.v1.LogService/ProduceStream")  # bytes in, bytes out
    good = _produce(1, topic, 0, b"first").SerializeToString()
    with pytest.raises(grpc.RpcError) as info:
        list(raw(iter([good, b"\xff\xff\xff garbage"]), timeout=30))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ProduceStreamRequest" in info.value.details()
    channel.close()
    answers = list(stub.ProduceStream(iter([_produce(2, topic, 0, b"second")]), timeout=30))
    assert answers[0].produce.base_offset == 1  # the first message was answered and kept


async def _aio_stub(address: str):
    channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
    return channel, pb_grpc.LogServiceStub(channel)


def test_the_service_says_how_far_it_reads_ahead_and_a_cancelled_stream_frees_its_slot(start_service):
    # Two streams per client: a cancelled stream that kept its slot would lock the third out.
    service = start_service(["--consume-streams-per-client-max", "2"])
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1))

    async def run() -> None:
        channel, stub = await _aio_stub(service.address)
        for round_number in range(5):
            call = stub.ProduceStream()
            metadata = dict(await call.initial_metadata())
            assert int(metadata["seglog-stream-in-flight-max"]) >= 1
            for i in range(20):  # cancelled with fsynced requests owed
                await call.write(_produce(i, "t", 0, b"r%d-%d" % (round_number, i), pb.ACKS_FSYNCED))
            call.cancel()
        kept = [stub.LookupStream(), stub.LookupStream()]
        for index, call in enumerate(kept):
            await call.write(pb.LookupStreamRequest(correlation_id=index, offsets_for_times=pb.OffsetsForTimesRequest(
                partitions=[pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=-1)])))
            assert (await call.read()).correlation_id == index
        third = stub.LookupStream()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await third.read()
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "consume_streams_per_client_max=2" in info.value.details()
        for call in kept:
            call.cancel()
        await channel.close()

    asyncio.run(run())


def test_shutdown_answers_what_the_stream_read_then_ends_it_unavailable(start_service):
    service = start_service()
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1))

    async def run() -> None:
        channel, stub = await _aio_stub(service.address)
        call = stub.ProduceStream()
        await call.write(_produce(1, "t", 0, b"before"))
        assert (await call.read()).produce.base_offset == 0
        service.process.send_signal(signal.SIGTERM)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call.read()  # parked: nothing more was sent
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in info.value.details()
        await channel.close()

    asyncio.run(run())
    assert service.process.wait(timeout=30) == 0


def test_the_service_reads_at_most_the_bound_ahead_of_its_answers():
    """In-process (to hold the group commit): with every fsync held, the stream reads exactly
    STREAM_IN_FLIGHT_MAX requests, then stops; released, it answers all of them in order."""
    from seglog_server.rpc.log_service import LogServicerLimits
    from seglog_server.rpc.streams import STREAM_IN_FLIGHT_MAX

    async def run(directory: str) -> None:
        with servicer_in(directory, LogServicerLimits(1 << 20, 1000, 4 << 20, 1 << 20)) as (manager, servicer):
            manager.create_topic("t", 1, {})
            release = asyncio.Event()
            appended = 0
            real_append, real_durable = servicer.produce.append, servicer.core.durable

            async def counting_append(request):
                nonlocal appended
                appended += 1
                return await real_append(request)

            async def held_durable(log, end_offset):
                await release.wait()
                await real_durable(log, end_offset)

            servicer.produce.append, servicer.core.durable = counting_append, held_durable
            async with served_on_loopback(servicer) as address:
                channel, stub = await _aio_stub(address)
                try:
                    call = stub.ProduceStream()
                    total = STREAM_IN_FLIGHT_MAX + 30
                    async def write_all() -> None:  # one write at a time (a grpc.aio rule)
                        for i in range(total):
                            await call.write(_produce(i, "t", 0, b"%d" % i, pb.ACKS_FSYNCED))

                    writer = asyncio.ensure_future(write_all())
                    for _ in range(200):
                        await asyncio.sleep(0.01)
                        if appended >= STREAM_IN_FLIGHT_MAX:
                            break
                    await asyncio.sleep(0.2)  # room for a read past the bound to show up
                    assert appended == STREAM_IN_FLIGHT_MAX
                    release.set()
                    await writer
                    await call.done_writing()
                    answers = [answer async for answer in call]
                    assert [a.correlation_id for a in answers] == list(range(total))
                    assert [a.produce.base_offset for a in answers] == list(range(total))
                    assert servicer.stream_in_flight_high == STREAM_IN_FLIGHT_MAX
                finally:
                    await channel.close()

    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(run(directory))


def test_a_request_unanswered_within_its_timeout_resets_the_clients_stream():
    """In-process (to hold the group commit): the client's RequestStream fails the request with
    RequestTimeoutError and ends the stream; the next request opens a new one and is answered."""
    from seglog._security import ConnectionSecurity
    from seglog.client import Transport
    from seglog.errors import RequestTimeoutError
    from seglog_server.rpc.log_service import LogServicerLimits

    async def run(directory: str) -> None:
        with servicer_in(directory, LogServicerLimits(1 << 20, 1000, 4 << 20, 1 << 20)) as (manager, servicer):
            manager.create_topic("t", 1, {})
            release = asyncio.Event()
            real_durable = servicer.core.durable

            async def held_durable(log, end_offset):
                await release.wait()
                await real_durable(log, end_offset)

            servicer.core.durable = held_durable
            async with served_on_loopback(servicer) as address:
                transport = Transport(address, security=ConnectionSecurity())
                try:
                    stream = transport.produce_stream()
                    fsynced = _produce(0, "t", 0, b"held", pb.ACKS_FSYNCED)
                    with pytest.raises(RequestTimeoutError, match="stream was reset"):
                        await stream.request(fsynced, timeout_s=0.3)
                    release.set()
                    written = _produce(0, "t", 0, b"after", pb.ACKS_WRITTEN)
                    answer = await stream.request(written, timeout_s=30)
                    assert answer.base_offset == 1  # the held one was appended before its fsync wait
                    assert stream.opened_count == 2
                finally:
                    await transport.close()

    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(run(directory))
