import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.integration_helpers import assert_serving, make_batch, rpc_error

from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration
Code = grpc.StatusCode
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


def _offsets(stub, *targets):
    request = pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic=topic, partition=partition, timestamp_ms=timestamp_ms)
        for topic, partition, timestamp_ms in targets])
    return [(r.topic, r.partition, r.offset, r.timestamp_ms)
            for r in stub.OffsetsForTimes(request).results]


@pytest.fixture
def timed_topic(stub, topic):
    """Offsets 0..3 with timestamps 100, 300, 200, 400 (out of order on purpose)."""
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch(
        [b"a", b"b"], timestamps=[100, 300])))
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch(
        [b"c", b"d"], timestamps=[200, 400])))
    return topic


def test_offsets_for_times_finds_the_first_record_at_or_after_the_target(stub, timed_topic):
    t = timed_topic
    assert _offsets(stub, (t, 0, 100), (t, 0, 150), (t, 0, 400)) == [
        (t, 0, 0, 100), (t, 0, 1, 300), (t, 0, 3, 400)]


def test_offsets_for_times_after_every_record_is_minus_one(stub, timed_topic):
    assert _offsets(stub, (timed_topic, 0, 401)) == [(timed_topic, 0, -1, -1)]


def test_offsets_for_times_special_targets(stub, timed_topic):
    t = timed_topic
    assert _offsets(stub, (t, 0, LATEST), (t, 0, EARLIEST), (t, 0, MAX_TIMESTAMP)) == [
        (t, 0, 4, -1), (t, 0, 0, -1), (t, 0, 3, 400)]


def test_offsets_for_times_answers_in_request_order_across_topics(stub, timed_topic):
    stub.CreateTopic(pb.CreateTopicRequest(topic="second-for-order", partitions=2))
    results = _offsets(stub, ("second-for-order", 1, LATEST), (timed_topic, 0, EARLIEST),
                       ("second-for-order", 0, 5))
    assert results == [("second-for-order", 1, 0, -1), (timed_topic, 0, 0, -1),
                       ("second-for-order", 0, -1, -1)]


def test_offsets_for_times_of_nothing_is_empty(stub):
    assert stub.OffsetsForTimes(pb.OffsetsForTimesRequest()).results == []


def test_offsets_for_times_below_the_specials_is_invalid_argument(stub, topic):
    [result] = stub.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic=topic, timestamp_ms=-4)])).results
    assert result.error.code == Code.INVALID_ARGUMENT.value[0]
    assert "-4" in result.error.message
    assert (result.offset, result.timestamp_ms) == (-1, -1)
    assert_serving(stub)


def test_delete_records_moves_the_log_start_offset(stub, timed_topic):
    response = stub.DeleteRecords(pb.DeleteRecordsRequest(topic=timed_topic, offset=2))
    assert response.log_start_offset == 2
    rpc_error(stub.Fetch, pb.FetchRequest(topic=timed_topic, offset=1), Code.OUT_OF_RANGE)
    fetched = stub.Fetch(pb.FetchRequest(topic=timed_topic, offset=2))
    assert fetched.log_start_offset == 2
    assert _offsets(stub, (timed_topic, 0, EARLIEST)) == [(timed_topic, 0, 2, -1)]


def test_delete_records_minus_one_deletes_up_to_the_high_watermark(stub, timed_topic):
    response = stub.DeleteRecords(pb.DeleteRecordsRequest(topic=timed_topic, offset=-1))
    assert response.log_start_offset == 4
    assert stub.Fetch(pb.FetchRequest(topic=timed_topic, offset=4)).records == b""


def test_delete_records_above_the_high_watermark_is_out_of_range(stub, timed_topic):
    rpc_error(stub.DeleteRecords, pb.DeleteRecordsRequest(topic=timed_topic, offset=5),
              Code.OUT_OF_RANGE)
    rpc_error(stub.DeleteRecords, pb.DeleteRecordsRequest(topic=timed_topic, offset=-2),
              Code.INVALID_ARGUMENT, "offset")
    assert_serving(stub)


# -- several timestamps per partition in one request -------------------------------------------------


def _results(stub, targets):
    request = pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic=topic, partition=partition, timestamp_ms=timestamp_ms)
        for topic, partition, timestamp_ms in targets])
    return [(r.topic, r.partition, r.offset, r.timestamp_ms, r.error.code, r.error.message)
            for r in stub.OffsetsForTimes(request, timeout=10).results]


def _one_at_a_time(stub, targets):
    return [_results(stub, [target])[0] for target in targets]


@pytest.fixture
def many_segments_topic(stub, topic):
    """A second topic of two partitions over several segments: partition 0 holds offsets 0..119
    with timestamps 1000 + 10 x offset, every fifth batch a step back in time; partition 1 is
    empty; partition 0's log start offset is raised to 7."""
    name = topic + "-two"
    stub.CreateTopic(pb.CreateTopicRequest(topic=name, partitions=2, configs={
        "segment.bytes": "1024", "index.interval.bytes": "100"}))
    for first in range(0, 120, 4):
        timestamps = [1000 + 10 * offset - (500 if first % 20 == 0 else 0) for offset in range(first, first + 4)]
        stub.Produce(pb.ProduceRequest(topic=name, partition=0, records=make_batch(
            [b"x" * 40] * 4, timestamps=timestamps)))
    stub.DeleteRecords(pb.DeleteRecordsRequest(topic=name, partition=0, offset=7))
    return name


def test_several_timestamps_per_partition_answer_in_order_as_one_at_a_time(stub, many_segments_topic):
    t = many_segments_topic
    targets = [(t, 0, 2190), (t, 1, 1500), (t, 0, 1000), (t, 0, -7), (t, 0, 1555), (t, 0, 1555),
               (t, 9, 1500), (t, 0, LATEST), ("", 0, 1500), (t, 0, 1001), (t, 0, MAX_TIMESTAMP),
               (t, 0, 5000), (t, 1, EARLIEST), (t, 0, 1700), (t, -1, 1500), (t, 0, EARLIEST), (t, 0, 0)]
    together = _results(stub, targets)
    assert together == _one_at_a_time(stub, targets)
    assert [(r[0], r[1]) for r in together] == [(topic, partition) for topic, partition, _ in targets]
    assert together[0][2:4] == (119, 2190) and together[2][2] == 7  # the log start offset bounds it
    assert together[4] == together[5] and together[4][2:4] == (56, 1560)
    assert together[3][4] == together[14][4] == together[8][4] == Code.INVALID_ARGUMENT.value[0]
    assert together[6][4] == Code.NOT_FOUND.value[0]
    assert together[1][2:5] == (-1, -1, 0)  # the empty partition: no record, no error
    assert_serving(stub)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(picks=st.lists(st.tuples(
    st.sampled_from(["the topic", "", "no-such-topic"]),
    st.integers(-1, 3),
    st.one_of(st.integers(-9, 0), st.integers(400, 2400)),
), min_size=2, max_size=6))
def test_any_target_answers_alone_as_it_does_among_others(stub, many_segments_topic, picks):
    """A request of one target takes a path of its own (no grouping by partition): whatever the
    target (bad topic or partition, unknown partition, special or invalid timestamp, below the
    log start offset, past the end), its answer alone is its answer among others, error message
    included. The lookups leave the fixture as it was, so every example may share it."""
    targets = [(many_segments_topic if topic == "the topic" else topic, partition, timestamp_ms)
               for topic, partition, timestamp_ms in picks]
    assert _one_at_a_time(stub, targets) == _results(stub, targets)


def test_several_timestamps_per_partition_on_the_lookup_stream_answer_as_unary(stub, many_segments_topic):
    t = many_segments_topic
    targets = [(t, 0, 1000 + step) for step in range(0, 1300, 37)] + [(t, 0, -9), (t, 3, 1200)]
    request = pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic=topic, partition=partition, timestamp_ms=timestamp_ms)
        for topic, partition, timestamp_ms in targets])
    [answer] = list(stub.LookupStream(iter([pb.LookupStreamRequest(correlation_id=1, offsets_for_times=request)]),
                                      timeout=10))
    streamed = [(r.topic, r.partition, r.offset, r.timestamp_ms, r.error.code, r.error.message)
                for r in answer.offsets_for_times.results]
    assert streamed == _results(stub, targets) == _one_at_a_time(stub, targets)
