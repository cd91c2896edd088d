"""Creating a topic's partitions across the log directories (and installing a partition move's
copy in place of a partition's log): Kafka's placement (each partition to
the online directory with the fewest partitions, ties broken by the configured order,
``nextLogDirs``), each partition's directory with its ``topic.properties``, the directories'
entries made durable, and the partitions registered only if every one was created.

Contract with the log manager, which calls ``create`` under its admin lock (CreateTopic, and
start-up for partitions an interrupted creation left missing) and hands in its topic map, its fs
seam, its online directories, how to open a log and how to take a directory offline. A failure
leaves nothing of the topic behind: an exhausted resource raises ResourceExhaustedError (the
directory stays online), another I/O error takes the failing directory offline and raises
LogDirOfflineError, anything else is raised as it came.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from ..base.errors import InvalidConfigError, LogDirOfflineError, TopicExistsError
from ..base.fs import FileSystem
from ..base.io_errors import exhaustion_error
from ..base.topic_partition import PARTITION_COUNT_MAX, TopicPartition, delete_dir_name, partition_path
from ..dirs.log_dir import LogDir, remove_tree
from ..dirs.topic_registry import IO_ERRORS, PartitionEntry, TopicEntry, TopicRegistry, close_quietly
from ..format.topic_metadata import TOPIC_METADATA_FILE_NAME, TopicMetadata, write_topic_metadata
from ..log.unified_log import Log

__all__ = ["PartitionCreator", "check_partition_count"]

_log = logging.getLogger(__name__)

# open_log(path, tp, config, had_clean_shutdown=, recovery_point=, log_start_offset=) -> Log
OpenLog = Callable[..., Log]


def check_partition_count(partition_count: object) -> None:
    """Raises InvalidConfigError unless ``partition_count`` is an int in [1, PARTITION_COUNT_MAX]."""
    if isinstance(partition_count, bool) or not isinstance(partition_count, int):
        raise InvalidConfigError(
            f"partition count must be an integer, found {partition_count!r}"
        )
    if not 1 <= partition_count <= PARTITION_COUNT_MAX:
        raise InvalidConfigError(
            f"partition count must be in [1, {PARTITION_COUNT_MAX}], found {partition_count}"
        )


class PartitionCreator:
    def __init__(
        self,
        registry: TopicRegistry,
        fs: FileSystem,
        *,
        online_dirs: Callable[[], list[LogDir]],
        open_log: OpenLog,
        take_dir_offline: Callable[[LogDir, str], None],
    ) -> None:
        self._registry = registry
        self._fs = fs
        self._online_dirs = online_dirs
        self._open_log = open_log
        self._take_dir_offline = take_dir_offline

    def create(self, topic: TopicEntry, partitions: list[TopicPartition]) -> None:
        """Creates the partitions and registers them (with the topic) only if all succeed."""
        placement = self._place(len(partitions))
        created: list[tuple[TopicPartition, PartitionEntry]] = []
        current: LogDir | None = None
        try:
            for tp, log_dir in zip(partitions, placement):
                current = log_dir
                created.append((tp, self._create_partition(log_dir, tp, topic)))
            for log_dir in dict.fromkeys(placement):
                current = log_dir
                self._fs.fsync_dir(log_dir.path)
        except BaseException as exc:
            self._roll_back(created)
            exhausted = exhaustion_error(exc, f"creating topic {topic.name!r}")
            if exhausted is not None:
                raise exhausted from exc  # nothing of the topic is left; the directory is fine
            if isinstance(exc, IO_ERRORS) and current is not None:
                self._take_dir_offline(current, f"creating topic {topic.name!r} failed: {exc}")
                raise LogDirOfflineError(
                    f"log directory {current.path} failed while creating topic "
                    f"{topic.name!r}: {exc}"
                ) from exc
            raise
        self._registry.add(topic, created)

    def install(self, tp: TopicPartition, found: PartitionEntry, staged: str, log_start_offset: int) -> Log:
        """Replaces ``found``'s log with the segment files in ``staged`` (LogManager.install_partition
        says how); ``found.log`` is the new log on return. An I/O error takes the directory offline
        and raises LogDirOfflineError."""
        properties = os.path.join(found.path, TOPIC_METADATA_FILE_NAME)
        with open(properties, "rb") as source:
            self._fs.write_atomically(os.path.join(staged, TOPIC_METADATA_FILE_NAME), source.read())
        close_quietly(found.log)
        retired = os.path.join(found.log_dir.path, delete_dir_name(tp))
        try:
            self._fs.replace(found.path, retired)
            self._fs.replace(staged, found.path)
            self._fs.fsync_dir(found.log_dir.path)
            log = self._open_log(found.path, tp, found.log.config, had_clean_shutdown=False,
                                 recovery_point=0, log_start_offset=log_start_offset)
        except IO_ERRORS as exc:
            self._take_dir_offline(found.log_dir, f"installing a copy of {tp} failed: {exc}")
            raise LogDirOfflineError(f"installing a copy of {tp} in {found.log_dir.path} failed: {exc}") from exc
        found.log = log
        found.log_dir.schedule_delete_dirs([retired])
        _log.info("partition %s installed from a copy: offsets %d..%d, %d segments", tp,
                  log.log_start_offset, log.log_end_offset, log.segment_count)
        return log

    def _place(self, partition_count: int) -> list[LogDir]:
        """Kafka's placement: each partition to the online dir with the fewest partitions."""
        online = self._online_dirs()
        if not online:
            raise LogDirOfflineError("no log directory is online to hold a new partition")
        counts = self._registry.partition_counts(online)
        placement = []
        for _ in range(partition_count):
            # min() keeps the first of equal counts, i.e. the configured order breaks ties.
            chosen = min(online, key=lambda log_dir: counts[log_dir])
            counts[chosen] += 1
            placement.append(chosen)
        return placement

    def _create_partition(
        self, log_dir: LogDir, tp: TopicPartition, topic: TopicEntry
    ) -> PartitionEntry:
        path = partition_path(log_dir.path, tp)
        if self._fs.exists(path):
            raise TopicExistsError(f"partition directory {path} already exists")
        self._fs.makedirs(path)
        assert topic.topic_id is not None
        metadata = TopicMetadata(
            topic.name, topic.topic_id, topic.partition_count, topic.overrides
        )
        write_topic_metadata(path, metadata, fs=self._fs)
        log = self._open_log(
            path, tp, topic.config, had_clean_shutdown=True, recovery_point=0, log_start_offset=0
        )
        return PartitionEntry(log, log_dir, path)

    def _roll_back(self, created: list[tuple[TopicPartition, PartitionEntry]]) -> None:
        for _, partition in created:
            close_quietly(partition.log)
            try:
                remove_tree(partition.path, self._fs)
            except OSError as exc:
                _log.warning("could not remove %s of a failed creation: %s", partition.path, exc)
