"""The committed offsets kept in the compacted ``__consumer_offsets`` topic of the storage engine,
served from one OffsetsState per partition.

A write builds one record batch (Kafka writes a group's commit of many partitions as one batch, so
it is all-or-nothing) and appends it to the group's partition (``partition_for``): a failed append
changes nothing. Its committed offsets (and their tombstones) reach the map only once durable, as
Kafka applies a commit to its cache once the append completed: they wait, in offset order, until
the log's recovery point passes their batch, and every read applies what it passed first
(``state``). So a fetch, a lag, a describe or the member the partition is handed to never sees an
offset a restart could lose, and a flush that fails leaves the map as it was (should a later flush
make the records durable after all, they are applied then: the map is always the replay of the
durable prefix of the log). The other records (the group's metadata and its KIP-848 membership
records, which the coordinator puts back itself when their flush fails) are applied at once. ``load`` replays every
partition from its log start to its end through the same ``apply``; it never depends on the
cleaner having run. In cluster mode the coordinator is the partition's owner: it calls
``load_partition`` when it gains a partition and ``unload_partition`` when it loses it
(rpc/group_routing.py); a partition not loaded reads as empty and refuses writes.

The topic is created lazily, as Kafka creates it on the first FindCoordinator: ``open`` replays it
when it exists and otherwise starts every partition empty without creating anything;
``ensure_created`` (the first group write, or any append) creates it once under its own lock, so
concurrent first writers create it once and the others wait for it.

That is the one part safe to call from several threads at once: every other call (writes, reads,
the durable records' application) is made under the coordinator's lock (coordinator.py), which
keeps a membership check and its append together too, so the state here takes no lock of its own.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from dataclasses import dataclass, field
from collections.abc import Callable, Iterable, Mapping, Set
from typing import Any

from seglog.records import RecordBatchBuilder, iter_batches
from seglog_server.storage import Clock, LogManager
from seglog_server.storage.base.errors import LogDirOfflineError, TopicExistsError, UnknownTopicOrPartitionError

from .offsets_state import OFFSETS_RETENTION_MS, OffsetsState
from .partitioning import OFFSETS_TOPIC_PARTITIONS, partition_for
from .records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    encode_key,
    encode_value,
    is_offset_commit_key,
)

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
    # A membership write put back by a failed flush (its own or another call's that covered it):
    # that flush's error, for every call answering on this write to raise (coordinator.py).
    undone: list[BaseException] = field(default_factory=list, compare=False, repr=False)


@dataclass(frozen=True)
class _Undurable:
    """A batch's committed-offset records (offset, key, value), applied once ``log``'s recovery
    point reaches ``end_offset``."""

    log: Any
    end_offset: int
    records: list[tuple[int, bytes, bytes | None]]


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
        # Offsets partition -> its appended offset records not yet durable, in offset order.
        self._undurable: dict[int, deque[_Undurable]] = {}
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
        that follow carry ``leader_epoch`` (cluster mode: the ownership epoch it is loaded under).
        The log is flushed to its end first: what the replay applies is durable, as every offset
        the map shows is (records past the recovery point are left by a stop without a flush)."""
        log = self._manager.get_log(OFFSETS_TOPIC, partition)
        if log.recovery_point < log.log_end_offset:
            self._log_call(log, log.flush, log.log_end_offset)
        state = OffsetsState()
        for offset, key, value in self._records(partition):
            state.apply(key, value, offset=offset)
        self._states[partition] = state
        self._leader_epochs[partition] = leader_epoch
        self._undurable.pop(partition, None)
        return state

    def unload_partition(self, partition: int) -> None:
        self._states.pop(partition, None)
        self._leader_epochs.pop(partition, None)
        self._undurable.pop(partition, None)

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
        """The partition's loaded state, with every offset record made durable since applied. A
        partition not loaded (cluster mode: another instance owns it) reads as a new empty state,
        never stored: writes to it still fail (``_append``)."""
        assert 0 <= partition < self._partition_count, partition
        state = self._states.get(partition)
        if state is None:
            return OffsetsState()
        self._apply_durable(partition, state)
        return state

    def _apply_durable(self, partition: int, state: OffsetsState) -> None:
        """Applies, in offset order, the waiting offset records the log's recovery point passed."""
        waiting = self._undurable.get(partition)
        while waiting:
            first = waiting[0]
            if first.log.recovery_point < first.end_offset:
                if first.end_offset <= first.log.log_end_offset:
                    return  # not durable yet, nor anything after it
                waiting.popleft()  # truncated away below its end: it is in no replay
                continue
            waiting.popleft()
            for offset, key, value in first.records:
                state.apply(key, value, offset=offset)
        self._undurable.pop(partition, None)

    def undurable_ends(self) -> list[tuple[Any, int]]:
        """(log, end offset) of the last waiting offset batch of each loaded partition: what to
        flush for every appended offset record to reach the map."""
        ends = []
        for partition, state in sorted(self._states.items()):
            self._apply_durable(partition, state)
            waiting = self._undurable.get(partition)
            if waiting:
                ends.append((waiting[-1].log, waiting[-1].end_offset))
        return ends

    def undurable_offsets(self, group: str) -> set[tuple[str, int]]:
        """The (topic, partition) of the group's offset records appended and not yet durable."""
        partition = partition_for(group, self._partition_count)
        if partition in self._states:
            self._apply_durable(partition, self._states[partition])
        return self._undurable_keys(partition).get(group, set())

    def _undurable_keys(self, partition: int) -> dict[str, set[tuple[str, int]]]:
        """Group -> the (topic, partition) of its offset records (commits or tombstones) waiting
        in ``partition``, as they are now (the caller applied what is durable first)."""
        found: dict[str, set[tuple[str, int]]] = {}
        for batch in self._undurable.get(partition, ()):
            for _, key, _ in batch.records:
                decoded = decode_key(key)
                if isinstance(decoded, OffsetCommitKey):
                    found.setdefault(decoded.group, set()).add((decoded.topic, decoded.partition))
        return found

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

    def delete_offsets(self, group: str, topic_partitions: Iterable[tuple[str, int]]) -> Appended | None:
        return self._write(group, [(encode_key(OffsetCommitKey(group, t, p)), None) for t, p in topic_partitions])

    def delete_group(self, group: str, topic_partitions: Iterable[tuple[str, int]],
                     other_keys: Iterable[bytes] = ()) -> Appended | None:
        """Tombstones for the group's offsets named, its metadata and ``other_keys`` (encoded keys
        of its KIP-848 records), in one batch."""
        return self._write(group, [(encode_key(OffsetCommitKey(group, t, p)), None) for t, p in topic_partitions]
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
        returns the number of tombstones written. The map holds durable records only, so an
        offset with a record still waiting (a commit appended, its flush under way) is not
        expired, nor is its group dead: a tombstone appended after that commit would delete it
        once both are durable, after its committer was answered (Kafka's expiry skips the
        partitions with pending commits, and a group holding any is not empty of offsets)."""
        now_ms = self._clock.time_ms()
        written = 0
        for partition, state in sorted(self._states.items()):
            self._apply_durable(partition, state)
            keys = state.expired_keys(now_ms, self._retention_ms, live_groups,
                                      pending=self._undurable_keys(partition))
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
        waiting: list[tuple[int, bytes, bytes | None]] = []
        for index, (key, value) in enumerate(records):
            if is_offset_commit_key(key):  # visible once durable
                waiting.append((info.base_offset + index, key, value))
            else:
                state.apply(key, value, offset=info.base_offset + index)
        appended = Appended(log, info.last_offset + 1)
        if waiting:
            self._undurable.setdefault(partition, deque()).append(_Undurable(log, appended.end_offset, waiting))
            self._apply_durable(partition, state)  # a log flushing on every append: already durable
        return appended

    def _log_call(self, log: Any, method: Callable[..., Any], *args: Any) -> Any:
        """One I/O call of an offsets partition's log, as rpc/service_core.log_call makes one of
        any other partition's: an I/O error (LogDirOfflineError) takes the log's directory
        offline through the storage (``handle_log_failure``) before it is raised."""
        try:
            return method(*args)
        except LogDirOfflineError as exc:
            self._manager.handle_log_failure(log, exc)
            raise
