"""What the log manager reports: topic descriptions (DescribeTopic) and ``statistics()``.

All frozen dataclasses, built on demand from the live state; ``metrics.py`` turns the statistics
into Prometheus series at scrape time (STYLE rule 12).
"""

from __future__ import annotations

import logging
import os
import resource
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ..base.errors import RemoteStorageUnavailableError
from ..base.log_config import LogConfig
from ..segment.open_segments import OpenSegmentsStatistics

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ..dirs.log_dir import LogDir
    from ..base.topic_partition import TopicPartition
    from ..dirs.topic_registry import PartitionEntry, TopicRegistry

__all__ = [
    "LogDirStatistics",
    "LogManagerCounters",
    "LogManagerStatistics",
    "PartitionDescription",
    "PartitionStatistics",
    "PartitionSummary",
    "RecoveryStatistics",
    "TopicDescription",
    "build_statistics",
    "describe_partition",
]


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    segment_count: int
    log_dir: str
    # Tiered storage: the local log's first offset, and the segments in the object store.
    local_log_start_offset: int = 0
    remote_segment_count: int = 0
    remote_size_bytes: int = 0


def describe_partition(number: int, partition: PartitionEntry) -> PartitionDescription:
    """DescribeTopic's answer for one served partition (its log's offsets, sizes and tier)."""
    log = partition.log
    tier = log.remote_tier
    remote = tier.segments() if tier is not None else []
    # A tiered log not listed since the start: its log start and remote extent are unknown (-1,
    # as for a partition owned elsewhere), not the local ones (EARLIEST answers UNAVAILABLE).
    try:
        log_start_offset = log.known_log_start_offset()
    except RemoteStorageUnavailableError:
        log_start_offset = -1
    unlisted = log_start_offset < 0
    return PartitionDescription(
        partition=number,
        log_start_offset=log_start_offset,
        log_end_offset=log.log_end_offset,
        high_watermark=log.high_watermark,
        size_bytes=log.size_in_bytes,
        segment_count=log.segment_count,
        log_dir=partition.log_dir.path,
        local_log_start_offset=log.local_log_start_offset,
        remote_segment_count=-1 if unlisted else len(remote),
        remote_size_bytes=-1 if unlisted else sum(m.segment_bytes for m in remote),
    )


@dataclass(frozen=True)
class TopicDescription:
    topic: str
    config: LogConfig
    partitions: list[PartitionDescription]  # online partitions, by partition number
    # Partitions that exist but cannot be served (their log directory is offline, or their
    # topic metadata is unreadable): partition number -> reason.
    offline_partitions: dict[int, str]

    @property
    def partition_count(self) -> int:
        return len(self.partitions) + len(self.offline_partitions)


@dataclass(frozen=True)
class RecoveryStatistics:
    """What loading did to the logs of a directory (or, summed, of all of them) at start-up."""

    marker_found: bool  # the clean-shutdown marker was there (for the sum: in every directory)
    logs_loaded: int
    logs_recovered: int  # logs in which at least one segment was recovered
    segments_recovered: int  # segments whose indexes were rebuilt from the .log, CRCs checked
    bytes_truncated: int  # bytes cut from torn or corrupt segment tails
    logs_reloaded_with_recovery: int  # logs that failed to load and were loaded again with recovery
    logs_offline: int  # logs kept offline alone: not loadable even with recovery
    duration_s: float  # wall time of loading the directory's logs


NO_RECOVERY = RecoveryStatistics(False, 0, 0, 0, 0, 0, 0, 0.0)


def sum_recovery(figures: Sequence[RecoveryStatistics]) -> RecoveryStatistics:
    if not figures:
        return NO_RECOVERY
    return RecoveryStatistics(
        marker_found=all(f.marker_found for f in figures),
        logs_loaded=sum(f.logs_loaded for f in figures),
        logs_recovered=sum(f.logs_recovered for f in figures),
        segments_recovered=sum(f.segments_recovered for f in figures),
        bytes_truncated=sum(f.bytes_truncated for f in figures),
        logs_reloaded_with_recovery=sum(f.logs_reloaded_with_recovery for f in figures),
        logs_offline=sum(f.logs_offline for f in figures),
        duration_s=sum(f.duration_s for f in figures),
    )


@dataclass(frozen=True)
class LogDirStatistics:
    path: str
    online: bool
    offline_reason: str | None
    had_clean_shutdown: bool  # the marker was present at start-up
    load_completed: bool  # every partition found at start-up was loaded
    partition_count: int  # online partitions served from this directory
    offline_partition_count: int
    size_bytes: int
    segment_count: int
    pending_delete_dir_count: int  # "-delete" directories not removed yet
    ignored_entry_count: int  # entries that are not seglog partitions (left alone)
    checkpoint_read_error_count: int  # corrupt checkpoint files read as empty
    recovery: RecoveryStatistics  # what loading did here at start-up (NO_RECOVERY if not loaded)


@dataclass(frozen=True)
class PartitionStatistics:
    topic: str
    partition: int
    log_dir: str
    log: Any  # the Log's own LogStatistics


class PartitionSummary(NamedTuple):
    """One online partition's ``Log.summary()`` (``LogSummary``'s fields, after its name and
    directory): what a scrape reads per partition. One flat tuple: a scrape holds 10,000 of
    these at once, and every container alive across it brings the next full GC nearer."""

    topic: str
    partition: int
    log_dir: str
    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    segment_count: int
    unflushed_record_count: int
    appended_bytes: int
    appended_record_count: int
    flush_count: int
    lost_offset_count: int


@dataclass(frozen=True)
class LogManagerStatistics:
    state: str  # "new", "starting", "running", "stopping", "stopped", "halted"
    log_dirs: tuple[LogDirStatistics, ...]
    # Every online partition's full statistics, by (topic, partition); empty when asked for
    # without them (``statistics(partition_detail=False)``, what /metrics reads).
    partitions: tuple[PartitionStatistics, ...]
    # totals
    topic_count: int
    partition_count: int
    offline_partition_count: int
    offline_log_dir_count: int
    size_bytes: int
    segment_count: int
    # start-up (Kafka's remainingLogsToRecover gauge and load timing)
    startup_duration_ms: float
    logs_loaded_count: int
    logs_recovered_count: int  # loaded from a directory without a clean-shutdown marker
    logs_created_on_startup_count: int  # partitions of an interrupted CreateTopic, completed
    interrupted_deletes_completed_count: int  # partitions of an interrupted DeleteTopic, deleted
    remaining_logs_to_load: int
    recovery: RecoveryStatistics  # summed over the directories that loaded
    # maintenance
    maintenance_pass_count: int
    maintenance_error_count: int
    last_maintenance_duration_ms: float
    retention_check_count: int
    segments_deleted_total: int
    files_deleted_total: int
    flushes_by_time_total: int
    recovery_point_checkpoint_count: int
    log_start_offset_checkpoint_count: int
    # administration
    topics_created_total: int
    topics_deleted_total: int
    delete_dirs_removed_total: int
    # descriptors (the process-wide open-segment budget, open_segments.py)
    open_segment_count: int = 0  # segments that may hold descriptors now
    open_segments_max: int = 0  # the budget, in segments
    descriptor_budget: int = 0  # descriptors the budget allows segments: open_segments_max * 4
    released_segment_total: int = 0  # segments made to give back their handles
    descriptors_in_use: int = -1  # the process's open descriptors (/proc/self/fd), -1: unknown
    descriptor_limit: int = -1  # RLIMIT_NOFILE (soft), -1: unlimited
    # Every online partition's running figures, by (topic, partition): always there and cheap.
    partition_summaries: tuple[PartitionSummary, ...] = ()
    # Partitions left out of ``partition_summaries`` because reading their figures raised (a
    # segment's size read on first use after a restart may meet EMFILE or EIO; logged).
    skipped_partition_count: int = 0


@dataclass
class LogManagerCounters:
    """The manager's running counts, updated in place (under its admin lock)."""

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
    recovery_by_dir: dict[str, RecoveryStatistics] = field(default_factory=dict)


def build_statistics(
    state: str,
    log_dirs: Sequence[LogDir],
    registry: TopicRegistry,
    counters: LogManagerCounters,
    open_segments: OpenSegmentsStatistics | None = None,
    *,
    partition_detail: bool = True,
) -> LogManagerStatistics:
    partitions = sorted(registry.all_partitions(), key=_by_topic_partition)
    topic_count, offline_count, offline_by_dir = registry.counts()
    summaries = _summaries(partitions)
    per_partition = tuple(
        PartitionStatistics(tp.topic, tp.partition, p.log_dir.path, p.log.statistics())
        for tp, p in partitions
    ) if partition_detail else ()
    dirs = tuple(
        _dir_statistics(d, summaries, offline_by_dir.get(d, 0), counters) for d in log_dirs
    )
    c = counters
    return LogManagerStatistics(
        state=state,
        log_dirs=dirs,
        partitions=per_partition,
        topic_count=topic_count,
        partition_count=len(partitions),
        offline_partition_count=offline_count,
        offline_log_dir_count=sum(1 for d in log_dirs if not d.online),
        size_bytes=sum(s.size_bytes for s in summaries),
        segment_count=sum(s.segment_count for s in summaries),
        startup_duration_ms=c.startup_duration_ms,
        logs_loaded_count=c.logs_loaded,
        logs_recovered_count=c.logs_recovered,
        logs_created_on_startup_count=c.logs_created_on_startup,
        interrupted_deletes_completed_count=c.interrupted_deletes_completed,
        remaining_logs_to_load=c.remaining_logs_to_load,
        recovery=sum_recovery(list(c.recovery_by_dir.values())),
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
        **_descriptor_fields(open_segments),
        partition_summaries=summaries,
        skipped_partition_count=len(partitions) - len(summaries),
    )


def _summaries(partitions: Sequence[tuple[Any, Any]]) -> tuple[PartitionSummary, ...]:
    """Each partition's summary; one whose figures cannot be read is left out and logged, so
    one partition in trouble never costs a scrape every other figure."""
    summaries = []
    for tp, p in partitions:
        try:
            summaries.append(PartitionSummary(tp.topic, tp.partition, p.log_dir.path, *p.log.summary()))
        except Exception as exc:
            _log.warning("statistics: partition %s left out: %s", tp, exc)
    return tuple(summaries)


def _by_topic_partition(item: tuple[TopicPartition, PartitionEntry]) -> TopicPartition:
    return item[0]


def _descriptor_fields(open_segments: OpenSegmentsStatistics | None) -> dict[str, int]:
    fields = {"descriptors_in_use": descriptors_in_use(), "descriptor_limit": descriptor_limit()}
    if open_segments is not None:
        fields.update(
            open_segment_count=open_segments.segment_count,
            open_segments_max=open_segments.segment_count_max,
            descriptor_budget=open_segments.descriptor_count_max,
            released_segment_total=open_segments.released_count,
        )
    return fields


def descriptors_in_use() -> int:
    """The process's open descriptors, counted in /proc/self/fd (-1 where there is none)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # minus the one listdir itself holds
    except OSError:
        return -1


def descriptor_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return -1 if soft == resource.RLIM_INFINITY else soft


def _dir_statistics(
    log_dir: LogDir,
    summaries: Sequence[PartitionSummary],
    offline_count: int,
    counters: LogManagerCounters,
) -> LogDirStatistics:
    path = log_dir.path  # unique among the manager's directories (checked at construction)
    mine = [s for s in summaries if s.log_dir == path]
    return LogDirStatistics(
        path=log_dir.path,
        online=log_dir.online,
        offline_reason=log_dir.offline_reason,
        had_clean_shutdown=log_dir.had_clean_shutdown,
        load_completed=log_dir.load_completed,
        partition_count=len(mine),
        offline_partition_count=offline_count,
        size_bytes=sum(s.size_bytes for s in mine),
        segment_count=sum(s.segment_count for s in mine),
        pending_delete_dir_count=len(log_dir.pending_delete_dirs),
        ignored_entry_count=len(log_dir.ignored_entries),
        checkpoint_read_error_count=log_dir.checkpoint_read_error_count,
        recovery=counters.recovery_by_dir.get(log_dir.path, NO_RECOVERY),
    )
