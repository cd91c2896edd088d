"""The first level of the two-level lookup: a log's segments sorted by base offset.

Kafka keeps a ``ConcurrentSkipListMap``; here a sorted list of base offsets searched with
``bisect`` plus a dict from base offset to segment. Appending a segment at the end (a roll) is
O(1); inserting in the middle (a swap on load) is O(n), which is rare. The owning ``Log`` guards
every call with its lock, so this class has none.

``values(from, to)`` follows Kafka: ``from == to`` is empty, ``to < from`` is an error, otherwise
the segments from the one *containing* ``from`` (its floor, or the first segment when there is no
floor) up to but excluding the segment whose base offset is ``to``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import Generic, Protocol, TypeVar

__all__ = ["LogSegments", "SegmentLike"]


class SegmentLike(Protocol):
    @property
    def base_offset(self) -> int: ...

    @property
    def size_in_bytes(self) -> int: ...


S = TypeVar("S", bound=SegmentLike)


class LogSegments(Generic[S]):
    """Segments keyed and ordered by base offset."""

    def __init__(self, segments: Iterable[S] = ()) -> None:
        self._base_offsets: list[int] = []
        self._by_base: dict[int, S] = {}
        for segment in segments:
            self.add(segment)

    # -- mutation ---------------------------------------------------------------------------
    def add(self, segment: S) -> S:
        """Adds ``segment``, replacing any segment with the same base offset."""
        base = segment.base_offset
        if base not in self._by_base:
            if not self._base_offsets or base > self._base_offsets[-1]:
                self._base_offsets.append(base)  # the common case: a roll
            else:
                bisect.insort(self._base_offsets, base)
        self._by_base[base] = segment
        return segment

    def remove(self, base_offset: int) -> S | None:
        segment = self._by_base.pop(base_offset, None)
        if segment is not None:
            slot = bisect.bisect_left(self._base_offsets, base_offset)
            assert self._base_offsets[slot] == base_offset
            del self._base_offsets[slot]
        return segment

    def clear(self) -> None:
        self._base_offsets.clear()
        self._by_base.clear()

    # -- point lookups ----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._base_offsets)

    def __bool__(self) -> bool:
        return bool(self._base_offsets)

    def __contains__(self, base_offset: int) -> bool:
        return base_offset in self._by_base

    def __iter__(self) -> Iterator[S]:
        return iter(self.values())

    def get(self, base_offset: int) -> S | None:
        return self._by_base.get(base_offset)

    @property
    def base_offsets(self) -> list[int]:
        return list(self._base_offsets)

    @property
    def first(self) -> S | None:
        return self._by_base[self._base_offsets[0]] if self._base_offsets else None

    @property
    def last(self) -> S | None:
        return self._by_base[self._base_offsets[-1]] if self._base_offsets else None

    @property
    def active(self) -> S:
        """The last segment, the only one appended to; a log always has one."""
        assert self._base_offsets, "a log always has an active segment"
        return self._by_base[self._base_offsets[-1]]

    # -- closest matches --------------------------------------------------------------------
    def floor(self, offset: int) -> S | None:
        """The segment with the greatest base offset <= ``offset``."""
        slot = bisect.bisect_right(self._base_offsets, offset) - 1
        return self._by_base[self._base_offsets[slot]] if slot >= 0 else None

    def lower(self, offset: int) -> S | None:
        """The segment with the greatest base offset < ``offset``."""
        slot = bisect.bisect_left(self._base_offsets, offset) - 1
        return self._by_base[self._base_offsets[slot]] if slot >= 0 else None

    def higher(self, offset: int) -> S | None:
        """The segment with the smallest base offset > ``offset``."""
        slot = bisect.bisect_right(self._base_offsets, offset)
        if slot < len(self._base_offsets):
            return self._by_base[self._base_offsets[slot]]
        return None

    def floor_slot(self, offset: int) -> int:
        """The position in base-offset order of ``floor(offset)``, or -1 when there is none."""
        return bisect.bisect_right(self._base_offsets, offset) - 1

    def at(self, slot: int) -> S:
        """The segment at position ``slot`` in base-offset order (negative slots count back)."""
        return self._by_base[self._base_offsets[slot]]

    def higher_segments(self, offset: int) -> list[S]:
        """Every segment with a base offset > ``offset``, in order."""
        slot = bisect.bisect_right(self._base_offsets, offset)
        return [self._by_base[base] for base in self._base_offsets[slot:]]

    # -- ranges -----------------------------------------------------------------------------
    def values(self, from_offset: int | None = None, to_offset: int | None = None) -> list[S]:
        """All segments, or those holding offsets in [from, to) as described in the module doc."""
        if from_offset is None and to_offset is None:
            return [self._by_base[base] for base in self._base_offsets]
        assert from_offset is not None and to_offset is not None
        if to_offset < from_offset:
            raise ValueError(
                f"invalid segment range: to offset {to_offset} is below from offset {from_offset}"
            )
        if from_offset == to_offset:
            return []
        start = max(bisect.bisect_right(self._base_offsets, from_offset) - 1, 0)
        end = bisect.bisect_left(self._base_offsets, to_offset)
        return [self._by_base[base] for base in self._base_offsets[start:end]]

    def non_active_from(self, from_offset: int) -> list[S]:
        """Segments from the one containing ``from_offset`` up to, excluding, the active one."""
        if not self._base_offsets:
            return []
        active_base = self._base_offsets[-1]
        if from_offset > active_base:
            return []
        return self.values(from_offset, active_base)

    @property
    def size_in_bytes(self) -> int:
        return sum(self._by_base[base].size_in_bytes for base in self._base_offsets)
