"""Bearer tokens and the ACL against a real service process: every RPC of LogService, called by
a principal the ACL allows and by one it does not."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import grpc
import pytest
from tests.support.integration_helpers import ServiceProcess, make_batch

from seglog import Admin, Consumer, Producer
from seglog.errors import AuthenticationError, AuthorizationError
from seglog.v1 import log_service_pb2 as pb
from seglog_server.security.token_file import create_token, format_entry

pytestmark = pytest.mark.integration

_SERVICE = pb.DESCRIPTOR.services_by_name["LogService"]
ACL = """
[[allow]]
principals = ["root"]
operations = ["read", "write", "admin"]
topics = ["*"]

[[allow]]
principals = ["nobody"]
operations = ["describe"]
topics = ["unrelated"]

[[allow]]
principals = ["reader"]
operations = ["read"]
topics = ["acl-"]   # exact name "acl-": matches nothing below

[[allow]]
principals = ["reader"]
operations = ["read"]
topics = ["shared.*"]
"""


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A service with tokens for root, nobody and reader, and the ACL above."""
    workdir = tmp_path_factory.mktemp("secured")
    tokens = {}
    lines = []
    for name in ("root", "nobody", "reader"):
        tokens[name], entry = create_token(name)
        lines.append(format_entry(entry))
    (workdir / "tokens").write_text("# test tokens\n" + "".join(lines))
    (workdir / "acl.toml").write_text(ACL)
    service = ServiceProcess(workdir, [workdir / "data"], [
        "--auth-tokens", str(workdir / "tokens"), "--acl", str(workdir / "acl.toml"),
    ]).start()
    service.tokens = tokens
    root = (("authorization", f"Bearer {tokens['root']}"),)
    for topic in ("acl-topic", "shared.events", "unrelated"):
        service.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1), timeout=10,
                                 metadata=root)
    service.stub.Produce(pb.ProduceRequest(topic="acl-topic", partition=0,
                                           records=make_batch([b"x"])), timeout=10, metadata=root)
    yield service
    assert service.stop() == 0, service.log()


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


# -- tokens ---------------------------------------------------------------------------------------


def test_the_right_token_authenticates_and_wrong_ones_fail_alike(secured):
    stub = secured.stub
    stub.ListTopics(pb.ListTopicsRequest(), timeout=10, metadata=_bearer(secured.tokens["root"]))
    key_part, _, secret = secured.tokens["root"].rpartition("_")
    wrong = {
        "missing": (),
        "wrong secret": _bearer(f"{key_part}_{'A' * len(secret)}"),
        "unknown key id": _bearer("seglog_0123456789ab_" + secret),
        "malformed": _bearer("hunter2"),
        "wrong scheme": (("authorization", f"Basic {secured.tokens['root']}"),),
    }
    details = set()
    for name, metadata in wrong.items():
        with pytest.raises(grpc.RpcError) as info:
            stub.ListTopics(pb.ListTopicsRequest(), timeout=10, metadata=metadata)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, name
        details.add(info.value.details())
    assert len(details) == 1, details  # no hint of which part was wrong
    assert "/" not in details.pop()  # no server path in the message


def test_health_and_reflection_need_no_token(secured):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    health = health_pb2_grpc.HealthStub(secured.channel)
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == \
        health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(secured.channel)
    responses = reflection.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
    names = [s.name for s in next(responses).list_services_response.service]
    assert "seglog.v1.LogService" in names


def test_clients_send_their_token_from_the_option_or_the_environment(secured, monkeypatch):
    with Producer(secured.address, token=secured.tokens["root"]) as producer:
        producer.send("acl-topic", b"from the producer").result(timeout=10)
    monkeypatch.setenv("SEGLOG_TOKEN", secured.tokens["reader"])
    with Consumer(secured.address, "shared.events", 0, start="earliest") as consumer:
        assert consumer.poll(timeout_ms=200) == []
    monkeypatch.delenv("SEGLOG_TOKEN")
    with Admin(secured.address) as admin, pytest.raises(AuthenticationError):
        admin.list_topics()


def test_token_create_command_appends_a_hash_that_sighup_loads(tmp_path, start_service):
    tokens = tmp_path / "tokens"
    tokens.write_text("")
    service = start_service(args=["--auth-tokens", str(tokens)])
    created = subprocess.run(
        [sys.executable, "-m", "seglog_cli", "token", "create", "ci-bot", "--file", str(tokens)],
        capture_output=True, text=True, timeout=60, check=True,
    )
    token = created.stdout.strip()
    assert token.startswith("seglog_") and token not in tokens.read_text()
    assert tokens.read_text().startswith("ci-bot ")
    with Admin(service.address, token=token) as admin:
        with pytest.raises(AuthenticationError):  # not loaded yet
            admin.list_topics()
        service.signal(signal.SIGHUP)
        _wait_for_log(service, "security files reloaded")
        assert admin.list_topics() == []


# -- every RPC, allowed and denied ----------------------------------------------------------------


def _request(method, topic: str):
    """A request for ``method`` naming ``topic`` wherever it has a topic (built from the
    descriptor, so RPCs added later are covered without editing this test). For a stream: the
    request of its unary twin, which ``_call`` sends as the stream's one message."""
    if method.client_streaming:
        return _request(_twin(method), topic)
    request = getattr(pb, method.input_type.name)()
    fields = request.DESCRIPTOR.fields_by_name
    if "topic" in fields:
        request.topic = topic
    if "records" in fields:
        request.records = make_batch([b"acl"])
    if "partitions" in fields and method.name == "OffsetsForTimes":
        request.partitions.add(topic=topic, partition=0, timestamp_ms=-1)
    elif "group" in fields:  # the consumer-group RPCs name their topics in lists
        request.group = "acl-group"
        if "partitions" in fields:
            request.partitions.add(topic=topic, partition=0)
        if "offsets" in fields:
            request.offsets.add(topic=topic, partition=0, offset=1)
        if "subscribed_topics" in fields:
            request.subscribed_topics.append(topic)
    elif "partitions" in fields:
        request.partitions = 1
    if "position" in fields:
        request.position = pb.START_POSITION_EARLIEST
    if "snapshot_id" in fields:
        request.snapshot_id = f"{topic}-0-0-0000"
    return request


def _twin(method):
    from seglog_server.rpc.operations import OPERATIONS

    return _SERVICE.methods_by_name[OPERATIONS[method.name].message_method]


class _StreamRefusal(grpc.RpcError):
    """A request a bidirectional stream refused (its StreamError), shaped as a failed call."""

    def __init__(self, error):
        self._error = error

    def code(self):
        return {c.value[0]: c for c in grpc.StatusCode}[self._error.code]

    def details(self):
        return self._error.message

    def trailing_metadata(self):
        return (("seglog-error", self._error.error_class),)


def _call(stub, method, request, token):
    rpc = getattr(stub, method.name)
    if method.client_streaming:  # a stream: one message holding its unary twin's request
        message = getattr(pb, method.input_type.name)(correlation_id=7)
        field = {"Produce": "produce", "OffsetsForTimes": "offsets_for_times"}[_twin(method).name]
        getattr(message, field).CopyFrom(request)
        answer = next(rpc(iter([message]), timeout=10, metadata=_bearer(token)))
        assert answer.correlation_id == 7
        if answer.HasField("error"):
            raise _StreamRefusal(answer.error)
        return answer
    if method.server_streaming:
        stream = rpc(request, timeout=3, metadata=_bearer(token))
        return next(stream)
    return rpc(request, timeout=10, metadata=_bearer(token))


_TOPIC_FOR = {"CreateTopic": "acl-created", "DeleteTopic": "acl-doomed"}


@pytest.mark.parametrize("method", list(_SERVICE.methods), ids=lambda m: m.name)
def test_every_rpc_is_allowed_by_a_matching_rule(secured, method):
    topic = _TOPIC_FOR.get(method.name, "acl-topic")
    if method.name == "DeleteTopic":
        secured.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1), timeout=10,
                                 metadata=_bearer(secured.tokens["root"]))
    try:
        _call(secured.stub, method, _request(method, topic), secured.tokens["root"])
    except grpc.RpcError as error:
        # Allowed: whatever the call's own outcome (a cleaning call on a non-compacted topic may
        # be refused by the storage), never an authentication or authorization failure.
        assert error.code() not in (grpc.StatusCode.PERMISSION_DENIED,
                                    grpc.StatusCode.UNAUTHENTICATED), error.details()


@pytest.mark.parametrize("method", list(_SERVICE.methods), ids=lambda m: m.name)
def test_every_rpc_is_denied_without_a_rule(secured, method):
    from seglog_server.rpc.operations import OPERATIONS, Scope

    row = OPERATIONS[method.name]
    request = _request(method, "acl-topic")
    if row.scope is Scope.MESSAGES:  # each message is refused as its twin would be
        row = OPERATIONS[row.message_method]
    if row.scope is Scope.FILTERED and method.name == "DescribeGroup":
        # Allowed, but a description shows only the topics the caller may describe.
        response = _call(secured.stub, method, request, secured.tokens["nobody"])
        assert all(p.topic == "unrelated" for p in response.partitions)
        return
    if row.scope is Scope.FILTERED:  # ListTopics: allowed, but shows only what may be described
        response = _call(secured.stub, method, request, secured.tokens["nobody"])
        assert [t.topic for t in response.topics] == ["unrelated"]
        return
    if method.name == "ListGroups":
        # Describe on some topic: 'nobody' may describe 'unrelated', so the listing is allowed
        # (group names are not filtered: the ACL has no group resource, docs/consumer-groups.md).
        # Answered, not refused: the groups other tests of this module made may be listed.
        response = _call(secured.stub, method, request, secured.tokens["nobody"])
        assert isinstance(response, pb.ListGroupsResponse)
        return
    with pytest.raises(grpc.RpcError) as info:
        _call(secured.stub, method, request, secured.tokens["nobody"])
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, info.value.details()
    details = info.value.details()
    assert "'nobody'" in details and row.operation.value in details
    if row.scope is Scope.SOME_TOPIC:  # InitProducerId: write on no topic at all
        assert "any topic" in details
    else:
        assert ("every topic" if None in row.topics(request) else "'acl-topic'") in details
    assert dict(info.value.trailing_metadata())["seglog-error"] == "PermissionDeniedError"


def test_prefix_rules_and_implied_describe(secured):
    reader = secured.tokens["reader"]
    listed = secured.stub.ListTopics(pb.ListTopicsRequest(), timeout=10, metadata=_bearer(reader))
    assert [t.topic for t in listed.topics] == ["shared.events"]  # read implies describe
    with Consumer(secured.address, "shared.events", 0, start="earliest", token=reader) as consumer:
        consumer.poll(timeout_ms=100)
    with Producer(secured.address, token=reader) as producer:
        # The idempotent producer's InitProducerId is refused first: 'reader' writes no topic.
        with pytest.raises(AuthorizationError, match="'reader'.*write any topic"):
            producer.send("shared.events", b"no", partition=0).result(timeout=10)
    with Producer(secured.address, token=reader, enable_idempotence=False) as producer:
        with pytest.raises(AuthorizationError, match="'reader'.*write.*'shared.events'"):
            producer.send("shared.events", b"no", partition=0).result(timeout=10)


def _wait_for_log(service, text: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in service.log():
        assert time.monotonic() < deadline, f"{text!r} not logged:\n{service.log()}"
        time.sleep(0.05)


def test_streams_authenticate_once_at_open_and_check_each_message_against_the_acl(secured):
    """A stream without a valid token ends UNAUTHENTICATED before any answer; an authenticated
    stream answers each message as its principal may: denied ones refused, the stream going on."""
    lookup = pb.OffsetsForTimesRequest(partitions=[pb.PartitionTimestamp(topic="shared.events", timestamp_ms=-1)])
    message = pb.LookupStreamRequest(correlation_id=1, offsets_for_times=lookup)
    for metadata in ((), _bearer("not-a-token")):
        with pytest.raises(grpc.RpcError) as info:
            list(secured.stub.LookupStream(iter([message]), timeout=10, metadata=metadata))
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    reader = _bearer(secured.tokens["reader"])
    denied_lookup = pb.OffsetsForTimesRequest(partitions=[pb.PartitionTimestamp(topic="acl-topic", timestamp_ms=-1)])
    answers = list(secured.stub.LookupStream(iter([
        message,
        pb.LookupStreamRequest(correlation_id=2, offsets_for_times=denied_lookup),
        pb.LookupStreamRequest(correlation_id=3, offsets_for_times=lookup),
    ]), timeout=10, metadata=reader))
    assert [a.correlation_id for a in answers] == [1, 2, 3]
    assert not answers[0].HasField("error") and not answers[2].HasField("error")
    assert answers[1].error.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert "'reader'" in answers[1].error.message and "'acl-topic'" in answers[1].error.message
    produced = list(secured.stub.ProduceStream(iter([pb.ProduceStreamRequest(
        correlation_id=4, produce=pb.ProduceRequest(topic="shared.events", records=make_batch([b"no"])),
    )]), timeout=10, metadata=reader))
    assert produced[0].error.code == grpc.StatusCode.PERMISSION_DENIED.value[0]  # read, not write


def test_a_packed_lookup_is_checked_against_the_acl_for_every_topic_it_names(secured):
    """OffsetsForTimes' packed form names its topics in its entries: each is checked as the old
    form's targets are, unary and on the LookupStream; a topic the principal may not describe
    refuses the whole request, wherever in it."""
    reader = _bearer(secured.tokens["reader"])
    allowed = pb.PartitionTimestamps(topic="shared.events", partition=0, timestamps_ms=[-1, -2])
    denied = pb.PartitionTimestamps(topic="acl-topic", partition=0, timestamps_ms=[-1])
    answer = secured.stub.OffsetsForTimes(pb.OffsetsForTimesRequest(packed=[allowed]), timeout=10, metadata=reader)
    assert [len(entry.offsets) for entry in answer.packed] == [2]
    for request in (pb.OffsetsForTimesRequest(packed=[allowed, denied]),
                    pb.OffsetsForTimesRequest(partitions=[pb.PartitionTimestamp(topic="shared.events")],
                                              packed=[denied])):
        with pytest.raises(grpc.RpcError) as info:
            secured.stub.OffsetsForTimes(request, timeout=10, metadata=reader)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "'acl-topic'" in info.value.details()
        [streamed] = secured.stub.LookupStream(iter([pb.LookupStreamRequest(correlation_id=5, offsets_for_times=request)]),
                                               timeout=10, metadata=reader)
        assert streamed.error.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
        assert "'acl-topic'" in streamed.error.message
