"""The log manager: every partition of every topic across several log directories (JBOD).

Kafka's ``LogManager`` without replication. It owns the directories (naming, placement, locks,
checkpoints, the clean-shutdown marker, topic deletion) and the topic map; each ``Log`` owns its
segments.

- **Start-up** (``startup``, passes in ``log_manager_startup.py``): per directory, lock it,
  consume ``.kafka_cleanshutdown`` (deleted before anything is loaded, KAFKA-10471), read the
  checkpoints, then ``Log.load`` every partition with those values; finish interrupted deletions
  and creations. An ``OSError`` takes the directory offline; the others keep serving.
- **Placement**: a new partition goes to the online directory with the fewest partitions, ties
  broken by the configured order (Kafka's ``nextLogDirs``); ``partition_creation.py``.
- **Topic configs** survive restarts in ``topic.properties`` inside each partition directory
  (``topic_metadata.py``): overrides only, applied over the manager's defaults.
- **Maintenance** (``run_maintenance``, called by the service about once a second): retention,
  flush.ms, physical deletion of ``.deleted`` files and ``-delete`` directories, and checkpoint
  writes, each at Kafka's interval on the injected clock (``log_maintenance.py`` says when,
  ``maintenance_jobs.py`` does them).
- **Shutdown**: per directory, flush and close every log, write both checkpoints, then the marker
  -- only if the directory was clean last time or all its logs loaded in this run (KAFKA-15375);
  a directory's checkpoints and its clean shutdown live in ``dir_checkpoints.py``.
- **The remote tier** (tiered topics, a store configured): attaching tiers, the remote pass and
  its uploader thread, the deleted topics' objects (``remote_maintenance.py``,
  ``remote_deletions.py``). The adapter's questions about a log: ``log_questions.py``.
- **Failures**: an ``OSError`` the manager sees (or one the service reports through
  ``handle_log_dir_failure``) takes the whole directory offline: its partitions raise
  ``LogDirOfflineError``, nothing more is written there, and the next start-up recovers it.
  Except an exhausted resource (``io_errors.py``): a full disk or running out of descriptors
  answers a retriable ``ResourceExhaustedError`` and the directory stays online, so reads go on,
  DeleteTopic frees space, and writes resume by themselves once the resource is back.
- **Descriptors**: one ``OpenSegments`` budget (``open_segments_max`` segments) for every log of
  every directory, so the process stays below its RLIMIT_NOFILE whatever the partition count.

Roll flushes: when a log rolls, it asks for the segments below the new one to be fsynced in the
background (Kafka's scheduler task "flush-log"). The manager runs those on its own small pool, one
thread per log directory (each directory is typically its own disk), and drains the pool at
shutdown before any log is closed, so no background flush races a close.

Locking: ``_admin_lock`` serialises what changes the set of logs (start-up, create, delete,
maintenance, shutdown); the topic map (``topic_registry.py``) has its own lock, held only for
dictionary work, so ``get_log`` on the request path never waits for disk I/O.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ..format.clean_shutdown import NO_BROKER_EPOCH
from ..base.clock import SYSTEM_CLOCK, Clock
from ..base.errors import (
    InvalidConfigError,
    LogDirOfflineError,
    UnknownTopicOrPartitionError,
)
from ..base.fs import REAL_FS, FileSystem
from ..base.io_errors import exhaustion_error, is_exhaustion
from ..log.unified_log import ChangeListener, Log
from ..base.log_config import LogConfig
from ..cleaning.log_cleaner_manager import (
    DEFAULT_SNAPSHOT_TTL_MS,
    CleanableLog,
    CleanerStatistics,
    CommitOutcome,
    LogCleanerManager,
)
from ..dirs.log_dir import LogDir, LogDirStateError
from ..cleaning.log_snapshot import TakenSnapshot
from .log_maintenance import MaintenanceIntervals, MaintenanceSchedule
from ..segment.open_segments import DEFAULT_OPEN_SEGMENTS_MAX, OpenSegments
from ..producers.producer_ids import AllocatedProducerIds, ProducerIdBlocks, ProducerIdManager
from . import log_questions
from .dir_checkpoints import DirCheckpoints
from .maintenance_jobs import MaintenanceJobs
from .partition_creation import PartitionCreator, check_partition_count
from .partition_deletion import PartitionDeleter
from .log_manager_startup import StartupLoader, check_some_dir_online
from .remote_maintenance import REMOTE_ORPHAN_GRACE_MS, RemoteMaintenance, no_remote_statistics
from .remote_uploader import RemoteTierStatistics
from .topic_config_change import (
    IntentReadError,
    PartitionWriteError,
    changed_overrides,
    check_changeable,
    complete_interrupted_change,
    intent_dirs_of,
    write_overrides,
)
from .log_manager_statistics import (
    LogManagerCounters,
    LogManagerStatistics,
    PartitionDescription,
    TopicDescription,
    build_statistics,
    describe_partition,
)
from ..format.topic_metadata import (
    TopicMetadata,
    new_topic_id,
)
from ..base.topic_partition import (
    TopicPartition,
    validate_topic,
)
from ..dirs.topic_registry import (
    IO_ERRORS,
    PartitionEntry,
    TopicEntry,
    TopicRegistry,
    close_quietly,
    drop_quietly,
)

if TYPE_CHECKING:  # boto3 is loaded only when a store is configured (the remote extra)
    from ..remote.remote_storage_manager import RemoteStorageManager

__all__ = [
    "LogDirStateError",
    "LogManager",
    "MaintenanceIntervals",
    "PartitionDescription",
    "TopicDescription",
]

_log = logging.getLogger(__name__)


_NEW, _STARTING, _RUNNING, _STOPPING, _STOPPED, _HALTED = (
    "new",
    "starting",
    "running",
    "stopping",
    "stopped",
    "halted",
)


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
        open_segments_max: int = DEFAULT_OPEN_SEGMENTS_MAX,
        snapshot_ttl_ms: int = DEFAULT_SNAPSHOT_TTL_MS,
        remote_storage: RemoteStorageManager | None = None,
        remote_fetch_cache_bytes: int = 64 * 1024 * 1024,
        remote_orphan_grace_ms: int = REMOTE_ORPHAN_GRACE_MS,
    ) -> None:
        if isinstance(log_dirs, str) or not log_dirs:
            raise InvalidConfigError(
                f"log_dirs must be a non-empty list of paths, found {log_dirs!r}"
            )
        _check_no_duplicate_dirs(log_dirs)
        self._dirs = [LogDir(path, fs=fs) for path in log_dirs]
        self._configured_names = {log_dir.path: str(path) for log_dir, path in zip(self._dirs, log_dirs)}
        self._default_config = default_config
        self._clock = clock
        self._fs = fs
        self._intervals = intervals
        self._broker_epoch = broker_epoch
        # The object store of tiered topics (remote.storage.enable); None: tiering is off.
        self._remote_storage = remote_storage
        self._admin_lock = threading.RLock()
        # One shutdown at a time (it leaves the admin lock while the uploader stops).
        self._shutdown_lock = threading.Lock()
        self._state = _NEW
        self._registry = TopicRegistry(default_config)
        self._counters = LogManagerCounters()
        self._checkpoints = DirCheckpoints(self._registry, self._counters, self._take_dir_offline)
        self._schedule: MaintenanceSchedule | None = None
        self._flush_pool: ThreadPoolExecutor | None = None
        self._open_segments = OpenSegments(open_segments_max)
        self._producer_ids: ProducerIdManager | AllocatedProducerIds | None = None
        self._change_listener: ChangeListener | None = None
        # Directories whose clean-shutdown marker the last shutdown() did not write.
        self._unclean_dirs: list[str] = []
        self._cleaner = LogCleanerManager(
            fs=fs,
            clock=clock,
            snapshot_ttl_ms=snapshot_ttl_ms,
            find_partition=self._registry.find,
            missing_error=self._registry.missing_error,
            all_partitions=self._online_partitions,
            take_dir_offline=self._take_dir_offline,
            snapshot_store=_snapshot_store(remote_storage, fs),
        )
        self._creator = PartitionCreator(self._registry, fs, online_dirs=self._online_dirs,
                                         open_log=self._open_log, take_dir_offline=self._take_dir_offline)
        # The cleaner checkpoint has one writer, the cleaner manager (under its checkpoint lock).
        self._deleter = PartitionDeleter(fs, self._counters, self._checkpoints,
                                         drop_cleaner_offsets=self._cleaner.drop_checkpoints,
                                         take_dir_offline=self._take_dir_offline)
        self._jobs = MaintenanceJobs(
            self._registry, self._counters, clock, self._checkpoints, online_dirs=self._online_dirs,
            take_dir_offline=self._take_dir_offline, expire_snapshots=self._cleaner.expire_snapshots)
        # The remote tier's upkeep (remote_maintenance.py); None without a store.
        self._remote: RemoteMaintenance | None = None
        if remote_storage is not None:
            self._remote = RemoteMaintenance(
                remote_storage,
                clock=clock,
                fs=fs,
                counters=self._counters,
                admin_lock=self._admin_lock,
                is_running=lambda: self._state == _RUNNING,
                owns_dirs=lambda: self._state in (_RUNNING, _STOPPING),
                online_partitions=self._online_partitions,
                remove_snapshot_objects=self._cleaner.remove_store_objects,
                fetch_cache_bytes=remote_fetch_cache_bytes,
                orphan_grace_ms=remote_orphan_grace_ms,
            )

    # ---------------------------------------------------------------------------------------
    # life cycle
    # ---------------------------------------------------------------------------------------
    def startup(self) -> None:
        """Opens every directory and loads every partition (see log_manager_startup.py).

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
            loader = StartupLoader(
                self._dirs,
                self._registry,
                self._counters,
                fs=self._fs,
                clock=self._clock,
                open_log=self._open_log,
                create_partitions=self._creator.create,
            )
            try:
                loader.run()
                self._complete_interrupted_config_changes()
                self._producer_ids = ProducerIdManager(
                    self._fs,
                    lambda: [d.path for d in self._online_dirs()],
                    self._clock.time_ms,
                    on_dir_error=self._producer_id_write_failed,
                )
                self._cleaner.load_snapshots(self._dirs)
                if self._remote is not None:  # without a store the deletions wait in their files
                    self._remote.deletions.resume(self._online_dirs(), self._is_live_topic)
                self._jobs.remove_delete_dirs()
                check_some_dir_online(self._dirs)
            except BaseException:
                self._abandon()
                raise
            self._counters.startup_duration_ms = (self._clock.monotonic_ns() - started_ns) / 1e6
            self._schedule = MaintenanceSchedule(self._intervals, self._now_ms())
            self._state = _RUNNING
            _log.info(
                "loaded %d logs from %d log directories in %.1f ms",
                self._counters.logs_loaded,
                len(self._dirs),
                self._counters.startup_duration_ms,
            )

    def shutdown(self) -> None:
        """Stops changes to, flushes and closes every log (Log.stop_changes: a change still
        arriving answers "shutting down"), writes checkpoints and markers; idempotent."""
        with self._shutdown_lock:
            self._shutdown()

    def _shutdown(self) -> None:
        with self._admin_lock:
            if self._state in (_STOPPED, _HALTED):
                return
            was_started = self._state != _NEW
            self._state = _STOPPING
        # Waited for outside the admin lock: the uploader's pass takes it to record a finished
        # remote deletion, and would otherwise wait out the whole stop wait for nothing.
        if self._remote is not None:
            self._remote.stop_uploader()
        with self._admin_lock:
            if self._state == _HALTED:
                return  # halt() meanwhile: left as a crash leaves it
            self._stop_flush_pool(wait=True)
            self._unclean_dirs = [d.path for d in self._dirs if not d.online]
            if was_started:
                for log_dir in self._dirs:
                    if log_dir.online and not self._checkpoints.shut_down_safely(log_dir, self._broker_epoch):
                        self._unclean_dirs.append(log_dir.path)
            for log_dir in self._dirs:
                log_dir.unlock()
            self._registry.clear_partitions()
            self._state = _STOPPED

    @property
    def stopped_cleanly(self) -> bool:
        """After shutdown(): whether every directory got its clean-shutdown marker (a directory
        without one is recovered from its recovery points at the next start)."""
        return self._state == _STOPPED and not self._unclean_dirs

    @property
    def unclean_dirs(self) -> list[str]:
        """After shutdown(): the directories left without a clean-shutdown marker."""
        return list(self._unclean_dirs)

    def halt(self) -> None:
        """Stops serving at once, leaving the directories as a crash would: no flush, no
        checkpoint, no marker (the next start-up recovers). Releases the directory locks."""
        self._state = _HALTED
        if self._remote is not None:
            self._remote.halt()
        self._stop_flush_pool(wait=False)
        for partition in self._registry.clear_partitions():
            drop_quietly(partition.log)
        for log_dir in self._dirs:
            log_dir.unlock()

    def _abandon(self) -> None:
        """Undoes a failed start-up: closes what was loaded, releases the locks."""
        self._state = _HALTED
        self._stop_flush_pool(wait=True)
        for partition in self._registry.clear_partitions():
            close_quietly(partition.log)
        for log_dir in self._dirs:
            log_dir.unlock()

    def _open_log(
        self,
        path: str,
        tp: TopicPartition,
        config: LogConfig,
        *,
        had_clean_shutdown: bool,
        recovery_point: int,
        log_start_offset: int,
    ) -> Log:
        log = Log.load(
            path,
            tp.topic,
            tp.partition,
            config,
            clock=self._clock,
            fs=self._fs,
            had_clean_shutdown=had_clean_shutdown,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            flush_scheduler=self._submit_flush,
            open_segments=self._open_segments,
        )
        log.set_change_listener(self._announce_change)
        if config.remote_storage_enable and self._remote is not None:
            self._remote.attach_tier(log, path, tp, log_start_offset)
        elif config.remote_storage_enable:
            _log.warning("%s: remote.storage.enable=true but the service has no --remote-storage: "
                         "its segments stay local", path)
        return log

    def set_remote_owner_check(self, check: Callable[[str, int], bool] | None) -> None:
        """Cluster mode: only partitions ``check(topic, partition)`` says this instance owns (and
        is not handing over) are uploaded, cleaned of orphans and kept by retention in the store;
        the other copies held here leave the store to their owner. A partition that becomes owned
        reads its remote segments from the store again before its first upload (its previous
        owner's uploads since the copy was opened)."""
        if self._remote is not None:
            self._remote.owner_check = check

    def set_change_listener(self, listener: ChangeListener | None) -> None:
        """Who is told (``(topic, partition)``, from any thread) after a partition's offsets
        moved (an append, a truncation, DeleteRecords) or it was deleted: the service's long
        polls wait on it (``log.ChangeListener``). One listener for every log, present and
        future."""
        self._change_listener = listener

    def _announce_change(self, topic: str, partition: int, *appended: Any) -> None:
        listener = self._change_listener
        if listener is not None:
            listener(topic, partition, *appended)

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
    # topics
    # ---------------------------------------------------------------------------------------
    def create_topic(
        self,
        topic: str,
        partition_count: int,
        configs: Mapping[str, str] | None = None,
        *,
        validate_only: bool = False,
        topic_id: str | None = None,
    ) -> LogConfig:
        """Creates ``partition_count`` empty partitions; returns the topic's effective config.
        ``topic_id``: the topic's id (32 hex digits) when it is chosen elsewhere (a cluster's,
        the same on every instance); a new random one by default.

        Raises InvalidTopicError (bad or colliding name), InvalidConfigError (bad config or
        partition count), TopicExistsError, LogDirOfflineError (no usable directory, or one
        failed while creating: nothing of the topic is left behind).
        """
        validate_topic(topic)
        check_partition_count(partition_count)
        configs = dict(configs or {})
        config = LogConfig.from_properties(configs, self._default_config)
        self._check_tiering(topic, config)
        canonical = config.to_properties()
        overrides = {name: canonical[name] for name in configs}
        with self._admin_lock:
            self._check_running()
            self._registry.check_new_topic_name(topic)
            if self._remote is not None:
                self._remote.deletions.check_name_free(topic)
            if not self._online_dirs():
                raise LogDirOfflineError("no log directory is online to hold a new topic")
            if validate_only:
                return config
            entry = TopicEntry(topic, topic_id or new_topic_id(), config, overrides, partition_count)
            self._creator.create(entry, entry.partitions())  # partition_creation.py
            self._counters.topics_created += 1
            _log.info(
                "created topic %s with %d partitions, overrides %s",
                topic,
                partition_count,
                overrides,
            )
            return config

    def _check_tiering(self, topic: str, config: LogConfig) -> None:
        if config.remote_storage_enable and self._remote_storage is None:
            raise InvalidConfigError(
                f"topic {topic!r}: remote.storage.enable=true needs a service started with "
                "--remote-storage s3://BUCKET[/PREFIX] (tiered storage is off)")

    def delete_topic(self, topic: str) -> None:
        """Closes the topic's logs, renames each partition directory to
        ``<topic>-<p>.<uuid32hex>-delete`` and removes it (retried by maintenance and at
        start-up if removal fails).

        Raises UnknownTopicOrPartitionError, and LogDirOfflineError when a partition lives on an
        offline directory (nothing is deleted then) or a directory fails during the deletion.
        """
        with self._admin_lock:
            self._check_running()
            entry = self._registry.topic(topic)
            if entry is None:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            some_dir_offline = any(not log_dir.online for log_dir in self._dirs)
            self._registry.check_all_partitions_online(entry, some_dir_offline)
            if self._remote is not None:  # recorded before anything is deleted (remote_deletions.py)
                served = [self._registry.find(tp) for tp in entry.partitions()]
                self._remote.deletions.record(topic, served, self._now_ms())
            partitions = self._registry.remove_topic(topic)
            failures = self._deleter.delete(partitions)  # partition_deletion.py
            for tp, _ in partitions:  # waiters on them wake up and find the topic gone
                self._announce_change(tp.topic, tp.partition)
            # Their links would keep the deleted segments' disk space until snapshot_ttl_ms.
            self._cleaner.drop_snapshots_of(topic)
            self._counters.topics_deleted += 1
            _log.info("deleted topic %s", topic)
            if failures:
                where = "; ".join(f"{d.path}: {exc}" for d, exc in failures.items())
                raise LogDirOfflineError(f"deleting topic {topic!r} failed on {where}")

    def _is_live_topic(self, topic: str, topic_id: str) -> bool:
        entry = self._registry.topic(topic)
        return entry is not None and entry.topic_id == topic_id

    def partition_dir(self, topic: str, partition: int) -> str:
        """The directory of a partition held here (a partition move stages its copy beside it).
        Raises UnknownTopicOrPartitionError."""
        tp = TopicPartition(topic, partition)
        found = self._registry.find(tp)
        if found is None:
            raise self._registry.missing_error(tp)
        return found.path

    def install_partition(self, topic: str, partition: int, staged: str, log_start_offset: int) -> Log:
        """Replaces a partition's log with the segment files in ``staged`` (a directory beside
        the partition's, a partition move's copy): the current log is closed and its directory
        renamed for deletion, ``staged`` takes its name (with the partition's own
        ``topic.properties``), both renames made durable, and the log loaded as after an unclean
        shutdown from offset 0: every batch's CRC walked, every index rebuilt, the producers'
        state read from the copied snapshots and the batches after them. Raises
        UnknownTopicOrPartitionError, and the load's errors (the directory is then taken
        offline as for any failed load)."""
        tp = TopicPartition(topic, partition)
        with self._admin_lock:
            self._check_running()
            found = self._registry.find(tp)
            if found is None:
                raise self._registry.missing_error(tp)
            log = self._creator.install(tp, found, staged, log_start_offset)  # partition_creation.py
            self._announce_change(topic, partition)
            return log

    def list_topics(self) -> list[tuple[str, int]]:
        """(topic, partition count) for every topic, sorted by name."""
        return self._registry.list_topics()

    def describe_topic(self, topic: str) -> TopicDescription:
        """Raises UnknownTopicOrPartitionError."""
        entry, online, offline = self._registry.describe(topic)
        return TopicDescription(
            topic=topic,
            config=entry.config,
            partitions=[describe_partition(p, partition) for p, partition in online],
            offline_partitions=offline,
        )

    def alter_topic_configs(
        self, topic: str, set_configs: Mapping[str, str], delete_names: Sequence[str] = (), *,
        validate_only: bool = False,
    ) -> LogConfig:
        """Kafka's IncrementalAlterConfigs on a topic (``topic_config_change.py``): SET gives a
        name a value, DELETE returns it to the service default; validated as CreateTopic's
        configs; written to every partition's ``topic.properties`` (each atomically), then applied
        to the live logs. Returns the topic's new effective config.

        Raises UnknownTopicOrPartitionError, InvalidConfigError (nothing changed), and
        LogDirOfflineError when a partition is on an offline directory (nothing changed) or a
        write fails (the files written are put back; the failing directory goes offline).
        """
        with self._admin_lock:
            self._check_running()
            entry = self._registry.topic(topic)
            if entry is None:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            if entry.topic_id is None:
                raise InvalidConfigError(
                    f"topic {topic!r} has no topic.properties (partition directories copied in): it "
                    "takes the service defaults, and its configs cannot be changed")
            overrides = changed_overrides(entry.overrides, set_configs, delete_names)
            config = LogConfig.from_properties(overrides, self._default_config)
            check_changeable(topic, entry.config, config)
            self._check_tiering(topic, config)
            canonical = config.to_properties()
            overrides = {name: canonical[name] for name in overrides}
            # Checked for validate_only too: cluster mode validates here before it writes to etcd.
            self._registry.check_all_partitions_online(
                entry, any(not d.online for d in self._dirs), "its configs can be changed")
            if validate_only:
                return config
            self._write_overrides(entry, overrides)
            entry.config, entry.overrides = config, overrides
            for tp in entry.partitions():
                found = self._registry.find(tp)
                if found is not None:
                    found.log.update_config(config)
            _log.info("topic %s: configs changed, overrides now %s", topic, overrides)
            return config

    def _complete_interrupted_config_changes(self) -> None:
        """A config change a stop interrupted (its intent found in a partition directory) is
        completed on every loaded partition of its topic (``topic_config_change.py``). A write that
        fails leaves the topic as loaded and the intent for the next start. An intent that cannot
        be read takes its directory offline, as an unreadable topic.properties does at loading
        (out of a resource: the topic stays as loaded, the next start reads it)."""
        for entry in self._registry.topics_snapshot():
            if entry.topic_id is None:
                continue
            served = [found for found in map(self._registry.find, entry.partitions()) if found is not None]
            try:
                change = complete_interrupted_change([p.path for p in served], entry.topic_id, self._fs,
                                                     lambda intent, entry=entry: self._intent_config(entry, intent))
            except IntentReadError as exc:
                self._intent_unreadable(entry, served, exc)
                continue
            except PartitionWriteError as exc:
                _log.error("topic %s: an interrupted config change not completed: %s (tried again at the next start)",
                           entry.name, exc)
                continue
            if change is None:
                continue
            config = change[1]
            entry.config, entry.overrides = config, dict(change[0].overrides)
            for partition in served:
                partition.log.update_config(config)

    def _intent_config(self, entry: TopicEntry, intent: TopicMetadata) -> LogConfig:
        """The config a change's intent gives the topic, checked as the change was; raises
        InvalidConfigError."""
        if (intent.topic, intent.partition_count) != (entry.name, entry.partition_count):
            raise InvalidConfigError(
                f"the intent is of topic {intent.topic!r} with {intent.partition_count} partitions, "
                f"the topic {entry.name!r} has {entry.partition_count}")
        config = LogConfig.from_properties(intent.overrides, self._default_config)
        check_changeable(entry.name, entry.config, config)
        return config

    def _intent_unreadable(self, entry: TopicEntry, served: Sequence[Any], failed: IntentReadError) -> None:
        what = f"topic {entry.name}: the intent of an interrupted config change not read ({failed})"
        if is_exhaustion(failed.cause):
            _log.error("%s; the topic serves as loaded, the next start reads it", what)
            return
        log_dir = next(p.log_dir for p in served if p.path == failed.path)
        _log.error("%s; log directory %s goes offline", what, log_dir.path)
        self._take_dir_offline(log_dir, what)

    def _write_overrides(self, entry: TopicEntry, overrides: dict[str, str]) -> None:
        served = [found for found in map(self._registry.find, entry.partitions()) if found is not None]
        assert entry.topic_id is not None
        before = TopicMetadata(entry.name, entry.topic_id, entry.partition_count, dict(entry.overrides))
        by_log_dir: dict[int, list[str]] = {}
        for partition in served:
            by_log_dir.setdefault(id(partition.log_dir), []).append(partition.path)
        intent_dirs = intent_dirs_of(by_log_dir.values(), self._fs)  # one a log dir
        try:
            write_overrides([p.path for p in served], before, overrides, self._fs, intent_dirs=intent_dirs)
        except PartitionWriteError as failed:
            what = f"changing the configs of topic {entry.name!r}"
            exhausted = exhaustion_error(failed.cause, what)
            if exhausted is not None:
                raise exhausted from failed.cause  # nothing changed; the directory is fine
            if not isinstance(failed.cause, IO_ERRORS):
                raise failed.cause
            log_dir = next(p.log_dir for p in served if p.path == failed.path)
            self._take_dir_offline(log_dir, f"{what} failed: {failed.cause}")
            raise LogDirOfflineError(
                f"log directory {log_dir.path} failed while {what}: {failed.cause}") from failed.cause

    def get_log(self, topic: str, partition: int) -> Log:
        """The partition's log. Raises UnknownTopicOrPartitionError or LogDirOfflineError."""
        tp = TopicPartition(topic, partition)
        found = self._registry.find(tp)
        if found is not None:
            if not found.log.is_offline:
                return found.log
            # An append or read hit an I/O error: the whole directory goes (Kafka's rule).
            self._take_dir_offline(found.log_dir, f"I/O error on {found.path}")
        if self._state != _RUNNING:
            raise LogDirOfflineError(f"the log manager is {self._state}, not serving {tp}")
        raise self._registry.missing_error(tp)

    # ---------------------------------------------------------------------------------------
    # offline cleaning (log_cleaner_manager.py)
    # ---------------------------------------------------------------------------------------
    def create_snapshot(self, topic: str, partition: int, *, export: bool = False) -> TakenSnapshot:
        """Hard-links the partition's cleanable segments into a new cleaning snapshot; with
        ``export``, also copies it to the object store (snapshot_store.py)."""
        self._check_running()
        return self._cleaner.create_snapshot(topic, partition, export=export)

    def snapshot_store_url(self, snapshot_id: str) -> str:
        """Where an exported snapshot lives in the object store ("" when it is not exported)."""
        return self._cleaner.store_url(snapshot_id)

    def list_cleanable(self, topic: str | None = None) -> list[CleanableLog]:
        """Every online compacted partition with its cleanable range, dirtiest first."""
        self._check_running()
        return self._cleaner.list_cleanable(topic)

    def commit_cleaned(self, snapshot_id: str) -> CommitOutcome:
        """Checks a snapshot's cleaning result against the live log and installs it."""
        self._check_running()
        return self._cleaner.commit(snapshot_id)

    def snapshot_partition(self, snapshot_id: str) -> TopicPartition | None:
        """The partition an open cleaning snapshot was taken of (None: not open here)."""
        return self._cleaner.snapshot_partition(snapshot_id)

    def drop_snapshot(self, snapshot_id: str) -> bool:
        """Removes a cleaning snapshot; False when there was none."""
        self._check_running()
        return self._cleaner.drop_snapshot(snapshot_id)

    def snapshot_path(self, snapshot_id: str) -> str:
        """The absolute path of an open cleaning snapshot."""
        return self._cleaner.snapshot_path(snapshot_id)

    def configured_dir_name(self, path: str) -> str:
        """A log directory's path as the service was configured with it (absolute ``path`` in)."""
        return self._configured_names.get(path, path)

    def cleaner_statistics(self) -> CleanerStatistics:
        return self._cleaner.statistics()

    # ---------------------------------------------------------------------------------------
    # idempotent producers
    # ---------------------------------------------------------------------------------------
    def init_producer_id(self) -> tuple[int, int]:
        """(producer id, epoch 0) for a new idempotent producer (producer_ids.py)."""
        self._check_running()
        assert self._producer_ids is not None
        try:
            return self._producer_ids.next_id(), 0
        except OSError as exc:
            exhausted = exhaustion_error(exc, "reserving producer ids")
            if exhausted is not None:
                raise exhausted from exc
            raise LogDirOfflineError(f"reserving a block of producer ids failed: {exc}") from exc

    def use_producer_id_blocks(self, reserve_block: ProducerIdBlocks) -> None:
        """From now on producer ids come from blocks ``reserve_block`` reserves (cluster mode: one
        counter for the cluster, producer_ids.py) instead of the local producer-id-block files.
        Called before the service answers its first call; its errors reach InitProducerId as
        raised."""
        self._producer_ids = AllocatedProducerIds(reserve_block)

    def _producer_id_write_failed(self, path: str, exc: OSError) -> None:
        """A producer-id block write failed in ``path``: the directory is taken offline unless
        a resource was exhausted (it stays online, left out of the block's holders)."""
        if not is_exhaustion(exc):
            self._take_dir_offline(self._dir_by_path(path), f"reserving producer ids failed: {exc}")

    def _online_partitions(self) -> list[tuple[TopicPartition, PartitionEntry]]:
        return [(tp, p) for tp, p in self._registry.all_partitions() if p.log_dir.online]

    # ---------------------------------------------------------------------------------------
    # maintenance
    # ---------------------------------------------------------------------------------------
    def run_maintenance(self) -> None:
        """One pass of the periodic jobs that are due (see MaintenanceIntervals)."""
        with self._admin_lock:
            if self._state != _RUNNING:
                return
            assert self._schedule is not None
            started_ns = self._clock.monotonic_ns()
            self._jobs.run(self._schedule.due(self._now_ms()))  # maintenance_jobs.py
            self._counters.maintenance_passes += 1
            elapsed_ns = self._clock.monotonic_ns() - started_ns
            self._counters.last_maintenance_duration_ms = elapsed_ns / 1e6

    # ---------------------------------------------------------------------------------------
    # the remote tier (remote_maintenance.py)
    # ---------------------------------------------------------------------------------------
    def start_remote_uploader(self, interval_ms: int) -> None:
        """Run ``run_remote_pass`` every ``interval_ms`` on a thread of its own until shutdown
        (the service does; tests call ``run_remote_pass`` themselves). No store: nothing to do."""
        with self._admin_lock:
            self._check_running()
            if self._remote is not None:
                self._remote.start_uploader(interval_ms)

    def run_remote_pass(self) -> None:
        """One pass of the remote tier over every tiered log: deletions of deleted topics,
        orphans, uploads, local retention right after an upload (the uploaded segments are what it
        may now delete), the whole log's retention over the remote segments. Runs on a thread of
        its own (the service's uploader), never inside ``run_maintenance``: a store call may take
        its whole deadline (object_store.py), and a silent store must not hold the other jobs
        back."""
        if self._remote is not None:
            self._remote.run_pass()

    def remote_statistics(self) -> RemoteTierStatistics:
        """The remote tier's figures (the metrics' remote section); zeros without a store."""
        return no_remote_statistics() if self._remote is None else self._remote.statistics()

    @property
    def remote_uploaded_segments(self) -> int:
        return 0 if self._remote is None else self._remote.uploaded_segments

    @property
    def remote_uploaded_bytes(self) -> int:
        return 0 if self._remote is None else self._remote.uploaded_bytes

    @property
    def remote_orphans_deleted(self) -> int:
        return 0 if self._remote is None else self._remote.orphans_deleted

    # ---------------------------------------------------------------------------------------
    # failures (a directory's checkpoints and its clean shutdown: dir_checkpoints.py)
    # ---------------------------------------------------------------------------------------
    def handle_log_dir_failure(self, log_dir: str, cause: BaseException | str) -> None:
        """Takes ``log_dir`` offline after an I/O error seen outside the manager (for example
        a LogDirOfflineError from ``Log.append`` in the service). Idempotent."""
        self._take_dir_offline(self._dir_by_path(log_dir), str(cause))

    # ---------------------------------------------------------------------------------------
    # the adapter's questions about a log (rpc/storage_port.py): asked on its event loop,
    # answered from the log's public state, no I/O
    # ---------------------------------------------------------------------------------------
    def inline_lock(self, log: Log) -> Any:
        """The re-entrant lock every operation of ``log`` takes (log_questions.py)."""
        return log_questions.inline_lock(log)

    def append_may_block(self, log: Log, batch: bytes | bytearray | memoryview) -> bool:
        """Whether ``log.append(batch)`` may block for I/O or CPU (log_questions.py)."""
        return log_questions.append_may_block(log, batch)

    def timestamp_lookup_may_block(self, log: Log, timestamps_ms: Sequence[int]) -> bool:
        """Whether looking ``timestamps_ms`` up may read every segment of ``log`` (log_questions.py)."""
        return log_questions.timestamp_lookup_may_block(log, timestamps_ms)

    def handle_log_failure(self, log: Log, cause: BaseException | str) -> None:
        """``handle_log_dir_failure`` for the directory holding ``log`` (an I/O error met by a
        caller, for example LogDirOfflineError from ``Log.append``). Idempotent."""
        self.handle_log_dir_failure(os.path.dirname(os.path.abspath(log.dir)), cause)

    def _take_dir_offline(self, log_dir: LogDir, reason: str) -> None:
        for partition in self._registry.take_dir_offline(log_dir, reason):
            drop_quietly(partition.log)

    # ---------------------------------------------------------------------------------------
    # reporting and helpers
    # ---------------------------------------------------------------------------------------
    def statistics(self, *, partition_detail: bool = True) -> LogManagerStatistics:
        """The manager's figures. ``partition_detail`` False leaves out each partition's full
        ``Log.statistics()`` (``partitions`` is empty) and keeps only ``partition_summaries``:
        what /metrics reads, cheap enough for 10,000 partitions per scrape."""
        return build_statistics(
            self._state, self._dirs, self._registry, self._counters, self._open_segments.statistics(),
            partition_detail=partition_detail,
        )

    def can_serve(self) -> bool:
        """Whether anything can be served: running with at least one directory online. Cheap
        (no per-partition work), for the health check."""
        return self._state == _RUNNING and any(log_dir.online for log_dir in self._dirs)

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


def _snapshot_store(remote_storage: RemoteStorageManager | None, fs: FileSystem) -> Any:
    """Cleaning snapshots go to the tiered storage's store, under their own key prefix."""
    if remote_storage is None:
        return None
    from ..cleaning.snapshot_store import SnapshotStore

    return SnapshotStore(remote_storage.store, fs)


def _check_no_duplicate_dirs(log_dirs: Iterable[str]) -> None:
    seen: dict[str, str] = {}
    for path in log_dirs:
        real = os.path.realpath(path)
        if real in seen:
            raise InvalidConfigError(f"duplicate log directory: {path!r} and {seen[real]!r}")
        seen[real] = path
