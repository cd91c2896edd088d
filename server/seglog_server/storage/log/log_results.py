"""The values a ``Log`` returns: append and fetch results, and its statistics snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from ..format.file_records import TimestampAndOffset

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendInfo",
    "FetchData",
    "LogStatistics",
    "LogSummary",
    "TimestampAndOffset",
]

# ListOffsets special targets (Kafka's ListOffsetsRequest, kafka-storage.md 5.6).
LATEST_TIMESTAMP = -1  # -> (-1, log end offset)
EARLIEST_TIMESTAMP = -2  # -> (-1, log start offset)
MAX_TIMESTAMP = -3  # -> the greatest timestamp and the first offset carrying it (KIP-734)
EARLIEST_LOCAL_TIMESTAMP = -4  # without tiered storage, the same as EARLIEST (KIP-405)
LATEST_TIERED_TIMESTAMP = -5  # without tiered storage, (-1, -1) (KIP-1005)


class AppendInfo(NamedTuple):
    """What an append did. A NamedTuple rather than a frozen dataclass: one is built per
    append, and a frozen dataclass costs a microsecond to construct."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int  # the broker time stamped on the batch; -1 under CreateTime
    log_start_offset: int
    max_timestamp_ms: int
    record_count: int
    size_bytes: int


class FetchData(NamedTuple):
    records: bytes  # whole batches from the one holding the fetch offset; none past the high watermark
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    # One past the last batch in ``records`` (the offset read at when there is none), from the
    # walk that checked them: Fetch answers it without walking the batches again. -1: unknown.
    next_offset: int = -1


class LogSummary(NamedTuple):
    """The few running figures of one log a /metrics scrape reads for every partition.

    ``Log.statistics()`` asks every segment and both its indexes for their statistics and builds
    a 25-field frozen dataclass, about 25 us a log: a scrape of 10,000 partitions cannot afford
    that. These come from counters the log keeps as it appends, flushes and deletes, and from the
    sizes its segments cache, so reading them is one lock and one tuple (a microsecond or two).
    A NamedTuple for the same reason as ``AppendInfo``."""

    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    segment_count: int
    unflushed_record_count: int  # log end offset - recovery point
    appended_bytes: int
    appended_record_count: int
    flush_count: int
    lost_offset_count: int  # offsets at or above the log start that damage cut (lost_offsets.py)


@dataclass(frozen=True)
class LogStatistics:
    """A snapshot of one partition's log, everything metrics and DescribeTopic need."""

    topic: str
    partition: int
    dir: str
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    recovery_point: int  # first offset not known to be fsynced
    unflushed_record_count: int  # log end offset - recovery point
    size_bytes: int
    segment_count: int
    active_segment_base_offset: int
    active_segment_bytes: int
    appended_batch_count: int
    appended_record_count: int
    appended_bytes: int
    read_count: int
    read_bytes: int
    roll_counts: Mapping[str, int]  # RollReason value -> rolls since the log was opened
    deleted_segment_count: int  # segments removed by retention, DeleteRecords, truncation
    pending_delete_file_count: int  # .deleted files waiting for file.delete.delay.ms
    flush_count: int
    last_flush_time_ms: int
    index_warm_lookup_count: int  # index lookups answered by the newest 8 KiB, all segments
    index_cold_lookup_count: int
    loaded_recovered_segment_count: int  # segments recovered (CRC-checked, reindexed) at load
    loaded_truncated_bytes: int  # bytes cut from torn or corrupt tails at load
