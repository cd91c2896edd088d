"""ExplainLookup: the two-level lookup of one offset or timestamp, laid out step by step.

Level 1 is the segment map (a floor over the sorted base offsets, or for a timestamp the first
segment whose largest timestamp reaches it); level 2 the segment's index, searched warm section
first; then a scan of batch headers forward from the position the index gave. This module walks
the same path as ``Log.read`` and ``Log.offset_for_timestamp`` and records each decision: the
segment chosen, every index search (zone, slots probed, pages touched), the bytes scanned after
the index hit, and the time it all took. The lookups are counted like any others.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..format.abstract_index import IndexSearchExplanation

if TYPE_CHECKING:
    from ..segment.log_segment import LogSegment
    from ..segment.log_segments import LogSegments

__all__ = [
    "NOT_FOUND",
    "LookupExplanation",
    "ResidentPages",
    "explain_offset",
    "explain_timestamp",
    "no_residency",
    "nothing_found",
]

NOT_FOUND = -1  # offsets and positions of a lookup that found nothing

ResidentPages = Callable[[str], bytes]
"""Given a file path, one byte per page, 1 where the page is in the page cache (the service
passes mincore; the storage itself does not ask the kernel). Asked just before each search."""


def no_residency(path: str) -> bytes:
    return b""


def _search(index: object, target: int, residency: ResidentPages) -> tuple[IndexSearchExplanation, object]:
    resident = residency(index.path)  # type: ignore[attr-defined]
    search, entry = index.explain_lookup(target)  # type: ignore[attr-defined]
    flags = tuple(page < len(resident) and resident[page] == 1 for page in search.pages)
    return replace(search, pages_resident=flags), entry


@dataclass(frozen=True)
class LookupExplanation:
    segment_count: int  # segments in the map searched at level 1
    segment_base_offset: int  # the segment chosen (NOT_FOUND: none)
    searches: tuple[IndexSearchExplanation, ...]  # level-2 searches, in order
    index_position: int  # the .log position the offset index pointed at
    found_offset: int  # the offset answered: first batch's base offset (or record, for time)
    found_position: int  # the .log position of the batch holding it
    scanned_bytes: int  # bytes of batch headers walked past the index position
    duration_seconds: float
    # Tiered storage: the remote segment answering a target below the local log start (no local
    # index searched, positions in its .log object); "" for a local answer.
    remote_segment_id: str = ""


def explain_offset(
    segments: LogSegments[LogSegment], offset: int, residency: ResidentPages = no_residency
) -> LookupExplanation:
    started = time.perf_counter()
    segment = segments.floor(offset) or segments.first
    searches: list[IndexSearchExplanation] = []
    while segment is not None:
        with segment.handles_as_found():  # explained, not used: no descriptor outside the budget
            search, entry = _search(segment.offset_index, offset, residency)
            searches.append(search)
            header = segment.log.search_for_offset_with_size(offset, entry.position)
        if header is not None:
            return LookupExplanation(
                len(segments), segment.base_offset, tuple(searches), entry.position,
                header.base_offset, header.position, header.position - entry.position,
                time.perf_counter() - started,
            )
        segment = segments.higher(segment.base_offset)
    return nothing_found(segments, tuple(searches), started)


def explain_timestamp(
    segments: LogSegments[LogSegment],
    first_slot: int,
    timestamp_ms: int,
    log_start_offset: int,
    residency: ResidentPages = no_residency,
) -> LookupExplanation:
    """From segment slot ``first_slot`` (the Log's level-1 answer) onward, as the Log searches."""
    started = time.perf_counter()
    searches: list[IndexSearchExplanation] = []
    for slot in range(first_slot, len(segments)):
        segment = segments.at(slot)
        if slot != first_slot and segment.largest_timestamp() < timestamp_ms:
            continue
        with segment.handles_as_found():  # explained, not used: no descriptor outside the budget
            time_search, entry = _search(segment.time_index, timestamp_ms, residency)
            offset_search, position = _search(
                segment.offset_index, max(entry.offset, log_start_offset), residency  # type: ignore[attr-defined]
            )
            searches += (time_search, offset_search)
            found = segment.find_offset_by_timestamp(timestamp_ms, log_start_offset)
            header = None
            if found is not None:
                header = segment.log.search_for_offset_with_size(found.offset, position.position)
        if found is not None:
            found_position = position.position if header is None else header.position
            return LookupExplanation(
                len(segments), segment.base_offset, tuple(searches), position.position,
                found.offset, found_position, found_position - position.position,
                time.perf_counter() - started,
            )
    return nothing_found(segments, tuple(searches), started)


def nothing_found(
    segments: LogSegments[LogSegment],
    searches: tuple[IndexSearchExplanation, ...] = (),
    started: float | None = None,
) -> LookupExplanation:
    started = time.perf_counter() if started is None else started
    return LookupExplanation(
        len(segments), NOT_FOUND, searches, NOT_FOUND, NOT_FOUND, NOT_FOUND, 0,
        time.perf_counter() - started,
    )
