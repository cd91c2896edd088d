"""What the cleaner may rewrite in one compacted log, and how dirty it is (Kafka's
``LogCleanerManager.cleanableOffsets`` and ``LogToClean``, kafka-storage.md 6.2).

Pure rules over the facts the log answers under its lock (``UnifiedLog.cleanable_view``):

- **first dirty offset**: the cleaner-offset-checkpoint entry, or the log start offset when there
  is none or it lies outside [log start offset, log end offset] (then the checkpoint is stale and
  ``checkpoint_reset`` says so);
- **first uncleanable offset**: the least of the high watermark, the active segment's base offset
  and, when ``min.compaction.lag.ms`` > 0, the base offset of the first closed dirty segment
  whose largest timestamp is younger than the lag; never below the first dirty offset. Cleaning
  works on whole segments, so the range ends at the base offset of the segment holding that
  offset (or the active segment's): the snapshot and the dirty ratio both use this aligned end;
- **dirty ratio** = cleanable bytes / (clean bytes + cleanable bytes), where clean bytes are the
  segments below the first dirty offset and cleanable bytes those from the first dirty offset to
  the end of the range (a segment straddling the first dirty offset counts in both, as in Kafka);
- **compaction delay** (``max.compaction.lag.ms``): how long the earliest first-batch timestamp
  of the closed dirty segments has been past the lag; a log with a delay and cleanable bytes
  *must* be cleaned whatever its ratio;
- **eligible**: must clean, or the dirty ratio strictly above ``min.cleanable.dirty.ratio``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..base.log_config import LogConfig
from ..log.segment_views import CleanableView, SegmentFacts
from ..segment.log_segments import LogSegments

__all__ = ["LogToClean", "log_to_clean"]


@dataclass(frozen=True)
class LogToClean:
    """One compacted log's cleanable range and dirtiness at ``now_ms``."""

    log_start_offset: int
    log_end_offset: int
    first_dirty_offset: int
    # End (exclusive) of the cleanable range: the base offset of the first segment not cleaned.
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    compaction_delay_ms: int
    min_cleanable_dirty_ratio: float
    # The checkpointed first dirty offset was outside the log and was replaced (Kafka rewrites it).
    checkpoint_reset: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def dirty_ratio(self) -> float:
        total = self.total_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def must_clean(self) -> bool:
        """max.compaction.lag.ms has passed for some dirty record."""
        return self.compaction_delay_ms > 0 and self.cleanable_bytes > 0

    @property
    def eligible(self) -> bool:
        return self.must_clean or (self.total_bytes > 0 and self.dirty_ratio > self.min_cleanable_dirty_ratio)


def log_to_clean(view: CleanableView, *, checkpoint: int | None, now_ms: int) -> LogToClean:
    """The range and ratio of one log. ``view`` must carry the timestamps from the first dirty
    offset: ask ``cleanable_view(timestamps_from=checkpoint)``."""
    log_start_offset, log_end_offset, config = view.log_start_offset, view.log_end_offset, view.config
    first_dirty = log_start_offset if checkpoint is None else checkpoint
    reset = checkpoint is not None and not log_start_offset <= checkpoint <= log_end_offset
    if reset:
        first_dirty = log_start_offset
    assert view.timestamps_from == first_dirty, (view.timestamps_from, first_dirty)
    segments = LogSegments(view.segments)
    active = segments.active
    # The high watermark equals the log end offset here (one replica, no transactions).
    candidates = [log_end_offset, active.base_offset]
    if config.min_compaction_lag_ms > 0:
        young = _first_too_young(segments.non_active_from(first_dirty), now_ms - config.min_compaction_lag_ms)
        if young is not None:
            candidates.append(young)
    uncleanable = max(first_dirty, min(candidates))
    end = _aligned_end(segments, uncleanable)
    clean_bytes = _bytes(segments.values(0, first_dirty)) if first_dirty > 0 else 0
    cleanable_bytes = _bytes(segments.values(min(first_dirty, end), end))
    return LogToClean(
        log_start_offset=log_start_offset,
        log_end_offset=log_end_offset,
        first_dirty_offset=first_dirty,
        first_uncleanable_offset=end,
        clean_bytes=clean_bytes,
        cleanable_bytes=cleanable_bytes,
        compaction_delay_ms=_compaction_delay_ms(segments, first_dirty, config, now_ms),
        min_cleanable_dirty_ratio=config.min_cleanable_dirty_ratio,
        checkpoint_reset=reset,
    )


def _first_too_young(dirty_closed: Sequence[SegmentFacts], newest_cleanable_ms: int) -> int | None:
    """Base offset of the first segment holding a record younger than min.compaction.lag.ms."""
    for segment in dirty_closed:
        assert segment.largest_timestamp_ms is not None, segment
        if segment.largest_timestamp_ms > newest_cleanable_ms:
            return segment.base_offset
    return None


def _aligned_end(segments: LogSegments[SegmentFacts], uncleanable: int) -> int:
    """Kafka's firstUncleanableSegment: the closed segment holding ``uncleanable``, else the
    active one; its base offset ends the range."""
    holding = segments.floor(uncleanable)
    active = segments.active
    if holding is None or holding is active:
        return active.base_offset
    return holding.base_offset


def _compaction_delay_ms(
    segments: LogSegments[SegmentFacts], first_dirty: int, config: LogConfig, now_ms: int
) -> int:
    """Kafka's maxCompactionDelay: 0 unless a dirty closed segment's first batch is older than
    max.compaction.lag.ms."""
    clean_until_ms = now_ms - max(config.max_compaction_lag_ms, 0)
    if clean_until_ms <= 0:
        return 0  # the default (Long.MAX) lag: no record is ever overdue
    earliest: int | None = None
    for segment in segments.non_active_from(first_dirty):
        first = segment.first_batch_timestamp_ms
        if first is not None and first > 0 and (earliest is None or first < earliest):
            earliest = first
    if earliest is None or earliest >= clean_until_ms:
        return 0
    return clean_until_ms - earliest


def _bytes(segments: Sequence[SegmentFacts]) -> int:
    return sum(segment.size_in_bytes for segment in segments)
