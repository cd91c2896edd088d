import grpc
import pytest
from tests.support.integration_helpers import assert_serving, error_class, rpc_error

from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration
Code = grpc.StatusCode


def test_create_list_describe_delete_a_topic(stub):
    created = stub.CreateTopic(pb.CreateTopicRequest(
        topic="orders", partitions=3, configs={"retention.ms": "86400000"}))
    assert (created.topic, created.partitions) == ("orders", 3)
    assert created.configs["retention.ms"] == "86400000"
    assert created.configs["segment.bytes"] == "1073741824"  # defaults filled in

    names = [(t.topic, t.partitions) for t in stub.ListTopics(pb.ListTopicsRequest()).topics]
    assert ("orders", 3) in names
    assert names == sorted(names)

    described = stub.DescribeTopic(pb.DescribeTopicRequest(topic="orders"))
    assert [p.partition for p in described.partitions] == [0, 1, 2]
    assert described.configs["retention.ms"] == "86400000"
    for partition in described.partitions:
        assert (partition.log_start_offset, partition.log_end_offset) == (0, 0)
        assert partition.high_watermark == 0
        assert partition.log_dir  # one of the service's two directories
        assert partition.configs["retention.ms"] == "86400000"
    assert len({p.log_dir for p in described.partitions}) == 2  # spread over both dirs (JBOD)

    stub.DeleteTopic(pb.DeleteTopicRequest(topic="orders"))
    assert "orders" not in [t.topic for t in stub.ListTopics(pb.ListTopicsRequest()).topics]
    rpc_error(stub.DescribeTopic, pb.DescribeTopicRequest(topic="orders"), Code.NOT_FOUND)


def test_validate_only_creates_nothing(stub):
    response = stub.CreateTopic(pb.CreateTopicRequest(
        topic="dry-run", partitions=2, validate_only=True, configs={"segment.bytes": "65536"}))
    assert response.configs["segment.bytes"] == "65536"
    assert "dry-run" not in [t.topic for t in stub.ListTopics(pb.ListTopicsRequest()).topics]


def test_create_existing_topic_is_already_exists(stub, topic):
    error = rpc_error(stub.CreateTopic, pb.CreateTopicRequest(topic=topic, partitions=1),
                      Code.ALREADY_EXISTS, topic)
    assert error_class(error) == "TopicExistsError"
    assert_serving(stub)


@pytest.mark.parametrize(
    ("request_", "match"),
    [
        (pb.CreateTopicRequest(topic="", partitions=1), "topic is empty"),
        (pb.CreateTopicRequest(topic="bad/name", partitions=1), "bad/name"),
        (pb.CreateTopicRequest(topic="..", partitions=1), ".."),
        (pb.CreateTopicRequest(topic="zero", partitions=0), "partitions"),
        (pb.CreateTopicRequest(topic="cfg", partitions=1, configs={"no.such": "1"}), "no.such"),
        (pb.CreateTopicRequest(topic="cfg", partitions=1, configs={"segment.bytes": "x"}),
         "segment.bytes"),
        (pb.CreateTopicRequest(topic="big", partitions=1,
                               configs={"max.message.bytes": str(64 * 1024 * 1024)}),
         "max.message.bytes"),
    ],
    ids=["empty-name", "slash", "dot-dot", "zero-partitions", "unknown-config", "bad-value",
         "message-above-request-limit"],
)
def test_bad_create_topic_is_invalid_argument(stub, request_, match):
    rpc_error(stub.CreateTopic, request_, Code.INVALID_ARGUMENT, match)
    assert request_.topic not in [t.topic for t in stub.ListTopics(pb.ListTopicsRequest()).topics]
    assert_serving(stub)


def test_unknown_topic_is_not_found_for_every_partition_rpc(stub):
    rpc_error(stub.DeleteTopic, pb.DeleteTopicRequest(topic="nope"), Code.NOT_FOUND, "nope")
    rpc_error(stub.DescribeTopic, pb.DescribeTopicRequest(topic="nope"), Code.NOT_FOUND)
    rpc_error(stub.Produce, pb.ProduceRequest(
        topic="nope", plain_records=[pb.PlainRecord(value=b"v")]), Code.NOT_FOUND)
    rpc_error(stub.Fetch, pb.FetchRequest(topic="nope"), Code.NOT_FOUND)
    rpc_error(stub.DeleteRecords, pb.DeleteRecordsRequest(topic="nope"), Code.NOT_FOUND)
    # OffsetsForTimes answers per partition (test_service_errors.py): NOT_FOUND in the result.
    [result] = stub.OffsetsForTimes(pb.OffsetsForTimesRequest(
        partitions=[pb.PartitionTimestamp(topic="nope", timestamp_ms=-1)])).results
    assert result.error.code == Code.NOT_FOUND.value[0]
    assert_serving(stub)


def test_unknown_partition_of_a_known_topic_is_not_found(stub, topic):
    rpc_error(stub.Fetch, pb.FetchRequest(topic=topic, partition=1), Code.NOT_FOUND)
    assert_serving(stub)
