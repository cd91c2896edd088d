"""Every LogService method is classified in the one operations table, so none is served
unchecked: this walks the service descriptor, as generated from the .proto."""

import pytest

from seglog.v1 import log_service_pb2 as pb
from seglog_server.rpc.operations import OPERATIONS, Owner, Scope
from seglog_server.rpc.registration import method_handlers
from seglog_server.security import CallKind, Operation

_SERVICE = pb.DESCRIPTOR.services_by_name["LogService"]
_METHODS = list(_SERVICE.methods)


def test_every_method_of_the_service_has_a_row():
    missing = [m.name for m in _METHODS if m.name not in OPERATIONS]
    assert not missing, f"classify {missing} in server/seglog_server/rpc/operations.py"


@pytest.mark.parametrize("method", _METHODS, ids=lambda m: m.name)
def test_each_row_reads_its_topics_from_fields_the_request_has(method):
    row = OPERATIONS[method.name]
    request = getattr(pb, method.input_type.name)()
    if "topic" in request.DESCRIPTOR.fields_by_name:
        request.topic = "t"
    # Calls naming their topics in a list: each topic once (the group RPCs, OffsetsForTimes).
    by_list = {"OffsetsForTimes": "partitions", "FetchOffsets": "partitions", "CommitOffsets": "offsets"}
    if method.name in by_list:
        getattr(request, by_list[method.name]).add(topic="t", partition=0)
        getattr(request, by_list[method.name]).add(topic="t", partition=1)
    if method.name == "Heartbeat":
        request.subscribed_topics.extend(["t", "t"])
    topics = row.topics(request)
    if row.scope is Scope.MESSAGES:  # a stream: each message is checked as its unary twin
        assert topics == ()
        assert OPERATIONS[row.message_method].scope is Scope.TOPICS
        twin = _SERVICE.methods_by_name[row.message_method]
        assert not twin.client_streaming and not twin.server_streaming
    elif row.scope in (Scope.FILTERED, Scope.SOME_TOPIC):
        assert topics == ()
    elif "topic" in request.DESCRIPTOR.fields_by_name or method.name in by_list or method.name == "Heartbeat":
        assert topics == ("t",)
    else:  # named by something else (a snapshot id): every topic
        assert topics == (None,)
    assert isinstance(row.kind(request), CallKind)


def test_the_admin_operations_are_the_ones_that_change_or_remove_data_outside_produce():
    admin = {name for name, row in OPERATIONS.items() if row.operation is Operation.ADMIN}
    assert admin == {"CreateTopic", "DeleteTopic", "AlterTopicConfigs", "DeleteRecords", "CreateSnapshot",
                     "ListCleanable", "CommitCleaned", "DropSnapshot",
                     # partition moves (move_rpcs.py): where a partition's data lives
                     "MovePartition", "CopyPartition", "AbortMove", "TakeOverPartition"}


def test_streams_and_long_polls_hold_their_own_kind_of_slot():
    assert OPERATIONS["Consume"].kind(pb.ConsumeRequest()) is CallKind.STREAM
    assert OPERATIONS["ProduceStream"].kind(pb.ProduceStreamRequest()) is CallKind.STREAM
    assert OPERATIONS["LookupStream"].kind(pb.LookupStreamRequest()) is CallKind.STREAM
    assert OPERATIONS["Fetch"].kind(pb.FetchRequest(max_wait_ms=500)) is CallKind.WAITER
    assert OPERATIONS["Fetch"].kind(pb.FetchRequest()) is CallKind.REQUEST


def test_registration_refuses_a_method_without_a_row(monkeypatch):
    from seglog_server.rpc import registration

    class Servicer:
        def __getattr__(self, name):
            return lambda request, context: None

    monkeypatch.setattr(registration, "OPERATIONS", {k: v for k, v in OPERATIONS.items()
                                                     if k != "Produce"})
    with pytest.raises(LookupError, match="Produce"):
        method_handlers(Servicer())


def _names_a_partition(message, seen=()) -> bool:
    """True when the message type, or one nested in it, has a field named ``partition``."""
    if message.full_name in seen:
        return False
    for field in message.fields:
        if field.name == "partition":
            return True
        if field.message_type is not None and _names_a_partition(field.message_type, (*seen, message.full_name)):
            return True
    return False


@pytest.mark.parametrize("method", _METHODS, ids=lambda m: m.name)
def test_every_method_naming_a_partition_is_routed_to_its_owner_in_cluster_mode(method):
    """Cluster mode answers a partition only where it lives: a method whose request names a
    partition (at any depth) has an owner kind, and an Owner.EACH row reads every partition it
    names, so the boundary's check (cluster_routing.check_request) cannot miss one."""
    row = OPERATIONS[method.name]
    if _names_a_partition(method.input_type):
        assert row.owner is not Owner.NONE, (
            f"{method.name} names a partition: give its row an Owner kind in rpc/operations.py")
    if row.owner is Owner.EACH:
        request = getattr(pb, method.input_type.name)(topic="t", partition=3)
        assert row.partitions(request) == (("t", 3),)
    else:
        assert row.partitions is None
    if row.owner is Owner.MESSAGES:
        assert OPERATIONS[row.message_method].owner in (Owner.EACH, Owner.PER_TARGET)


@pytest.mark.parametrize("method", _METHODS, ids=lambda m: m.name)
def test_every_method_naming_a_group_is_answered_by_the_groups_coordinator(method):
    """A request with a ``group`` field is a group's call: cluster mode answers it only at the
    group's coordinator (Owner.COORDINATOR, rpc/group_routing.py), so a new group RPC cannot be
    served by an instance that does not hold the group's offsets."""
    if "group" in method.input_type.fields_by_name:
        assert OPERATIONS[method.name].owner is Owner.COORDINATOR, (
            f"{method.name} names a group: give its row Owner.COORDINATOR and route it in group_rpcs.py")


def test_the_routed_kinds_are_the_ones_the_cluster_docs_list():
    kinds = {name: row.owner for name, row in OPERATIONS.items() if row.owner is not Owner.NONE}
    assert kinds == {
        "Produce": Owner.EACH, "Fetch": Owner.EACH, "Consume": Owner.EACH, "DeleteRecords": Owner.EACH,
        "ExplainLookup": Owner.EACH, "CreateSnapshot": Owner.EACH,
        "OffsetsForTimes": Owner.PER_TARGET, "DescribeTopic": Owner.DESCRIBE,
        "CommitOffsets": Owner.COORDINATOR, "FetchOffsets": Owner.COORDINATOR, "Heartbeat": Owner.COORDINATOR,
        "DescribeGroup": Owner.COORDINATOR, "DeleteGroup": Owner.COORDINATOR,
        "ProduceStream": Owner.MESSAGES, "LookupStream": Owner.MESSAGES,
    }
