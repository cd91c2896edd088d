"""What the log manager reports: topic descriptions (DescribeTopic) and ``statistics()``.

All frozen dataclasses, built on demand from the live state; ``metrics.py`` turns the statistics
into Prometheus series at scrape time (STYLE rule 12).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .log_config import LogConfig

__all__ = [
    "LogDirStatistics",
    "LogManagerStatistics",
    "PartitionDescription",
    "PartitionStatistics",
    "TopicDescription",
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


@dataclass(frozen=True)
class PartitionStatistics:
    topic: str
    partition: int
    log_dir: str
    log: Any  # the Log's own LogStatistics


@dataclass(frozen=True)
class LogManagerStatistics:
    state: str  # "new", "starting", "running", "stopping", "stopped", "halted"
    log_dirs: tuple[LogDirStatistics, ...]
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
