"""A log directory's checkpoints (recovery points, log start offsets) and its clean shutdown:
every log flushed and closed, both checkpoints, then the clean-shutdown marker.

Contract with the log manager, which owns the directories, the topic map and the admin lock
(every call here runs under it): the manager hands in its topic map, its counters and how to take
a directory offline. A checkpoint keeps the last known value of a partition of the directory
that is not loaded, so its recovery does not restart from 0. Writes raise OSError to the caller
(maintenance decides between retrying and taking the directory offline); ``shut_down`` handles
its own failures and answers whether the marker was written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from ..base.topic_partition import TopicPartition
from ..dirs.log_dir import LogDir
from ..dirs.topic_registry import IO_ERRORS, PartitionEntry, TopicRegistry, close_quietly
from .log_manager_statistics import LogManagerCounters

__all__ = ["DirCheckpoints"]

_log = logging.getLogger(__name__)


class DirCheckpoints:
    def __init__(
        self,
        registry: TopicRegistry,
        counters: LogManagerCounters,
        take_dir_offline: Callable[[LogDir, str], None],
    ) -> None:
        self._registry = registry
        self._counters = counters
        self._take_dir_offline = take_dir_offline

    def write_recovery_points(self, log_dir: LogDir) -> None:
        partitions = self._registry.partitions_in(log_dir)
        self._write_recovery_points(log_dir, {tp: p.log.recovery_point for tp, p in partitions})

    def write_log_start_offsets(self, log_dir: LogDir) -> None:
        partitions = self._registry.partitions_in(log_dir)
        self._write_log_start_offsets(log_dir, _log_start_offsets_to_keep(partitions))

    def write_both(self, log_dir: LogDir) -> None:
        self.write_recovery_points(log_dir)
        self.write_log_start_offsets(log_dir)

    def shut_down_safely(self, log_dir: LogDir, broker_epoch: int) -> bool:
        """One directory's failure of any kind stops neither the others' shutdown nor the
        release of the locks; that directory just gets no marker."""
        try:
            return self._shut_down(log_dir, broker_epoch)
        except Exception:
            _log.exception("shutting down %s failed: no clean-shutdown marker", log_dir.path)
            return False

    def _shut_down(self, log_dir: LogDir, broker_epoch: int) -> bool:
        """Flushes and closes every log of ``log_dir``, writes the checkpoints and then the
        marker. True when the marker was written: never when a log failed to flush or close
        (Kafka's rule), so the next start recovers the directory instead of trusting it."""
        partitions = self._registry.partitions_in(log_dir)
        recovery_points: dict[TopicPartition, int] = {}
        log_start_offsets: dict[TopicPartition, int] = {}
        all_closed = True
        for tp, partition in partitions:
            try:
                # A call cut by the drain may still run on the pool: from here on it is refused
                # ("shutting down"), so the flush covers every record the log acknowledged.
                partition.log.stop_changes()
                partition.log.flush()
                recovery_points[tp] = partition.log.recovery_point
                log_start_offsets.update(_log_start_offsets_to_keep([(tp, partition)]))
                partition.log.close()
            except IO_ERRORS as exc:
                reason = f"flushing {partition.path} at shutdown failed: {exc}"
                _log.error("%s; no clean-shutdown marker for %s", reason, log_dir.path)
                self._take_dir_offline(log_dir, reason)
                return False
            except Exception:
                _log.exception("closing %s at shutdown failed", partition.path)
                close_quietly(partition.log)
                all_closed = False
        if not all_closed:
            _log.error("not every log of %s closed: no clean-shutdown marker, it recovers at the next start", log_dir.path)
            return False  # Kafka's rule: no checkpoints and no marker unless every log closed
        try:
            self._write_recovery_points(log_dir, recovery_points)
            self._write_log_start_offsets(log_dir, log_start_offsets)
            if log_dir.had_clean_shutdown or log_dir.load_completed:
                log_dir.marker.write(broker_epoch)
                return True
            _log.warning("%s: no clean-shutdown marker: not every partition loaded at start", log_dir.path)
            return False
        except OSError as exc:
            self._take_dir_offline(log_dir, f"writing checkpoints at shutdown failed: {exc}")
            return False

    def _write_recovery_points(self, log_dir: LogDir, offsets: dict[TopicPartition, int]) -> None:
        # Partitions of this directory that are not loaded keep their last known value, so
        # their recovery does not restart from 0.
        for tp in self._registry.unloaded_in(log_dir):
            if tp in log_dir.recovery_points:
                offsets.setdefault(tp, log_dir.recovery_points[tp])
        log_dir.write_recovery_points(offsets)
        self._counters.recovery_point_checkpoints += 1

    def _write_log_start_offsets(self, log_dir: LogDir, offsets: dict[TopicPartition, int]) -> None:
        for tp in self._registry.unloaded_in(log_dir):
            if tp in log_dir.log_start_offsets:
                offsets.setdefault(tp, log_dir.log_start_offsets[tp])
        log_dir.write_log_start_offsets(offsets)
        self._counters.log_start_offset_checkpoints += 1


def _log_start_offsets_to_keep(
    partitions: Iterable[tuple[TopicPartition, PartitionEntry]],
) -> dict[TopicPartition, int]:
    """Kafka checkpoints a log start offset only where it is above the first segment's base
    offset; elsewhere loading derives it from the files. A tiered log's is always kept (as
    Kafka's for remote-enabled logs): its start may lie below its first local segment, moved
    there by DeleteRecords, and a restart's first listing of the store must not undo that."""
    kept = {}
    for tp, partition in partitions:
        log = partition.log
        if log.remote_tier is not None:
            kept[tp] = log.log_start_offset_to_checkpoint()
            continue
        first_base_offset = log.segments_snapshot()[0].base_offset
        if log.log_start_offset > first_base_offset:
            kept[tp] = log.log_start_offset
    return kept
