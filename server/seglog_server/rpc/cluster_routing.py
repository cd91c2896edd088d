"""Cluster mode's questions on the request path: may this instance acknowledge a produce, and does
it own the partition a request names (docs/cluster.md).

``ClusterRouting`` answers from memory only (a clock read for the lease, a dict look-up in the
watched cache): the handlers ask it on every Produce, ProduceStream message, Fetch and Consume, so
it never waits on etcd. It holds the cluster core's objects by duck type and imports nothing of it,
so a single process (no ``--etcd``) loads no etcd code at all; the service core's ``cluster`` is
then None and no handler asks anything.

The rules, in order:

- a produce while ``may_acknowledge()`` is False (no lease renewal within the fencing deadline,
  shorter than the lease TTL) is refused UNAVAILABLE: another instance may take the partition
  once the lease expires, and this one must not acknowledge a write it might no longer own;
- a partition with no owner record in etcd (a topic created before cluster mode) is served
  locally, as before (__consumer_offsets has owners: it is created cluster-wide on the first
  group call, and a group is answered by its partition's owner, group_routing.py);
- a partition owned by another live instance is refused FAILED_PRECONDITION with the owner's id,
  address and epoch in trailing metadata (``seglog-owner-id``, ``seglog-owner-address``,
  ``seglog-epoch``): the client asks that owner, the service never forwards;
- a partition whose owner is gone (its lease expired) is refused UNAVAILABLE naming the owner and
  since when, with the same hint: nothing moves its partitions but an operator.
- a partition served here whose local copy is not of the topic generation the cache has (etcd's
  create revision of the topic key: ``held_generation`` against ``topic_generation``) is refused
  UNAVAILABLE, retriable: a copy not made yet (CreateTopic a moment ago, the materializer behind),
  or the copy of a topic deleted (and maybe created again) that the materializer has not dropped
  yet. Served, it would append a new topic's records to the old topic's log (which the drop then
  deletes, acknowledged records with it) and hand the old topic's records to the new one's
  consumers. A cache not yet at the copy's generation is not believed (it is behind: the copy is
  newer than anything it knows), so an instance restarted while etcd is away keeps serving reads.

The same rule holds for every RPC that names a partition, as one class: the kind of each RPC is
in its row of ``operations.OPERATIONS`` (``Owner``), and ``check_request`` applies the row at the
boundary (boundary.py) before any handler runs. OffsetsForTimes (and LookupStream's messages)
answers per target with ``owner_error`` as that target's error; DescribeTopic describes from
``partition_owner``; the group coordinator reads only the log ends ``owns`` says are here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .errors import ServiceError
from .operations import Owner, RpcOperation

__all__ = [
    "EPOCH_METADATA_KEY",
    "OWNER_ADDRESS_METADATA_KEY",
    "OWNER_ID_METADATA_KEY",
    "ClusterRouting",
    "PartitionOwner",
    "ClusterUnavailableError",
    "InstanceFencedError",
    "NoLiveInstanceError",
    "NotPartitionOwnerError",
    "OffsetsNotReservedError",
    "PartitionOwnerGoneError",
    "PartitionMovingError",
    "TopicGenerationError",
]

OWNER_ID_METADATA_KEY = "seglog-owner-id"
OWNER_ADDRESS_METADATA_KEY = "seglog-owner-address"
EPOCH_METADATA_KEY = "seglog-epoch"


class InstanceFencedError(ServiceError):
    """This instance could not renew its etcd lease within the fencing deadline (UNAVAILABLE)."""


class _OwnerHintError(ServiceError):
    """Refusals that name the partition's owner in trailing metadata (status.py sends
    ``status_metadata`` after the error class)."""

    def __init__(self, message: str, owner_id: str, owner_address: str, epoch: int) -> None:
        super().__init__(message)
        self.owner_id, self.owner_address, self.epoch = owner_id, owner_address, epoch
        self.status_metadata = ((OWNER_ID_METADATA_KEY, owner_id), (OWNER_ADDRESS_METADATA_KEY, owner_address),
                                (EPOCH_METADATA_KEY, str(epoch)))


class NotPartitionOwnerError(_OwnerHintError):
    """Another live instance owns the partition: ask it (FAILED_PRECONDITION, with the hint)."""


class PartitionOwnerGoneError(_OwnerHintError):
    """The partition's owner is not registered (dead or cut off): UNAVAILABLE, with the hint."""


@dataclass(frozen=True)
class PartitionOwner:
    """A partition's owner as the watched cache knows it (``alive``: its lease is held)."""

    instance_id: str
    address: str
    epoch: int
    alive: bool
    gone_since_ms: int | None


class ClusterRouting:
    """``membership``: a cluster.Membership (``may_acknowledge``, ``statistics``); ``cache``: a
    cluster.MetadataCache (``owner_of``, ``instances``, ``topics``, ``statistics``)."""

    def __init__(self, cluster_name: str, instance_id: str, address: str, membership: Any, cache: Any,
                 fence_after_s: float, create_topic: Any = None, wall_clock: Any = time.time,
                 monotonic: Any = time.monotonic) -> None:
        self.cluster_name = cluster_name
        self.instance_id = instance_id
        # (topic, partition count, configs) -> None, blocking: places the partitions over the live
        # instances and writes them to etcd in one transaction, then holds the topic locally
        # (cluster_node.py, which translates the core's errors into this module's and storage's).
        self.create_topic = create_topic
        self.address = address
        self.membership = membership
        self.cache = cache
        self._fence_after_s = fence_after_s
        self._wall_clock = wall_clock
        self._monotonic = monotonic
        # Partition moves (cluster/partition_moves.py MoveStore, set by cluster_node.py).
        self.moves: Any = None
        # Offset ceilings (cluster/offset_ceilings.py OffsetCeilings, set by cluster_node.py).
        self.ceilings: Any = None
        # Topic deletion and a deleted topic's local copy (cluster_node.py ClusterNode: delete_topic,
        # settle_topic; blocking), set by cluster_node.py.
        self.topics: Any = None
        # () -> the live instances whose ACL digest differs from this one's (cluster_node.py).
        self.acl_mismatches: Any = None
        # topic -> the generation (etcd create revision) of the local copy held for etcd's sake, or
        # None (cluster_node.py: HeldTopics.get). Unset: no generation check.
        self.held_generation: Any = None

    def check_produce(self, topic: str, partition: int) -> int | None:
        """Admits a produce: not fenced, owned here, not in a move's final catch-up. Returns the
        ownership epoch it is admitted under (the append carries it: the log refuses it once the
        partition's epoch moved on, and stamps it into the batch), or None for a partition etcd
        has no owner record for (served as in a single process: no epoch, no stamp)."""
        self.check_fence()
        # One read of the owner record decides both: read twice, a cache update in between would
        # admit the produce as this instance's under the previous owner's epoch.
        owner = self._owner(topic, partition)
        error = self._refusal(topic, partition, owner)
        if error is not None:
            raise error
        self.check_not_moving(topic, partition)
        return None if owner is None else owner.epoch

    def fenced_append_error(self, topic: str, partition: int, exc: Exception) -> Exception:
        """The answer to an append the log refused because the partition's epoch moved past the
        one it was admitted under (storage's FencedLeaderEpochError; nothing was written): the
        owner's hint as the cache has it now, so the client asks the owner, or repeats here when
        the newer epoch is this instance's. When the cache's epoch is not above the refused one
        (the log holds a newer epoch than etcd: cluster metadata restored from an older copy),
        the storage's error itself: FAILED_PRECONDITION, no hint to follow."""
        error = self.owner_error(topic, partition)
        if error is not None:
            return error
        owner = self._owner(topic, partition)
        admitted = getattr(exc, "admitted_epoch", -1)
        if owner is None or owner.epoch <= admitted:
            return exc
        return NotPartitionOwnerError(
            f"{exc}; {topic}-{partition} is this instance's at epoch {owner.epoch}: retry here",
            owner.instance_id, owner.address, owner.epoch)

    def check_acknowledge(self, topic: str, partition: int) -> None:
        """Right before a produce's OK: fenced (lease), moved away meanwhile, or fenced for a
        move's final catch-up since the append: UNAVAILABLE or the owner's hint, never OK (the
        batch may be in this log; the producer's retry is deduplicated by the owner)."""
        self.check_fence()
        self.check_owner(topic, partition)
        self.check_not_moving(topic, partition)
        self.check_offsets_reserved(topic, partition)

    def check_offsets_reserved(self, topic: str, partition: int) -> None:
        """Offsets are acknowledged only below the ceiling etcd holds for this owner's epoch
        (cluster/offset_ceilings.py), so an unclean takeover starts above every one of them. A
        log whose end passed it (produce outran the thread raising it) answers UNAVAILABLE."""
        record = self.cache.owner_of(topic, partition)
        if self.ceilings is None or record is None or record.owner != self.instance_id:
            return
        beyond = self.ceilings.beyond(topic, partition, record)
        if beyond is not None:
            end, ceiling = beyond
            raise OffsetsNotReservedError(
                f"{topic}-{partition}: offsets up to {ceiling} are reserved in etcd for epoch {record.epoch}, the log "
                f"ends at {end}: not acknowledged until the reservation is raised; retry")

    def check_not_moving(self, topic: str, partition: int) -> None:
        """A partition whose move is in its final catch-up (the move record ``final`` in etcd,
        naming this instance as the source) takes no produce here: UNAVAILABLE, retriable; the
        producer's retry goes to the new owner once the move commits, or here after an abort."""
        move = self.cache.move_of(topic, partition)
        if move is not None and move.get("state") == "final" and move.get("source") == self.instance_id:
            raise PartitionMovingError(
                f"{topic}-{partition} is being moved to instance {move.get('target')!r}: produce is refused "
                "during the final catch-up; retry (the client follows the new owner once the move commits)")

    def check_fence(self) -> None:
        """Refuses (UNAVAILABLE) while fenced: before a produce's append and again right before
        its OK, since the append, a group commit or a quota delay may outlast the deadline."""
        if not self.membership.may_acknowledge():
            raise InstanceFencedError(self._fenced_message())
        # Registered again after a lapse (SIGSTOP, a cut longer than the TTL): the partitions may
        # have been taken over meanwhile, below the new registration's revision. Nothing is
        # acknowledged until the cache has applied everything up to it, so the owner checks that
        # follow answer from a view that includes any such change.
        registered_at = self.membership.registration_revision()
        seen = self.cache.statistics().revision
        if seen < registered_at:
            raise InstanceFencedError(
                f"instance fenced: registered in etcd at revision {registered_at}, its view of the cluster is at "
                f"{seen}: nothing is acknowledged until the view includes every ownership change made while "
                "its lease was gone. Retry: it resumes once the view catches up")

    def check_request(self, row: RpcOperation, request: Any) -> None:
        """The owner check of an ``Owner.EACH`` call: every partition it names is this
        instance's, or the whole call is refused with the first other owner's hint. Other kinds
        are answered by their handlers (per target, from the cache, by the coordinator)."""
        if row.owner is not Owner.EACH:
            return
        assert row.partitions is not None, row
        for topic, partition in row.partitions(request):
            self.check_owner(topic, partition)

    def check_owner(self, topic: str, partition: int) -> None:
        error = self.owner_error(topic, partition)
        if error is not None:
            raise error

    def owns(self, topic: str, partition: int) -> bool:
        """True when this instance serves the partition (its own, or one etcd has no owner for)."""
        owner = self.partition_owner(topic, partition)
        return owner is None or owner.instance_id == self.instance_id

    def partition_owner(self, topic: str, partition: int) -> PartitionOwner | None:
        """The partition's owner in the cache; None when etcd has no owner record (served here)."""
        return self._owner(topic, partition)

    def owner_error(self, topic: str, partition: int, *, generation: bool = True) -> ServiceError | None:
        """The refusal of a request for a partition owned elsewhere (with the hint), or of one
        whose local copy is not at etcd's generation; None when served here. ``generation=False``
        asks the owner alone: the group coordinator makes its own copy of the offsets topic when
        it loads a partition, and that internal topic is never deleted."""
        owner = self._owner(topic, partition)
        if not generation:
            return self._owner_refusal(topic, partition, owner)
        return self._refusal(topic, partition, owner)

    def _refusal(self, topic: str, partition: int, owner: PartitionOwner | None) -> ServiceError | None:
        if owner is None or owner.instance_id == self.instance_id:
            return self._generation_refusal(topic, partition, owner)
        return self._owner_refusal(topic, partition, owner)

    def _owner_refusal(self, topic: str, partition: int, owner: PartitionOwner | None) -> ServiceError | None:
        if owner is None or owner.instance_id == self.instance_id:
            return None
        where = f"{topic}-{partition} is owned by instance {owner.instance_id!r}"
        if owner.alive:
            return NotPartitionOwnerError(
                f"{where} at {owner.address} (epoch {owner.epoch}), not by {self.instance_id!r}: send it there "
                "(trailing metadata seglog-owner-address)", owner.instance_id, owner.address, owner.epoch)
        since = "" if owner.gone_since_ms is None else " since " + _utc(owner.gone_since_ms / 1000)
        return PartitionOwnerGoneError(
            f"{where}, which is not registered{since}: the partition is offline until it returns "
            "(or an operator moves it)", owner.instance_id, owner.address, owner.epoch)

    def _generation_refusal(self, topic: str, partition: int, owner: PartitionOwner | None) -> ServiceError | None:
        """UNAVAILABLE while the partition, served here, is not held at the cache's generation."""
        if self.held_generation is None:
            return None
        held = self.held_generation(topic)
        current = self.cache.topic_generation(topic)
        if held == current or (held is None and owner is None):
            return None  # the right copy, or a topic (or partition) etcd has no record of
        if held is None:
            return TopicGenerationError(
                f"{topic}-{partition} is this instance's (epoch {owner.epoch}) but not held here yet: the topic "
                "was created a moment ago and its local copy is being made; retry")
        if self.cache.statistics().revision < held:
            return None  # the cache is behind the copy (loading, or etcd away): not believed
        now = "deleted" if current is None else f"created again (generation {current})"
        return TopicGenerationError(
            f"{topic}-{partition}: this instance's copy is of generation {held} of topic {topic!r}, since {now} "
            "in etcd; the old copy is being dropped and is not served; retry")

    def _owner(self, topic: str, partition: int) -> PartitionOwner | None:
        record = self.cache.owner_of(topic, partition)
        if record is None:
            return None
        if record.owner == self.instance_id:
            return PartitionOwner(record.owner, self.address, record.epoch, True, None)
        info = self.cache.instances().get(record.owner)
        if info is None:
            return PartitionOwner(record.owner, "", record.epoch, False, None)
        return PartitionOwner(record.owner, info.address, record.epoch, info.alive, info.gone_since_ms)

    def _fenced_message(self) -> str:
        renewed_at = self.membership.statistics().renewed_at
        if renewed_at is None:
            since = "this instance is not registered in etcd (yet)"
        else:
            since = "lease not renewed since " + _utc(self._wall_clock() - (self._monotonic() - renewed_at))
        return (f"instance fenced: {since}; produce is refused after {self._fence_after_s:.1f} s without a "
                "renewal, before etcd could give its partitions to another instance. Retry: it resumes "
                "once etcd answers")


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}Z"


class PartitionMovingError(ServiceError):
    """The partition's owner is fenced for a move's final catch-up (UNAVAILABLE, retriable)."""


class OffsetsNotReservedError(ServiceError):
    """The log's end passed the offset ceiling etcd holds for this owner (UNAVAILABLE, retriable)."""


class TopicGenerationError(ServiceError):
    """The local copy is not of the topic's current generation in etcd (not made yet, or of a
    deleted topic not dropped yet): UNAVAILABLE, retriable."""


class ClusterUnavailableError(ServiceError):
    """etcd did not answer a cluster change (CreateTopic's placement, InitProducerId's block of
    ids): UNAVAILABLE, retriable."""


class NoLiveInstanceError(ServiceError):
    """No live instance to place a new topic's partitions on (UNAVAILABLE)."""
