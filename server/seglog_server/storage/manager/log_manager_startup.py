"""The log manager's start-up passes over its directories (Kafka's ``LogManager.loadLogs``).

1. Open every directory: create it if missing, lock it, consume the clean-shutdown marker
   (deleted before any log is touched, KAFKA-10471), read the recovery-point and
   log-start-offset checkpoints (corrupt ones read as empty). An ``OSError`` takes the directory
   offline; the others go on.
2. List every directory: partition directories, leftovers of deletions (``-delete``), and
   entries that are not seglog's (left alone, counted).
3. Note the ``topic.id`` of every ``-delete`` leftover and schedule its removal: a partition
   still carrying one of those ids belongs to the same interrupted DeleteTopic and is deleted
   too, so a topic never comes back half-deleted.
4. Load each partition with ``Log.load`` and the checkpointed values. Unreadable
   ``topic.properties`` keeps just that partition offline; an I/O error takes the whole directory
   offline (Kafka's rule: the disk is suspect), except running out of descriptors or space
   (EMFILE, ENFILE, ENOSPC, EDQUOT: io_errors.py), which keeps just that partition offline until
   the next start (Kafka takes the directory offline then too). Any other failure (bytes that break a rule the
   loader relies on) is that partition's alone: it is loaded again as after a crash (recovery
   from its recovery point) and, should that fail too, kept offline by itself while every other
   partition serves. Kafka stops the broker on such a load error; one bad partition should not
   take every topic down.
   Each directory logs whether its clean-shutdown marker was found and what recovery did
   (logs, segments, bytes cut, duration); ``RecoveryStatistics`` keeps the same figures.
5. With every directory online, create the partitions a topic's metadata promises but no
   directory holds (a crash inside CreateTopic).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..base.errors import CorruptCheckpointError, InvalidConfigError, LogDirOfflineError
from ..base.fs import FileSystem
from ..base.io_errors import is_exhaustion
from ..dirs.log_dir import DirScan, LogDir
from ..base.clock import Clock
from .log_manager_statistics import LogManagerCounters, RecoveryStatistics
from ..format.topic_metadata import CorruptTopicMetadataError, read_topic_metadata
from ..base.topic_partition import TopicPartition, delete_dir_name
from ..dirs.topic_registry import IO_ERRORS, PartitionEntry, TopicEntry, TopicRegistry, drop_quietly

__all__ = ["OpenLog", "StartupLoader", "check_some_dir_online"]

_log = logging.getLogger(__name__)

OpenLog = Callable[..., Any]
"""``open_log(path, tp, config, *, had_clean_shutdown, recovery_point, log_start_offset)``."""

CreatePartitions = Callable[[TopicEntry, list[TopicPartition]], None]


def check_some_dir_online(log_dirs: Sequence[LogDir]) -> None:
    if not any(log_dir.online for log_dir in log_dirs):
        reasons = "; ".join(f"{d.path}: {d.offline_reason}" for d in log_dirs)
        raise LogDirOfflineError(f"no log directory is usable ({reasons})")


class StartupLoader:
    def __init__(
        self,
        log_dirs: Sequence[LogDir],
        registry: TopicRegistry,
        counters: LogManagerCounters,
        *,
        fs: FileSystem,
        clock: Clock,
        open_log: OpenLog,
        create_partitions: CreatePartitions,
    ) -> None:
        self._clock = clock
        self._dirs = log_dirs
        self._registry = registry
        self._counters = counters
        self._fs = fs
        self._open_log = open_log
        self._create_partitions = create_partitions
        self._deleting_topic_ids: set[str] = set()

    def run(self) -> None:
        self._open_dirs()
        scans = self._scan_dirs()
        self._note_interrupted_deletes(scans)
        self._counters.remaining_logs_to_load = sum(len(s.partitions) for s in scans.values())
        for log_dir, scan in scans.items():
            self._load_dir(log_dir, scan)
        self._complete_interrupted_creates()

    # -- directories ---------------------------------------------------------------------------
    def _open_dirs(self) -> None:
        for log_dir in self._dirs:
            try:
                log_dir.open()
            except OSError as exc:
                log_dir.take_offline(f"cannot open log directory: {exc}")
        check_some_dir_online(self._dirs)

    def _scan_dirs(self) -> dict[LogDir, DirScan]:
        scans = {}
        for log_dir in self._dirs:
            if not log_dir.online:
                continue
            try:
                scans[log_dir] = log_dir.scan()
            except OSError as exc:
                log_dir.take_offline(f"cannot list log directory: {exc}")
        return scans

    def _note_interrupted_deletes(self, scans: Mapping[LogDir, DirScan]) -> None:
        for log_dir, scan in scans.items():
            for path in scan.delete_dirs:
                try:
                    metadata = read_topic_metadata(path, fs=self._fs)
                except (OSError, CorruptTopicMetadataError):
                    metadata = None  # half-removed already; its files no longer matter
                if metadata is not None:
                    self._deleting_topic_ids.add(metadata.topic_id)
            log_dir.schedule_delete_dirs(scan.delete_dirs)

    # -- partitions ----------------------------------------------------------------------------
    def _load_dir(self, log_dir: LogDir, scan: DirScan) -> None:
        _log_marker(log_dir, len(scan.partitions))
        started_ns = self._clock.monotonic_ns()
        tally = _RecoveryTally()
        loaded: list[tuple[TopicPartition, PartitionEntry]] = []
        unloaded = 0
        remaining = len(scan.partitions)
        try:
            for tp, path in scan.partitions.items():
                outcome = self._load_partition(log_dir, tp, path, tally)
                remaining -= 1
                self._counters.remaining_logs_to_load -= 1
                if outcome is _DELETED:
                    continue
                if outcome is None:
                    unloaded += 1
                    continue
                tally.add(outcome)
                loaded.append((tp, PartitionEntry(outcome, log_dir, path)))
        except IO_ERRORS as exc:
            self._counters.remaining_logs_to_load -= remaining  # none of them will load now
            for _, partition in loaded:
                drop_quietly(partition.log)
            reason = f"loading failed: {exc}"
            log_dir.take_offline(reason)
            self._registry.mark_offline(scan.partitions, log_dir, reason)
            return
        self._registry.register_loaded(loaded)
        # KAFKA-15375: only a directory whose every partition loaded may later claim "clean".
        log_dir.load_completed = unloaded == 0
        self._counters.logs_loaded += len(loaded)
        if not log_dir.had_clean_shutdown:
            self._counters.logs_recovered += len(loaded)
        duration_s = (self._clock.monotonic_ns() - started_ns) / 1e9
        figures = tally.figures(log_dir.had_clean_shutdown, len(loaded), duration_s)
        self._counters.recovery_by_dir[log_dir.path] = figures
        _log_recovery(log_dir, figures)

    def _load_partition(self, log_dir: LogDir, tp: TopicPartition, path: str, tally: _RecoveryTally) -> Any:
        """The loaded Log; None when it stays offline (the directory is fine); _DELETED when it
        belonged to an interrupted deletion, now finished."""
        try:
            return self._load_partition_files(log_dir, tp, path, tally)
        except IO_ERRORS as exc:
            if not is_exhaustion(exc):
                raise  # the disk is suspect: the directory goes offline (Kafka's rule)
            # Out of descriptors or space is not a failed disk (io_errors.py): this partition
            # stays offline alone, the directory and every other partition serve, and the
            # next start loads it once the resource is back. Kafka takes the directory offline.
            reason = f"ran out of a resource while loading ({exc}); it loads at the next start once the resource is back"
            _log.error("partition %s stays offline, every other partition serves: %s", tp, reason)
            self._registry.mark_offline([tp], log_dir, reason)
            tally.offline += 1
            return None

    def _load_partition_files(self, log_dir: LogDir, tp: TopicPartition, path: str, tally: _RecoveryTally) -> Any:
        """_load_partition, I/O errors propagating."""
        try:
            metadata = read_topic_metadata(path, fs=self._fs)
            if metadata is not None and metadata.topic_id in self._deleting_topic_ids:
                self._finish_interrupted_delete(log_dir, tp, path)
                return _DELETED
            topic = self._registry.topic_from_disk(tp, metadata, path)
        except (CorruptTopicMetadataError, InvalidConfigError) as exc:
            _log.error("partition %s stays offline: %s", tp, exc)
            self._registry.mark_offline([tp], log_dir, f"unreadable topic metadata: {exc}")
            return None
        recovery_point = log_dir.recovery_points.get(tp, 0)
        log_start_offset = log_dir.log_start_offsets.get(tp, 0)
        try:
            return self._open_log(
                path,
                tp,
                topic.config,
                had_clean_shutdown=log_dir.had_clean_shutdown,
                recovery_point=recovery_point,
                log_start_offset=log_start_offset,
            )
        except IO_ERRORS:
            raise
        except CorruptCheckpointError as exc:
            # A checkpoint that contradicts the files (a log start above the log end, an
            # unreadable lost-offset-ranges): loading again with recovery meets it again, and no
            # guess may delete segments. The message names the file and the operator's fix.
            reason = str(exc)
            _log.error("partition %s stays offline, every other partition serves: %s", tp, reason)
            self._registry.mark_offline([tp], log_dir, reason)
            tally.offline += 1
            return None
        except Exception as exc:  # noqa: BLE001 - any bad byte of one partition stays in it
            first_failure = exc
        _log.error(
            "partition %s failed to load (%s: %s); loading it again with recovery from offset %d",
            tp, type(first_failure).__name__, first_failure, recovery_point,
        )
        tally.retried += 1
        try:
            return self._open_log(
                path, tp, topic.config, had_clean_shutdown=False,
                recovery_point=recovery_point, log_start_offset=log_start_offset,
            )
        except IO_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001
            reason = f"cannot load its files even with recovery: {type(exc).__name__}: {exc}"
            _log.error("partition %s stays offline, every other partition serves: %s", tp, reason)
            self._registry.mark_offline([tp], log_dir, reason)
            tally.offline += 1
            return None

    def _finish_interrupted_delete(self, log_dir: LogDir, tp: TopicPartition, path: str) -> None:
        _log.warning("finishing the interrupted deletion of %s (%s)", tp, path)
        target = os.path.join(log_dir.path, delete_dir_name(tp))
        self._fs.replace(path, target)
        self._fs.fsync_dir(log_dir.path)
        log_dir.schedule_delete_dirs([target])
        self._counters.interrupted_deletes_completed += 1

    def _complete_interrupted_creates(self) -> None:
        """Only when every directory is online: otherwise a missing partition may simply live
        on the offline one."""
        if not all(log_dir.online for log_dir in self._dirs):
            return
        for topic in self._registry.topics_snapshot():
            if not topic.has_metadata:
                continue  # a Kafka directory copied in: nothing says which partitions exist
            missing = self._registry.missing_partitions(topic)
            if not missing:
                continue
            _log.warning("topic %s lacks partitions %s; creating them", topic.name, missing)
            try:
                self._create_partitions(topic, missing)
            except LogDirOfflineError as exc:
                _log.error("could not complete topic %s: %s", topic.name, exc)
                continue
            self._counters.logs_created_on_startup += len(missing)


class _RecoveryTally:
    """What recovery did to the logs of one directory while they loaded."""

    def __init__(self) -> None:
        self.logs_recovered = 0
        self.segments_recovered = 0
        self.bytes_truncated = 0
        self.retried = 0
        self.offline = 0

    def add(self, log: Any) -> None:
        segments = log.loaded_recovered_segment_count
        if segments:
            self.logs_recovered += 1
            self.segments_recovered += segments
            self.bytes_truncated += log.loaded_truncated_bytes

    def figures(self, marker_found: bool, logs_loaded: int, duration_s: float) -> RecoveryStatistics:
        return RecoveryStatistics(
            marker_found=marker_found,
            logs_loaded=logs_loaded,
            logs_recovered=self.logs_recovered,
            segments_recovered=self.segments_recovered,
            bytes_truncated=self.bytes_truncated,
            logs_reloaded_with_recovery=self.retried,
            logs_offline=self.offline,
            duration_s=duration_s,
        )


def _log_marker(log_dir: LogDir, partition_count: int) -> None:
    if partition_count == 0:
        _log.info("log directory %s: no logs to load (clean-shutdown marker %s)",
                  log_dir.path, "found" if log_dir.had_clean_shutdown else "absent")
    elif log_dir.had_clean_shutdown:
        _log.info(
            "log directory %s: clean-shutdown marker found; loading %d logs without recovery "
            "(each log's index files and active-segment tail are still checked)",
            log_dir.path, partition_count,
        )
    else:
        _log.warning(
            "log directory %s: no clean-shutdown marker; recovering %d logs from their recovery points",
            log_dir.path, partition_count,
        )


def _log_recovery(log_dir: LogDir, figures: RecoveryStatistics) -> None:
    level = logging.WARNING if figures.logs_recovered or figures.logs_offline else logging.INFO
    _log.log(
        level,
        "log directory %s: loaded %d logs in %.3f s; recovery ran on %d logs (%d segments, %d bytes cut), "
        "%d logs loaded again with recovery, %d kept offline",
        log_dir.path, figures.logs_loaded, figures.duration_s, figures.logs_recovered,
        figures.segments_recovered, figures.bytes_truncated, figures.logs_reloaded_with_recovery,
        figures.logs_offline,
    )


# _load_partition's answer for a partition of an interrupted deletion (not loaded, not offline).
_DELETED = object()
