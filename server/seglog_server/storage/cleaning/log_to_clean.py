"""What the cleaner may rewrite in one compacted log, and how dirty it is (Kafka's
``LogCleanerManager.cleanableOffsets`` and ``LogToClean``, kafka-storage.md 6.2).

Pure rules over a log's segments, evaluated under the log's lock:

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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..base.log_config import LogConfig
from ..segment.log_segment import LogSegment
from ..segment.log_segments import LogSegments

__all__ = ["LogToClean", "cleanable_segments", "log_to_clean"]

_T = TypeVar("_T")


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


def log_to_clean(
    segments: LogSegments[LogSegment],
    *,
    log_start_offset: int,
    log_end_offset: int,
    config: LogConfig,
    checkpoint: int | None,
    now_ms: int,
) -> LogToClean:
    """The range and ratio of one log (call under its lock: segments are read)."""
    first_dirty = log_start_offset if checkpoint is None else checkpoint
    reset = checkpoint is not None and not log_start_offset <= checkpoint <= log_end_offset
    if reset:
        first_dirty = log_start_offset
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


def cleanable_segments(segments: LogSegments[LogSegment], to_clean: LogToClean) -> list[LogSegment]:
    """The closed segments one cleaning rewrites: from the one holding the log start offset up to
    the first uncleanable offset. The clean head is recopied too (Kafka groups from offset 0):
    dirty records supersede clean ones there. Segments wholly below the log start offset are
    left to retention, which deletes them anyway."""
    if to_clean.log_start_offset >= to_clean.first_uncleanable_offset:
        return []
    chosen = segments.values(to_clean.log_start_offset, to_clean.first_uncleanable_offset)
    active = segments.active
    assert all(segment is not active for segment in chosen), "the active segment is never cleaned"
    return chosen


def _first_too_young(dirty_closed: Sequence[LogSegment], newest_cleanable_ms: int) -> int | None:
    """Base offset of the first segment holding a record younger than min.compaction.lag.ms."""
    for segment in dirty_closed:
        if _peek(segment, segment.largest_timestamp) > newest_cleanable_ms:
            return segment.base_offset
    return None


def _peek(segment: LogSegment, read: Callable[[], _T]) -> _T:
    """``read()`` of a closed segment, leaving it without descriptors if it had none: a log of
    thousands of segments must not keep one open per segment for the cleaner's sake (the
    answers are cached by the segment)."""
    held = segment.holds_handles
    try:
        return read()
    finally:
        if not held:
            segment.release_handles()


def _aligned_end(segments: LogSegments[LogSegment], uncleanable: int) -> int:
    """Kafka's firstUncleanableSegment: the closed segment holding ``uncleanable``, else the
    active one; its base offset ends the range."""
    holding = segments.floor(uncleanable)
    active = segments.active
    if holding is None or holding is active:
        return active.base_offset
    return holding.base_offset


def _compaction_delay_ms(
    segments: LogSegments[LogSegment], first_dirty: int, config: LogConfig, now_ms: int
) -> int:
    """Kafka's maxCompactionDelay: 0 unless a dirty closed segment's first batch is older than
    max.compaction.lag.ms."""
    clean_until_ms = now_ms - max(config.max_compaction_lag_ms, 0)
    if clean_until_ms <= 0:
        return 0  # the default (Long.MAX) lag: no record is ever overdue
    earliest: int | None = None
    for segment in segments.non_active_from(first_dirty):
        first = _peek(segment, segment.first_batch_timestamp)
        if first is not None and first > 0 and (earliest is None or first < earliest):
            earliest = first
    if earliest is None or earliest >= clean_until_ms:
        return 0
    return clean_until_ms - earliest


def _bytes(segments: Sequence[LogSegment]) -> int:
    return sum(segment.size_in_bytes for segment in segments)
