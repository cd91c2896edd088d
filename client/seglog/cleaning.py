"""What the admin client's offline-cleaning calls return (``Admin.list_cleanable``,
``create_snapshot``, ``commit_cleaned``): frozen dataclasses mirroring the proto messages.

The loop they serve: list the compacted partitions and their dirty ratios, snapshot the
dirtiest, clean the snapshot (``seglog_spark``), commit the result, drop the snapshot on failure.
``seglog cleaner run`` is that loop.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CleanablePartition", "CleaningCommit", "SnapshotInfo"]


@dataclass(frozen=True)
class CleanablePartition:
    topic: str
    partition: int
    log_dir: str
    dirty_ratio: float  # cleanable / (clean + cleanable) bytes, Kafka's cleanable ratio
    min_cleanable_dirty_ratio: float
    cleanable_bytes: int
    clean_bytes: int
    first_dirty_offset: int  # the cleaner checkpoint
    first_uncleanable_offset: int
    log_start_offset: int
    log_end_offset: int
    compaction_delay_ms: int  # how long past max.compaction.lag.ms the oldest dirty record is
    must_clean: bool
    eligible: bool  # must_clean, or dirty_ratio > min_cleanable_dirty_ratio
    open_snapshot_ids: tuple[str, ...]


@dataclass(frozen=True)
class SnapshotInfo:
    snapshot_id: str
    log_dir: str  # the service's log directory by its label ("log dir #0 (data)"), not a path
    relative_path: str  # the snapshot directory relative to log_dir
    local_path: str | None  # the absolute path on the service's machine, when asked for
    manifest_json: str
    segment_count: int
    size_bytes: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    # "s3://BUCKET/.../cleaning-snapshots/<id>/" when exported to the service's object store
    store_url: str | None = None


@dataclass(frozen=True)
class CleaningCommit:
    topic: str
    partition: int
    replaced_segment_count: int
    installed_segment_count: int
    bytes_before: int
    bytes_after: int
    cleaned_up_to_offset: int  # the partition's cleaner checkpoint now
