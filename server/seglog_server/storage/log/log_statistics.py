"""A log's running counters and the figures it reports (``statistics()``, ``summary()``).

The counters are the ``UnifiedLog``'s (appends, flushes, what loading repaired); the rest is
read from the ``LocalLog`` (segments, reads, rolls, deletions, retired index lookups). Both
builders run under the log's lock: they read the segment map.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from .local_log import LocalLog
from .log_results import LogStatistics, LogSummary

__all__ = ["LogCounters", "log_statistics", "log_summary"]


@dataclass
class LogCounters:
    """What a log counts itself (guarded by its lock)."""

    appended_batch_count: int = 0
    appended_record_count: int = 0
    appended_bytes: int = 0
    flush_count: int = 0
    loaded_recovered_segment_count: int = 0  # segments that loading recovered
    loaded_truncated_bytes: int = 0  # bytes that loading cut from torn or corrupt tails

    def count_append(self, record_count: int, size_bytes: int) -> None:
        self.appended_batch_count += 1
        self.appended_record_count += record_count
        self.appended_bytes += size_bytes


def log_statistics(
    local: LocalLog, counters: LogCounters, *, topic: str, partition: int, log_start_offset: int,
    log_end_offset: int, recovery_point: int, last_flush_time_ms: int,
) -> LogStatistics:
    """Under the log's lock: every figure, the segments' index lookups summed."""
    segments = local.segments.values()
    warm, cold = local.retired_warm_lookups, local.retired_cold_lookups
    for segment in segments:
        stats = segment.statistics()
        warm += stats.warm_lookup_count
        cold += stats.cold_lookup_count
    active = segments[-1]
    return LogStatistics(
        topic=topic,
        partition=partition,
        dir=local.dir,
        log_start_offset=log_start_offset,
        log_end_offset=log_end_offset,
        high_watermark=log_end_offset,  # one replica: the high watermark is the log end offset
        recovery_point=recovery_point,
        unflushed_record_count=log_end_offset - recovery_point,
        size_bytes=sum(segment.size_in_bytes for segment in segments),
        segment_count=len(segments),
        active_segment_base_offset=active.base_offset,
        active_segment_bytes=active.size_in_bytes,
        appended_batch_count=counters.appended_batch_count,
        appended_record_count=counters.appended_record_count,
        appended_bytes=counters.appended_bytes,
        read_count=local.read_count,
        read_bytes=local.read_bytes,
        roll_counts=MappingProxyType(dict(local.roll_counts)),
        deleted_segment_count=local.deleted_segment_count,
        pending_delete_file_count=local.pending_delete_count,
        flush_count=counters.flush_count,
        last_flush_time_ms=last_flush_time_ms,
        index_warm_lookup_count=warm,
        index_cold_lookup_count=cold,
        loaded_recovered_segment_count=counters.loaded_recovered_segment_count,
        loaded_truncated_bytes=counters.loaded_truncated_bytes,
    )


def log_summary(
    local: LocalLog, counters: LogCounters, *, log_start_offset: int, log_end_offset: int, recovery_point: int
) -> LogSummary:
    """Under the log's lock: the running figures a scrape reads per partition (no per-segment
    statistics)."""
    return LogSummary(
        log_start_offset,
        log_end_offset,
        local.segments.size_in_bytes,
        len(local.segments),
        log_end_offset - recovery_point,
        counters.appended_bytes,
        counters.appended_record_count,
        counters.flush_count,
        local.lost_offsets.offset_count(log_start_offset),
    )
