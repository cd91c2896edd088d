"""Fetch long polls and Consume streams. No timing assertions tighter than generous: we assert on
content, and that a woken Fetch returns before its (long) max_wait_ms would have expired."""

import threading
import time

import grpc
import pytest
from tests.support.integration_helpers import assert_serving, make_batch, records_of, rpc_error

from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration
Code = grpc.StatusCode

# Long enough that a Fetch answering because of it, instead of the append, fails the test clearly.
LONG_WAIT_MS = 20_000


def test_fetch_waiting_at_the_tail_returns_when_a_produce_arrives(stub, topic):
    started = time.monotonic()
    # Sent first on the same connection, the Fetch reaches its wait before the Produce is handled
    # (one event loop, requests in arrival order); if not, it would answer at once with the same
    # content, so the test cannot fail falsely either way.
    waiting = stub.Fetch.future(pb.FetchRequest(topic=topic, offset=0, max_wait_ms=LONG_WAIT_MS))
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"wake up"])))
    response = waiting.result(timeout=LONG_WAIT_MS / 1000)
    assert [r.value for r in records_of(response)] == [b"wake up"]
    assert time.monotonic() - started < LONG_WAIT_MS / 1000 / 2


def test_fetch_waiting_with_nothing_arriving_returns_empty_after_max_wait(stub, topic):
    response = stub.Fetch(pb.FetchRequest(topic=topic, offset=0, max_wait_ms=200), timeout=30)
    assert response.records == b""
    assert response.next_offset == 0


def test_fetch_below_the_tail_answers_without_waiting(stub, topic):
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"ready"])))
    response = stub.Fetch(pb.FetchRequest(topic=topic, offset=0, max_wait_ms=LONG_WAIT_MS),
                          timeout=LONG_WAIT_MS / 2000)
    assert [r.value for r in records_of(response)] == [b"ready"]


def test_fetch_with_min_bytes_waits_for_enough_bytes(stub, topic):
    waiting = stub.Fetch.future(pb.FetchRequest(
        topic=topic, offset=0, max_wait_ms=LONG_WAIT_MS, min_bytes=1500))
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"x" * 500])))
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"y" * 500])))
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"z" * 600])))
    response = waiting.result(timeout=LONG_WAIT_MS / 1000)
    assert len(response.records) >= 1500
    assert [r.offset for r in records_of(response)] == [0, 1, 2]


def test_fetch_waiting_on_a_deleted_topic_is_not_found(stub):
    stub.CreateTopic(pb.CreateTopicRequest(topic="doomed", partitions=1))
    waiting = stub.Fetch.future(pb.FetchRequest(topic="doomed", max_wait_ms=LONG_WAIT_MS))
    stub.DeleteTopic(pb.DeleteTopicRequest(topic="doomed"))
    with pytest.raises(grpc.RpcError) as info:
        waiting.result(timeout=LONG_WAIT_MS / 1000)
    assert info.value.code() == Code.NOT_FOUND


def _consume(stub, request, count, received, done):
    stream = stub.Consume(request, timeout=60)
    try:
        for response in stream:
            received.extend(records_of(response))
            if len(received) >= count:
                break
    finally:
        stream.cancel()
        done.set()


def test_consume_from_earliest_streams_old_then_new_records(stub, topic):
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"old-1", b"old-2"])))
    received, done = [], threading.Event()
    consumer = threading.Thread(target=_consume, args=(
        stub, pb.ConsumeRequest(topic=topic, position=pb.START_POSITION_EARLIEST),
        4, received, done))
    consumer.start()
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"new-1"])))
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"new-2"])))
    assert done.wait(30)
    consumer.join()
    assert [r.value for r in received] == [b"old-1", b"old-2", b"new-1", b"new-2"]
    assert [r.offset for r in received] == [0, 1, 2, 3]


def test_consume_from_latest_sees_only_records_appended_after_it_starts(stub, topic):
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"before"])))
    stream = stub.Consume(pb.ConsumeRequest(topic=topic, position=pb.START_POSITION_LATEST),
                          timeout=60)
    # The service sends the resolved start offset as initial metadata before streaming.
    assert dict(stream.initial_metadata())["seglog-start-offset"] == "1"
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"after"])))
    first = next(iter(stream))
    stream.cancel()
    assert [(r.offset, r.value) for r in records_of(first)] == [(1, b"after")]


def test_consume_from_a_timestamp_starts_at_the_first_record_at_or_after_it(stub, topic):
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch(
        [b"t100", b"t200", b"t300"], timestamps=[100, 200, 300])))
    stream = stub.Consume(pb.ConsumeRequest(topic=topic, timestamp_ms=150, decode=True),
                          timeout=60)
    first = next(iter(stream))
    stream.cancel()
    assert [(r.offset, r.value) for r in first.decoded_records] == [(1, b"t200"), (2, b"t300")]


def test_consume_from_an_offset_with_min_bytes_groups_batches(stub, topic):
    for index in range(3):
        stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"%d" % index * 400])))
    stream = stub.Consume(pb.ConsumeRequest(topic=topic, offset=1, min_bytes=800,
                                            max_wait_ms=LONG_WAIT_MS), timeout=60)
    first = next(iter(stream))
    stream.cancel()
    assert [r.offset for r in records_of(first)] == [1, 2]
    assert first.next_offset == 3


def test_consume_of_an_unknown_topic_ends_with_not_found(stub):
    stream = stub.Consume(pb.ConsumeRequest(topic="nope", position=pb.START_POSITION_EARLIEST),
                          timeout=10)
    with pytest.raises(grpc.RpcError) as info:
        next(iter(stream))
    assert info.value.code() == Code.NOT_FOUND
    assert_serving(stub)


def test_consume_with_a_bad_start_is_invalid_argument(stub, topic):
    for request in (pb.ConsumeRequest(topic=topic, position=9),
                    pb.ConsumeRequest(topic=topic, timestamp_ms=-9),
                    pb.ConsumeRequest(topic=topic, max_bytes=-1)):
        stream = stub.Consume(request, timeout=10)
        with pytest.raises(grpc.RpcError) as info:
            next(iter(stream))
        assert info.value.code() == Code.INVALID_ARGUMENT
    assert_serving(stub)


def test_consume_past_the_log_end_is_out_of_range(stub, topic):
    stream = stub.Consume(pb.ConsumeRequest(topic=topic, offset=5), timeout=10)
    with pytest.raises(grpc.RpcError) as info:
        next(iter(stream))
    assert info.value.code() == Code.OUT_OF_RANGE
    rpc_error(stub.Fetch, pb.FetchRequest(topic=topic, offset=5), Code.OUT_OF_RANGE)
