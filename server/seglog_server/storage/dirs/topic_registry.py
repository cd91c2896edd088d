"""The log manager's topic map: topics, served partitions, offline partitions, under one lock.

The lock guards dictionary work only (never disk I/O), so ``get_log`` on the request path never
waits for a fsync, a load or a directory listing. Callers that change what is on disk
(create, delete, start-up) are serialised by the manager's admin lock; this class keeps the map
consistent for the readers that run beside them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..base.errors import (
    InvalidTopicError,
    LogDirOfflineError,
    StorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from ..base.log_config import LogConfig
from .log_dir import LogDir, LogDirStateError
from ..format.topic_metadata import CorruptTopicMetadataError, TopicMetadata
from ..base.topic_partition import TopicPartition, has_collision_chars, unify_collision_chars

__all__ = [
    "IO_ERRORS",
    "OfflinePartition",
    "PartitionEntry",
    "TopicEntry",
    "TopicRegistry",
    "close_quietly",
    "drop_quietly",
]

_log = logging.getLogger(__name__)

# How a disk failure reaches the manager: raw from the file system seam, or already translated by
# a Log (which then stays offline itself).
IO_ERRORS = (OSError, LogDirOfflineError)


@dataclass
class TopicEntry:
    name: str
    topic_id: str | None  # None: known only from directory names (no topic.properties read)
    config: LogConfig
    overrides: dict[str, str]
    partition_count: int

    @property
    def has_metadata(self) -> bool:
        return self.topic_id is not None

    def partitions(self) -> list[TopicPartition]:
        return [TopicPartition(self.name, p) for p in range(self.partition_count)]


@dataclass
class PartitionEntry:
    log: Any  # Log
    log_dir: LogDir
    path: str


@dataclass
class OfflinePartition:
    log_dir: LogDir
    reason: str


class TopicRegistry:
    def __init__(self, default_config: LogConfig) -> None:
        self._default_config = default_config
        self._lock = threading.Lock()
        self._topics: dict[str, TopicEntry] = {}
        self._partitions: dict[TopicPartition, PartitionEntry] = {}
        self._offline: dict[TopicPartition, OfflinePartition] = {}

    # -- lookups -----------------------------------------------------------------------------
    def find(self, tp: TopicPartition) -> PartitionEntry | None:
        with self._lock:
            return self._partitions.get(tp)

    def topic(self, name: str) -> TopicEntry | None:
        with self._lock:
            return self._topics.get(name)

    def missing_error(self, tp: TopicPartition) -> StorageError:
        """Why ``tp`` has no log: offline (it exists somewhere we cannot serve) or unknown."""
        with self._lock:
            entry = self._topics.get(tp.topic)
            if entry is None:
                return UnknownTopicOrPartitionError(f"topic {tp.topic!r} does not exist")
            partition = tp.partition
            if isinstance(partition, int) and 0 <= partition < entry.partition_count:
                return LogDirOfflineError(f"partition {tp} is offline: {self._offline_reason(tp)}")
            return UnknownTopicOrPartitionError(
                f"topic {tp.topic!r} has partitions 0..{entry.partition_count - 1}, not {partition!r}"
            )

    def _offline_reason(self, tp: TopicPartition) -> str:
        offline = self._offline.get(tp)
        if offline is not None:
            return f"{offline.reason} ({offline.log_dir.path})"
        return "no online log directory holds it (its directory may be offline)"

    def list_topics(self) -> list[tuple[str, int]]:
        with self._lock:
            return sorted((name, entry.partition_count) for name, entry in self._topics.items())

    def describe(
        self, name: str
    ) -> tuple[TopicEntry, list[tuple[int, PartitionEntry]], dict[int, str]]:
        """(topic, [(partition, entry)] served, {partition: reason} not served)."""
        with self._lock:
            entry = self._topics.get(name)
            if entry is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            online = []
            offline = {}
            for tp in entry.partitions():
                partition = self._partitions.get(tp)
                if partition is not None:
                    online.append((tp.partition, partition))
                else:
                    offline[tp.partition] = self._offline_reason(tp)
            return entry, online, offline

    def partitions_in(self, log_dir: LogDir) -> list[tuple[TopicPartition, PartitionEntry]]:
        with self._lock:
            return [(tp, p) for tp, p in self._partitions.items() if p.log_dir is log_dir]

    def unloaded_in(self, log_dir: LogDir) -> list[TopicPartition]:
        with self._lock:
            return [tp for tp, o in self._offline.items() if o.log_dir is log_dir]

    def all_partitions(self) -> list[tuple[TopicPartition, PartitionEntry]]:
        with self._lock:
            return list(self._partitions.items())

    def partition_counts(self, log_dirs: Iterable[LogDir]) -> dict[LogDir, int]:
        counts = {log_dir: 0 for log_dir in log_dirs}
        with self._lock:
            for partition in self._partitions.values():
                if partition.log_dir in counts:
                    counts[partition.log_dir] += 1
        return counts

    def counts(self) -> tuple[int, int, dict[LogDir, int]]:
        """(topic count, offline partition count, offline partitions per directory)."""
        with self._lock:
            by_dir: dict[LogDir, int] = {}
            for offline in self._offline.values():
                by_dir[offline.log_dir] = by_dir.get(offline.log_dir, 0) + 1
            return len(self._topics), len(self._offline), by_dir

    # -- checks --------------------------------------------------------------------------------
    def check_new_topic_name(self, topic: str) -> None:
        with self._lock:
            if topic in self._topics:
                raise TopicExistsError(f"topic {topic!r} already exists")
            if not has_collision_chars(topic):
                return
            unified = unify_collision_chars(topic)
            for other in self._topics:
                if unify_collision_chars(other) == unified:
                    raise InvalidTopicError(
                        f"topic {topic!r} collides with existing topic {other!r}: "
                        f"'.' and '_' are the same character in metric names"
                    )

    def check_all_partitions_online(
        self, entry: TopicEntry, some_dir_offline: bool, then: str = "it can be deleted"
    ) -> None:
        with self._lock:
            offline = [tp.partition for tp in entry.partitions() if tp in self._offline]
            missing = [
                tp.partition
                for tp in entry.partitions()
                if tp not in self._offline and tp not in self._partitions
            ]
        if offline or (missing and some_dir_offline):
            raise LogDirOfflineError(
                f"topic {entry.name!r} has partitions {sorted(offline + missing)} on offline log "
                f"directories; {then} once they are back"
            )

    def missing_partitions(self, entry: TopicEntry) -> list[TopicPartition]:
        """Partitions the topic promises that are neither served nor known offline."""
        with self._lock:
            return [
                tp
                for tp in entry.partitions()
                if tp not in self._partitions and tp not in self._offline
            ]

    # -- changes -------------------------------------------------------------------------------
    def add(self, entry: TopicEntry, created: Iterable[tuple[TopicPartition, PartitionEntry]]) -> None:
        with self._lock:
            self._topics[entry.name] = entry
            for tp, partition in created:
                self._partitions[tp] = partition

    def register_loaded(self, loaded: Iterable[tuple[TopicPartition, PartitionEntry]]) -> None:
        with self._lock:
            for tp, partition in loaded:
                other = self._partitions.get(tp)
                if other is not None:
                    raise LogDirStateError(
                        f"partition {tp} exists in both {other.path} and {partition.path}; "
                        f"remove the stale copy before starting"
                    )
                self._partitions[tp] = partition

    def remove_topic(self, name: str) -> list[tuple[TopicPartition, PartitionEntry]]:
        """Forgets the topic; returns its served partitions (the caller closes and deletes)."""
        with self._lock:
            entry = self._topics.pop(name)
            return [
                (tp, self._partitions.pop(tp))
                for tp in entry.partitions()
                if tp in self._partitions
            ]

    def clear_partitions(self) -> list[PartitionEntry]:
        with self._lock:
            partitions = list(self._partitions.values())
            self._partitions.clear()
            return partitions

    def mark_offline(self, partitions: Iterable[TopicPartition], log_dir: LogDir, reason: str) -> None:
        """Records partitions found on disk that cannot be served."""
        with self._lock:
            for tp in partitions:
                self._offline[tp] = OfflinePartition(log_dir, reason)
                entry = self._topics.get(tp.topic)
                if entry is None:
                    entry = TopicEntry(tp.topic, None, self._default_config, {}, 0)
                    self._topics[tp.topic] = entry
                entry.partition_count = max(entry.partition_count, tp.partition + 1)

    def take_dir_offline(self, log_dir: LogDir, reason: str) -> list[PartitionEntry]:
        """Moves the directory's partitions to offline; returns them for the caller to drop."""
        with self._lock:
            log_dir.take_offline(reason)
            gone = [(tp, p) for tp, p in self._partitions.items() if p.log_dir is log_dir]
            for tp, _ in gone:
                del self._partitions[tp]
                self._offline[tp] = OfflinePartition(log_dir, reason)
        return [partition for _, partition in gone]

    def topic_from_disk(
        self, tp: TopicPartition, metadata: TopicMetadata | None, path: str
    ) -> TopicEntry:
        """The topic entry for a partition found on disk, created or completed from its metadata.

        Raises CorruptTopicMetadataError when the metadata names another topic and
        InvalidConfigError when its overrides no longer parse.
        """
        if metadata is not None and metadata.topic != tp.topic:
            raise CorruptTopicMetadataError(
                f"{path}/topic.properties names topic {metadata.topic!r}, "
                f"the directory belongs to {tp.topic!r}"
            )
        config = None
        if metadata is not None:
            config = LogConfig.from_properties(metadata.overrides, self._default_config)
        with self._lock:
            entry = self._topics.get(tp.topic)
            if metadata is None:
                if entry is None:
                    # A partition directory without seglog metadata (e.g. copied from Kafka).
                    entry = TopicEntry(tp.topic, None, self._default_config, {}, 0)
                    self._topics[tp.topic] = entry
                entry.partition_count = max(entry.partition_count, tp.partition + 1)
                return entry
            assert config is not None
            if entry is None or not entry.has_metadata:
                count = max(metadata.partition_count, entry.partition_count if entry else 0)
                overrides = dict(metadata.overrides)
                entry = TopicEntry(tp.topic, metadata.topic_id, config, overrides, count)
                self._topics[tp.topic] = entry
            elif (metadata.topic_id, dict(metadata.overrides)) != (entry.topic_id, entry.overrides):
                _log.warning(
                    "partition %s has topic id %s and overrides %s, other partitions %s and %s; "
                    "using the latter",
                    tp,
                    metadata.topic_id,
                    dict(metadata.overrides),
                    entry.topic_id,
                    entry.overrides,
                )
            count = max(entry.partition_count, metadata.partition_count, tp.partition + 1)
            entry.partition_count = count
            return entry

    def topics_snapshot(self) -> list[TopicEntry]:
        with self._lock:
            return list(self._topics.values())


def drop_quietly(log: Any) -> None:
    """Closes descriptors and mappings without writing: for a failed disk or a crash."""
    try:
        log.close_handlers()
    except Exception as exc:
        _log.warning("dropping %s failed: %s", getattr(log, "dir", log), exc)


def close_quietly(log: Any) -> None:
    try:
        log.close()
    except Exception as exc:  # the log is being dropped; its directory may be failing
        _log.warning("closing %s failed: %s", getattr(log, "dir", log), exc)

