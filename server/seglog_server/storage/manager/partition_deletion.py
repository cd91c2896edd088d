"""Deleting a topic's partitions from the log directories (DeleteTopic, after the manager took
them out of its topic map): each log closed, each directory renamed to
``<topic>-<p>.<uuid32hex>-delete``, every rename made durable before anything is removed, then
the removal, the checkpoints and the cleaner's offsets of each directory.

Contract with the log manager, which calls ``delete`` under its admin lock and hands in its fs
seam, its counters, the directory checkpoints, how to drop the cleaner's offsets and how to take
a directory offline. ``delete`` answers the directories that failed (each is taken offline); an
exhausted resource is retried by maintenance instead, the directory staying online.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from ..base.fs import FileSystem
from ..base.io_errors import is_exhaustion
from ..base.topic_partition import TopicPartition, delete_dir_name
from ..dirs.log_dir import LogDir
from ..dirs.topic_registry import PartitionEntry, close_quietly
from .dir_checkpoints import DirCheckpoints
from .log_manager_statistics import LogManagerCounters

__all__ = ["PartitionDeleter"]

_log = logging.getLogger(__name__)


class PartitionDeleter:
    def __init__(
        self,
        fs: FileSystem,
        counters: LogManagerCounters,
        checkpoints: DirCheckpoints,
        *,
        drop_cleaner_offsets: Callable[[LogDir, list[TopicPartition]], None],
        take_dir_offline: Callable[[LogDir, str], None],
    ) -> None:
        self._fs = fs
        self._counters = counters
        self._checkpoints = checkpoints
        self._drop_cleaner_offsets = drop_cleaner_offsets
        self._take_dir_offline = take_dir_offline

    def delete(self, partitions: list[tuple[TopicPartition, PartitionEntry]]) -> dict[LogDir, BaseException]:
        """Renames every partition first and makes the renames durable in every directory before
        anything is removed: after a crash, any surviving "-delete" directory tells start-up to
        finish the job (same topic.id), so the topic cannot come back half-deleted."""
        renamed: dict[LogDir, list[str]] = {}
        failures: dict[LogDir, BaseException] = {}
        for tp, partition in partitions:
            close_quietly(partition.log)
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
                if is_exhaustion(exc):  # no descriptor for the directory: the next fsync covers it
                    _log.warning("deleting partitions in %s: %s", log_dir.path, exc)
                    continue
                failures[log_dir] = exc
                del renamed[log_dir]
        for log_dir, paths in renamed.items():
            gone = [tp for tp, p in partitions if p.log_dir is log_dir]
            # Removal first: on a full disk this is what frees space, and the checkpoints
            # (which need a block or two) can only be written after it.
            log_dir.schedule_delete_dirs(paths)
            try:
                self._counters.delete_dirs_removed += log_dir.remove_pending_delete_dirs()
                self._checkpoints.write_both(log_dir)
                self._drop_cleaner_offsets(log_dir, gone)
            except OSError as exc:
                if is_exhaustion(exc):
                    _log.warning("after deleting partitions of %s: %s (retried by maintenance)", log_dir.path, exc)
                    continue
                failures[log_dir] = exc
        for log_dir, exc in failures.items():
            self._take_dir_offline(log_dir, f"deleting a partition failed: {exc}")
        return failures
