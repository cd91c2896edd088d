"""OffsetsForTimes with many targets in one log: the targets worked in ascending order.

One target costs a segment choice (``SegmentTimestamps``), two index searches and a scan of batch
headers from the index's position. A consumer group seeking every partition to a time, or a tool
asking several times of one partition, sends many targets at once; searched one by one, each pays
the log's lock, the segment choice and both index shells again (about 14 us a target here, most
of it the same work repeated). Sorted, the targets that reach the same first segment form a run
(the segment choice is monotonic in the target), the run's index searches run together
(``LogSegment.find_offsets_by_timestamps``) and a scan is shared by targets landing in the same
batch.

Every answer is the per-target path's (``Log.offset_for_timestamp``): the same first segment,
the same continuation to later segments when every match there sits below the log start offset,
the same scans. A property test holds the two to each other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..format.file_records import TimestampAndOffset
from ..segment.log_segment import LogSegment
from ..segment.log_segments import LogSegments
from ..base.observer import stopwatch
from ..segment.segment_timestamps import SegmentTimestamps

__all__ = ["search_timestamps"]


def search_timestamps(
    segments: LogSegments[LogSegment],
    timestamps: SegmentTimestamps,
    targets: Sequence[int],
    log_start_offset: int,
    touch: Callable[[LogSegment], None],
) -> dict[int, TimestampAndOffset]:
    """The first record with a timestamp >= each of ``targets`` (ascending, distinct, >= 0) at
    or above ``log_start_offset``, by target; a target with no such record is left out.
    ``touch`` is called on each segment before it is searched (the descriptor budget)."""
    found: dict[int, TimestampAndOffset] = {}
    watch = stopwatch("offsets_for_times")
    start_slot = segments.floor_slot(log_start_offset)
    first_slot_reaching = timestamps.first_slot_reaching
    reachings = [first_slot_reaching(segments, target) for target in targets]
    watch.lap_each("segment_lookup", len(targets))
    run_start, run_reaching = 0, -1
    for number, reaching in enumerate(reachings):
        if reaching != run_reaching:
            if number > run_start:
                _search_run(segments, targets[run_start:number], run_reaching, start_slot, log_start_offset, touch, found)
            run_start, run_reaching = number, reaching
    if len(targets) > run_start:
        _search_run(segments, targets[run_start:], run_reaching, start_slot, log_start_offset, touch, found)
    return found


def _search_run(
    segments: LogSegments[LogSegment],
    targets: Sequence[int],
    reaching: int,
    start_slot: int,
    log_start_offset: int,
    touch: Callable[[LogSegment], None],
    found: dict[int, TimestampAndOffset],
) -> None:
    """Searches ``targets``, which share their first reaching segment ``reaching``, as
    ``Log._search_timestamp`` searches one: from the later of that segment and the one holding
    the log start offset, on through the later segments whose largest timestamp reaches a target
    still unanswered (a match below the log start offset is no match)."""
    pending = list(targets)
    for slot in range(max(reaching, start_slot), len(segments)):
        segment = segments.at(slot)
        if slot == reaching:  # the running max vouches for the first segment reaching them
            searched = pending
        else:
            largest = segment.largest_timestamp()
            searched = [target for target in pending if target <= largest]
            if not searched:
                continue
        touch(segment)
        answers = segment.find_offsets_by_timestamps(searched, log_start_offset)
        unanswered = []
        for target, answer in zip(searched, answers):
            if answer is None:
                unanswered.append(target)
            else:
                found[target] = answer
        if len(searched) != len(pending):
            answered = set(searched).difference(unanswered)
            unanswered = [target for target in pending if target not in answered]
        pending = unanswered
        if not pending:
            return
