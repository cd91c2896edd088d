"""The committed offsets kept in the compacted ``__consumer_offsets`` topic of the storage engine,
served from one OffsetsState per partition.

A write builds one record batch (Kafka writes a group's commit of many partitions as one batch, so
it is all-or-nothing), appends it to the group's partition (``partition_for``), and only then
applies the same records to the map: a failed append changes nothing. ``load`` replays every
partition from its log start to its end through the same ``apply``; it never depends on the
cleaner having run. In cluster mode the coordinator is the partition's owner: it calls
``load_partition`` when it gains a partition and ``unload_partition`` when it loses it
(rpc/group_routing.py); a partition not loaded reads as empty and refuses writes.

The topic is created lazily, as Kafka creates it on the first FindCoordinator: ``open`` replays it
when it exists and otherwise starts every partition empty without creating anything;
``ensure_created`` (the first group write, or any append) creates it once under its own lock, so
concurrent first writers create it once and the others wait for it.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from collections.abc import Callable, Iterable, Mapping, Set
from typing import Any

from seglog.records import RecordBatchBuilder, iter_batches
from seglog_server.storage import Clock, LogManager
from seglog_server.storage.base.errors import LogDirOfflineError, TopicExistsError, UnknownTopicOrPartitionError

from .offsets_state import OFFSETS_RETENTION_MS, OffsetsState
from .partitioning import OFFSETS_TOPIC_PARTITIONS, partition_for
from .records import GroupMetadataKey, GroupMetadataValue, OffsetCommitKey, OffsetCommitValue, encode_key, encode_value

__all__ = ["OFFSETS_TOPIC", "OFFSETS_TOPIC_CONFIG", "Appended", "OffsetsLog"]

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    # Kafka's offsets.topic.segment.bytes: small segments so the cleaner can reach commits soon
    # (the active segment is never cleaned) and a replay at load reads little.
    "segment.bytes": str(100 * 1024 * 1024),
}
# One replay read: large enough that a partition of a few MB loads in a handful of reads.
_REPLAY_READ_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Appended:
    """Where a write landed: its records are below ``end_offset`` of ``log``. A commit is
    acknowledged only once they are durable (rpc/group_rpcs.py waits for the group commit)."""

    log: Any  # the offsets partition's storage Log
    end_offset: int


class OffsetsLog:
    def __init__(self, manager: LogManager, clock: Clock, *, partitions: int = OFFSETS_TOPIC_PARTITIONS,
                 retention_ms: int = OFFSETS_RETENTION_MS) -> None:
        assert partitions > 0 and retention_ms > 0
        self._manager = manager
        self._clock = clock
        self._partition_count = partitions
        self._retention_ms = retention_ms
        self._states: dict[int, OffsetsState] = {}
        # Cluster mode: the ownership epoch each partition was loaded under. Appends carry it, so
        # the log stamps it into the batches and refuses them once the partition's epoch moved on,
        # as a produce's (a single process loads without one: batches written as built).
        self._leader_epochs: dict[int, int | None] = {}
        self._created = False  # the topic is known to exist with the right partition count
        self._create_lock = threading.Lock()

    @property
    def partition_count(self) -> int:
        return self._partition_count

    @property
    def created(self) -> bool:
        return self._created

    def open(self) -> bool:
        """Replays the topic when it exists (refused with another partition count), else starts
        every partition empty and creates nothing; returns whether it existed."""
        if not self._exists():
            self._states = {partition: OffsetsState() for partition in range(self._partition_count)}
            return False
        self.load()
        return True

    def ensure_created(self) -> None:
        """Creates the compacted topic if absent, once among concurrent callers."""
        if self._created:
            return
        with self._create_lock:
            if not self._created:
                self.ensure_topic()

    def ensure_topic(self) -> None:
        """Creates the compacted topic when missing; refuses one with another partition count
        (every group would move partition and lose its offsets)."""
        if not self._exists():
            try:
                self._manager.create_topic(OFFSETS_TOPIC, self._partition_count, OFFSETS_TOPIC_CONFIG)
            except TopicExistsError:
                self._exists()  # created by another caller meanwhile: its partition count checked
        self._created = True

    def _exists(self) -> bool:
        try:
            described = self._manager.describe_topic(OFFSETS_TOPIC)
        except UnknownTopicOrPartitionError:
            return False
        found = len(described.partitions) + len(described.offline_partitions)
        if found != self._partition_count:
            raise ValueError(f"{OFFSETS_TOPIC} has {found} partitions, the coordinator expects {self._partition_count}")
        self._created = True
        return True

    # -- loading ------------------------------------------------------------------------------
    def load(self) -> None:
        for partition in range(self._partition_count):
            self.load_partition(partition)

    def load_partition(self, partition: int, leader_epoch: int | None = None) -> OffsetsState:
        """Replays the partition's log into a new state (replacing any loaded one); the appends
        that follow carry ``leader_epoch`` (cluster mode: the ownership epoch it is loaded under)."""
        state = OffsetsState()
        for offset, key, value in self._records(partition):
            state.apply(key, value, offset=offset)
        self._states[partition] = state
        self._leader_epochs[partition] = leader_epoch
        return state

    def unload_partition(self, partition: int) -> None:
        self._states.pop(partition, None)
        self._leader_epochs.pop(partition, None)

    def _records(self, partition: int) -> Iterable[tuple[int, bytes | None, bytes | None]]:
        log = self._manager.get_log(OFFSETS_TOPIC, partition)
        offset, end = log.log_start_offset, log.log_end_offset
        while offset < end:
            fetched = self._log_call(log, log.read, offset, _REPLAY_READ_BYTES)
            next_offset = offset
            for batch in iter_batches(fetched.records):
                next_offset = batch.next_offset
                if batch.is_control:
                    continue
                for record in batch.records():
                    if record.offset >= offset:
                        yield record.offset, record.key, record.value
            if next_offset <= offset:
                break  # nothing readable below the end: a gap the log reports no batch for
            offset = next_offset

    # -- reads --------------------------------------------------------------------------------
    def state_of(self, group: str) -> OffsetsState:
        """The loaded state holding ``group`` (an empty one when its partition is not loaded)."""
        return self.state(partition_for(group, self._partition_count))

    def state(self, partition: int) -> OffsetsState:
        """The partition's loaded state. A partition not loaded (cluster mode: another instance
        owns it) reads as a new empty state, never stored: writes to it still fail (``_append``)."""
        assert 0 <= partition < self._partition_count, partition
        state = self._states.get(partition)
        return OffsetsState() if state is None else state

    def loaded(self, partition: int) -> bool:
        return partition in self._states

    def committed(self, group: str, topic: str, partition: int) -> OffsetCommitValue | None:
        return self.state_of(group).committed(group, topic, partition)

    # -- writes -------------------------------------------------------------------------------
    def commit(self, group: str, offsets: Mapping[tuple[str, int], int | OffsetCommitValue]) -> Appended | None:
        """Commits ``offsets`` ((topic, partition) -> offset or a full value) as one batch;
        returns where it landed (None: nothing to write). Not yet durable: see ``Appended``."""
        now_ms = self._clock.time_ms()
        records = [
            (OffsetCommitKey(group, topic, partition),
             value if isinstance(value, OffsetCommitValue) else OffsetCommitValue(value, now_ms))
            for (topic, partition), value in offsets.items()
        ]
        return self._write(group, [(encode_key(k), encode_value(v)) for k, v in records])

    def delete_offsets(self, group: str, topic_partitions: Iterable[tuple[str, int]]) -> None:
        self._write(group, [(encode_key(OffsetCommitKey(group, t, p)), None) for t, p in topic_partitions])

    def delete_group(self, group: str, topic_partitions: Iterable[tuple[str, int]],
                     other_keys: Iterable[bytes] = ()) -> None:
        """Tombstones for the group's offsets named, its metadata and ``other_keys`` (encoded keys
        of its KIP-848 records), in one batch."""
        self._write(group, [(encode_key(OffsetCommitKey(group, t, p)), None) for t, p in topic_partitions]
                    + [(encode_key(GroupMetadataKey(group)), None)] + [(key, None) for key in other_keys])

    def write(self, group: str, records: list[tuple[bytes, bytes | None]]) -> Appended | None:
        """Appends encoded records (a None value: a tombstone) to the group's partition as one
        batch and applies them; None when there is nothing to write."""
        return self._write(group, records)

    def store_group(self, group: str, value: GroupMetadataValue | None) -> None:
        """Writes the group's metadata (None: its tombstone)."""
        self._write(group, [(encode_key(GroupMetadataKey(group)), None if value is None else encode_value(value))])

    def expire(self, live_groups: Set[str] = frozenset()) -> int:
        """Tombstones every expired offset (and dead empty group) of the loaded partitions;
        returns the number of tombstones written."""
        now_ms = self._clock.time_ms()
        written = 0
        for partition, state in sorted(self._states.items()):
            keys = state.expired_keys(now_ms, self._retention_ms, live_groups)
            if keys:
                self._append(partition, [(key, None) for key in keys])
                written += len(keys)
        return written

    def _write(self, group: str, records: list[tuple[bytes, bytes | None]]) -> Appended | None:
        if not records:
            return None
        return self._append(partition_for(group, self._partition_count), records)

    def _append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> Appended:
        # A partition this coordinator has not loaded: KeyError (cluster mode: lost while the call
        # ran; rpc/group_routing.py answers the new owner's hint instead).
        state = self._states[partition]
        self.ensure_created()
        now_ms = self._clock.time_ms()
        builder = RecordBatchBuilder()
        for key, value in records:
            builder.append(value, key=key, timestamp_ms=now_ms)
        log = self._manager.get_log(OFFSETS_TOPIC, partition)
        append = functools.partial(log.append, leader_epoch=self._leader_epochs.get(partition))
        info = self._log_call(log, append, builder.build())
        for index, (key, value) in enumerate(records):
            state.apply(key, value, offset=info.base_offset + index)
        return Appended(log, info.last_offset + 1)

    def _log_call(self, log: Any, method: Callable[..., Any], *args: Any) -> Any:
        """One I/O call of an offsets partition's log, as rpc/service_core.log_call makes one of
        any other partition's: an I/O error (LogDirOfflineError) takes the log's directory
        offline through the storage (``handle_log_failure``) before it is raised."""
        try:
            return method(*args)
        except LogDirOfflineError as exc:
            self._manager.handle_log_failure(log, exc)
            raise
