"""Kafka's Cleaner.groupSegmentsBySize (kafka-storage.md 6.3 step 2): consecutive segments are
cleaned into one while the group's log bytes stay within segment.bytes, its offset- and
time-index bytes each within segment.index.bytes, and the next segment's estimated last offset
stays within an int32 of the group's base offset (checked only for a non-empty segment, so an
empty segment never forces a new group).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SegmentSize", "group_segments_by_size"]

RELATIVE_OFFSET_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class SegmentSize:
    base_offset: int
    log_bytes: int
    offset_index_bytes: int
    time_index_bytes: int
    estimated_last_offset: int  # the next segment's base - 1, or the first uncleanable offset - 1


def group_segments_by_size(segments: Sequence[SegmentSize], max_bytes: int, max_index_bytes: int) -> list[list[int]]:
    """Indexes into `segments`, grouped."""
    groups: list[list[int]] = []
    i = 0
    while i < len(segments):
        first = segments[i]
        group = [i]
        log_bytes, index_bytes, time_bytes = first.log_bytes, first.offset_index_bytes, first.time_index_bytes
        i += 1
        while i < len(segments):
            candidate = segments[i]
            if (
                log_bytes + candidate.log_bytes > max_bytes
                or index_bytes + candidate.offset_index_bytes > max_index_bytes
                or time_bytes + candidate.time_index_bytes > max_index_bytes
                or (candidate.log_bytes and candidate.estimated_last_offset - first.base_offset > RELATIVE_OFFSET_MAX)
            ):
                break
            group.append(i)
            log_bytes += candidate.log_bytes
            index_bytes += candidate.offset_index_bytes
            time_bytes += candidate.time_index_bytes
            i += 1
        groups.append(group)
    return groups
