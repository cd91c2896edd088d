"""Which inactive segments of a log keep their descriptors open: a least-recently-used budget.

An inactive segment that was read holds its ``.log`` descriptor, a read mapping of it and the
mappings of its two indexes, and CPython's mmap keeps a duplicate descriptor per mapping. A log
of 10,000 segments read end to end would hold tens of thousands of descriptors (and run out).
The ``Log`` reports every use of an inactive segment here; beyond ``max_count`` the least
recently used one releases its handles (``LogSegment.release_handles``) and reopens them on its
next use, tens of microseconds later.

Not thread-safe: the owning ``Log`` calls it under its lock.
"""

from __future__ import annotations

from collections import OrderedDict

from .log_segment import LogSegment

__all__ = ["DEFAULT_OPEN_SEGMENTS_MAX", "OpenSegments"]

# 64 inactive segments x ~4 descriptors: about 256 per log, while the segments a few consumers
# are reading stay open.
DEFAULT_OPEN_SEGMENTS_MAX = 64


class OpenSegments:
    """The inactive segments allowed to hold handles, least recently used first."""

    def __init__(self, max_count: int = DEFAULT_OPEN_SEGMENTS_MAX) -> None:
        assert max_count >= 1, f"the open-segment budget must be at least 1, got {max_count}"
        self._max_count = max_count
        self._by_base: OrderedDict[int, LogSegment] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_base)

    def touch(self, segment: LogSegment) -> None:
        """``segment`` (inactive) was just used; releases the least recently used beyond budget."""
        by_base = self._by_base
        base = segment.base_offset
        known = by_base.get(base)
        if known is segment:
            by_base.move_to_end(base)
            return
        if known is not None:  # a replaced segment with the same base offset
            known.release_handles()
        by_base[base] = segment
        while len(by_base) > self._max_count:
            _, victim = by_base.popitem(last=False)
            victim.release_handles()

    def forget(self, segment: LogSegment) -> None:
        """``segment`` left the inactive set (deleted, replaced, or active again)."""
        if self._by_base.get(segment.base_offset) is segment:
            del self._by_base[segment.base_offset]
