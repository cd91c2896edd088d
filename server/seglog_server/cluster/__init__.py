"""The cluster's metadata core: membership under etcd leases, placement, ownership with epochs, and
a watched cache of both (docs/architecture.md, "The cluster's metadata core").

Built on etcd v3 through etcd3gw (the HTTP gateway; synchronous, so every call here runs on a
thread of its own, never on the event loop). It may import the storage's public surface; the
storage never imports it, and it imports neither the gRPC adapter nor grpc (import-linter).
"""

from .config import DEFAULT_CLUSTER_NAME, DEFAULT_LEASE_TTL_S, ClusterConfig
from .errors import (
    ClusterConfigError,
    ClusterError,
    EtcdUnavailableError,
    InstanceIdInUseError,
    NoLiveInstanceError,
    OwnershipConflictError,
    TopicExistsError,
    UnknownPartitionError,
    WatchCompactedError,
)
from .etcd_gateway import EtcdGateway
from .instance_identity import instance_id_for
from .keys import ClusterKeys
from .membership import Capacity, Membership, MembershipStatistics
from .metadata_cache import CacheStatistics, InstanceInfo, MetadataCache
from .ownership import INITIAL_EPOCH, PartitionOwner, change_owner, create_topic, read_owner
from .placement import InstanceLoad, place_partitions
from .producer_id_blocks import ProducerIdBlockContentionError, reserve_producer_id_block

__all__ = [
    "DEFAULT_CLUSTER_NAME",
    "DEFAULT_LEASE_TTL_S",
    "INITIAL_EPOCH",
    "CacheStatistics",
    "Capacity",
    "ClusterConfig",
    "ClusterConfigError",
    "ClusterError",
    "ClusterKeys",
    "EtcdGateway",
    "EtcdUnavailableError",
    "InstanceIdInUseError",
    "InstanceInfo",
    "InstanceLoad",
    "Membership",
    "MembershipStatistics",
    "MetadataCache",
    "NoLiveInstanceError",
    "OwnershipConflictError",
    "PartitionOwner",
    "ProducerIdBlockContentionError",
    "TopicExistsError",
    "UnknownPartitionError",
    "WatchCompactedError",
    "change_owner",
    "create_topic",
    "instance_id_for",
    "place_partitions",
    "read_owner",
    "reserve_producer_id_block",
]
