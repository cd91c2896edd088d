"""The bodies of the log manager's periodic jobs (log_maintenance.py says when each is due):
retention, flush.ms, producer expiry, deletion of ``.deleted`` files and ``-delete`` directories,
cleaning snapshots' expiry, and the two checkpoints.

Contract with the log manager, which runs ``run`` under its admin lock while running: the manager
hands in its topic map, its counters, its clock, the directory checkpoints, its online
directories and how to take a directory offline. One log's failure never stops the pass: an I/O
error takes its directory offline (Kafka's rule), an exhausted resource (a full disk, no
descriptors) is logged and retried at the next pass, any other error is logged and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from . import log_maintenance as jobs
from ..base.clock import Clock
from ..base.errors import LogDirOfflineError, ResourceExhaustedError
from ..base.io_errors import is_exhaustion
from ..dirs.log_dir import LogDir
from ..dirs.topic_registry import IO_ERRORS, PartitionEntry, TopicRegistry
from .dir_checkpoints import DirCheckpoints
from .log_manager_statistics import LogManagerCounters

__all__ = ["MaintenanceJobs"]

_log = logging.getLogger(__name__)


class MaintenanceJobs:
    def __init__(
        self,
        registry: TopicRegistry,
        counters: LogManagerCounters,
        clock: Clock,
        checkpoints: DirCheckpoints,
        *,
        online_dirs: Callable[[], list[LogDir]],
        take_dir_offline: Callable[[LogDir, str], None],
        expire_snapshots: Callable[[], object],
    ) -> None:
        self._registry = registry
        self._counters = counters
        self._clock = clock
        self._checkpoints = checkpoints
        self._online_dirs = online_dirs
        self._take_dir_offline = take_dir_offline
        self._expire_snapshots = expire_snapshots

    def run(self, due: frozenset[str]) -> None:
        """The jobs named in ``due`` (log_maintenance's names), then those of every pass."""
        if jobs.RETENTION in due:
            self._counters.retention_checks += 1
            self._for_each_log(self._apply_retention)
        if jobs.FLUSH in due:
            self._for_each_log(self._flush_if_due)
        if jobs.PRODUCER_EXPIRY in due:
            self._for_each_log(self._expire_producers)
        self._for_each_log(self._delete_due_files)
        self.remove_delete_dirs()
        self._expire_snapshots()
        if jobs.RECOVERY_POINTS in due:
            self._for_each_online_dir(self._checkpoints.write_recovery_points)
        if jobs.LOG_START_OFFSETS in due:
            self._for_each_online_dir(self._checkpoints.write_log_start_offsets)

    def remove_delete_dirs(self) -> None:
        """Removes the ``-delete`` directories each online directory has pending (also at start)."""
        for log_dir in self._online_dirs():
            if not log_dir.pending_delete_dirs:
                continue
            try:
                self._counters.delete_dirs_removed += log_dir.remove_pending_delete_dirs()
            except OSError as exc:
                if is_exhaustion(exc):
                    continue
                self._take_dir_offline(log_dir, f"removing deleted partitions failed: {exc}")

    def _apply_retention(self, partition: PartitionEntry) -> None:
        self._counters.segments_deleted += partition.log.delete_old_segments()

    def _expire_producers(self, partition: PartitionEntry) -> None:
        partition.log.remove_expired_producers()

    def _flush_if_due(self, partition: PartitionEntry) -> None:
        log = partition.log
        if self._clock.time_ms() - log.last_flush_time_ms >= log.config.flush_ms:
            log.flush()
            self._counters.flushes_by_time += 1

    def _delete_due_files(self, partition: PartitionEntry) -> None:
        self._counters.files_deleted += partition.log.delete_due_files()

    def _for_each_log(self, job: Callable[[PartitionEntry], None]) -> None:
        """Runs ``job`` on every online partition; an I/O error takes its directory offline,
        any other error is logged and counted so one bad log cannot stop maintenance."""
        for _, partition in self._registry.all_partitions():
            if not partition.log_dir.online:
                continue
            try:
                if partition.log.is_offline:
                    raise LogDirOfflineError(f"log {partition.path} failed earlier")
                job(partition)
            except IO_ERRORS as exc:
                if is_exhaustion(exc):
                    _log.warning("maintenance of %s: %s", partition.path, exc)
                    continue
                self._take_dir_offline(partition.log_dir, f"I/O error on {partition.path}: {exc}")
            except ResourceExhaustedError as exc:
                _log.warning("maintenance of %s: %s", partition.path, exc)
            except Exception:
                self._counters.maintenance_errors += 1
                _log.exception("maintenance of %s failed", partition.path)

    def _for_each_online_dir(self, job: Callable[[LogDir], None]) -> None:
        for log_dir in self._online_dirs():
            try:
                job(log_dir)
            except OSError as exc:
                if is_exhaustion(exc):  # kept in memory; written once there is space again
                    _log.warning("writing a checkpoint in %s: %s (retried next pass)", log_dir.path, exc)
                    continue
                self._take_dir_offline(log_dir, f"writing a checkpoint failed: {exc}")
