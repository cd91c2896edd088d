"""Partition moves and unclean takeovers from the client (PartitionMoveService, moves.proto).

A move is asked of the bootstrap instance; an instance that is not the target answers
NotMoveTargetError (FAILED_PRECONDITION) with the target's address as an owner hint, and the
call is repeated once there. A takeover is asked of the instance that takes the partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import SeglogError
from .v1 import moves_pb2 as mpb

# A move copies the whole partition: its deadline is its own, not the request timeout.
MOVE_TIMEOUT_S_DEFAULT = 3600.0


@dataclass(frozen=True)
class PartitionMove:
    topic: str
    partition: int
    from_instance: str
    to_instance: str
    epoch: int
    log_start_offset: int
    log_end_offset: int
    bytes_copied: int
    fenced_ms: int
    elapsed_ms: int


@dataclass(frozen=True)
class PartitionTakeover:
    topic: str
    partition: int
    from_instance: str
    epoch: int
    start_offset: int


@dataclass(frozen=True)
class InstanceStatus:
    instance_id: str
    address: str
    alive: bool
    gone_since_ms: int | None
    partition_count: int  # partitions etcd records it as the owner of
    bytes: int  # of the partitions it serves, as its registration last reported


@dataclass(frozen=True)
class OfflinePartition:
    topic: str
    partition: int
    owner_id: str
    gone_since_ms: int | None


@dataclass(frozen=True)
class MoveInProgress:
    topic: str
    partition: int
    from_instance: str
    to_instance: str
    state: str  # "copying" or "final"
    started_ms: int


@dataclass(frozen=True)
class ClusterStatus:
    """The cluster as the answering instance's watched cache has it (``Admin.cluster_status``)."""

    cluster_name: str
    instance_id: str  # the instance that answered
    current: bool  # False while it cannot reach etcd
    instances: tuple[InstanceStatus, ...]
    offline_partitions: tuple[OfflinePartition, ...]
    moves: tuple[MoveInProgress, ...]


async def _call(transport: Any, method: str, request: Any, timeout_s: float) -> Any:
    return await transport.partition_moves(method, request, timeout_s)


async def move_partition(router: Any, topic: str, partition: int, to: str, from_instance: str | None,
                         timeout_s: float) -> PartitionMove:
    request = mpb.MovePartitionRequest(topic=topic, partition=partition, to_instance=to,
                                       from_instance=from_instance or "")
    transport = router.bootstrap
    for attempt in range(2):
        try:
            answer = await _call(transport, "MovePartition", request, timeout_s)
            break
        except SeglogError as error:
            address = getattr(error, "owner_address", None)
            if attempt or error.service_error != "NotMoveTargetError" or not address:
                raise
            transport = router._channel_to(address)
    return PartitionMove(topic, partition, answer.from_instance, answer.to_instance, answer.epoch,
                         answer.log_start_offset, answer.log_end_offset, answer.bytes_copied, answer.fenced_ms,
                         answer.elapsed_ms)


async def abort_move(router: Any, topic: str, partition: int, timeout_s: float) -> bool:
    answer = await _call(router.bootstrap, "AbortMove", mpb.AbortMoveRequest(topic=topic, partition=partition),
                         timeout_s)
    return bool(answer.aborted)


async def take_over_partition(router: Any, topic: str, partition: int, unclean: bool,
                              timeout_s: float) -> PartitionTakeover:
    answer = await _call(router.bootstrap, "TakeOverPartition",
                         mpb.TakeOverPartitionRequest(topic=topic, partition=partition, unclean=unclean), timeout_s)
    return PartitionTakeover(topic, partition, answer.from_instance, answer.epoch, answer.start_offset)


async def cluster_status(router: Any, timeout_s: float) -> ClusterStatus:
    answer = await _call(router.bootstrap, "DescribeCluster", mpb.DescribeClusterRequest(), timeout_s)
    return ClusterStatus(
        answer.cluster_name, answer.instance_id, answer.current,
        tuple(InstanceStatus(i.instance_id, i.address, i.alive, i.gone_since_ms or None, i.partition_count, i.bytes)
              for i in answer.instances),
        tuple(OfflinePartition(o.topic, o.partition, o.owner_id, o.gone_since_ms or None)
              for o in answer.offline_partitions),
        tuple(MoveInProgress(m.topic, m.partition, m.from_instance, m.to_instance, m.state, m.started_ms)
              for m in answer.moves))
