"""The log manager: every partition of every topic across several log directories (JBOD).

Kafka's ``LogManager`` without replication. It owns the directories (naming, placement, locks,
checkpoints, the clean-shutdown marker, topic deletion) and the topic map; each ``Log`` owns its
segments.

- **Start-up** (``startup``): per directory, lock it, consume ``.kafka_cleanshutdown`` (deleted
  before anything is loaded, KAFKA-10471), read the recovery-point and log-start-offset
  checkpoints (a corrupt file reads as empty: recovery just starts from 0), then ``Log.load``
  every partition with those values. An ``OSError`` takes the directory offline; the others keep
  serving. Interrupted work is finished: leftover ``-delete`` directories are removed and the
  other partitions of their topic (same ``topic.id``) deleted too; partitions a topic's metadata
  promises but no directory holds (a crash inside CreateTopic) are created.
- **Placement**: a new partition goes to the online directory with the fewest partitions, ties
  broken by the configured order (Kafka's ``nextLogDirs``).
- **Topic configs** survive restarts in ``topic.properties`` inside each partition directory
  (``topic_metadata.py``): overrides only, applied over the manager's defaults.
- **Maintenance** (``run_maintenance``, called by the service about once a second): retention,
  flush.ms, physical deletion of ``.deleted`` files and ``-delete`` directories, and checkpoint
  writes, each at Kafka's interval measured on the injected clock.
- **Shutdown**: per directory, flush and close every log, write both checkpoints, then the marker
  -- only if the directory was clean last time or all its logs loaded in this run (KAFKA-15375).
- **Failures**: an ``OSError`` the manager sees (or one the service reports through
  ``handle_log_dir_failure``) takes the whole directory offline: its partitions raise
  ``LogDirOfflineError``, nothing more is written there, and the next start-up recovers it.

Roll flushes: when a log rolls, it asks for the segments below the new one to be fsynced in the
background (Kafka's scheduler task "flush-log"). The manager runs those on its own small pool, one
thread per log directory (each directory is typically its own disk), and drains the pool at
shutdown before any log is closed, so no background flush races a close.

Locking: ``_admin_lock`` serialises what changes the set of logs (start-up, create, delete,
maintenance, shutdown); ``_lock`` guards the maps and is held only for dictionary work, so
``get_log`` on the request path never waits for disk I/O.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

from .checkpoint import CorruptCheckpointError
from .clean_shutdown import NO_BROKER_EPOCH
from .clock import SYSTEM_CLOCK, Clock
from .errors import (
    InvalidConfigError,
    InvalidTopicError,
    LogDirOfflineError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from .fs import REAL_FS, FileSystem
from .log import Log
from .log_config import LogConfig
from .log_dir import DirScan, LogDir, LogDirStateError, remove_tree
from .log_manager_statistics import (
    LogDirStatistics,
    LogManagerStatistics,
    PartitionDescription,
    PartitionStatistics,
    TopicDescription,
)
from .topic_metadata import (
    CorruptTopicMetadataError,
    TopicMetadata,
    new_topic_id,
    read_topic_metadata,
    write_topic_metadata,
)
from .topic_partition import (
    PARTITION_COUNT_MAX,
    TopicPartition,
    delete_dir_name,
    has_collision_chars,
    partition_path,
    unify_collision_chars,
    validate_topic,
)

__all__ = [
    "LogDirStateError",
    "LogManager",
    "MaintenanceIntervals",
    "PartitionDescription",
    "TopicDescription",
]

_log = logging.getLogger(__name__)

# How a disk failure reaches the manager: raw from the file system seam, or already translated by
# a Log (which then stays offline itself).
_IO_ERRORS = (OSError, LogDirOfflineError)

# _load_partition's answer for a partition of an interrupted deletion (not loaded, not offline).
_DELETED = object()

_NEW, _STARTING, _RUNNING, _STOPPING, _STOPPED, _HALTED = (
    "new",
    "starting",
    "running",
    "stopping",
    "stopped",
    "halted",
)


@dataclass(frozen=True)
class MaintenanceIntervals:
    """How often ``run_maintenance`` does each job; Kafka's broker settings and defaults."""

    # log.initial.task.delay.ms: let start-up traffic settle before the first periodic job.
    initial_delay_ms: int = 30_000
    # log.retention.check.interval.ms: retention deletes whole segments, so checking every
    # 5 minutes costs little precision against retention.ms measured in hours or days.
    retention_check_ms: int = 300_000
    # Kafka's log.flush.scheduler.interval.ms defaults to "never", which silently disables the
    # flush.ms topic setting; seglog honours flush.ms at a one-second resolution instead.
    flush_check_ms: int = 1_000
    # log.flush.offset.checkpoint.interval.ms: a stale recovery point only lengthens recovery.
    recovery_point_checkpoint_ms: int = 60_000
    # log.flush.start.offset.checkpoint.interval.ms.
    log_start_offset_checkpoint_ms: int = 60_000

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value < 0:
                raise InvalidConfigError(f"{name} must be >= 0, found {value}")


class _PeriodicJob:
    def __init__(self, interval_ms: int, first_due_ms: int) -> None:
        self._interval_ms = interval_ms
        self._next_due_ms = first_due_ms

    def is_due(self, now_ms: int) -> bool:
        """True (and re-armed) when the job should run at ``now_ms``."""
        if now_ms < self._next_due_ms:
            return False
        self._next_due_ms = now_ms + self._interval_ms
        return True


@dataclass
class _Topic:
    name: str
    topic_id: str | None  # None: known only from directory names (no topic.properties read)
    config: LogConfig
    overrides: dict[str, str]
    partition_count: int

    @property
    def has_metadata(self) -> bool:
        return self.topic_id is not None


@dataclass
class _Partition:
    log: Any  # Log
    log_dir: LogDir
    path: str


@dataclass
class _OfflinePartition:
    log_dir: LogDir
    reason: str


@dataclass
class _Counters:
    startup_duration_ms: float = 0.0
    logs_loaded: int = 0
    logs_recovered: int = 0
    logs_created_on_startup: int = 0
    interrupted_deletes_completed: int = 0
    remaining_logs_to_load: int = 0
    maintenance_passes: int = 0
    maintenance_errors: int = 0
    last_maintenance_duration_ms: float = 0.0
    retention_checks: int = 0
    segments_deleted: int = 0
    files_deleted: int = 0
    flushes_by_time: int = 0
    recovery_point_checkpoints: int = 0
    log_start_offset_checkpoints: int = 0
    topics_created: int = 0
    topics_deleted: int = 0
    delete_dirs_removed: int = 0


class LogManager:
    def __init__(
        self,
        log_dirs: Sequence[str],
        *,
        default_config: LogConfig = LogConfig(),
        clock: Clock = SYSTEM_CLOCK,
        fs: FileSystem = REAL_FS,
        intervals: MaintenanceIntervals = MaintenanceIntervals(),
        broker_epoch: int = NO_BROKER_EPOCH,
    ) -> None:
        if isinstance(log_dirs, str) or not log_dirs:
            raise InvalidConfigError(f"log_dirs must be a non-empty list of paths, found {log_dirs!r}")
        _check_no_duplicate_dirs(log_dirs)
        self._dirs = [LogDir(path, fs=fs) for path in log_dirs]
        self._default_config = default_config
        self._clock = clock
        self._fs = fs
        self._intervals = intervals
        self._broker_epoch = broker_epoch
        self._admin_lock = threading.RLock()
        self._lock = threading.Lock()
        self._state = _NEW
        self._topics: dict[str, _Topic] = {}
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._offline: dict[TopicPartition, _OfflinePartition] = {}
        self._counters = _Counters()
        self._jobs: dict[str, _PeriodicJob] = {}
        self._deleting_topic_ids: set[str] = set()
        self._flush_pool: ThreadPoolExecutor | None = None

    # ---------------------------------------------------------------------------------------
    # life cycle
    # ---------------------------------------------------------------------------------------
    def startup(self) -> None:
        """Opens every directory and loads every partition; see the module docstring.

        Raises LogDirOfflineError when no directory is usable and LogDirStateError when a
        directory is locked by another process or a partition exists in two directories.
        """
        with self._admin_lock:
            if self._state != _NEW:
                raise RuntimeError(f"startup() called on a log manager that is {self._state}")
            self._state = _STARTING
            started_ns = self._clock.monotonic_ns()
            self._flush_pool = ThreadPoolExecutor(
                max_workers=len(self._dirs), thread_name_prefix="seglog-roll-flush"
            )
            try:
                self._open_dirs()
                scans = self._scan_dirs()
                self._remove_delete_dirs_found(scans)
                self._counters.remaining_logs_to_load = sum(len(s.partitions) for s in scans.values())
                for log_dir, scan in scans.items():
                    self._load_dir(log_dir, scan)
                self._complete_interrupted_creates()
                self._remove_delete_dirs()
                self._check_some_dir_online()
            except BaseException:
                self._abandon()
                raise
            self._counters.startup_duration_ms = (self._clock.monotonic_ns() - started_ns) / 1e6
            self._arm_jobs()
            self._state = _RUNNING
            _log.info(
                "loaded %d logs from %d log directories in %.1f ms",
                self._counters.logs_loaded,
                len(self._dirs),
                self._counters.startup_duration_ms,
            )

    def shutdown(self) -> None:
        """Flushes and closes every log, writes checkpoints and markers; idempotent."""
        with self._admin_lock:
            if self._state in (_STOPPED, _HALTED):
                return
            was_started = self._state != _NEW
            self._state = _STOPPING
            self._stop_flush_pool(wait=True)
            if was_started:
                for log_dir in self._dirs:
                    if log_dir.online:
                        self._shut_down_dir(log_dir)
            for log_dir in self._dirs:
                log_dir.unlock()
            with self._lock:
                self._partitions.clear()
            self._state = _STOPPED

    def halt(self) -> None:
        """Stops serving at once, leaving the directories as a crash would: no flush, no
        checkpoint, no marker (the next start-up recovers). Releases the directory locks."""
        with self._lock:
            self._state = _HALTED
            partitions = list(self._partitions.values())
            self._partitions.clear()
        self._stop_flush_pool(wait=False)
        for partition in partitions:
            _drop_quietly(partition.log)
        for log_dir in self._dirs:
            log_dir.unlock()

    def _abandon(self) -> None:
        """Undoes a failed start-up: closes what was loaded, releases the locks."""
        with self._lock:
            partitions = list(self._partitions.values())
            self._partitions.clear()
            self._state = _HALTED
        self._stop_flush_pool(wait=True)
        for partition in partitions:
            _close_quietly(partition.log)
        for log_dir in self._dirs:
            log_dir.unlock()

    def _submit_flush(self, task: Callable[[], None]) -> None:
        """The Logs' FlushScheduler: runs a roll's background flush on the manager's pool."""
        pool = self._flush_pool
        if pool is None:
            return  # stopped: the shutdown flush (or the next recovery) covers it
        try:
            pool.submit(task)
        except RuntimeError:
            pass  # the pool is shutting down, same as above

    def _stop_flush_pool(self, *, wait: bool) -> None:
        pool, self._flush_pool = self._flush_pool, None
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=not wait)

    # ---------------------------------------------------------------------------------------
    # start-up steps
    # ---------------------------------------------------------------------------------------
    def _open_dirs(self) -> None:
        for log_dir in self._dirs:
            try:
                log_dir.open()
            except OSError as exc:
                log_dir.take_offline(f"cannot open log directory: {exc}")
        self._check_some_dir_online()

    def _check_some_dir_online(self) -> None:
        if not self._online_dirs():
            reasons = "; ".join(f"{d.path}: {d.offline_reason}" for d in self._dirs)
            raise LogDirOfflineError(f"no log directory is usable ({reasons})")

    def _scan_dirs(self) -> dict[LogDir, DirScan]:
        scans = {}
        for log_dir in self._online_dirs():
            try:
                scans[log_dir] = log_dir.scan()
            except OSError as exc:
                log_dir.take_offline(f"cannot list log directory: {exc}")
        return scans

    def _remove_delete_dirs_found(self, scans: Mapping[LogDir, DirScan]) -> None:
        """Notes the topic ids of interrupted deletions (their other partitions go too), then
        removes the leftover directories."""
        for log_dir, scan in scans.items():
            for path in scan.delete_dirs:
                try:
                    metadata = read_topic_metadata(path, fs=self._fs)
                except (OSError, CorruptTopicMetadataError):
                    metadata = None  # half-removed already; its files no longer matter
                if metadata is not None:
                    self._deleting_topic_ids.add(metadata.topic_id)
            log_dir.schedule_delete_dirs(scan.delete_dirs)

    def _load_dir(self, log_dir: LogDir, scan: DirScan) -> None:
        loaded: list[tuple[TopicPartition, _Partition]] = []
        skipped = 0
        try:
            for tp, path in scan.partitions.items():
                log = self._load_partition(log_dir, tp, path)
                self._counters.remaining_logs_to_load -= 1
                if log is _DELETED:
                    continue
                if log is None:
                    skipped += 1
                    continue
                loaded.append((tp, _Partition(log, log_dir, path)))
        except _IO_ERRORS as exc:
            for _, partition in loaded:
                _drop_quietly(partition.log)
            reason = f"loading failed: {exc}"
            log_dir.take_offline(reason)
            self._mark_offline(scan.partitions, log_dir, reason)
            return
        self._register_loaded(loaded)
        log_dir.load_completed = skipped == 0
        self._counters.logs_loaded += len(loaded)
        if not log_dir.had_clean_shutdown:
            self._counters.logs_recovered += len(loaded)

    def _load_partition(self, log_dir: LogDir, tp: TopicPartition, path: str) -> Any:
        """Loads one partition. Returns None when its metadata keeps it offline (the directory
        is fine) and _DELETED when it belongs to an interrupted deletion, now finished."""
        try:
            metadata = read_topic_metadata(path, fs=self._fs)
            if metadata is not None and metadata.topic_id in self._deleting_topic_ids:
                self._finish_interrupted_delete(log_dir, tp, path)
                return _DELETED
            topic = self._topic_for_loading(tp, metadata, path)
        except (CorruptTopicMetadataError, InvalidConfigError) as exc:
            _log.error("partition %s stays offline: %s", tp, exc)
            self._mark_offline({tp: path}, log_dir, f"unreadable topic metadata: {exc}")
            return None
        return Log.load(
            path,
            tp.topic,
            tp.partition,
            topic.config,
            clock=self._clock,
            fs=self._fs,
            had_clean_shutdown=log_dir.had_clean_shutdown,
            recovery_point=log_dir.recovery_points.get(tp, 0),
            log_start_offset=log_dir.log_start_offsets.get(tp, 0),
            flush_scheduler=self._submit_flush,
        )

    def _finish_interrupted_delete(self, log_dir: LogDir, tp: TopicPartition, path: str) -> None:
        _log.warning("finishing the interrupted deletion of %s (%s)", tp, path)
        target = os.path.join(log_dir.path, delete_dir_name(tp))
        self._fs.replace(path, target)
        self._fs.fsync_dir(log_dir.path)
        log_dir.schedule_delete_dirs([target])
        self._counters.interrupted_deletes_completed += 1

    def _topic_for_loading(
        self, tp: TopicPartition, metadata: TopicMetadata | None, path: str
    ) -> _Topic:
        """The topic entry for a partition found on disk, created or completed from metadata."""
        if metadata is not None and metadata.topic != tp.topic:
            raise CorruptTopicMetadataError(
                f"{path}/topic.properties names topic {metadata.topic!r}, "
                f"the directory belongs to {tp.topic!r}"
            )
        topic = self._topics.get(tp.topic)
        if metadata is None:
            if topic is None:
                # A partition directory without seglog metadata (e.g. copied from Kafka).
                topic = _Topic(tp.topic, None, self._default_config, {}, 0)
                self._topics[tp.topic] = topic
            topic.partition_count = max(topic.partition_count, tp.partition + 1)
            return topic
        config = LogConfig.from_properties(metadata.overrides, self._default_config)
        if topic is None or not topic.has_metadata:
            count = max(metadata.partition_count, topic.partition_count if topic else 0)
            topic = _Topic(tp.topic, metadata.topic_id, config, dict(metadata.overrides), count)
            self._topics[tp.topic] = topic
        elif metadata.topic_id != topic.topic_id or dict(metadata.overrides) != topic.overrides:
            _log.warning(
                "partition %s has topic id %s and overrides %s, other partitions %s and %s; "
                "using the latter",
                tp,
                metadata.topic_id,
                dict(metadata.overrides),
                topic.topic_id,
                topic.overrides,
            )
        topic.partition_count = max(topic.partition_count, metadata.partition_count, tp.partition + 1)
        return topic

    def _register_loaded(self, loaded: list[tuple[TopicPartition, _Partition]]) -> None:
        with self._lock:
            for tp, partition in loaded:
                other = self._partitions.get(tp)
                if other is not None:
                    raise LogDirStateError(
                        f"partition {tp} exists in both {other.path} and {partition.path}; "
                        f"remove the stale copy before starting"
                    )
                self._partitions[tp] = partition

    def _mark_offline(self, partitions: Mapping[TopicPartition, str], log_dir: LogDir, reason: str) -> None:
        with self._lock:
            for tp in partitions:
                self._offline[tp] = _OfflinePartition(log_dir, reason)
                if tp.topic not in self._topics:
                    self._topics[tp.topic] = _Topic(
                        tp.topic, None, self._default_config, {}, tp.partition + 1
                    )
                topic = self._topics[tp.topic]
                topic.partition_count = max(topic.partition_count, tp.partition + 1)

    def _complete_interrupted_creates(self) -> None:
        """Creates partitions a topic's metadata promises but no directory holds (a crash in
        the middle of CreateTopic). Only when every directory is online: otherwise the missing
        partitions may simply live on the offline one."""
        if not all(log_dir.online for log_dir in self._dirs):
            return
        for topic in list(self._topics.values()):
            if not topic.has_metadata:
                continue  # a Kafka directory copied in: nothing says which partitions exist
            missing = [
                TopicPartition(topic.name, p)
                for p in range(topic.partition_count)
                if TopicPartition(topic.name, p) not in self._partitions
                and TopicPartition(topic.name, p) not in self._offline
            ]
            if missing:
                _log.warning("topic %s lacks partitions %s; creating them", topic.name, missing)
                try:
                    self._create_partitions(topic, missing)
                except LogDirOfflineError as exc:
                    _log.error("could not complete topic %s: %s", topic.name, exc)
                    continue
                self._counters.logs_created_on_startup += len(missing)

    def _arm_jobs(self) -> None:
        now_ms = self._now_ms()
        first_ms = now_ms + self._intervals.initial_delay_ms
        self._jobs = {
            "retention": _PeriodicJob(self._intervals.retention_check_ms, first_ms),
            "flush": _PeriodicJob(self._intervals.flush_check_ms, now_ms),
            "recovery_points": _PeriodicJob(self._intervals.recovery_point_checkpoint_ms, first_ms),
            "log_start_offsets": _PeriodicJob(
                self._intervals.log_start_offset_checkpoint_ms, first_ms
            ),
        }

    # ---------------------------------------------------------------------------------------
    # topics
    # ---------------------------------------------------------------------------------------
    def create_topic(
        self,
        topic: str,
        partition_count: int,
        configs: Mapping[str, str] | None = None,
        *,
        validate_only: bool = False,
    ) -> LogConfig:
        """Creates ``partition_count`` empty partitions; returns the topic's effective config.

        Raises InvalidTopicError (bad or colliding name), InvalidConfigError (bad config or
        partition count), TopicExistsError, LogDirOfflineError (no usable directory, or one
        failed while creating: nothing of the topic is left behind).
        """
        validate_topic(topic)
        _check_partition_count(partition_count)
        configs = dict(configs or {})
        config = LogConfig.from_properties(configs, self._default_config)
        canonical = config.to_properties()
        overrides = {name: canonical[name] for name in configs}
        with self._admin_lock:
            self._check_running()
            self._check_new_topic_name(topic)
            if not self._online_dirs():
                raise LogDirOfflineError("no log directory is online to hold a new topic")
            if validate_only:
                return config
            entry = _Topic(topic, new_topic_id(), config, overrides, partition_count)
            partitions = [TopicPartition(topic, p) for p in range(partition_count)]
            self._create_partitions(entry, partitions)
            self._counters.topics_created += 1
            _log.info("created topic %s with %d partitions, overrides %s", topic, partition_count, overrides)
            return config

    def _check_new_topic_name(self, topic: str) -> None:
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

    def _create_partitions(self, topic: _Topic, partitions: list[TopicPartition]) -> None:
        placement = self._place(len(partitions))
        created: list[tuple[TopicPartition, _Partition]] = []
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
            if isinstance(exc, _IO_ERRORS) and current is not None:
                self._take_dir_offline(current, f"creating topic {topic.name!r} failed: {exc}")
                raise LogDirOfflineError(
                    f"log directory {current.path} failed while creating topic {topic.name!r}: {exc}"
                ) from exc
            raise
        with self._lock:
            self._topics[topic.name] = topic
            for tp, partition in created:
                self._partitions[tp] = partition

    def _place(self, partition_count: int) -> list[LogDir]:
        """Kafka's placement: each partition to the online dir with the fewest partitions."""
        online = self._online_dirs()
        if not online:
            raise LogDirOfflineError("no log directory is online to hold a new partition")
        counts = {log_dir: 0 for log_dir in online}
        with self._lock:
            for partition in self._partitions.values():
                if partition.log_dir in counts:
                    counts[partition.log_dir] += 1
        placement = []
        for _ in range(partition_count):
            # min() keeps the first of equal counts, i.e. the configured order breaks ties.
            chosen = min(online, key=lambda log_dir: counts[log_dir])
            counts[chosen] += 1
            placement.append(chosen)
        return placement

    def _create_partition(self, log_dir: LogDir, tp: TopicPartition, topic: _Topic) -> _Partition:
        path = partition_path(log_dir.path, tp)
        if self._fs.exists(path):
            raise TopicExistsError(f"partition directory {path} already exists")
        self._fs.makedirs(path)
        assert topic.topic_id is not None
        metadata = TopicMetadata(topic.name, topic.topic_id, topic.partition_count, topic.overrides)
        write_topic_metadata(path, metadata, fs=self._fs)
        log = Log.load(
            path,
            tp.topic,
            tp.partition,
            topic.config,
            clock=self._clock,
            fs=self._fs,
            had_clean_shutdown=True,
            recovery_point=0,
            log_start_offset=0,
            flush_scheduler=self._submit_flush,
        )
        return _Partition(log, log_dir, path)

    def _roll_back(self, created: list[tuple[TopicPartition, _Partition]]) -> None:
        for tp, partition in created:
            _close_quietly(partition.log)
            try:
                remove_tree(partition.path, self._fs)
            except OSError as exc:
                _log.warning("could not remove %s of a failed CreateTopic: %s", partition.path, exc)

    def delete_topic(self, topic: str) -> None:
        """Closes the topic's logs, renames each partition directory to
        ``<topic>-<p>.<uuid32hex>-delete`` and removes it (retried by maintenance and at
        start-up if removal fails).

        Raises UnknownTopicOrPartitionError, and LogDirOfflineError when a partition lives on an
        offline directory (nothing is deleted then) or a directory fails during the deletion.
        """
        with self._admin_lock:
            self._check_running()
            entry = self._topics.get(topic)
            if entry is None:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            self._check_all_partitions_online(entry)
            with self._lock:
                partitions = [
                    (tp, self._partitions.pop(tp))
                    for tp in _topic_partitions(entry)
                    if tp in self._partitions
                ]
                del self._topics[topic]
            failures = self._rename_for_deletion(partitions)
            self._counters.topics_deleted += 1
            _log.info("deleted topic %s", topic)
            if failures:
                raise LogDirOfflineError(
                    "deleting topic {!r} failed on {}".format(
                        topic, "; ".join(f"{d.path}: {exc}" for d, exc in failures.items())
                    )
                )

    def _check_all_partitions_online(self, entry: _Topic) -> None:
        offline = [tp.partition for tp in _topic_partitions(entry) if tp in self._offline]
        missing = [
            tp.partition
            for tp in _topic_partitions(entry)
            if tp not in self._offline and tp not in self._partitions
        ]
        if offline or (missing and any(not d.online for d in self._dirs)):
            raise LogDirOfflineError(
                f"topic {entry.name!r} has partitions {sorted(offline + missing)} on offline log "
                f"directories; it can be deleted once they are back"
            )

    def _rename_for_deletion(
        self, partitions: list[tuple[TopicPartition, _Partition]]
    ) -> dict[LogDir, OSError]:
        """Renames every partition first and makes the renames durable in every directory before
        anything is removed: after a crash, any surviving "-delete" directory tells start-up to
        finish the job (same topic.id), so the topic cannot come back half-deleted."""
        renamed: dict[LogDir, list[str]] = {}
        failures: dict[LogDir, OSError] = {}
        for tp, partition in partitions:
            _close_quietly(partition.log)
            target = os.path.join(partition.log_dir.path, delete_dir_name(tp))
            try:
                self._fs.replace(partition.path, target)
            except OSError as exc:
                failures[partition.log_dir] = exc
                continue
            renamed.setdefault(partition.log_dir, []).append(target)
        for log_dir in list(renamed):
            try:
                self._fs.fsync_dir(log_dir.path)
            except OSError as exc:
                failures[log_dir] = exc
                del renamed[log_dir]
        for log_dir, paths in renamed.items():
            gone = [tp for tp, p in partitions if p.log_dir is log_dir]
            try:
                self._write_checkpoints(log_dir)
                self._drop_cleaner_offsets(log_dir, gone)
                log_dir.schedule_delete_dirs(paths)
                self._counters.delete_dirs_removed += log_dir.remove_pending_delete_dirs()
            except OSError as exc:
                failures[log_dir] = exc
        for log_dir, exc in failures.items():
            self._take_dir_offline(log_dir, f"deleting a partition failed: {exc}")
        return failures

    def list_topics(self) -> list[tuple[str, int]]:
        """(topic, partition count) for every topic, sorted by name."""
        with self._lock:
            return sorted((name, entry.partition_count) for name, entry in self._topics.items())

    def describe_topic(self, topic: str) -> TopicDescription:
        with self._lock:
            entry = self._topics.get(topic)
            if entry is None:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            online = []
            offline = {}
            for tp in _topic_partitions(entry):
                partition = self._partitions.get(tp)
                if partition is not None:
                    online.append((tp.partition, partition))
                else:
                    offline[tp.partition] = self._offline_reason(tp)
        return TopicDescription(
            topic=topic,
            config=entry.config,
            partitions=[_describe_partition(p, partition) for p, partition in online],
            offline_partitions=offline,
        )

    def get_log(self, topic: str, partition: int) -> Log:
        """The partition's log. Raises UnknownTopicOrPartitionError or LogDirOfflineError."""
        tp = TopicPartition(topic, partition)
        with self._lock:
            found = self._partitions.get(tp)
            if found is not None and not found.log.is_offline:
                return found.log
        if found is not None:
            # An append or read hit an I/O error: the whole directory goes (Kafka's rule).
            self._take_dir_offline(found.log_dir, f"I/O error on {found.path}")
        with self._lock:
            if self._state != _RUNNING:
                raise LogDirOfflineError(f"the log manager is {self._state}, not serving {tp}")
            entry = self._topics.get(topic)
            if entry is not None and isinstance(partition, int) and 0 <= partition < entry.partition_count:
                raise LogDirOfflineError(f"partition {tp} is offline: {self._offline_reason(tp)}")
        if entry is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        raise UnknownTopicOrPartitionError(
            f"topic {topic!r} has partitions 0..{entry.partition_count - 1}, not {partition!r}"
        )

    def _offline_reason(self, tp: TopicPartition) -> str:
        offline = self._offline.get(tp)
        if offline is not None:
            return f"{offline.reason} ({offline.log_dir.path})"
        return "no online log directory holds it (its directory may be offline)"

    # ---------------------------------------------------------------------------------------
    # cleaner checkpoint (for the offline cleaner)
    # ---------------------------------------------------------------------------------------
    def cleaner_offsets(self, log_dir: str) -> dict[TopicPartition, int]:
        """The cleaner-offset-checkpoint of ``log_dir`` (empty if absent or corrupt)."""
        return self._read_cleaner_offsets(self._dir_by_path(log_dir))

    def write_cleaner_offsets(self, log_dir: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Replaces the cleaner-offset-checkpoint of ``log_dir`` atomically."""
        directory = self._dir_by_path(log_dir)
        if not directory.online:
            raise LogDirOfflineError(f"log directory {directory.path} is offline")
        try:
            directory.cleaner_offset_file.write(offsets)
        except OSError as exc:
            self._take_dir_offline(directory, f"writing the cleaner checkpoint failed: {exc}")
            raise LogDirOfflineError(f"log directory {directory.path} failed: {exc}") from exc

    def _drop_cleaner_offsets(self, directory: LogDir, gone: list[TopicPartition]) -> None:
        offsets = self._read_cleaner_offsets(directory)
        if any(tp in offsets for tp in gone):
            directory.cleaner_offset_file.write(
                {tp: offset for tp, offset in offsets.items() if tp not in gone}
            )

    def _read_cleaner_offsets(self, directory: LogDir) -> dict[TopicPartition, int]:
        try:
            return directory.cleaner_offset_file.read()
        except CorruptCheckpointError as exc:
            _log.warning("%s; treating it as empty", exc)
            return {}

    # ---------------------------------------------------------------------------------------
    # maintenance
    # ---------------------------------------------------------------------------------------
    def run_maintenance(self) -> None:
        """One pass of the periodic jobs that are due (see MaintenanceIntervals)."""
        with self._admin_lock:
            if self._state != _RUNNING:
                return
            started_ns = self._clock.monotonic_ns()
            now_ms = self._now_ms()
            if self._jobs["retention"].is_due(now_ms):
                self._counters.retention_checks += 1
                self._for_each_log(self._apply_retention)
            if self._jobs["flush"].is_due(now_ms):
                self._for_each_log(self._flush_if_due)
            self._for_each_log(self._delete_due_files)
            self._remove_delete_dirs()
            if self._jobs["recovery_points"].is_due(now_ms):
                self._for_each_online_dir(self._checkpoint_recovery_points)
            if self._jobs["log_start_offsets"].is_due(now_ms):
                self._for_each_online_dir(self._checkpoint_log_start_offsets)
            self._counters.maintenance_passes += 1
            self._counters.last_maintenance_duration_ms = (
                self._clock.monotonic_ns() - started_ns
            ) / 1e6

    def _apply_retention(self, partition: _Partition) -> None:
        self._counters.segments_deleted += partition.log.delete_old_segments()

    def _flush_if_due(self, partition: _Partition) -> None:
        log = partition.log
        if self._clock.time_ms() - log.last_flush_time_ms >= log.config.flush_ms:
            log.flush()
            self._counters.flushes_by_time += 1

    def _delete_due_files(self, partition: _Partition) -> None:
        self._counters.files_deleted += partition.log.delete_due_files()

    def _for_each_log(self, job: Callable[[_Partition], None]) -> None:
        """Runs ``job`` on every online partition; an OSError takes its directory offline,
        any other error is logged and counted so one bad log cannot stop maintenance."""
        with self._lock:
            partitions = list(self._partitions.values())
        for partition in partitions:
            if not partition.log_dir.online:
                continue
            try:
                if partition.log.is_offline:
                    raise LogDirOfflineError(f"log {partition.path} failed earlier")
                job(partition)
            except _IO_ERRORS as exc:
                self._take_dir_offline(partition.log_dir, f"I/O error on {partition.path}: {exc}")
            except Exception:
                self._counters.maintenance_errors += 1
                _log.exception("maintenance of %s failed", partition.path)

    def _for_each_online_dir(self, job: Callable[[LogDir], None]) -> None:
        for log_dir in self._online_dirs():
            try:
                job(log_dir)
            except OSError as exc:
                self._take_dir_offline(log_dir, f"writing a checkpoint failed: {exc}")

    def _remove_delete_dirs(self) -> None:
        for log_dir in self._online_dirs():
            if log_dir.pending_delete_dirs:
                try:
                    self._counters.delete_dirs_removed += log_dir.remove_pending_delete_dirs()
                except OSError as exc:
                    self._take_dir_offline(log_dir, f"removing deleted partitions failed: {exc}")

    # ---------------------------------------------------------------------------------------
    # checkpoints
    # ---------------------------------------------------------------------------------------
    def _partitions_in(self, log_dir: LogDir) -> list[tuple[TopicPartition, _Partition]]:
        with self._lock:
            return [(tp, p) for tp, p in self._partitions.items() if p.log_dir is log_dir]

    def _unloaded_in(self, log_dir: LogDir) -> list[TopicPartition]:
        with self._lock:
            return [tp for tp, o in self._offline.items() if o.log_dir is log_dir]

    def _checkpoint_recovery_points(self, log_dir: LogDir) -> None:
        offsets = {tp: p.log.recovery_point for tp, p in self._partitions_in(log_dir)}
        self._write_recovery_points(log_dir, offsets)

    def _checkpoint_log_start_offsets(self, log_dir: LogDir) -> None:
        offsets = _log_start_offsets_to_keep(self._partitions_in(log_dir))
        self._write_log_start_offsets(log_dir, offsets)

    def _write_checkpoints(self, log_dir: LogDir) -> None:
        self._checkpoint_recovery_points(log_dir)
        self._checkpoint_log_start_offsets(log_dir)

    def _write_recovery_points(self, log_dir: LogDir, offsets: dict[TopicPartition, int]) -> None:
        # Partitions of this directory that are not loaded keep their last known value, so
        # their recovery does not restart from 0.
        for tp in self._unloaded_in(log_dir):
            if tp in log_dir.recovery_points:
                offsets.setdefault(tp, log_dir.recovery_points[tp])
        log_dir.write_recovery_points(offsets)
        self._counters.recovery_point_checkpoints += 1

    def _write_log_start_offsets(self, log_dir: LogDir, offsets: dict[TopicPartition, int]) -> None:
        for tp in self._unloaded_in(log_dir):
            if tp in log_dir.log_start_offsets:
                offsets.setdefault(tp, log_dir.log_start_offsets[tp])
        log_dir.write_log_start_offsets(offsets)
        self._counters.log_start_offset_checkpoints += 1

    # ---------------------------------------------------------------------------------------
    # shutdown and failures
    # ---------------------------------------------------------------------------------------
    def _shut_down_dir(self, log_dir: LogDir) -> None:
        partitions = self._partitions_in(log_dir)
        recovery_points: dict[TopicPartition, int] = {}
        log_start_offsets: dict[TopicPartition, int] = {}
        all_closed = True
        for tp, partition in partitions:
            try:
                partition.log.flush()
                recovery_points[tp] = partition.log.recovery_point
                log_start_offsets.update(_log_start_offsets_to_keep([(tp, partition)]))
                partition.log.close()
            except _IO_ERRORS as exc:
                self._take_dir_offline(log_dir, f"flushing {partition.path} at shutdown failed: {exc}")
                return
            except Exception:
                _log.exception("closing %s at shutdown failed", partition.path)
                _close_quietly(partition.log)
                all_closed = False
        if not all_closed:
            # Kafka's rule: no checkpoints and no marker unless every log closed cleanly.
            return
        try:
            self._write_recovery_points(log_dir, recovery_points)
            self._write_log_start_offsets(log_dir, log_start_offsets)
            if log_dir.had_clean_shutdown or log_dir.load_completed:
                log_dir.marker.write(self._broker_epoch)
        except OSError as exc:
            self._take_dir_offline(log_dir, f"writing checkpoints at shutdown failed: {exc}")

    def handle_log_dir_failure(self, log_dir: str, cause: BaseException | str) -> None:
        """Takes ``log_dir`` offline after an I/O error seen outside the manager (for example
        an OSError from ``Log.append`` in the service). Idempotent."""
        self._take_dir_offline(self._dir_by_path(log_dir), str(cause))

    def _take_dir_offline(self, log_dir: LogDir, reason: str) -> None:
        with self._lock:
            log_dir.take_offline(reason)
            gone = [(tp, p) for tp, p in self._partitions.items() if p.log_dir is log_dir]
            for tp, _ in gone:
                del self._partitions[tp]
                self._offline[tp] = _OfflinePartition(log_dir, reason)
        for _, partition in gone:
            _drop_quietly(partition.log)

    # ---------------------------------------------------------------------------------------
    # statistics
    # ---------------------------------------------------------------------------------------
    def statistics(self) -> LogManagerStatistics:
        with self._lock:
            partitions = list(self._partitions.items())
            offline_by_dir: dict[LogDir, int] = {}
            for offline in self._offline.values():
                offline_by_dir[offline.log_dir] = offline_by_dir.get(offline.log_dir, 0) + 1
            topic_count = len(self._topics)
            offline_count = len(self._offline)
            state = self._state
        per_partition = tuple(
            PartitionStatistics(tp.topic, tp.partition, p.log_dir.path, p.log.statistics())
            for tp, p in sorted(partitions)
        )
        sizes = {tp: (p.log.size_in_bytes, p.log.segment_count) for tp, p in partitions}
        dirs = tuple(
            _dir_statistics(d, partitions, sizes, offline_by_dir.get(d, 0)) for d in self._dirs
        )
        c = self._counters
        return LogManagerStatistics(
            state=state,
            log_dirs=dirs,
            partitions=per_partition,
            topic_count=topic_count,
            partition_count=len(partitions),
            offline_partition_count=offline_count,
            offline_log_dir_count=sum(1 for d in self._dirs if not d.online),
            size_bytes=sum(size for size, _ in sizes.values()),
            segment_count=sum(count for _, count in sizes.values()),
            startup_duration_ms=c.startup_duration_ms,
            logs_loaded_count=c.logs_loaded,
            logs_recovered_count=c.logs_recovered,
            logs_created_on_startup_count=c.logs_created_on_startup,
            interrupted_deletes_completed_count=c.interrupted_deletes_completed,
            remaining_logs_to_load=c.remaining_logs_to_load,
            maintenance_pass_count=c.maintenance_passes,
            maintenance_error_count=c.maintenance_errors,
            last_maintenance_duration_ms=c.last_maintenance_duration_ms,
            retention_check_count=c.retention_checks,
            segments_deleted_total=c.segments_deleted,
            files_deleted_total=c.files_deleted,
            flushes_by_time_total=c.flushes_by_time,
            recovery_point_checkpoint_count=c.recovery_point_checkpoints,
            log_start_offset_checkpoint_count=c.log_start_offset_checkpoints,
            topics_created_total=c.topics_created,
            topics_deleted_total=c.topics_deleted,
            delete_dirs_removed_total=c.delete_dirs_removed,
        )

    # ---------------------------------------------------------------------------------------
    # small helpers
    # ---------------------------------------------------------------------------------------
    @property
    def log_dirs(self) -> list[str]:
        return [log_dir.path for log_dir in self._dirs]

    @property
    def default_config(self) -> LogConfig:
        return self._default_config

    def _online_dirs(self) -> list[LogDir]:
        return [log_dir for log_dir in self._dirs if log_dir.online]

    def _dir_by_path(self, path: str) -> LogDir:
        wanted = os.path.realpath(path)
        for log_dir in self._dirs:
            if os.path.realpath(log_dir.path) == wanted:
                return log_dir
        raise ValueError(f"{path!r} is not one of the log directories {self.log_dirs}")

    def _check_running(self) -> None:
        if self._state != _RUNNING:
            raise LogDirOfflineError(f"the log manager is {self._state}, not running")

    def _now_ms(self) -> int:
        return self._clock.monotonic_ns() // 1_000_000


def _check_no_duplicate_dirs(log_dirs: Iterable[str]) -> None:
    seen: dict[str, str] = {}
    for path in log_dirs:
        real = os.path.realpath(path)
        if real in seen:
            raise InvalidConfigError(f"duplicate log directory: {path!r} and {seen[real]!r}")
        seen[real] = path


def _check_partition_count(partition_count: object) -> None:
    if isinstance(partition_count, bool) or not isinstance(partition_count, int):
        raise InvalidConfigError(f"partition count must be an integer, found {partition_count!r}")
    if not 1 <= partition_count <= PARTITION_COUNT_MAX:
        raise InvalidConfigError(
            f"partition count must be in [1, {PARTITION_COUNT_MAX}], found {partition_count}"
        )


def _topic_partitions(entry: _Topic) -> list[TopicPartition]:
    return [TopicPartition(entry.name, p) for p in range(entry.partition_count)]


def _log_start_offsets_to_keep(
    partitions: Iterable[tuple[TopicPartition, _Partition]],
) -> dict[TopicPartition, int]:
    """Kafka checkpoints a log start offset only where it is above the first segment's base
    offset; elsewhere loading derives it from the files."""
    kept = {}
    for tp, partition in partitions:
        log = partition.log
        if log.log_start_offset > _first_segment_base_offset(log):
            kept[tp] = log.log_start_offset
    return kept


def _first_segment_base_offset(log: Any) -> int:
    return log.segments_snapshot()[0].base_offset


def _describe_partition(number: int, partition: _Partition) -> PartitionDescription:
    log = partition.log
    return PartitionDescription(
        partition=number,
        log_start_offset=log.log_start_offset,
        log_end_offset=log.log_end_offset,
        high_watermark=log.high_watermark,
        size_bytes=log.size_in_bytes,
        segment_count=log.segment_count,
        log_dir=partition.log_dir.path,
    )


def _dir_statistics(
    log_dir: LogDir,
    partitions: list[tuple[TopicPartition, _Partition]],
    sizes: dict[TopicPartition, tuple[int, int]],
    offline_count: int,
) -> LogDirStatistics:
    mine = [tp for tp, p in partitions if p.log_dir is log_dir]
    return LogDirStatistics(
        path=log_dir.path,
        online=log_dir.online,
        offline_reason=log_dir.offline_reason,
        had_clean_shutdown=log_dir.had_clean_shutdown,
        load_completed=log_dir.load_completed,
        partition_count=len(mine),
        offline_partition_count=offline_count,
        size_bytes=sum(sizes[tp][0] for tp in mine),
        segment_count=sum(sizes[tp][1] for tp in mine),
        pending_delete_dir_count=len(log_dir.pending_delete_dirs),
        ignored_entry_count=len(log_dir.ignored_entries),
        checkpoint_read_error_count=log_dir.checkpoint_read_error_count,
    )


def _drop_quietly(log: Any) -> None:
    """Closes descriptors and mappings without writing: for a failed disk or a crash."""
    try:
        log.close_handlers()
    except Exception as exc:
        _log.warning("dropping %s failed: %s", getattr(log, "dir", log), exc)


def _close_quietly(log: Any) -> None:
    try:
        log.close()
    except Exception as exc:  # the log is being dropped; its directory may be failing
        _log.warning("closing %s failed: %s", getattr(log, "dir", log), exc)
