"""The first level of a lookup by timestamp: which segment to search first.

Kafka scans the segments in order for the first whose largest timestamp is >= the target. Over a
thousand segments that is a thousand Python calls per lookup. Here the largest timestamps of the
inactive segments are kept as a running maximum, which never decreases, so ``bisect`` finds that
first segment in O(log n): the first segment whose running maximum reaches the target is the
first whose own largest timestamp does.

The active segment's largest timestamp moves with every append and is read live; the inactive
part is rebuilt (lazily, O(n) with cached per-segment values) whenever the set of segments
changes: a roll, a deletion, a truncation, a swap.
"""

from __future__ import annotations

import bisect

from .log_segment import LogSegment
from .log_segments import LogSegments

__all__ = ["SegmentTimestamps"]


class SegmentTimestamps:
    """Running maximum of the inactive segments' largest timestamps, rebuilt on demand."""

    def __init__(self) -> None:
        self._running_max: list[int] | None = None
        # Whether the running maximum was ever built: every inactive segment has then answered
        # its largest timestamp once, which ran its deferred first-use check (LogSegment.
        # defer_check). Segments added later (rolls, cleaned segments) are never deferred, so
        # this stays true.
        self._loaded = False

    @property
    def loaded(self) -> bool:
        """True once every inactive segment's largest timestamp was read (and so each was
        checked): until then, a lookup by time may read three small pieces of every segment
        of the log, milliseconds of disk for a log of thousands (the caller runs it off the
        event loop)."""
        return self._loaded

    def invalidate(self) -> None:
        self._running_max = None

    def load(self, segments: LogSegments[LogSegment]) -> None:
        """Builds the running maximum now if it is not built."""
        if self._running_max is None:
            self._running_max = _running_max(segments)
            self._loaded = True

    def first_slot_reaching(self, segments: LogSegments[LogSegment], timestamp_ms: int) -> int:
        """The position of the first segment whose largest timestamp is >= ``timestamp_ms``,
        or ``len(segments)`` when none is."""
        running_max = self._running_max
        if running_max is None:
            running_max = self._running_max = _running_max(segments)
            self._loaded = True
        slot = bisect.bisect_left(running_max, timestamp_ms)
        if slot < len(running_max):
            return slot
        active = segments.active
        return slot if active.largest_timestamp() >= timestamp_ms else len(segments)

    def first_slots_reaching(self, segments: LogSegments[LogSegment], timestamps_ms: list[int]) -> list[int]:
        """``first_slot_reaching`` of each of ``timestamps_ms`` in one call (a batched lookup's
        targets: one call, not one a target; the active segment asked once, when needed)."""
        running_max = self._running_max
        if running_max is None:
            running_max = self._running_max = _running_max(segments)
            self._loaded = True
        inactive, total = len(running_max), len(segments)
        active_largest: int | None = None
        slots = []
        bisect_left = bisect.bisect_left
        for timestamp_ms in timestamps_ms:
            slot = bisect_left(running_max, timestamp_ms) if inactive else 0
            if slot == inactive:
                if active_largest is None:
                    active_largest = segments.active.largest_timestamp()
                if active_largest < timestamp_ms:
                    slot = total
            slots.append(slot)
        return slots


    def runs_reaching(self, segments: LogSegments[LogSegment], timestamps_ms: list[int]) -> list[tuple[int, int, int]]:
        """``first_slots_reaching`` of ``timestamps_ms`` (ascending) as runs: (start, end, slot)
        for each stretch ``timestamps_ms[start:end]`` sharing the first segment reaching them
        (``len(segments)`` for the targets none reaches), in order. A bisection a run, not one a
        target: the targets of a run are those up to its segment's running maximum."""
        running_max = self._running_max
        if running_max is None:
            running_max = self._running_max = _running_max(segments)
            self._loaded = True
        inactive, total, count = len(running_max), len(segments), len(timestamps_ms)
        bisect_left, bisect_right = bisect.bisect_left, bisect.bisect_right
        runs = []
        start = 0
        while start < count:
            slot = bisect_left(running_max, timestamps_ms[start]) if inactive else 0
            if slot < inactive:
                end = bisect_right(timestamps_ms, running_max[slot], start)
            else:  # past every inactive segment: the active one's, then none's
                end = bisect_right(timestamps_ms, segments.active.largest_timestamp(), start)
                if end == start:
                    slot, end = total, count
            runs.append((start, end, slot))
            start = end
        return runs


def _running_max(segments: LogSegments[LogSegment]) -> list[int]:
    running: list[int] = []
    best = -(2**63)
    for slot in range(len(segments) - 1):  # every segment but the active one
        best = max(best, segments.at(slot).largest_timestamp())
        running.append(best)
    return running
