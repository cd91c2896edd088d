"""What the log answers the cleaner about its segments: small values taken under the log's lock.

The cleaner never holds the log's lock itself (no callback into it): it asks one of the log's
explicit operations and reads the value it returns, off the lock. The operations live here, over
the ``LocalLog`` (its segments, its offline state, its translation of an ``OSError``) and the
offsets ``UnifiedLog`` passes in; ``UnifiedLog`` calls each under one acquisition of the lock.

- ``UnifiedLog.cleanable_view`` -> ``CleanableView``: the offsets, the config and each
  segment's size and, where the compaction lags need them, its timestamps (the input of
  ``cleaning.log_to_clean``);
- ``UnifiedLog.snapshot_segments`` -> ``SegmentsSnapshot``: the segments hard-linked into a
  cleaning snapshot, each checked first, and the producers' last offsets, under one lock;
- ``UnifiedLog.describe_segment`` -> ``SegmentDescription``: one linked segment's offsets and
  times (one segment per acquisition, so appends interleave);
- ``UnifiedLog.segments_in_range`` -> ``SegmentRange``: the live segments of a range, the first
  check of an install (the swap checks again under its own lock).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..base import file_names
from ..base.errors import StaleCleaningResultError
from ..base.fs import FileSystem
from ..base.log_config import LONG_MAX, LogConfig
from ..producers.producer_state import ProducerStateManager
from ..segment.log_segment import LogSegment
from ..segment.log_segments import LogSegments
from .local_log import LocalLog

__all__ = [
    "CleanableView",
    "LinkedSegment",
    "SegmentDescription",
    "SegmentFacts",
    "SegmentRange",
    "SegmentsSnapshot",
    "cleanable_view",
    "describe_segment",
    "segments_in_range",
    "snapshot_segments",
]


@dataclass(frozen=True)
class SegmentFacts:
    """One segment as the lock saw it. A timestamp is None when it was not read (the lag it
    serves is off, or the segment lies below ``CleanableView.timestamps_from``; never for the
    active segment) or, for the first batch's, when the segment has none."""

    base_offset: int
    size_in_bytes: int
    largest_timestamp_ms: int | None = None
    first_batch_timestamp_ms: int | None = None


@dataclass(frozen=True)
class CleanableView:
    """A log's offsets and segments for the cleaner's choice (the last segment is the active
    one). Timestamps are read for the closed segments from the one holding ``timestamps_from``:
    largest timestamps when ``min.compaction.lag.ms`` > 0, first-batch timestamps when
    ``max.compaction.lag.ms`` is finite."""

    log_start_offset: int
    log_end_offset: int
    config: LogConfig
    segments: tuple[SegmentFacts, ...]
    timestamps_from: int


@dataclass(frozen=True)
class LinkedSegment:
    segment: LogSegment  # the live object, for a commit in this process to compare by identity
    file: str  # the link's name in the snapshot directory
    size_bytes: int  # the size linked (closed segments never change in place)


@dataclass(frozen=True)
class SegmentsSnapshot:
    """What ``snapshot_segments`` linked, in offset order, and the producers' last offsets
    (producer id -> last offset of its last batch) under the same lock."""

    log_start_offset: int
    linked: tuple[LinkedSegment, ...]
    producer_last_offsets: Mapping[int, int]


@dataclass(frozen=True)
class SegmentDescription:
    base_offset: int
    next_offset: int
    largest_timestamp_ms: int
    last_modified_ms: int


@dataclass(frozen=True)
class SegmentRange:
    """The live segments holding offsets in a range (``LogSegments.values``), the active
    segment and the log start offset, as one acquisition of the lock saw them."""

    log_start_offset: int
    segments: tuple[LogSegment, ...]
    active: LogSegment


# -- the operations (UnifiedLog calls each under one acquisition of the log's lock) ------------


def cleanable_view(local: LocalLog, *, log_start_offset: int, log_end_offset: int,
                   timestamps_from: int | None) -> CleanableView:
    """The offsets, the config and every segment's size (and, where the compaction lags need
    them, the closed segments' timestamps from the one holding ``timestamps_from``): the input
    of the cleaner's choice. ``timestamps_from`` outside [log start, log end] (or None) reads
    from the log start offset: the range the cleaner's first dirty offset then starts at."""
    local.check_usable()
    if timestamps_from is None or not log_start_offset <= timestamps_from <= log_end_offset:
        timestamps_from = log_start_offset
    try:
        facts = _segment_facts(local.segments, local.config, timestamps_from)
    except OSError as exc:
        raise local.io_error("reading the cleanable segments of", exc) from exc
    return CleanableView(log_start_offset, log_end_offset, local.config, facts, timestamps_from)


def _segment_facts(segments: LogSegments[LogSegment], config: LogConfig, timestamps_from: int) -> tuple[SegmentFacts, ...]:
    want_largest = config.min_compaction_lag_ms > 0
    # LONG_MAX (the default) is "never overdue": no first-batch timestamp is ever compared.
    want_first = config.max_compaction_lag_ms < LONG_MAX
    timed = {id(segment) for segment in segments.non_active_from(timestamps_from)} if want_largest or want_first else set()
    facts = []
    for segment in segments:
        if id(segment) not in timed:
            facts.append(SegmentFacts(segment.base_offset, segment.size_in_bytes))
            continue
        # A question, not a use: a segment without descriptors is left without (handles_as_found).
        with segment.handles_as_found():
            largest = segment.largest_timestamp() if want_largest else None
            first = segment.first_batch_timestamp() if want_first else None
        facts.append(SegmentFacts(segment.base_offset, segment.size_in_bytes, largest, first))
    return tuple(facts)


def snapshot_segments(local: LocalLog, producers: ProducerStateManager, up_to_offset: int, link_into: str, *,
                      log_start_offset: int, expected_log_start_offset: int | None) -> SegmentsSnapshot:
    """Hard-links into ``link_into`` the live segments holding offsets from the log start
    offset up to ``up_to_offset`` (a segment's base offset, at most the active one's), each
    checked first, and takes the producers' last offsets: linking under the lock keeps a
    retention rename from racing a link (whose OSError would take the directory offline).
    StaleCleaningResultError, nothing linked, when the log start offset is no longer
    ``expected_log_start_offset`` (when given) or ``up_to_offset`` no longer a segment
    boundary. An OSError takes the log offline (a full disk: retriable)."""
    local.check_usable()
    if expected_log_start_offset is not None and expected_log_start_offset != log_start_offset:
        raise StaleCleaningResultError(
            f"{local.name}: the log start offset moved from {expected_log_start_offset} to "
            f"{log_start_offset} since the range was chosen (DeleteRecords or retention)"
        )
    try:
        linked = _link_segments(local.segments, up_to_offset, link_into, local.fs,
                                log_start_offset=log_start_offset, name=local.name)
    except OSError as exc:
        raise local.io_error("linking segments of", exc) from exc
    return SegmentsSnapshot(log_start_offset, linked, producers.last_offsets())


def _link_segments(segments: LogSegments[LogSegment], up_to_offset: int, link_into: str, fs: FileSystem,
                   *, log_start_offset: int, name: str) -> tuple[LinkedSegment, ...]:
    """Hard-links into ``link_into`` the ``.log`` of every live segment holding offsets in [log
    start offset, ``up_to_offset``), each checked first. ``up_to_offset`` must be the base
    offset of a closed segment or of the active one, else StaleCleaningResultError (the log was
    truncated, or another cleaning merged segments, since the range was chosen)."""
    active = segments.active
    if up_to_offset > active.base_offset or (up_to_offset not in segments):
        raise StaleCleaningResultError(
            f"{name}: offset {up_to_offset} is no longer the base offset of a segment at or below the "
            f"active one ({active.base_offset}): the log was truncated or cleaned since the range was chosen"
        )
    linked = []
    for segment in segments.values(log_start_offset, up_to_offset) if log_start_offset < up_to_offset else ():
        # A segment not checked since a clean start is checked before its files are linked:
        # the check may cut its tail (and record the lost range), and a link made before would
        # describe the segment as it was.
        with segment.handles_as_found():
            segment.ensure_checked()
        file = os.path.basename(segment.log.path)
        assert file == file_names.filename_prefix(segment.base_offset) + file_names.LOG_SUFFIX, file
        fs.link(segment.log.path, os.path.join(link_into, file))
        linked.append(LinkedSegment(segment, file, segment.size_in_bytes))
    return tuple(linked)


def describe_segment(local: LocalLog, segment: LogSegment) -> SegmentDescription:
    """A closed segment's next offset, largest timestamp and mtime (for a snapshot's manifest),
    one segment per acquisition of the lock, so appends interleave. What it says cannot change,
    and a segment replaced or deleted meanwhile still reads from its renamed files."""
    local.check_usable()
    try:
        with segment.handles_as_found():  # looked at once: keep no descriptor for it
            return SegmentDescription(
                base_offset=segment.base_offset,
                next_offset=segment.read_next_offset(),
                largest_timestamp_ms=segment.largest_timestamp(),
                last_modified_ms=segment.last_modified_ms(),
            )
    except OSError as exc:
        raise local.io_error("describing a segment of", exc) from exc


def segments_in_range(local: LocalLog, from_offset: int, to_offset: int, *, log_start_offset: int) -> SegmentRange:
    """The live segments holding offsets in [``from_offset``, ``to_offset``), the active
    segment and the log start offset, as one acquisition of the lock saw them."""
    local.check_usable()
    return SegmentRange(log_start_offset, tuple(local.segments.values(from_offset, to_offset)), local.segments.active)
