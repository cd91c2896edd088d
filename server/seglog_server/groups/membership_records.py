"""A group's membership as KIP-848's records of ``__consumer_offsets``, and back.

A group with members is written as Kafka's coordinator writes it: its epoch
(ConsumerGroupMetadata), the subscribed topics' partition counts (ConsumerGroupPartitionMetadata),
the target's epoch (ConsumerGroupTargetAssignmentMetadata), and per member its metadata (instance
id, subscription, rebalance timeout), its target (ConsumerGroupTargetAssignmentMember) and what it
owns with its epochs (ConsumerGroupCurrentMemberAssignment: owned partitions of its target are
``assigned``, the others ``pending_revocation``). A group without members has no records: the
coordinator forgets it, and a new first member starts it at epoch 1 again.

``records_of`` is a pure function of the group's snapshot, so the coordinator writes only the
records that changed since the last write (a steady heartbeat changes nothing and writes nothing)
and tombstones the ones gone; ``snapshot_of`` rebuilds the snapshot from the records a replay
kept, so live and replayed state are one computation. Deadlines (session, rebalance) are not
written: a restart counts them from the load.

Topic ids: seglog's records name a topic by a uuid derived from its name (``topic_id``), and the
group's partition metadata plus its members' subscriptions map them back. A partition of a topic
neither subscribed nor counted any more (deleted while a member still owned it) does not map back
at replay: it was leaving that member anyway, and nobody else can be given it.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from .assignor import TopicPartition
from .reconciliation import LEAVE_STATIC_EPOCH, GroupSnapshot, MemberSnapshot
from .records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicMetadata,
    TopicPartitions,
)

__all__ = ["Slot", "key_of", "member_records_of", "member_slots", "records_of", "snapshot_of", "topic_id"]

Slot = tuple[int, str]  # (record type, member id or "")
_METADATA = ConsumerGroupMetadataKey.KEY_TYPE
_PARTITIONS = ConsumerGroupPartitionMetadataKey.KEY_TYPE
_MEMBER = ConsumerGroupMemberMetadataKey.KEY_TYPE
_TARGET_EPOCH = ConsumerGroupTargetAssignmentMetadataKey.KEY_TYPE
_TARGET = ConsumerGroupTargetAssignmentMemberKey.KEY_TYPE
_CURRENT = ConsumerGroupCurrentMemberAssignmentKey.KEY_TYPE
_KEYS = {key.KEY_TYPE: key for key in (
    ConsumerGroupMetadataKey, ConsumerGroupPartitionMetadataKey, ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey)}
_SERVER_ASSIGNOR = "uniform"  # Kafka's name for its uniform sticky assignor
# Kafka's MemberState values (group-coordinator's MemberState).
_STABLE, _UNREVOKED_PARTITIONS, _UNRELEASED_PARTITIONS = 0, 1, 2
# A fixed namespace: a topic's id is the same on every instance and across restarts.
_TOPIC_ID_NAMESPACE = uuid.UUID("6c8f0f5e-4b8e-4d53-9f55-0a1e7c2d9b31")


@functools.lru_cache(maxsize=4096)
def topic_id(topic: str) -> bytes:
    return uuid.uuid5(_TOPIC_ID_NAMESPACE, topic).bytes


def member_slots(member_id: str) -> tuple[Slot, ...]:
    """The slots of one member's records (its metadata, target and current assignment)."""
    return ((_MEMBER, member_id), (_TARGET, member_id), (_CURRENT, member_id))


def key_of(group: str, slot: Slot) -> Any:
    record_type, member_id = slot
    key_class = _KEYS[record_type]
    return key_class(group, member_id) if "member_id" in key_class._fields else key_class(group)


def records_of(snapshot: GroupSnapshot) -> dict[Slot, Any]:
    """The group's records (slot -> value); none for a group without members."""
    if not snapshot.members:
        return {}
    records: dict[Slot, Any] = {
        (_METADATA, ""): ConsumerGroupMetadataValue(snapshot.group_epoch),
        (_PARTITIONS, ""): ConsumerGroupPartitionMetadataValue(tuple(
            TopicMetadata(topic_id(topic), topic, count) for topic, count in sorted(snapshot.partition_counts.items()))),
        (_TARGET_EPOCH, ""): ConsumerGroupTargetAssignmentMetadataValue(snapshot.group_epoch),
    }
    for member_id, member in snapshot.members.items():
        records.update(member_records_of(member_id, member, snapshot.target.get(member_id, frozenset())))
    return records


def member_records_of(member_id: str, member: MemberSnapshot, target: frozenset[TopicPartition]) -> dict[Slot, Any]:
    """One member's records (``member_slots``), as ``records_of`` writes them."""
    return {
        (_MEMBER, member_id): ConsumerGroupMemberMetadataValue(
            member.instance_id, None, member.client_id, member.client_host, tuple(sorted(member.subscription)), None,
            member.rebalance_timeout_ms, _SERVER_ASSIGNOR),
        (_TARGET, member_id): ConsumerGroupTargetAssignmentMemberValue(_by_topic(target)),
        (_CURRENT, member_id): ConsumerGroupCurrentMemberAssignmentValue(
            member.epoch, member.previous_epoch, _state(member, target),
            _by_topic(member.owned & target), _by_topic(member.owned - target)),
    }


def snapshot_of(records: Mapping[Slot, Any]) -> GroupSnapshot | None:
    """The group the records describe; None without members (or without its epoch record)."""
    metadata = records.get((_METADATA, ""))
    members = sorted(member_id for record_type, member_id in records if record_type == _MEMBER)
    if metadata is None or not members:
        return None
    partitions = records.get((_PARTITIONS, ""), ConsumerGroupPartitionMetadataValue(()))
    counts = {t.name: t.partition_count for t in partitions.topics}
    subscriptions = {m: frozenset(records[(_MEMBER, m)].subscribed_topic_names) for m in members}
    names = {topic_id(name): name for name in set(counts).union(*subscriptions.values())}
    target: dict[str, frozenset[TopicPartition]] = {}
    restored: dict[str, MemberSnapshot] = {}
    for member_id in members:
        meta: ConsumerGroupMemberMetadataValue = records[(_MEMBER, member_id)]
        mine = records.get((_TARGET, member_id))
        if mine is not None:
            target[member_id] = _from_topics(mine.topic_partitions, names)
        current = records.get((_CURRENT, member_id))
        owned = frozenset() if current is None else (
            _from_topics(current.assigned, names) | _from_topics(current.pending_revocation, names))
        restored[member_id] = MemberSnapshot(
            subscriptions[member_id], 0 if current is None else current.member_epoch,
            -1 if current is None else current.previous_member_epoch, owned,
            meta.instance_id, meta.rebalance_timeout_ms, meta.client_id or "", meta.client_host or "")
    return GroupSnapshot(metadata.epoch, counts, restored, target)


def _state(member: MemberSnapshot, target: frozenset[TopicPartition]) -> int:
    if member.epoch != LEAVE_STATIC_EPOCH and member.owned - target:
        return _UNREVOKED_PARTITIONS
    return _UNRELEASED_PARTITIONS if target - member.owned else _STABLE


def _by_topic(partitions: Iterable[TopicPartition]) -> tuple[TopicPartitions, ...]:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        topics.setdefault(topic, []).append(partition)
    return tuple(TopicPartitions(topic_id(topic), tuple(numbers)) for topic, numbers in topics.items())


def _from_topics(entries: Iterable[TopicPartitions], names: Mapping[bytes, str]) -> frozenset[TopicPartition]:
    return frozenset((names[entry.topic_id], partition) for entry in entries if entry.topic_id in names
                     for partition in entry.partitions)
