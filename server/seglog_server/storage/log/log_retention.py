"""Which segments a retention pass deletes (Kafka's deletableSegments, kafka-storage.md 5.7).

Pure rules over a log's segments, oldest first: a pass deletes the longest prefix of segments
that its predicate accepts, never a segment reaching past the high watermark and never a last
segment that is empty. Three predicates run in Kafka's order:

1. below the log start offset: the next segment starts at or below it (DeleteRecords moved it);
2. beyond ``retention.bytes``: deleting the segment still leaves at least that many bytes;
3. older than ``retention.ms``: the segment's largest record timestamp (or its file's mtime when
   no record has one) is more than that far in the past. A single record from the future keeps
   its segment and every later one (Kafka's behaviour; KIP-937 limits such timestamps).

The ``Log`` deletes what these return (rolling first when every segment is due).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..segment.log_segment import LogSegment

__all__ = [
    "Predicate",
    "below_log_start_offset",
    "beyond_retention_bytes",
    "deletable_prefix",
    "older_than_retention_ms",
]

Predicate = Callable[[LogSegment, "LogSegment | None"], bool]
"""(segment, the segment after it or None) -> whether the segment may go."""


def deletable_prefix(
    segments: Sequence[LogSegment], high_watermark: int, log_end_offset: int, predicate: Predicate
) -> list[LogSegment]:
    """The oldest segments, in order, up to the first one the rules keep."""
    deletable: list[LogSegment] = []
    for slot, segment in enumerate(segments):
        following = segments[slot + 1] if slot + 1 < len(segments) else None
        upper = following.base_offset if following is not None else log_end_offset
        if high_watermark < upper or not predicate(segment, following):
            break
        if following is None and segment.size_in_bytes == 0:
            break
        deletable.append(segment)
    return deletable


def below_log_start_offset(log_start_offset: int) -> Predicate:
    def predicate(segment: LogSegment, following: LogSegment | None) -> bool:
        return following is not None and following.base_offset <= log_start_offset

    return predicate


def beyond_retention_bytes(log_bytes: int, retention_bytes: int) -> Predicate | None:
    """None when the log is within ``retention.bytes`` (or it is -1, unlimited)."""
    if retention_bytes < 0 or log_bytes < retention_bytes:
        return None
    excess = log_bytes - retention_bytes

    def predicate(segment: LogSegment, following: LogSegment | None) -> bool:
        nonlocal excess
        if excess - segment.size_in_bytes < 0:
            return False
        excess -= segment.size_in_bytes
        return True

    return predicate


def older_than_retention_ms(now_ms: int, retention_ms: int) -> Predicate | None:
    """None when ``retention.ms`` is -1 (unlimited)."""
    if retention_ms < 0:
        return None

    def predicate(segment: LogSegment, following: LogSegment | None) -> bool:
        return now_ms - segment.largest_timestamp() > retention_ms

    return predicate
