"""OffsetsForTimes' packed form (a partition's targets as one packed list each way) against a real
service on loopback: any mix of targets (answered, beyond every record, special, refused,
repeated, over several partitions, of unknown partitions and topics, several entries for one
partition) is answered exactly as the old form answers it, on the wire (unary and LookupStream)
and through ``Admin.offsets_for_times_many``; a request in the old form is answered in the old
form only. Against an older service (a real gRPC server on loopback in front of the real one that,
as a build from before the packed form, drops the field it does not know) the client asks again
in the old form, and from then on asks in the old form alone; answers the client cannot read
(fewer answers than targets, an error for no target, too few entries) fail the call naming what
is wrong."""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.integration_helpers import make_batch

from seglog import Admin, AsyncAdmin, TopicPartition
from seglog import admin as admin_module
from seglog.errors import SeglogError, ServiceError
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration

INT64 = 2**63
# Partitions with records (offsets 0..5 at times 100..600, one out of order), an empty one, and
# references the service refuses or does not know.
REFS = [("packed-a", 0), ("packed-a", 1), ("packed-b", 0), ("packed-b", 3), ("packed-none", 0),
        ("", 0), ("packed-a", -1), ("../x", 0)]
TIMESTAMPS = st.one_of(
    st.sampled_from([-1, -2, -3, -4, -100, -INT64, INT64 - 1, 0, 100, 250, 600, 601]),
    st.integers(0, 700),
    st.integers(-INT64, INT64 - 1),
)
ENTRIES = st.lists(st.tuples(st.sampled_from(REFS), st.lists(TIMESTAMPS, max_size=8)), max_size=5)
_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def logs(service):
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="packed-a", partitions=2))
    stub.CreateTopic(pb.CreateTopicRequest(topic="packed-b", partitions=1))
    for partition in (0, 1):
        stub.Produce(pb.ProduceRequest(topic="packed-a", partition=partition,
                                       records=make_batch([b"a", b"b", b"c"], timestamps=[100, 300, 200])))
        stub.Produce(pb.ProduceRequest(topic="packed-a", partition=partition,
                                       records=make_batch([b"d", b"e", b"f"], timestamps=[400, 500, 600])))
    return service


def _error(error: pb.PartitionError) -> tuple:
    return (error.code, error.message, error.error_class, error.owner_id, error.owner_address, error.owner_epoch)


def _old_answers(response: pb.OffsetsForTimesResponse) -> list[tuple]:
    return [(r.topic, r.partition, r.offset, r.timestamp_ms, _error(r.error) if r.HasField("error") else None)
            for r in response.results]


def _packed_answers(entries, response: pb.OffsetsForTimesResponse) -> list[tuple]:
    """The packed answers target by target, as ``_old_answers`` reads the old form's."""
    assert len(response.packed) == len(entries)
    flat = []
    for ((topic, partition), timestamps), answer in zip(entries, response.packed):
        assert (answer.topic, answer.partition) == (topic, partition)
        assert len(answer.offsets) == len(answer.timestamps_ms) == len(timestamps)
        indexes = [e.index for e in answer.errors]
        assert indexes == sorted(set(indexes)), "errors in increasing index order, one a target"
        errors = {e.index: _error(e.error) for e in answer.errors}
        flat += [(topic, partition, offset, timestamp_ms, errors.get(index))
                 for index, (offset, timestamp_ms) in enumerate(zip(answer.offsets, answer.timestamps_ms))]
    return flat


def _requests(entries) -> tuple[pb.OffsetsForTimesRequest, pb.OffsetsForTimesRequest]:
    old = pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic=topic, partition=partition, timestamp_ms=timestamp_ms)
        for (topic, partition), timestamps in entries for timestamp_ms in timestamps])
    packed = pb.OffsetsForTimesRequest(packed=[
        pb.PartitionTimestamps(topic=topic, partition=partition, timestamps_ms=timestamps)
        for (topic, partition), timestamps in entries])
    return old, packed


@_SETTINGS
@given(entries=ENTRIES)
def test_the_packed_form_answers_every_target_as_the_old_form(logs, entries):
    old_request, packed_request = _requests(entries)
    stub = logs.stub
    old = stub.OffsetsForTimes(old_request, timeout=10)
    packed = stub.OffsetsForTimes(packed_request, timeout=10)
    assert not old.packed and not packed.results  # each form answered in its own
    expected = _old_answers(old)
    assert _packed_answers(entries, packed) == expected
    # The same on the LookupStream, and a request carrying both forms answers each in its own.
    both = pb.OffsetsForTimesRequest(partitions=old_request.partitions, packed=packed_request.packed)
    streamed = list(stub.LookupStream(iter([
        pb.LookupStreamRequest(correlation_id=1, offsets_for_times=packed_request),
        pb.LookupStreamRequest(correlation_id=2, offsets_for_times=both),
    ]), timeout=10))
    assert [s.HasField("error") for s in streamed] == [False, False]
    assert _packed_answers(entries, streamed[0].offsets_for_times) == expected
    assert _old_answers(streamed[1].offsets_for_times) == expected
    assert _packed_answers(entries, streamed[1].offsets_for_times) == expected


def _outcome(admin: Admin, targets):
    try:
        return admin.offsets_for_times_many(targets)
    except SeglogError as error:
        return type(error), str(error)


@_SETTINGS
@given(entries=ENTRIES, shuffle=st.randoms(use_true_random=False))
def test_the_client_answers_alike_in_both_forms(logs, entries, shuffle, monkeypatch):
    """Targets of several partitions interleaved: the packed form groups them by partition and
    answers them in the caller's order, or raises the earliest failure, as the old form does
    (the packed form asked for any number of targets here, however spread)."""
    monkeypatch.setattr(admin_module, "_PACKED_TARGETS_MIN", 1)
    monkeypatch.setattr(admin_module, "_PACKED_TARGETS_PER_PARTITION_MIN", 1)
    targets = [(TopicPartition(topic, partition), timestamp_ms)
               for (topic, partition), timestamps in entries for timestamp_ms in timestamps]
    shuffle.shuffle(targets)
    with Admin(logs.address) as admin:
        packed = _outcome(admin, targets)
        router = admin._async._router
        assert router is not None and router.packed_lookups
        router.packed_lookups = False  # as after meeting an older service: the old form
        assert _outcome(admin, targets) == packed


def test_a_request_in_the_old_form_is_answered_in_the_old_form_only(logs):
    """An older client's request: answered in ``results``, nothing in ``packed``."""
    request = pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic="packed-a", partition=0, timestamp_ms=250),
        pb.PartitionTimestamp(topic="packed-a", partition=0, timestamp_ms=-4)])
    answer = logs.stub.OffsetsForTimes(request, timeout=10)
    assert not answer.packed
    assert [(r.offset, r.timestamp_ms, r.error.code) for r in answer.results] == [
        (1, 300, 0), (-1, -1, grpc.StatusCode.INVALID_ARGUMENT.value[0])]


class _OlderService(pb_grpc.LogServiceServicer):
    """OffsetsForTimes and LookupStream of the real service at ``upstream``, as a build from
    before the packed form answers them (``mode`` "older": the request's ``packed`` dropped, as a
    parser that does not know the field drops it), or with a malformed packed answer ("short":
    one offset too few an entry; "stray": an error for a target past the entry's end; "fewer":
    an entry missing). ``packed_seen`` counts the requests that came with entries."""

    def __init__(self, upstream: str, mode: str) -> None:
        self.upstream, self.mode, self.packed_seen = upstream, mode, 0
        self._channel: grpc.aio.Channel | None = None

    async def _answer(self, request: pb.OffsetsForTimesRequest) -> pb.OffsetsForTimesResponse:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self.upstream)
        if request.packed:
            self.packed_seen += 1
        if self.mode == "older":
            request.ClearField("packed")
        answer = await pb_grpc.LogServiceStub(self._channel).OffsetsForTimes(request, timeout=10)
        if answer.packed and self.mode == "short":
            del answer.packed[0].offsets[-1]
        elif answer.packed and self.mode == "stray":
            answer.packed[0].errors.add(index=len(answer.packed[0].offsets)).error.code = 3
        elif answer.packed and self.mode == "fewer":
            del answer.packed[-1]
        return answer

    async def OffsetsForTimes(self, request, context):
        return await self._answer(request)

    async def LookupStream(self, requests, context):
        await context.send_initial_metadata((("seglog-stream-in-flight-max", "64"),))
        async for message in requests:
            answer = await self._answer(message.offsets_for_times)
            yield pb.LookupStreamResponse(correlation_id=message.correlation_id, offsets_for_times=answer)


async def _through(upstream: str, mode: str, body):
    service = _OlderService(upstream, mode)
    server = grpc.aio.server()
    pb_grpc.add_LogServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with AsyncAdmin(f"127.0.0.1:{port}") as admin:
            return await body(admin, service)
    finally:
        await server.stop(None)


# Sixteen targets a partition: asked in the packed form (fewer, or fewer than eight in all, go in
# the old form).
_TARGETS = [(TopicPartition("packed-a", 1), 250), (TopicPartition("packed-a", 0), -1),
            (TopicPartition("packed-a", 1), 601), (TopicPartition("packed-a", 0), 100)] * 8


def test_an_older_service_is_asked_again_in_the_old_form_and_from_then_on(logs):
    with Admin(logs.address) as admin:
        expected = admin.offsets_for_times_many(_TARGETS)
    assert [None if f is None else tuple(f) for f in expected] == [(1, 300), (6, -1), None, (0, 100)] * 8

    async def body(admin, service):
        first = await admin.offsets_for_times_many(_TARGETS)
        assert service.packed_seen == 1 and admin._router.packed_lookups is False
        second = await admin.offsets_for_times_many(_TARGETS)
        assert service.packed_seen == 1  # the old form alone from then on
        with pytest.raises(SeglogError, match="packed-a-0: .*-9"):  # its errors as before
            await admin.offsets_for_times_many([(TopicPartition("packed-a", 0), -9)] * 8)
        return first, second

    first, second = asyncio.run(_through(logs.address, "older", body))
    assert first == second == expected


@pytest.mark.parametrize(("mode", "match"), [
    ("short", "answered 7 offsets for 8 targets of packed-a-1"),
    ("stray", "an error for target 8 of 8 of packed-a-1"),
    ("fewer", "answered 1 entries for 2"),
])
def test_a_packed_answer_the_client_cannot_read_fails_the_call(logs, mode, match):
    targets = [(TopicPartition("packed-a", 1), t) for t in range(100, 900, 100)] + [(TopicPartition("packed-a", 0), 1)] * 24

    async def body(admin, service):
        with pytest.raises(ServiceError, match=match):
            await admin.offsets_for_times_many(targets)
        assert service.packed_seen == 1 and admin._router.packed_lookups  # no fallback: a newer service
        # Fewer than eight targets go in the old form (cheaper there), to a newer service too, and
        # so do targets of fewer than sixteen a partition.
        assert [tuple(f) for f in await admin.offsets_for_times_many(targets[:3])] == [(0, 100), (1, 300), (1, 300)]
        assert len(await admin.offsets_for_times_many(targets[:8] + targets[-23:])) == 31
        assert service.packed_seen == 1

    asyncio.run(_through(logs.address, mode, body))

