"""The records of the ``__consumer_offsets`` topic, in Kafka's own key and value schemas, so the
topic's files read as Kafka's (group-coordinator's OffsetCommitKey/Value and GroupMetadataKey/Value).

Every key and value starts with an int16: for a key, the record type (0 and 1: an offset commit,
2: a group's metadata; KIP-848's records use 3 and above); for a value, the schema version. Then
the fields, big-endian, with no length framing of their own (the record's key/value length frames
them). A null value is a tombstone: the key's offset or group is deleted.

    OffsetCommitKey (type 0 or 1; Kafka writes 1)
        group      STRING
        topic      STRING
        partition  INT32

    OffsetCommitValue                     versions    this core writes
        offset           INT64            0+          3, or 1 when an expire timestamp is set,
        leaderEpoch      INT32            3+          as Kafka 3.x does (4 is flexible: compact
        metadata         STRING           0+          strings and tagged fields; read, written
        commitTimestamp  INT64            0+          only when asked)
        expireTimestamp  INT64            1 only

    GroupMetadataKey (type 2)
        group      STRING

    GroupMetadataValue                    versions    this core writes 3 (Kafka 3.x's)
        protocolType           STRING           0+
        generation             INT32            0+
        protocol               nullable STRING  0+
        leader                 nullable STRING  0+
        currentStateTimestamp  INT64            2+
        members                [MemberMetadata] 0+
          memberId         STRING              0+
          groupInstanceId  nullable STRING     3+
          clientId         STRING              0+
          clientHost       STRING              0+
          rebalanceTimeout INT32               1+
          sessionTimeout   INT32               0+
          subscription     BYTES               0+
          assignment       BYTES               0+

KIP-848's consumer group records (group-coordinator's ConsumerGroup*Key/Value). Each key's int16
is its type and the key holds its fields non-flexibly; each value is version 0 and flexible
(compact strings and arrays, tagged fields closing every struct). A uuid is 16 raw bytes.

    type  key fields           value fields
    3     group                ConsumerGroupMetadata: epoch INT32
    4     group                ConsumerGroupPartitionMetadata: topics [topicId UUID, topicName
                               STRING, numPartitions INT32, partitionMetadata [partition INT32,
                               racks [STRING]] (deprecated: written empty, read and dropped)]
    5     group, memberId      ConsumerGroupMemberMetadata: instanceId nullable STRING, rackId
                               nullable STRING, clientId STRING, clientHost STRING,
                               subscribedTopicNames [STRING], subscribedTopicRegex nullable
                               STRING, rebalanceTimeoutMs INT32, serverAssignor nullable STRING
                               (tag 0, classic member metadata: skipped)
    6     group                ConsumerGroupTargetAssignmentMetadata: assignmentEpoch INT32
    7     group, memberId      ConsumerGroupTargetAssignmentMember: topicPartitions [topicId
                               UUID, partitions [INT32]]
    8     group, memberId      ConsumerGroupCurrentMemberAssignment: memberEpoch INT32,
                               previousMemberEpoch INT32, state INT8, assignedPartitions
                               [topicId UUID, partitions [INT32]], partitionsPendingRevocation
                               (same)
"""

from __future__ import annotations

from typing import Any, NamedTuple

from . import _wire
from .errors import UnknownGroupRecordError

__all__ = [
    "CONSUMER_GROUP_KEYS",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "TopicMetadata",
    "TopicPartitions",
    "GROUP_METADATA_KEY_TYPE",
    "OFFSET_COMMIT_KEY_TYPE",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "is_offset_commit_key",
]

OFFSET_COMMIT_KEY_TYPE = 1  # Kafka writes 1; 0 is the same layout from before 0.10 and is read too
_OFFSET_COMMIT_KEY_TYPES = (0, 1)
GROUP_METADATA_KEY_TYPE = 2

NO_LEADER_EPOCH = -1
NO_TIMESTAMP = -1
OFFSET_COMMIT_VALUE_VERSIONS = range(0, 5)
GROUP_METADATA_VALUE_VERSIONS = range(0, 5)
_FLEXIBLE_FROM = 4  # both values: version 4 is the first flexible version (KIP-915)
_OFFSET_COMMIT_VALUE_VERSION = 3  # what Kafka 3.x writes when no expire timestamp is set
_OFFSET_COMMIT_VALUE_VERSION_EXPIRING = 1  # the only version with an expireTimestamp
_GROUP_METADATA_VALUE_VERSION = 3  # Kafka 3.x's (IBP 2.3+): static members' groupInstanceId


class OffsetCommitKey(NamedTuple):
    group: str
    topic: str
    partition: int


class GroupMetadataKey(NamedTuple):
    group: str


class OffsetCommitValue(NamedTuple):
    offset: int
    commit_timestamp_ms: int
    metadata: str = ""
    leader_epoch: int = NO_LEADER_EPOCH
    expire_timestamp_ms: int = NO_TIMESTAMP


class MemberMetadata(NamedTuple):
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1  # version 1+; a version-0 record reads it as sessionTimeout
    group_instance_id: str | None = None
    subscription: bytes = b""
    assignment: bytes = b""


class GroupMetadataValue(NamedTuple):
    protocol_type: str
    generation: int
    protocol: str | None = None
    leader: str | None = None
    current_state_timestamp_ms: int = NO_TIMESTAMP
    members: tuple[MemberMetadata, ...] = ()


# -- KIP-848's records: every key has its type as KEY_TYPE, every value is version 0 -------------
class ConsumerGroupMetadataKey(NamedTuple):
    group: str
    KEY_TYPE = 3


class ConsumerGroupPartitionMetadataKey(NamedTuple):
    group: str
    KEY_TYPE = 4


class ConsumerGroupMemberMetadataKey(NamedTuple):
    group: str
    member_id: str
    KEY_TYPE = 5


class ConsumerGroupTargetAssignmentMetadataKey(NamedTuple):
    group: str
    KEY_TYPE = 6


class ConsumerGroupTargetAssignmentMemberKey(NamedTuple):
    group: str
    member_id: str
    KEY_TYPE = 7


class ConsumerGroupCurrentMemberAssignmentKey(NamedTuple):
    group: str
    member_id: str
    KEY_TYPE = 8


CONSUMER_GROUP_KEYS: dict[int, Any] = {key.KEY_TYPE: key for key in (
    ConsumerGroupMetadataKey, ConsumerGroupPartitionMetadataKey, ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey,
)}


class ConsumerGroupMetadataValue(NamedTuple):
    epoch: int


class TopicMetadata(NamedTuple):
    topic_id: bytes  # 16 bytes
    name: str
    partition_count: int


class ConsumerGroupPartitionMetadataValue(NamedTuple):
    topics: tuple[TopicMetadata, ...]


class ConsumerGroupMemberMetadataValue(NamedTuple):
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None


class ConsumerGroupTargetAssignmentMetadataValue(NamedTuple):
    assignment_epoch: int


class TopicPartitions(NamedTuple):
    topic_id: bytes  # 16 bytes
    partitions: tuple[int, ...]


class ConsumerGroupTargetAssignmentMemberValue(NamedTuple):
    topic_partitions: tuple[TopicPartitions, ...]


class ConsumerGroupCurrentMemberAssignmentValue(NamedTuple):
    member_epoch: int
    previous_member_epoch: int
    state: int  # Kafka's MemberState: 0 stable, 1 unrevoked partitions, 2 unreleased partitions
    assigned: tuple[TopicPartitions, ...]
    pending_revocation: tuple[TopicPartitions, ...]


ConsumerGroupKey = (ConsumerGroupMetadataKey | ConsumerGroupPartitionMetadataKey | ConsumerGroupMemberMetadataKey
                    | ConsumerGroupTargetAssignmentMetadataKey | ConsumerGroupTargetAssignmentMemberKey
                    | ConsumerGroupCurrentMemberAssignmentKey)
ConsumerGroupValue = (ConsumerGroupMetadataValue | ConsumerGroupPartitionMetadataValue
                      | ConsumerGroupMemberMetadataValue | ConsumerGroupTargetAssignmentMetadataValue
                      | ConsumerGroupTargetAssignmentMemberValue | ConsumerGroupCurrentMemberAssignmentValue)
Key = OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey
Value = OffsetCommitValue | GroupMetadataValue | ConsumerGroupValue


# -- keys ---------------------------------------------------------------------------------------
def encode_key(key: Key) -> bytes:
    if isinstance(key, OffsetCommitKey):
        return b"".join((
            _wire.INT16.pack(OFFSET_COMMIT_KEY_TYPE),
            _wire.string(key.group, compact=False),
            _wire.string(key.topic, compact=False),
            _wire.INT32.pack(key.partition),
        ))
    if isinstance(key, GroupMetadataKey):
        return _wire.INT16.pack(GROUP_METADATA_KEY_TYPE) + _wire.string(key.group, compact=False)
    return _wire.INT16.pack(key.KEY_TYPE) + b"".join(_wire.string(field, compact=False) for field in key)


def is_offset_commit_key(data: bytes | memoryview | None) -> bool:
    """Whether an encoded key is a committed offset's (types 0 and 1), read from its first two
    bytes without decoding the rest."""
    return data is not None and len(data) >= 2 and int.from_bytes(data[:2], "big", signed=True) in _OFFSET_COMMIT_KEY_TYPES


def decode_key(data: bytes | memoryview) -> Key:
    """Raises UnknownGroupRecordError for a type this core does not read, CorruptGroupRecordError
    for anything malformed."""
    reader = _wire.Reader(data, "__consumer_offsets key")
    key_type = reader.int16("key type")
    if key_type in _OFFSET_COMMIT_KEY_TYPES:
        key: Key = OffsetCommitKey(
            reader.string("group", compact=False), reader.string("topic", compact=False), reader.int32("partition")
        )
    elif key_type == GROUP_METADATA_KEY_TYPE:
        key = GroupMetadataKey(reader.string("group", compact=False))
    elif (key_class := CONSUMER_GROUP_KEYS.get(key_type)) is not None:
        key = key_class(*(reader.string(field, compact=False) for field in key_class._fields))
    else:
        raise UnknownGroupRecordError(f"__consumer_offsets key: unknown key type {key_type}")
    reader.finish()
    return key


# -- values -------------------------------------------------------------------------------------
def encode_value(value: Value, version: int | None = None) -> bytes:
    """``value`` in ``version`` (by default the one Kafka 3.x writes for it)."""
    if isinstance(value, OffsetCommitValue):
        return _encode_offset_commit(value, _offset_commit_version(value) if version is None else version)
    if not isinstance(value, GroupMetadataValue):
        assert version in (None, 0), version
        return _wire.INT16.pack(0) + _CONSUMER_GROUP_ENCODERS[type(value)](value)
    return _encode_group_metadata(value, _GROUP_METADATA_VALUE_VERSION if version is None else version)


def decode_value(key: Key, data: bytes | memoryview) -> Value:
    """The value of ``key``'s type. Raises UnknownGroupRecordError for a version past 4,
    CorruptGroupRecordError for anything malformed."""
    if isinstance(key, OffsetCommitKey):
        reader = _wire.Reader(data, f"offset commit value of {key}")
        value: Value = _decode_offset_commit(reader, _version(reader, OFFSET_COMMIT_VALUE_VERSIONS))
    elif isinstance(key, GroupMetadataKey):
        reader = _wire.Reader(data, f"group metadata value of {key}")
        value = _decode_group_metadata(reader, _version(reader, GROUP_METADATA_VALUE_VERSIONS))
    else:
        reader = _wire.Reader(data, f"{type(key).__name__[:-3]} value of {key}")
        _version(reader, _CONSUMER_GROUP_VALUE_VERSIONS)
        value = _CONSUMER_GROUP_DECODERS[type(key)](reader)
    reader.finish()
    return value


def _version(reader: _wire.Reader, known: range) -> int:
    version = reader.int16("value version")
    if version not in known:
        raise UnknownGroupRecordError(f"value version {version}, this core reads {known.start}-{known.stop - 1}")
    return version


def _offset_commit_version(value: OffsetCommitValue) -> int:
    if value.expire_timestamp_ms != NO_TIMESTAMP:
        return _OFFSET_COMMIT_VALUE_VERSION_EXPIRING
    return _OFFSET_COMMIT_VALUE_VERSION


def _encode_offset_commit(value: OffsetCommitValue, version: int) -> bytes:
    assert version in OFFSET_COMMIT_VALUE_VERSIONS, version
    flexible = version >= _FLEXIBLE_FROM
    parts = [_wire.INT16.pack(version), _wire.INT64.pack(value.offset)]
    if version >= 3:
        parts.append(_wire.INT32.pack(value.leader_epoch))
    parts += [_wire.string(value.metadata, compact=flexible), _wire.INT64.pack(value.commit_timestamp_ms)]
    if version == 1:
        parts.append(_wire.INT64.pack(value.expire_timestamp_ms))
    if flexible:
        parts.append(_wire.NO_TAGGED_FIELDS)
    return b"".join(parts)


def _decode_offset_commit(reader: _wire.Reader, version: int) -> OffsetCommitValue:
    flexible = version >= _FLEXIBLE_FROM
    offset = reader.int64("offset")
    leader_epoch = reader.int32("leaderEpoch") if version >= 3 else NO_LEADER_EPOCH
    metadata = reader.string("metadata", compact=flexible)
    assert metadata is not None
    commit_timestamp_ms = reader.int64("commitTimestamp")
    expire_timestamp_ms = reader.int64("expireTimestamp") if version == 1 else NO_TIMESTAMP
    if flexible:
        reader.skip_tagged_fields("OffsetCommitValue")
    return OffsetCommitValue(offset, commit_timestamp_ms, metadata, leader_epoch, expire_timestamp_ms)


def _encode_group_metadata(value: GroupMetadataValue, version: int) -> bytes:
    assert version in GROUP_METADATA_VALUE_VERSIONS, version
    flexible = version >= _FLEXIBLE_FROM
    parts = [
        _wire.INT16.pack(version),
        _wire.string(value.protocol_type, compact=flexible),
        _wire.INT32.pack(value.generation),
        _wire.string(value.protocol, compact=flexible),
        _wire.string(value.leader, compact=flexible),
    ]
    if version >= 2:
        parts.append(_wire.INT64.pack(value.current_state_timestamp_ms))
    parts.append(_wire.count(len(value.members), compact=flexible))
    parts += [_encode_member(member, version) for member in value.members]
    if flexible:
        parts.append(_wire.NO_TAGGED_FIELDS)
    return b"".join(parts)


def _encode_member(member: MemberMetadata, version: int) -> bytes:
    flexible = version >= _FLEXIBLE_FROM
    parts = [_wire.string(member.member_id, compact=flexible)]
    if version >= 3:
        parts.append(_wire.string(member.group_instance_id, compact=flexible))
    parts += [_wire.string(member.client_id, compact=flexible), _wire.string(member.client_host, compact=flexible)]
    if version >= 1:
        parts.append(_wire.INT32.pack(member.rebalance_timeout_ms))
    parts += [
        _wire.INT32.pack(member.session_timeout_ms),
        _wire.bytes_(member.subscription, compact=flexible),
        _wire.bytes_(member.assignment, compact=flexible),
    ]
    if flexible:
        parts.append(_wire.NO_TAGGED_FIELDS)
    return b"".join(parts)


def _decode_group_metadata(reader: _wire.Reader, version: int) -> GroupMetadataValue:
    flexible = version >= _FLEXIBLE_FROM
    protocol_type = reader.string("protocolType", compact=flexible)
    assert protocol_type is not None
    generation = reader.int32("generation")
    protocol = reader.string("protocol", compact=flexible, nullable=True)
    leader = reader.string("leader", compact=flexible, nullable=True)
    current_state_timestamp_ms = reader.int64("currentStateTimestamp") if version >= 2 else NO_TIMESTAMP
    count = reader.count("members", compact=flexible, element_bytes_min=1)
    members = tuple(_decode_member(reader, version) for _ in range(count))
    if flexible:
        reader.skip_tagged_fields("GroupMetadataValue")
    return GroupMetadataValue(protocol_type, generation, protocol, leader, current_state_timestamp_ms, members)


def _decode_member(reader: _wire.Reader, version: int) -> MemberMetadata:
    flexible = version >= _FLEXIBLE_FROM
    member_id = reader.string("memberId", compact=flexible)
    group_instance_id = reader.string("groupInstanceId", compact=flexible, nullable=True) if version >= 3 else None
    client_id = reader.string("clientId", compact=flexible)
    client_host = reader.string("clientHost", compact=flexible)
    rebalance_timeout_ms = reader.int32("rebalanceTimeout") if version >= 1 else None
    session_timeout_ms = reader.int32("sessionTimeout")
    subscription = reader.bytes_("subscription", compact=flexible)
    assignment = reader.bytes_("assignment", compact=flexible)
    if flexible:
        reader.skip_tagged_fields("MemberMetadata")
    assert member_id is not None and client_id is not None and client_host is not None
    return MemberMetadata(
        member_id, client_id, client_host, session_timeout_ms,
        session_timeout_ms if rebalance_timeout_ms is None else rebalance_timeout_ms,
        group_instance_id, subscription, assignment,
    )


# -- KIP-848's values ---------------------------------------------------------------------------
_CONSUMER_GROUP_VALUE_VERSIONS = range(0, 1)
_TAGS = _wire.NO_TAGGED_FIELDS


def _compact_array(items: list[bytes] | tuple[bytes, ...]) -> bytes:
    return _wire.count(len(items), compact=True) + b"".join(items)


def _encode_topic_partitions(entries: tuple[TopicPartitions, ...]) -> bytes:
    return _compact_array([
        _uuid(entry.topic_id) + _compact_array([_wire.INT32.pack(p) for p in entry.partitions]) + _TAGS
        for entry in entries
    ])


def _uuid(topic_id: bytes) -> bytes:
    assert len(topic_id) == 16, topic_id
    return topic_id


def _encode_partition_metadata(value: ConsumerGroupPartitionMetadataValue) -> bytes:
    return _compact_array([
        _uuid(t.topic_id) + _wire.string(t.name, compact=True) + _wire.INT32.pack(t.partition_count)
        + _wire.count(0, compact=True) + _TAGS  # partitionMetadata: racks, deprecated, empty
        for t in value.topics
    ]) + _TAGS


def _encode_member_metadata(value: ConsumerGroupMemberMetadataValue) -> bytes:
    return b"".join((
        _wire.string(value.instance_id, compact=True),
        _wire.string(value.rack_id, compact=True),
        _wire.string(value.client_id, compact=True),
        _wire.string(value.client_host, compact=True),
        _compact_array([_wire.string(name, compact=True) for name in value.subscribed_topic_names]),
        _wire.string(value.subscribed_topic_regex, compact=True),
        _wire.INT32.pack(value.rebalance_timeout_ms),
        _wire.string(value.server_assignor, compact=True),
        _TAGS,
    ))


def _encode_current_assignment(value: ConsumerGroupCurrentMemberAssignmentValue) -> bytes:
    return b"".join((
        _wire.INT32.pack(value.member_epoch),
        _wire.INT32.pack(value.previous_member_epoch),
        _wire.INT8.pack(value.state),
        _encode_topic_partitions(value.assigned),
        _encode_topic_partitions(value.pending_revocation),
        _TAGS,
    ))


_CONSUMER_GROUP_ENCODERS: dict[type, Any] = {
    ConsumerGroupMetadataValue: lambda v: _wire.INT32.pack(v.epoch) + _TAGS,
    ConsumerGroupPartitionMetadataValue: _encode_partition_metadata,
    ConsumerGroupMemberMetadataValue: _encode_member_metadata,
    ConsumerGroupTargetAssignmentMetadataValue: lambda v: _wire.INT32.pack(v.assignment_epoch) + _TAGS,
    ConsumerGroupTargetAssignmentMemberValue: lambda v: _encode_topic_partitions(v.topic_partitions) + _TAGS,
    ConsumerGroupCurrentMemberAssignmentValue: _encode_current_assignment,
}


def _array(reader: _wire.Reader, field: str, element_bytes_min: int, read: Any) -> tuple:
    count = reader.count(field, compact=True, element_bytes_min=element_bytes_min)
    return tuple(read() for _ in range(count))


def _string(reader: _wire.Reader, field: str) -> str:
    value = reader.string(field, compact=True)
    assert value is not None
    return value


def _decode_topic_partitions(reader: _wire.Reader, field: str) -> tuple[TopicPartitions, ...]:
    def entry() -> TopicPartitions:
        topic_id = reader.uuid("topicId")
        partitions = _array(reader, "partitions", 4, lambda: reader.int32("partition"))
        reader.skip_tagged_fields(field)
        return TopicPartitions(topic_id, partitions)
    return _array(reader, field, 18, entry)


def _decode_partition_metadata(reader: _wire.Reader) -> ConsumerGroupPartitionMetadataValue:
    def rack_entry() -> None:
        reader.int32("partition")
        _array(reader, "racks", 1, lambda: _string(reader, "rack"))
        reader.skip_tagged_fields("PartitionMetadata")

    def topic() -> TopicMetadata:
        found = TopicMetadata(reader.uuid("topicId"), _string(reader, "topicName"), reader.int32("numPartitions"))
        _array(reader, "partitionMetadata", 6, rack_entry)
        reader.skip_tagged_fields("TopicMetadata")
        return found
    topics = _array(reader, "topics", 23, topic)
    reader.skip_tagged_fields("ConsumerGroupPartitionMetadataValue")
    return ConsumerGroupPartitionMetadataValue(topics)


def _decode_member_metadata(reader: _wire.Reader) -> ConsumerGroupMemberMetadataValue:
    value = ConsumerGroupMemberMetadataValue(
        reader.string("instanceId", compact=True, nullable=True),
        reader.string("rackId", compact=True, nullable=True),
        _string(reader, "clientId"),
        _string(reader, "clientHost"),
        _array(reader, "subscribedTopicNames", 1, lambda: _string(reader, "subscribedTopicName")),
        reader.string("subscribedTopicRegex", compact=True, nullable=True),
        reader.int32("rebalanceTimeoutMs"),
        reader.string("serverAssignor", compact=True, nullable=True),
    )
    reader.skip_tagged_fields("ConsumerGroupMemberMetadataValue")  # tag 0: classic members only
    return value


def _decode_int32_value(field: str, build: Any) -> Any:
    def decode(reader: _wire.Reader) -> Any:
        value = build(reader.int32(field))
        reader.skip_tagged_fields(build.__name__)
        return value
    return decode


def _decode_target_member(reader: _wire.Reader) -> ConsumerGroupTargetAssignmentMemberValue:
    value = ConsumerGroupTargetAssignmentMemberValue(_decode_topic_partitions(reader, "topicPartitions"))
    reader.skip_tagged_fields("ConsumerGroupTargetAssignmentMemberValue")
    return value


def _decode_current_assignment(reader: _wire.Reader) -> ConsumerGroupCurrentMemberAssignmentValue:
    value = ConsumerGroupCurrentMemberAssignmentValue(
        reader.int32("memberEpoch"), reader.int32("previousMemberEpoch"), reader.int8("state"),
        _decode_topic_partitions(reader, "assignedPartitions"),
        _decode_topic_partitions(reader, "partitionsPendingRevocation"),
    )
    reader.skip_tagged_fields("ConsumerGroupCurrentMemberAssignmentValue")
    return value


_CONSUMER_GROUP_DECODERS: dict[type, Any] = {
    ConsumerGroupMetadataKey: _decode_int32_value("epoch", ConsumerGroupMetadataValue),
    ConsumerGroupPartitionMetadataKey: _decode_partition_metadata,
    ConsumerGroupMemberMetadataKey: _decode_member_metadata,
    ConsumerGroupTargetAssignmentMetadataKey: _decode_int32_value(
        "assignmentEpoch", ConsumerGroupTargetAssignmentMetadataValue),
    ConsumerGroupTargetAssignmentMemberKey: _decode_target_member,
    ConsumerGroupCurrentMemberAssignmentKey: _decode_current_assignment,
}
