"""AlterTopicConfigs over gRPC on a real service process: SET and DELETE, validate_only, the refusals
(each a specific status naming the key, the topic unchanged, the service serving), and the change
surviving a restart."""

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.integration_helpers import ServiceProcess, assert_serving, error_class, rpc_error

from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration
Code = grpc.StatusCode
DEFAULT_SEGMENT_BYTES = "1073741824"


def _configs(stub, topic):
    return dict(stub.DescribeTopic(pb.DescribeTopicRequest(topic=topic)).configs)


def test_set_and_delete_answer_and_describe_the_new_configs(stub):
    stub.CreateTopic(pb.CreateTopicRequest(topic="alter-me", partitions=2,
                                           configs={"segment.bytes": "65536", "retention.ms": "1000"}))
    answer = stub.AlterTopicConfigs(pb.AlterTopicConfigsRequest(
        topic="alter-me", set_configs={"retention.ms": "86400000", "cleanup.policy": "compact"},
        delete_configs=["segment.bytes"]))
    assert answer.topic == "alter-me"
    assert (answer.configs["retention.ms"], answer.configs["cleanup.policy"]) == ("86400000", "compact")
    assert answer.configs["segment.bytes"] == DEFAULT_SEGMENT_BYTES  # back to the service default
    described = stub.DescribeTopic(pb.DescribeTopicRequest(topic="alter-me"))
    assert dict(described.configs) == dict(answer.configs)
    assert all(dict(p.configs) == dict(answer.configs) for p in described.partitions)


def test_validate_only_answers_the_result_and_changes_nothing(stub, topic):
    before = _configs(stub, topic)
    answer = stub.AlterTopicConfigs(pb.AlterTopicConfigsRequest(
        topic=topic, set_configs={"retention.ms": "5"}, validate_only=True))
    assert answer.configs["retention.ms"] == "5"
    assert _configs(stub, topic) == before


@pytest.mark.parametrize(
    ("set_configs", "delete", "match"),
    [
        ({"no.such": "1"}, [], "unknown topic config 'no.such'"),
        ({}, ["no.such"], "unknown topic config 'no.such'"),
        ({"segment.bytes": "x"}, [], "segment.bytes must be an integer"),
        ({"retention.ms": "1"}, ["retention.ms"], "both set and deleted"),
        ({"max.message.bytes": str(64 * 1024 * 1024)}, [], "max.message.bytes"),
        ({"remote.storage.enable": "true"}, [], "remote.storage.enable is fixed at creation"),
    ],
    ids=["unknown-set", "unknown-delete", "bad-value", "set-and-delete", "message-above-request-limit",
         "remote-storage"],
)
def test_a_bad_change_is_invalid_argument_and_changes_nothing(stub, topic, set_configs, delete, match):
    before = _configs(stub, topic)
    rpc_error(stub.AlterTopicConfigs, pb.AlterTopicConfigsRequest(
        topic=topic, set_configs=set_configs, delete_configs=delete), Code.INVALID_ARGUMENT, match)
    assert _configs(stub, topic) == before
    assert_serving(stub)


def test_unknown_topic_is_not_found_and_an_empty_name_invalid(stub):
    error = rpc_error(stub.AlterTopicConfigs, pb.AlterTopicConfigsRequest(
        topic="nope", set_configs={"retention.ms": "1"}), Code.NOT_FOUND, "nope")
    assert error_class(error) == "UnknownTopicOrPartitionError"
    rpc_error(stub.AlterTopicConfigs, pb.AlterTopicConfigsRequest(), Code.INVALID_ARGUMENT, "topic is empty")


def test_the_internal_topic_configs_are_the_services(stub):
    rpc_error(stub.AlterTopicConfigs, pb.AlterTopicConfigsRequest(
        topic="__consumer_offsets", set_configs={"retention.ms": "1"}), Code.PERMISSION_DENIED,
        "internal topic")


@pytest.mark.slow  # two service starts
def test_a_change_survives_a_restart(tmp_path):
    dirs = [tmp_path / "data0", tmp_path / "data1"]
    service = ServiceProcess(tmp_path, dirs, []).start()
    try:
        service.stub.CreateTopic(pb.CreateTopicRequest(topic="kept", partitions=2))
        service.stub.AlterTopicConfigs(pb.AlterTopicConfigsRequest(
            topic="kept", set_configs={"retention.ms": "12345", "cleanup.policy": "delete,compact"}))
    finally:
        assert service.stop() == 0, service.log()
    again = ServiceProcess(tmp_path, dirs, []).start()
    try:
        configs = _configs(again.stub, "kept")
        assert (configs["retention.ms"], configs["cleanup.policy"]) == ("12345", "compact,delete")
    finally:
        assert again.stop() == 0, again.log()


_NAMES = st.one_of(st.sampled_from(["retention.ms", "segment.bytes", "cleanup.policy", "max.message.bytes",
                                    "flush.messages", "remote.storage.enable", "no.such"]), st.text(max_size=8))
_VALUES = st.one_of(st.sampled_from(["1", "-1", "0", "compact", "true", "x", " 5\n", "2147483648"]),
                    st.text(max_size=10))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(set_configs=st.dictionaries(_NAMES, _VALUES, max_size=3), delete=st.lists(_NAMES, max_size=2))
def test_any_change_is_answered_ok_or_invalid_argument_and_a_refusal_changes_nothing(stub, set_configs, delete):
    """Random key/value maps: only OK or INVALID_ARGUMENT come back; a refused change leaves the
    described configs as they were, an accepted one is what DescribeTopic shows."""
    before = _configs(stub, "fuzzed")
    try:
        answer = stub.AlterTopicConfigs(pb.AlterTopicConfigsRequest(
            topic="fuzzed", set_configs=set_configs, delete_configs=delete), timeout=10)
    except grpc.RpcError as error:
        assert error.code() == Code.INVALID_ARGUMENT, error.details()
        assert _configs(stub, "fuzzed") == before
        return
    assert _configs(stub, "fuzzed") == dict(answer.configs)


@pytest.fixture(scope="module", autouse=True)
def _fuzzed_topic(service):
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="fuzzed", partitions=2), timeout=10)
