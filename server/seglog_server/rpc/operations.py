"""The one table from RPC method to what it does: its ACL operation, the topics it touches, the
kind of concurrency slot it holds, and the byte quota it uses.

Every method of seglog.v1.LogService must have a row: ``registration.method_handlers`` refuses
to serve a method without one, and a test walks the service descriptor, so a new RPC cannot be
served unclassified. Rows for methods the .proto does not (yet) declare are harmless.

``topics(request)`` returns the topic names the ACL checks; ``None`` among them stands for
"every topic" (a call by snapshot id, or ListCleanable without a topic): it needs a rule for "*".
With ``FILTERED`` nothing is checked up front: the servicer shows only what the caller may see
(ListTopics).

``owner`` says how cluster mode (cluster_routing.py) routes the call: a request that names a
partition is answered only by that partition's owner, never from another instance's empty local
copy. ``Owner.EACH`` rows are checked at the boundary (boundary.py) on every partition their
``partitions(request)`` names, before the handler runs; the other kinds say where the handler
answers instead. A test walks the .proto: every request naming a partition has a kind other than
``Owner.NONE``, so a new RPC cannot be served from the wrong instance unclassified.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from seglog_server.security import CallKind, Operation

__all__ = ["OPERATIONS", "Owner", "Quota", "RpcOperation", "Scope", "operation_of"]


class Scope(enum.Enum):
    TOPICS = "topics"  # checked on each topic the request names (None: every topic)
    FILTERED = "filtered"  # the response shows only what the caller may see
    # A bidirectional stream: nothing is checked at open but the credentials; each message is
    # checked against the row of its unary twin (``message_method``), as that call would be.
    MESSAGES = "messages"
    SOME_TOPIC = "some_topic"  # allowed when the operation is granted on at least one topic


class Owner(enum.Enum):
    """Cluster mode: which instance may answer a call about a partition (docs/cluster.md)."""

    NONE = "none"  # names no partition
    # Every partition named must be this instance's: otherwise the whole call is refused with
    # the owner's hint (FAILED_PRECONDITION, or UNAVAILABLE for a gone owner), at the boundary.
    EACH = "each"
    # Each target is answered on its own (OffsetsForTimes, as Kafka's ListOffsets answers per
    # partition): a target owned elsewhere gets a per-target error carrying the owner's hint.
    PER_TARGET = "per_target"
    # A topic-wide description: each partition from the metadata cache (owner, epoch), and the
    # offsets only of the partitions this instance owns.
    DESCRIBE = "describe"
    # A consumer group's call: answered only by the group's coordinator, the owner of the
    # group's __consumer_offsets partition (partition_for(group), rpc/group_routing.py), and
    # refused elsewhere with that owner's hint, as EACH is; checked in the handler, which may
    # first create the offsets topic in the cluster. The partitions the request names are of the
    # group's offsets, not logs read here; the log ends the coordinator reads for lag are those
    # of partitions this instance owns, unknown (-1) for the others.
    COORDINATOR = "coordinator"
    # A stream: each message is routed as its unary twin (``message_method``).
    MESSAGES = "messages"


class Quota(enum.StrEnum):  # StrEnum: a dict key on every call (hashed in C, not Python)
    NONE = "none"
    PRODUCE = "produce"  # charged the request's bytes before it runs
    FETCH = "fetch"  # charged each response's bytes before it is sent


@dataclass(frozen=True)
class RpcOperation:
    operation: Operation
    scope: Scope
    topics: Callable[[Any], tuple[str | None, ...]]
    kind: Callable[[Any], CallKind]
    quota: Quota = Quota.NONE
    message_method: str | None = None  # Scope.MESSAGES: each message is checked as this call
    owner: Owner = Owner.NONE
    # Owner.EACH: the (topic, partition) pairs the request names.
    partitions: Callable[[Any], tuple[tuple[str, int], ...]] | None = None


def _topic(request: Any) -> tuple[str, ...]:
    return (request.topic,)


def _no_topic(request: Any) -> tuple[str | None, ...]:
    return ()


def _every_topic(request: Any) -> tuple[str | None, ...]:
    return (None,)


def _topic_or_every(request: Any) -> tuple[str | None, ...]:
    return (request.topic,) if request.topic else (None,)


def _partition(request: Any) -> tuple[tuple[str, int], ...]:
    return ((request.topic, request.partition),)


def _partition_topics(request: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(target.topic for target in request.partitions))


def _lookup_topics(request: Any) -> tuple[str, ...]:
    """OffsetsForTimes' topics: of its targets in both forms (``partitions`` and ``packed``)."""
    return tuple(dict.fromkeys([*(target.topic for target in request.partitions),
                                *(entry.topic for entry in request.packed)]))


def _offset_topics(request: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(entry.topic for entry in request.offsets))


def _subscribed_topics(request: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(request.subscribed_topics))


def _request(request: Any) -> CallKind:
    return CallKind.REQUEST


def _fetch_kind(request: Any) -> CallKind:
    # A Fetch that may wait at the tail is a long-poll waiter; one that answers at once is not.
    return CallKind.WAITER if request.max_wait_ms > 0 else CallKind.REQUEST


def _stream(request: Any) -> CallKind:
    return CallKind.STREAM


_READ, _WRITE, _ADMIN, _DESCRIBE = Operation.READ, Operation.WRITE, Operation.ADMIN, Operation.DESCRIBE
_EACH, _COORDINATOR = Owner.EACH, Owner.COORDINATOR

OPERATIONS: Mapping[str, RpcOperation] = {
    # -- admin ------------------------------------------------------------------------------
    "CreateTopic": RpcOperation(_ADMIN, Scope.TOPICS, _topic, _request),
    "DeleteTopic": RpcOperation(_ADMIN, Scope.TOPICS, _topic, _request),
    "ListTopics": RpcOperation(_DESCRIBE, Scope.FILTERED, _no_topic, _request),
    "DescribeTopic": RpcOperation(_DESCRIBE, Scope.TOPICS, _topic, _request, owner=Owner.DESCRIBE),
    # Kafka's ALTER_CONFIGS on the topic: admin here (seglog's admin is Kafka's ALTER and
    # ALTER_CONFIGS); any instance answers it (the change goes through etcd's topic record).
    "AlterTopicConfigs": RpcOperation(_ADMIN, Scope.TOPICS, _topic, _request),
    # -- data -------------------------------------------------------------------------------
    "Produce": RpcOperation(_WRITE, Scope.TOPICS, _topic, _request, Quota.PRODUCE, owner=_EACH, partitions=_partition),
    "Fetch": RpcOperation(_READ, Scope.TOPICS, _topic, _fetch_kind, Quota.FETCH, owner=_EACH, partitions=_partition),
    "Consume": RpcOperation(_READ, Scope.TOPICS, _topic, _stream, Quota.FETCH, owner=_EACH, partitions=_partition),
    # Offsets are metadata (Kafka's ListOffsets needs DESCRIBE on the topic).
    "OffsetsForTimes": RpcOperation(_DESCRIBE, Scope.TOPICS, _lookup_topics, _request, owner=Owner.PER_TARGET),
    "DeleteRecords": RpcOperation(_ADMIN, Scope.TOPICS, _topic, _request, owner=_EACH, partitions=_partition),
    # An index lookup's path (segments, index slots, positions): metadata, not record content.
    "ExplainLookup": RpcOperation(_DESCRIBE, Scope.TOPICS, _topic, _request, owner=_EACH, partitions=_partition),
    # A producer id grants nothing by itself (each Produce is checked for write on its topic);
    # as in Kafka since KIP-679, a caller allowed to write to some topic may have one.
    "InitProducerId": RpcOperation(_WRITE, Scope.SOME_TOPIC, _no_topic, _request),
    # -- consumer groups (group_rpcs.py). The ACL has topics only, no group resource: a commit
    # needs read on each topic it commits (Kafka: READ on the group and the topic), a fetch of
    # offsets describe on the topics named (without names the answer shows only the topics the
    # caller may describe), a heartbeat read on the subscribed topics.
    "CommitOffsets": RpcOperation(_READ, Scope.TOPICS, _offset_topics, _request, owner=_COORDINATOR),
    "FetchOffsets": RpcOperation(_DESCRIBE, Scope.TOPICS, _partition_topics, _request, owner=_COORDINATOR),
    "Heartbeat": RpcOperation(_READ, Scope.TOPICS, _subscribed_topics, _request, owner=_COORDINATOR),
    # Operators' views: group names for a caller who may describe some topic (in cluster mode the
    # groups this instance coordinates: a client asks every instance); a group's description
    # shows only the partitions of topics the caller may describe.
    "ListGroups": RpcOperation(_DESCRIBE, Scope.SOME_TOPIC, _no_topic, _request),
    "DescribeGroup": RpcOperation(_DESCRIBE, Scope.FILTERED, _no_topic, _request, owner=_COORDINATOR),
    # Deleting a group deletes its offsets: read on some topic at the gate, then read on every
    # topic the group has offsets on (group_rpcs.py, under the coordinator's lock).
    "DeleteGroup": RpcOperation(_READ, Scope.SOME_TOPIC, _no_topic, _request, owner=_COORDINATOR),
    # -- seglog.v1.ClusterService (cluster_rpcs.py): the answer shows only describable topics -----
    "Metadata": RpcOperation(_DESCRIBE, Scope.FILTERED, _no_topic, _request),
    # -- offline cleaning (admin: they replace a partition's segments) ---------------------------
    "CreateSnapshot": RpcOperation(_ADMIN, Scope.TOPICS, _topic, _request, owner=_EACH, partitions=_partition),
    "ListCleanable": RpcOperation(_ADMIN, Scope.TOPICS, _topic_or_every, _request),
    # By snapshot id: the topic is not in the request, so these need admin on every topic.
    "CommitCleaned": RpcOperation(_ADMIN, Scope.TOPICS, _every_topic, _request),
    "DropSnapshot": RpcOperation(_ADMIN, Scope.TOPICS, _every_topic, _request),
    # -- streams (rpc/streams.py): a stream slot at open, each message checked as its twin -------
    # Each ProduceStream message passes Produce's check in its handler (produce_rpcs.py: the
    # fencing first); each LookupStream message is answered per target as OffsetsForTimes.
    "ProduceStream": RpcOperation(_WRITE, Scope.MESSAGES, _no_topic, _stream, message_method="Produce",
                                  owner=Owner.MESSAGES),
    "LookupStream": RpcOperation(
        _DESCRIBE, Scope.MESSAGES, _no_topic, _stream, message_method="OffsetsForTimes", owner=Owner.MESSAGES
    ),    # -- seglog.v1.PartitionMoveService (move_rpcs.py): admin on the topic, as the other changes of
    # where and what a partition holds. The handlers route themselves: MovePartition runs at the
    # target (another instance answers with its address), CopyPartition and TakeOverPartition
    # check the owner record themselves.
    "MovePartition": RpcOperation(_ADMIN, Scope.TOPICS, _topic, _request),
    "CopyPartition": RpcOperation(_ADMIN, Scope.TOPICS, _topic, _stream),
    "AbortMove": RpcOperation(_ADMIN, Scope.TOPICS, _topic, _request),
    "TakeOverPartition": RpcOperation(_ADMIN, Scope.TOPICS, _topic, _request),
    # Every partition's owner and every move: describe on every topic.
    "DescribeCluster": RpcOperation(_DESCRIBE, Scope.TOPICS, _every_topic, _request),
}


def operation_of(method: str) -> RpcOperation:
    """The row of ``method``; KeyError for an unclassified method (it must not be served)."""
    return OPERATIONS[method]
