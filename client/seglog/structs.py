"""Plain values the client hands out and accepts (Kafka clients' vocabulary).

Records and metadata are NamedTuples, as in kafka-python and aiokafka, so they unpack, compare and
print without ceremony. Descriptions of topics are frozen dataclasses.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeAlias

__all__ = [
    "DEFAULT_SERVER",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "Acks",
    "ClusterInstance",
    "ClusterMetadata",
    "ConsumerRecord",
    "GroupDescription",
    "GroupListing",
    "GroupMemberDescription",
    "GroupPartitionLag",
    "Header",
    "HeadersLike",
    "OffsetAndTimestamp",
    "PartitionDescription",
    "PartitionOwner",
    "RecordMetadata",
    "TopicDescription",
    "TopicInfo",
    "TopicPartition",
    "normalize_headers",
]

# The service's default listen address (scripts/serve, the CLI's --server default).
DEFAULT_SERVER = "127.0.0.1:50551"

# Special targets of OffsetsForTimes (Kafka's ListOffsets sentinels).
LATEST_TIMESTAMP = -1  # the log end offset
EARLIEST_TIMESTAMP = -2  # the log start offset
MAX_TIMESTAMP = -3  # the record with the largest timestamp

Header: TypeAlias = tuple[str, bytes | None]
# What send() accepts as headers: a mapping, or (key, value) pairs when keys repeat.
HeadersLike: TypeAlias = Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | str | None]]


class Acks(enum.Enum):
    """When the service acknowledges a produced batch."""

    WRITTEN = "written"  # after the write to the log (page cache); the topic's flush policy decides fsync
    FSYNCED = "fsynced"  # after the batch and everything before it is fsynced


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where a produced record landed."""

    topic: str
    partition: int
    offset: int
    # The record's CreateTime, or the service's LogAppendTime when the topic uses it.
    timestamp_ms: int


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


class OffsetAndTimestamp(NamedTuple):
    offset: int
    # The found record's timestamp; -1 for the EARLIEST / LATEST targets.
    timestamp_ms: int


@dataclass(frozen=True)
class TopicInfo:
    """A topic as ListTopics and CreateTopic report it."""

    topic: str
    partitions: int
    # Effective configs (CreateTopic only; empty from ListTopics).
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    segment_count: int
    log_dir: str
    # Tiered storage: the first offset on the service's disk, and the segments copied to the
    # object store (0 without one). size_bytes/segment_count are the local ones.
    local_log_start_offset: int = 0
    remote_segment_count: int = 0
    remote_size_bytes: int = 0


@dataclass(frozen=True)
class TopicDescription:
    topic: str
    configs: Mapping[str, str]
    partitions: tuple[PartitionDescription, ...]  # online partitions only
    # All partitions, including any whose log dir is offline (absent from ``partitions``).
    partition_count: int = 0


@dataclass(frozen=True)
class GroupListing:
    """A consumer group as ListGroups reports it."""

    group: str
    state: str  # Kafka's: "Stable", "Reconciling", "Empty"
    member_count: int


@dataclass(frozen=True)
class GroupMemberDescription:
    member_id: str
    member_epoch: int
    subscribed_topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...]  # sorted
    instance_id: str = ""  # a static member's group.instance.id
    client_id: str = ""  # its client.id (Kafka's consumer default: consumer-<group>-<n>)
    host: str = ""  # where the service saw its heartbeats from ("/127.0.0.1", as Kafka shows it)


@dataclass(frozen=True)
class GroupPartitionLag:
    """A partition's committed offset (-1: none), log end offset (-1: unknown) and lag (log end
    minus committed; -1 when either is unknown), and its owner ("" when none)."""

    topic: str
    partition: int
    committed_offset: int
    log_end_offset: int
    lag: int
    member_id: str = ""
    metadata: str = ""


@dataclass(frozen=True)
class GroupDescription:
    group: str
    state: str  # "Stable", "Reconciling", "Empty" or "Dead" (unknown to the service)
    group_epoch: int
    members: tuple[GroupMemberDescription, ...]
    partitions: tuple[GroupPartitionLag, ...]  # sorted by topic and partition


@dataclass(frozen=True)
class ClusterInstance:
    """One instance of a cluster as Metadata reports it."""

    instance_id: str
    address: str  # HOST:PORT clients dial (its --advertise)
    alive: bool  # registered under a live etcd lease


@dataclass(frozen=True)
class PartitionOwner:
    """Who serves one partition: the owning instance, where to dial it, the ownership epoch
    (bumped each time the owner changes; 0 at creation) and whether the owner is alive."""

    topic: str
    partition: int
    owner_id: str
    address: str
    epoch: int
    owner_alive: bool = True


@dataclass(frozen=True)
class ClusterMetadata:
    """``Admin.metadata()``: the instances and each partition's owner. A single process (no
    ``--etcd``) answers ``cluster_mode=False`` with itself the owner of every partition."""

    cluster_mode: bool
    cluster_name: str
    instance_id: str  # the instance that answered
    instances: tuple[ClusterInstance, ...]
    partitions: tuple[PartitionOwner, ...]  # sorted by topic and partition
    # False when the answering instance could not keep its view of etcd current.
    current: bool = True

    def owner_of(self, topic: str, partition: int) -> PartitionOwner | None:
        return next((p for p in self.partitions if p.topic == topic and p.partition == partition), None)


def normalize_headers(headers: HeadersLike | None) -> tuple[Header, ...]:
    """Headers as the codec wants them: (str key, bytes-or-None value) pairs, order kept."""
    if not headers:
        return ()
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    normalized: list[Header] = []
    for key, value in pairs:
        if not isinstance(key, str):
            raise TypeError(f"header keys must be str, got {type(key).__name__}")
        if isinstance(value, str):
            value = value.encode()
        elif value is not None and not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"header {key!r}: value must be bytes, str or None, got {type(value).__name__}")
        normalized.append((key, bytes(value) if value is not None else None))
    return tuple(normalized)
