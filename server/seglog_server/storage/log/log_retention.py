"""Which segments a retention pass deletes (Kafka's deletableSegments, kafka-storage.md 5.7).

Pure rules over a log's segments, oldest first: a pass deletes the longest prefix of segments
that its predicate accepts, never a segment reaching past the high watermark and never a last
segment that is empty. Three predicates run in Kafka's order:

1. below the log start offset: the next segment starts at or below it (DeleteRecords moved it);
2. beyond ``retention.bytes``: deleting the segment still leaves at least that many bytes;
3. older than ``retention.ms``: the segment's largest record timestamp (or its file's mtime when
   no record has one) is more than that far in the past. A single record from the future keeps
   its segment and every later one (Kafka's behaviour; KIP-937 limits such timestamps).

``retention_pass`` runs them in that order over the live segments, handing each prefix to the
log's deletion (``UnifiedLog``: it rolls first when every segment is due, moves the log start
offset and deletes through the ``LocalLog``) before the next predicate looks.
``delete_records_offset`` is DeleteRecords' rule: the offset the log start offset may move to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..base.clock import Clock
from ..base.errors import OffsetOutOfRangeError
from ..base.log_config import LogConfig
from ..segment.log_segment import LogSegment
from ..segment.log_segments import LogSegments

__all__ = [
    "DELETE_TO_HIGH_WATERMARK",
    "Predicate",
    "below_log_start_offset",
    "beyond_retention_bytes",
    "deletable_prefix",
    "delete_records_offset",
    "older_than_retention_ms",
    "retention_pass",
    "tiered_retention_pass",
]

# DeleteRecords' "up to the high watermark" (Kafka's DeleteRecordsRequest.HIGH_WATERMARK).
DELETE_TO_HIGH_WATERMARK = -1

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


def retention_pass(
    segments: LogSegments[LogSegment], config: LogConfig, clock: Clock, *, log_start_offset: int,
    high_watermark: int, log_end_offset: int, delete: Callable[[list[LogSegment]], None],
) -> int:
    """One retention pass (5.7) over the live ``segments``, under the log's lock: below the log
    start offset and, when the cleanup policy includes delete, beyond retention.bytes and
    retention.ms. Each deletable prefix goes to ``delete`` (which removes it from ``segments``)
    before the next predicate measures what is left. Returns how many segments went."""

    def delete_while(predicate: Predicate | None) -> int:
        if predicate is None:
            return 0
        deletable = deletable_prefix(segments.values(), high_watermark, log_end_offset, predicate)
        if deletable:
            delete(deletable)
        return len(deletable)

    deleted = delete_while(below_log_start_offset(log_start_offset))
    if config.is_delete:
        deleted += delete_while(beyond_retention_bytes(segments.size_in_bytes, config.retention_bytes))
        deleted += delete_while(older_than_retention_ms(clock.time_ms(), config.retention_ms))
    return deleted


def tiered_retention_pass(
    segments: LogSegments[LogSegment], config: LogConfig, clock: Clock, *, log_start_offset: int,
    high_watermark: int, log_end_offset: int, highest_uploaded_offset: int,
    delete: Callable[[list[LogSegment]], None],
) -> int:
    """A tiered log's local pass (Kafka's with remote storage): a local segment goes only when
    it is wholly uploaded (its last offset at most ``highest_uploaded_offset``) and it is below the
    log start offset, beyond local.retention.bytes or older than local.retention.ms (-2: as
    retention.*). ``delete`` removes local files only: the log start offset stays, the remote
    copy still holds those offsets (the whole log's retention deletes it later)."""

    def uploaded(segment: LogSegment, following: LogSegment | None) -> bool:
        return following is not None and following.base_offset - 1 <= highest_uploaded_offset

    def delete_while(predicate: Predicate | None) -> int:
        if predicate is None:
            return 0

        def both(segment: LogSegment, following: LogSegment | None) -> bool:
            return uploaded(segment, following) and predicate(segment, following)

        deletable = deletable_prefix(segments.values(), high_watermark, log_end_offset, both)
        if deletable:
            delete(deletable)
        return len(deletable)

    deleted = delete_while(below_log_start_offset(log_start_offset))
    deleted += delete_while(beyond_retention_bytes(segments.size_in_bytes, config.local_retention_bytes_effective))
    deleted += delete_while(older_than_retention_ms(clock.time_ms(), config.local_retention_ms_effective))
    return deleted


def delete_records_offset(offset: int, high_watermark: int, name: str) -> int:
    """DeleteRecords' new log start offset for ``offset`` (``DELETE_TO_HIGH_WATERMARK``: the high
    watermark); OffsetOutOfRangeError outside [0, high watermark]."""
    if offset == DELETE_TO_HIGH_WATERMARK:
        offset = high_watermark
    if offset < 0 or offset > high_watermark:
        raise OffsetOutOfRangeError(
            f"{name}: cannot delete records before offset {offset}: expected an offset "
            f"in [0, {high_watermark}] (the high watermark)"
        )
    return offset
