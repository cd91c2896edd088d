"""Errors of the cluster metadata core, under one root.

    ClusterError
    ├── ClusterConfigError        a cluster setting is wrong (one line naming the setting)
    ├── EtcdUnavailableError      no etcd endpoint answered (the cause chained)
    │   └── WatchCompactedError   etcd cancelled a watch: its history is compacted past the start
    ├── InstanceIdInUseError      another live process holds this instance id's registration
    ├── NoLiveInstanceError       placement found no live instance to place partitions on
    ├── TopicExistsError          the topic is already in etcd (a create lost to another)
    ├── UnknownPartitionError     etcd holds no owner for the partition
    ├── OwnershipConflictError    the owner changed since it was read (a concurrent change won)
    ├── UnknownTopicError         etcd holds no record of the topic
    ├── ConfigsConflictError      a topic's configs kept changing under a change being written
    └── MalformedRecordError      a key or value etcd holds is not one seglog writes (records.py)
"""

from __future__ import annotations


class ClusterError(Exception):
    """Root of the cluster core's errors."""


class ClusterConfigError(ClusterError, ValueError):
    """A cluster setting is invalid; the message is one line naming it."""


class EtcdUnavailableError(ClusterError):
    """No etcd endpoint answered the request."""


class WatchCompactedError(EtcdUnavailableError):
    """etcd cancelled a watch because the revision it starts from is compacted away: only a full
    reload (a read at the current revision) can make a cache current again."""

    def __init__(self, message: str, compact_revision: int) -> None:
        super().__init__(message)
        self.compact_revision = compact_revision


class InstanceIdInUseError(ClusterError):
    """The instance key exists under another lease: a second process claims this instance id."""


class NoLiveInstanceError(ClusterError):
    """Placement was asked to place partitions with no live instance."""


class TopicExistsError(ClusterError):
    """The topic key already exists in etcd."""


class UnknownPartitionError(ClusterError):
    """No ownership record exists for the partition."""


class OwnershipConflictError(ClusterError):
    """The ownership record changed between the read and the transaction."""


class UnknownTopicError(ClusterError):
    """etcd holds no record of the topic."""


class ConfigsConflictError(ClusterError):
    """Every attempt to write a topic's configs lost its race to another change of the record."""


class MalformedRecordError(ClusterError):
    """A key or value read from etcd is not one seglog writes (records.py): not JSON, too large,
    too deep, a field of the wrong type or out of range. ``key`` names it (printable)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"etcd record {key!r} is malformed: {reason}")
        self.key = key
        self.reason = reason
