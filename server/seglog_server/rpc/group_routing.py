"""Cluster mode's consumer groups: one coordinator per group, the owner of the group's
``__consumer_offsets`` partition (``partition_for(group)``, Kafka's rule), as Kafka's
FindCoordinator answers the leader of that partition.

``GroupRouting`` answers, for each group RPC, whether this instance coordinates the group:

- the offsets topic is created cluster-wide on the first group call anywhere (placed over the
  live instances through etcd, as CreateTopic places any topic; Kafka creates it on the first
  FindCoordinator). A racing second create answers ALREADY_EXISTS: the topic etcd holds is the
  one, held locally (with the same partitions and configs) when a partition of it is loaded;
- a group whose offsets partition another live instance owns is refused FAILED_PRECONDITION with
  the owner's hint (``NotPartitionOwnerError``, trailing ``seglog-owner-*``), one whose owner is
  gone UNAVAILABLE with the hint (``PartitionOwnerGoneError``): the same refusals, and the same
  client handling, as a request for a partition;
- a partition this instance owns is loaded (replayed) by the coordinator once per ownership
  epoch: the first call after it gained the partition replays it, so a partition that left and
  came back is never served from a stale map. ``sync`` (the service's timer, about once a second)
  unloads the partitions it lost: their committed offsets leave the map and their groups'
  members are dropped, to rejoin at the new owner;
- ``after`` re-checks the ownership once a call's work is done (a commit after its records are
  durable): a partition lost meanwhile refuses the call with the new owner's hint, so a commit
  is never acknowledged by an instance that no longer owns its offsets partition. Writes are
  fenced by the lease too (``check_fence``), as produces are, and refused (UNAVAILABLE, retriable)
  while the offsets partition is in its move's final catch-up from this instance
  (``check_not_moving``): a write acknowledged after the final copy was read would be lost at the
  target. The partition's appends carry the ownership epoch it was loaded under (stamped into the
  batches, refused by the log once the epoch moved on), as a produce's do.

It asks only memory (the watched cache) on the request path, except the first call anywhere,
which writes the topic to etcd once. No gRPC here beyond the adapter's errors.
"""

from __future__ import annotations

import threading
from typing import Any

from seglog_server.groups.coordinator import GroupCoordinator
from seglog_server.groups.offsets_log import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIG
from seglog_server.storage.base.errors import TopicExistsError

from .cluster_routing import NotPartitionOwnerError, PartitionMovingError, PartitionOwnerGoneError
from .errors import CoordinatorNotAvailableError

__all__ = ["GroupRouting"]

# How long the first group call waits for the watched cache to show the offsets topic it (or a
# racing instance) just wrote to etcd: one watch event, normally milliseconds.
CACHE_WAIT_S = 5.0


class GroupRouting:
    """``routing``: rpc/cluster_routing.ClusterRouting (owners from its ``cache``, the offsets
    topic made through its ``create_topic``); ``coordinator``: this instance's GroupCoordinator."""

    def __init__(self, routing: Any, coordinator: GroupCoordinator) -> None:
        self._routing = routing
        self._coordinator = coordinator
        self._lock = threading.Lock()  # loads and unloads, one at a time
        self._loaded: dict[int, int] = {}  # offsets partition -> the ownership epoch it was loaded at
        self._synced = False

    def partition_of(self, group: str) -> int:
        return self._coordinator.offsets_partition_of(group)

    # -- the request path (blocking: on the storage pool) ----------------------------------------
    def before(self, group: str, *, write: bool = False) -> int:
        """Checks that this instance coordinates ``group`` (creating the offsets topic in the
        cluster on the first call anywhere) and that its partition is loaded; returns the
        ownership epoch to hand to ``after``."""
        partition = self.partition_of(group)
        owner = self._routing.partition_owner(OFFSETS_TOPIC, partition)
        if owner is None:
            self._create_topic()
            owner = self._wait_for_owner(partition)
        self._check_coordinator(group, partition)
        if write:
            self._check_writable(group, partition)
        with self._lock:
            if self._loaded.get(partition) != owner.epoch:
                self._coordinator.load_offsets_partition(partition, owner.epoch)
                self._loaded[partition] = owner.epoch
        return owner.epoch

    def after(self, group: str, epoch: int, *, write: bool = False) -> None:
        """Refuses, with the current owner's hint, a call whose partition changed hands (or epoch)
        while it ran; ``write``: and one this instance may no longer acknowledge (fenced)."""
        partition = self.partition_of(group)
        if write:
            self._check_writable(group, partition)
        self._check_coordinator(group, partition)
        owner = self._routing.partition_owner(OFFSETS_TOPIC, partition)
        if owner is None or owner.epoch != epoch:
            raise CoordinatorNotAvailableError(
                f"group {group!r}: {OFFSETS_TOPIC}-{partition} changed ownership epoch while the call ran "
                f"({epoch} -> {'none' if owner is None else owner.epoch}); retry")

    def coordinates(self, group: str) -> bool:
        """Whether this instance answers for ``group`` (ListGroups lists only those)."""
        return self._routing.owns(OFFSETS_TOPIC, self.partition_of(group))

    def _check_coordinator(self, group: str, partition: int) -> None:
        # The owner alone: loading the partition makes this instance's copy (cluster_routing.py).
        error = self._routing.owner_error(OFFSETS_TOPIC, partition, generation=False)
        if error is None:
            return
        message = f"group {group!r} is coordinated by the owner of {OFFSETS_TOPIC}-{partition}: {error}"
        if isinstance(error, NotPartitionOwnerError | PartitionOwnerGoneError):
            raise type(error)(message, error.owner_id, error.owner_address, error.epoch)
        raise error

    def _check_writable(self, group: str, partition: int) -> None:
        """Not fenced, and the offsets partition not in its move's final catch-up from here."""
        self._routing.check_fence()
        try:
            self._routing.check_not_moving(OFFSETS_TOPIC, partition)
        except PartitionMovingError as moving:
            raise PartitionMovingError(f"group {group!r}: its writes are refused while {OFFSETS_TOPIC}-{partition} "
                                       f"is in its move's final catch-up; retry ({moving})") from None

    def _create_topic(self) -> None:
        count = self._coordinator.offsets_partition_count
        try:
            self._routing.create_topic(OFFSETS_TOPIC, count, OFFSETS_TOPIC_CONFIG)
        except TopicExistsError:
            pass  # another instance's create won the race: its topic is the one (held locally on load)

    def _wait_for_owner(self, partition: int) -> Any:
        def known(_cache: Any) -> bool:
            return self._routing.partition_owner(OFFSETS_TOPIC, partition) is not None

        if not self._routing.cache.wait_until(known, CACHE_WAIT_S):
            raise CoordinatorNotAvailableError(
                f"{OFFSETS_TOPIC} is created in etcd but this instance's view of it has no owner for "
                f"partition {partition} yet; retry")
        return self._routing.partition_owner(OFFSETS_TOPIC, partition)

    # -- the timer --------------------------------------------------------------------------------
    def sync(self) -> list[int]:
        """Unloads the offsets partitions this instance no longer owns (and, on the first pass,
        those the start replayed but another instance owns); returns them. The partitions it owns
        are loaded by the next call that needs them (``before``)."""
        dropped = []
        with self._lock:
            candidates = range(self._coordinator.offsets_partition_count) if not self._synced else list(self._loaded)
            for partition in candidates:
                owner = self._routing.partition_owner(OFFSETS_TOPIC, partition)
                if owner is None:
                    continue  # no owner record yet: nothing was written to it anywhere
                if owner.instance_id == self._routing.instance_id:
                    if partition not in self._loaded:  # first pass: the start replayed it from its own log
                        self._loaded[partition] = owner.epoch
                    if self._loaded[partition] == owner.epoch:
                        continue
                self._coordinator.unload_offsets_partition(partition)
                self._loaded.pop(partition, None)
                dropped.append(partition)
            self._synced = self._synced or self._routing.cache.statistics().connected
        return dropped

