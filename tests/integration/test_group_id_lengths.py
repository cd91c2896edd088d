"""Client-sent ids and names the group coordinator writes into __consumer_offsets records, each
past its limit, over gRPC on a real service: INVALID_ARGUMENT naming the field and the limit
(once INTERNAL: the record encoder's ValueError after the group had changed), nothing changed,
and the same call at the limit is accepted."""

from __future__ import annotations

import grpc
import pytest
from tests.support.integration_helpers import assert_serving, rpc_error

from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration

ID_MAX = 32_767  # Kafka's STRING: an int16 length
TOPIC_MAX = 249  # a topic name's limit


def _join(topic: str, **fields) -> pb.HeartbeatRequest:
    request = dict(group=f"g-{topic}", member_epoch=0, subscribed_topics=[topic])
    request.update(fields)
    return pb.HeartbeatRequest(**request)


# field -> (a request with that field one byte past its limit, the same at the limit, message)
HEARTBEAT_FIELDS = {
    "group id": (lambda t, n: _join(t, group="g" * n), ID_MAX),
    "member id": (lambda t, n: _join(t, member_id="m" * n), ID_MAX),
    "instance id": (lambda t, n: _join(t, instance_id="i" * n), ID_MAX),
    "subscribed topic": (lambda t, n: _join(t, subscribed_topics=[t, "s" * n]), TOPIC_MAX),
    "client id": (lambda t, n: _join(t, client_id="c" * n), 1024),
}


@pytest.mark.parametrize("field", sorted(HEARTBEAT_FIELDS))
def test_a_heartbeat_field_past_its_limit_is_invalid_argument_and_changes_nothing(stub, field):
    make, limit = HEARTBEAT_FIELDS[field]
    topic = "ids-" + field.replace(" ", "-")
    stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1))
    too_long = make(topic, limit + 1)
    rpc_error(stub.Heartbeat, too_long, grpc.StatusCode.INVALID_ARGUMENT, f"{field} is {limit + 1} bytes")
    rpc_error(stub.Heartbeat, too_long, grpc.StatusCode.INVALID_ARGUMENT, f"at most {limit}")
    at_limit = make(topic, limit)
    assert stub.DescribeGroup(pb.DescribeGroupRequest(group=at_limit.group), timeout=10).members == []
    answer = stub.Heartbeat(at_limit, timeout=10)
    assert answer.member_epoch > 0 and answer.assignment == [pb.GroupPartition(topic=topic, partition=0)]
    assert len(stub.DescribeGroup(pb.DescribeGroupRequest(group=at_limit.group), timeout=10).members) == 1


def test_a_multibyte_id_is_measured_in_utf8_bytes(stub):
    stub.CreateTopic(pb.CreateTopicRequest(topic="ids-utf8", partitions=1))
    rpc_error(stub.Heartbeat, _join("ids-utf8", group="\u00e9" * 16_384), grpc.StatusCode.INVALID_ARGUMENT,
              f"group id is 32768 bytes (UTF-8): at most {ID_MAX}")
    assert stub.Heartbeat(_join("ids-utf8", group="\u00e9" * 16_383), timeout=10).member_epoch > 0


def _commit(group="g-commit", member_id="", topic="ids-commit", metadata="") -> pb.CommitOffsetsRequest:
    return pb.CommitOffsetsRequest(group=group, member_id=member_id, member_epoch=-1, offsets=[
        pb.OffsetToCommit(topic=topic, partition=0, offset=5, metadata=metadata)])


def test_commit_fields_past_their_limits_are_invalid_argument_and_change_nothing(stub):
    stub.CreateTopic(pb.CreateTopicRequest(topic="ids-commit", partitions=1))
    code = grpc.StatusCode.INVALID_ARGUMENT
    rpc_error(stub.CommitOffsets, _commit(group="g" * (ID_MAX + 1)), code, f"group id is {ID_MAX + 1} bytes")
    rpc_error(stub.CommitOffsets, _commit(member_id="m" * (ID_MAX + 1)), code, f"member id is {ID_MAX + 1} bytes")
    rpc_error(stub.CommitOffsets, _commit(topic="t" * (TOPIC_MAX + 1)), code, f"topic is {TOPIC_MAX + 1} bytes")
    rpc_error(stub.CommitOffsets, _commit(metadata="x" * 4097), code, "above 4096 bytes")
    assert not stub.FetchOffsets(pb.FetchOffsetsRequest(group="g-commit"), timeout=10).offsets
    stub.CommitOffsets(_commit(group="c" * ID_MAX, metadata="x" * 4096), timeout=10)
    fetched = stub.FetchOffsets(pb.FetchOffsetsRequest(group="c" * ID_MAX), timeout=10).offsets
    assert [(o.topic, o.offset) for o in fetched] == [("ids-commit", 5)]


def test_other_group_calls_refuse_a_group_id_past_its_limit(stub):
    group, code = "g" * (ID_MAX + 1), grpc.StatusCode.INVALID_ARGUMENT
    rpc_error(stub.DeleteGroup, pb.DeleteGroupRequest(group=group), code, f"at most {ID_MAX}")
    rpc_error(stub.DescribeGroup, pb.DescribeGroupRequest(group=group), code, f"at most {ID_MAX}")
    rpc_error(stub.FetchOffsets, pb.FetchOffsetsRequest(group=group), code, f"at most {ID_MAX}")
    assert_serving(stub)


def test_a_refusal_echoing_ids_at_their_limit_reaches_the_client_cut(stub):
    """Refusals name the ids they refuse: a group id and member id of 32,767 bytes each once made
    a message past the client's 16 KiB limit on trailers ("Stream removed", not the refusal).
    The boundary cuts every message to 1,500 UTF-8 bytes."""
    stub.CreateTopic(pb.CreateTopicRequest(topic="ids-echoed", partitions=1))
    group = "\u00e9" * 16_383  # 32,766 UTF-8 bytes: 196,596 characters once percent-encoded
    stub.Heartbeat(_join("ids-echoed", group=group), timeout=10)
    error = rpc_error(stub.CommitOffsets, _commit(group=group, topic="ids-echoed"),
                      grpc.StatusCode.FAILED_PRECONDITION, "group '\u00e9\u00e9")
    assert "message cut" in error.details() and len(error.details().encode()) <= 1500
    error = rpc_error(stub.Heartbeat, _join("ids-echoed", group=group, member_id="m" * ID_MAX, member_epoch=3),
                      grpc.StatusCode.NOT_FOUND, "member 'mmm")
    assert "message cut" in error.details() and len(error.details().encode()) <= 1500


@pytest.mark.parametrize("char", ["\u20ac", "\U0001f600"], ids=["3-byte", "4-byte"])
def test_many_refusals_echoing_wide_characters_each_arrive_as_their_own_status(stub, char):
    """A message cut to 1,024 characters of 3- or 4-byte characters once percent-encoded to 9-12
    KiB, past the client's 8 KiB soft limit on metadata: 10 of 60 such refusals reached the client
    as RESOURCE_EXHAUSTED 'Stream removed', which it retries as an overload. Cut by UTF-8 bytes,
    every one arrives as the refusal it is, the cut never splitting a character."""
    topic = f"ids-wide-{len(char.encode())}"
    stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1))
    group = char * (ID_MAX // len(char.encode()))
    stub.Heartbeat(_join(topic, group=group), timeout=10)
    answers = []
    for _ in range(60):
        with pytest.raises(grpc.RpcError) as raised:
            stub.CommitOffsets(_commit(group=group, topic=topic), timeout=10)
        answers.append((raised.value.code(), raised.value.details()))
    assert [code for code, _ in answers] == [grpc.StatusCode.FAILED_PRECONDITION] * 60, {
        (code, details[:80]) for code, details in answers if code != grpc.StatusCode.FAILED_PRECONDITION}
    for _, details in answers:
        assert details.startswith("group '" + char * 300) and "\ufffd" not in details
        assert "message cut" in details and len(details.encode()) <= 1500
    assert_serving(stub)
