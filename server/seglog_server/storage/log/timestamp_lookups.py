"""Lookups by time in one log (OffsetsForTimes): one implementation for one target or many,
answering an outcome per target (its answer, or the error its own search meets).

``offset_for_timestamp`` answers one target: the special targets (LATEST -1, EARLIEST -2,
MAX_TIMESTAMP -3, EARLIEST_LOCAL -4, LATEST_TIERED -5, answered in ``_special`` and
``_offset_of_max_timestamp`` only) or the first record with a timestamp >= the target at or above
the log start offset: Kafka's search of the first segment whose largest timestamp reaches it,
going on to later segments when every match there sits below the log start offset.

``lookup_timestamps`` answers many: a consumer group seeking every partition to a time, or a
tool asking several times of one partition, sends many targets at once; searched one by one,
each pays the segment choice and both index shells again (about 14 us a target here, most of it
the same work repeated). Sorted, the targets that reach the same first segment form a run (the
segment choice is monotonic in the target), the run's index searches run together
(``LogSegment.find_offsets_by_timestamps``) and a scan is shared by targets landing in the same
batch (``search_timestamps``). Every answer is ``offset_for_timestamp``'s (a property test holds
the two to each other). When the shared search meets damage or an I/O error, each target is
searched alone, so each gets what its own search gives: a corrupt batch fails only the targets
whose scan reaches it, as Kafka answers per partition. One target takes the single path: the
shared search's set-up (sorting, runs, ranges of index entries) costs more than it saves there
(30 against 20 us a lookup).

A lookup given a ``LookupBudget`` (segment/lookup_budget.py: the service's inline attempt on
its event loop) searches the same way, every segment it searches bounded by it: it answers as
the unbounded search does, or raises ``LookupRefused`` before a step past the budget (a build, a
decompression, a read past what is left), the counters it moved put back; the caller then runs
the unbounded search on a thread.

Every function here expects the log's lock held (``UnifiedLog`` takes it) and the log usable.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from time import perf_counter as _perf_counter

from ..base.errors import CorruptRecordError, StorageError
from ..base.observer import count_laps, held_stopwatch, release_held, stopwatch
from ..format.file_records import TimestampAndOffset
from ..segment.log_segment import LogSegment
from ..segment.log_segments import LogSegments
from ..segment.lookup_budget import LookupBudget, LookupRefused
from ..segment.segment_timestamps import SegmentTimestamps
from .local_log import LocalLog
from .log_results import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)

__all__ = ["SPECIAL_TIMESTAMPS", "LookupOutcome", "check_targets", "lookup_one_bounded", "lookup_one_in_memory",
           "lookup_timestamps",
           "offset_for_timestamp", "search_timestamps"]

SPECIAL_TIMESTAMPS = frozenset(
    (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP)
)

LookupOutcome = TimestampAndOffset | None | StorageError
"""One target's outcome: the record found, None (no record at or after the target), or the
storage error its search met (``CorruptSegmentError``, ``LogDirOfflineError``,
``ResourceExhaustedError``)."""


def check_targets(timestamps_ms: Sequence[int], name: str) -> None:
    """ValueError for a negative target that is no special one (the caller's bug: the adapter
    refuses such targets with INVALID_ARGUMENT before it asks)."""
    for timestamp_ms in timestamps_ms:
        if timestamp_ms < 0 and timestamp_ms not in SPECIAL_TIMESTAMPS:
            raise ValueError(f"{name}: unknown special timestamp {timestamp_ms}")


def offset_for_timestamp(
    local: LocalLog, timestamp_ms: int, log_start_offset: int, log_end_offset: int,
    budget: LookupBudget | None = None,
) -> TimestampAndOffset | None:
    """One target's answer; raises the storage error its search meets (an OSError has taken
    the log offline, or is a retriable exhaustion: ``LocalLog.io_error``), or LookupRefused
    past ``budget``."""
    try:
        if timestamp_ms >= 0:
            return _search_timestamp(local, timestamp_ms, log_start_offset, log_end_offset, budget)
        if timestamp_ms == MAX_TIMESTAMP:
            return _offset_of_max_timestamp(local, log_start_offset, log_end_offset, budget)
    except OSError as exc:
        raise local.io_error("searching", exc) from exc
    except CorruptRecordError as exc:
        raise local.corrupt(f"a search for timestamp {timestamp_ms}", exc) from exc
    return _special(timestamp_ms, log_start_offset, log_end_offset, local.name)


def lookup_timestamps(
    local: LocalLog, timestamps_ms: Sequence[int], log_start_offset: int, log_end_offset: int,
    budget: LookupBudget | None = None,
) -> list[LookupOutcome]:
    """The outcome of each of ``timestamps_ms``, in their order (see the module docstring);
    ValueError before any search for a target ``check_targets`` refuses; with ``budget``,
    LookupRefused before a step past it (the counters the search moved put back)."""
    if local.timestamps.loaded and len(timestamps_ms) > 1:
        records = _records_in_memory(local, timestamps_ms, log_start_offset, log_end_offset)
        if records is not None:
            return records
    if budget is None:
        return _lookup_timestamps(local, timestamps_ms, log_start_offset, log_end_offset, None)
    try:
        if not local.timestamps.loaded and any(t >= 0 or t == MAX_TIMESTAMP for t in timestamps_ms):
            raise LookupRefused("the segments' first-use checks")  # (every segment's largest timestamp read)
        outcomes = _lookup_timestamps(local, timestamps_ms, log_start_offset, log_end_offset, budget)
    except LookupRefused:
        budget.roll_back()
        raise
    budget.release_figures()
    return outcomes


def _records_in_memory(
    local: LocalLog, timestamps_ms: Sequence[int], log_start_offset: int, log_end_offset: int,
) -> list[LookupOutcome] | None:
    """``lookup_timestamps``'s outcomes of ``timestamps_ms`` (two or more, any order, repeats
    allowed) when every target is >= 0, all share their first reaching segment, at or above the
    log start's, and that segment's time-step table answers each with a record from memory
    (``LogSegment.records_from_time_steps``): a batched lookup's common case, without the
    shared search's sorting, runs, budget and per-segment layers. None in every other case
    (nothing counted, nothing changed), and the shared search answers. The same answers: the
    search starts at that segment for every target, and the table gives what its search there
    gives (a step is never replaced by a later append). The same laps as the shared search
    (``segment_lookup`` and ``index_search``, once per distinct target), held until it answers.
    The segments' largest timestamps must be loaded (the caller checks: no first-use check
    runs here)."""
    if log_start_offset == log_end_offset:
        return None
    lowest = min(timestamps_ms)
    if lowest < 0:
        return None
    held: list[tuple] = []
    watch = held_stopwatch("offsets_for_times", held)
    segments = local.segments
    reaching = local.timestamps
    try:
        slot = reaching.first_slot_reaching(segments, lowest)
        if slot == len(segments) or reaching.first_slot_reaching(segments, max(timestamps_ms)) != slot:
            return None
    except (OSError, CorruptRecordError):  # (the active segment's largest timestamp read): the search meets it
        return None
    if slot < segments.floor_slot(log_start_offset):
        return None
    distinct = len(set(timestamps_ms))
    watch.lap_each("segment_lookup", distinct)
    segment = segments.at(slot)
    records = segment.records_from_time_steps(timestamps_ms, log_start_offset)
    if records is None:
        return None
    local.touch(segment)
    watch.lap_each("index_search", distinct)
    if held:
        release_held(held)
    return records


def lookup_one_bounded(
    local: LocalLog, timestamp_ms: int, log_start_offset: int, log_end_offset: int, budget: LookupBudget,
) -> LookupOutcome:
    """``lookup_timestamps(local, [timestamp_ms], ..., budget)[0]`` (a special target must be
    one of ``SPECIAL_TIMESTAMPS``), without the list and the layers a single target does not
    need: the service's single lookup on its event loop. LookupRefused as there, the counters
    put back."""
    try:
        if not local.timestamps.loaded and (timestamp_ms >= 0 or timestamp_ms == MAX_TIMESTAMP):
            raise LookupRefused("the segments' first-use checks")  # (every segment's largest timestamp read)
        outcome = _outcome_of_one(local, timestamp_ms, log_start_offset, log_end_offset, budget)
    except LookupRefused:
        budget.roll_back()
        raise
    budget.release_figures()
    return outcome


def lookup_one_in_memory(
    local: LocalLog, timestamp_ms: int, log_start_offset: int, log_end_offset: int,
) -> TimestampAndOffset | StorageError | None:
    """The outcome of target ``timestamp_ms`` (>= 0) when the search's first segment answers it
    from its time-step table (``LogSegment.answer_from_time_steps``: a record, from memory), or
    the storage error the segment choice met; None in every other case, which the caller hands
    to ``lookup_one_bounded`` (no such table, a match below the log start or past the table, the
    search going on to a later segment). What it answers is ``lookup_one_bounded``'s (a
    Hypothesis differential holds the two together), with the same laps counted
    (``segment_lookup``, ``index_search``: three clock reads, one count once answered), and
    without the bounded search's layers: no budget, no held stopwatch, no per-segment loop. The
    service's single lookup on its event loop; the log's lock held, the log usable, its segments'
    largest timestamps loaded."""
    if log_start_offset == log_end_offset:
        return None
    started = _perf_counter()
    segments = local.segments
    try:
        slot = local.timestamps.first_slot_reaching(segments, timestamp_ms)
    except OSError as exc:  # (the active segment's largest timestamp read): as offset_for_timestamp
        return local.io_error("searching", exc)
    except CorruptRecordError as exc:
        return local.corrupt(f"a search for timestamp {timestamp_ms}", exc)
    if slot == len(segments) or slot < segments.floor_slot(log_start_offset):
        return None  # nothing reaches it, or the search starts at a later segment
    chosen = _perf_counter()
    segment = segments.at(slot)
    found = segment.answer_from_time_steps(timestamp_ms, log_start_offset)
    if found is None:
        return None
    local.touch(segment)
    count_laps("offsets_for_times", "segment_lookup", chosen - started, "index_search", _perf_counter() - chosen)
    return found


def _lookup_timestamps(
    local: LocalLog, timestamps_ms: Sequence[int], log_start_offset: int, log_end_offset: int,
    budget: LookupBudget | None,
) -> list[LookupOutcome]:
    if len(timestamps_ms) == 1:
        return [_outcome_of_one(local, timestamps_ms[0], log_start_offset, log_end_offset, budget)]
    # No negative target (every call but one asking LATEST, EARLIEST, ...): nothing to check or
    # answer apart, and the searched targets are the distinct ones (C-level passes, none a target).
    plain = not timestamps_ms or min(timestamps_ms) >= 0
    if not plain:
        check_targets(timestamps_ms, local.name)
    found: dict[int, LookupOutcome] = {}
    searched = sorted(set(timestamps_ms) if plain else {timestamp for timestamp in timestamps_ms if timestamp >= 0})
    if searched and log_start_offset != log_end_offset:
        try:
            found.update(search_timestamps(local.segments, local.timestamps, searched, log_start_offset, local.touch,
                                           budget))
        except (OSError, CorruptRecordError):
            # Some run met damage or a failing disk: each target by its own search (the last
            # one failing the same way may take the log offline; the targets after it say so).
            found = {target: _outcome_of_one(local, target, log_start_offset, log_end_offset, budget)
                     for target in searched}
    if not plain:
        for special in SPECIAL_TIMESTAMPS.intersection(timestamps_ms):
            found[special] = _outcome_of_one(local, special, log_start_offset, log_end_offset, budget)
    return list(map(found.get, timestamps_ms))


def _outcome_of_one(local: LocalLog, timestamp_ms: int, log_start_offset: int, log_end_offset: int,
                    budget: LookupBudget | None = None) -> LookupOutcome:
    try:
        if local.offline_cause is not None:  # an earlier target's search took the log offline
            local.check_usable()
        return offset_for_timestamp(local, timestamp_ms, log_start_offset, log_end_offset, budget)
    except StorageError as exc:
        return exc


def _special(timestamp_ms: int, log_start_offset: int, log_end_offset: int, name: str) -> TimestampAndOffset:
    """The answer to a special target other than MAX_TIMESTAMP: no search, only the offsets."""
    if timestamp_ms == LATEST_TIMESTAMP:
        return TimestampAndOffset(-1, log_end_offset)
    if timestamp_ms == EARLIEST_TIMESTAMP or timestamp_ms == EARLIEST_LOCAL_TIMESTAMP:
        return TimestampAndOffset(-1, log_start_offset)
    if timestamp_ms == LATEST_TIERED_TIMESTAMP:
        return TimestampAndOffset(-1, -1)
    raise ValueError(f"{name}: unknown special timestamp {timestamp_ms}")


def _search_timestamp(
    local: LocalLog, timestamp_ms: int, log_start_offset: int, log_end_offset: int, budget: LookupBudget | None
) -> TimestampAndOffset | None:
    if log_start_offset == log_end_offset:
        return None
    segments = local.segments
    touch = local.touch
    # One stopwatch for the whole lookup, handed to each segment searched (which restarts it
    # with its fault count, after its first-use check): one object, not one a segment. A
    # bounded search's laps are held until it answers (a refusal counts nothing).
    watch = stopwatch("offsets_for_times") if budget is None else budget.stopwatch("offsets_for_times")
    reaching = local.timestamps.first_slot_reaching(segments, timestamp_ms)
    slot = max(reaching, segments.floor_slot(log_start_offset))
    watch.lap("segment_lookup")
    # Kafka searches only the first segment whose largest timestamp reaches the target; the
    # search goes on to later ones when every match there sits below the log start offset.
    for index in range(slot, len(segments)):
        segment = segments.at(index)
        if index != reaching and segment.largest_timestamp() < timestamp_ms:
            continue  # (the running max vouches for the first segment reaching it)
        touch(segment)
        if budget is None:
            found = segment.find_offset_by_timestamp(timestamp_ms, log_start_offset, watch)
        else:
            found = _bounded(segment, budget, segment.find_offset_by_timestamp, timestamp_ms, log_start_offset, watch)
        if found is not None:
            return found
    return None


def _offset_of_max_timestamp(local: LocalLog, log_start_offset: int, log_end_offset: int,
                             budget: LookupBudget | None) -> TimestampAndOffset | None:
    if log_start_offset == log_end_offset:
        return None
    segments = local.segments
    local.timestamps.load(segments)  # asks every segment (and says so: loaded)
    best = max(segments.values(), key=lambda segment: segment.max_timestamp_so_far)
    local.touch(best)
    if budget is None:
        return best.offset_of_max_timestamp()
    return _bounded(best, budget, best.offset_of_max_timestamp)


def _bounded(segment: LogSegment, budget: LookupBudget, search: Callable, *args: object) -> object:
    """``search(*args)``, a search of ``segment``, bounded by ``budget`` (LookupRefused past it)."""
    segment.lookup_budget = budget
    try:
        return search(*args)
    finally:
        segment.lookup_budget = None


def search_timestamps(
    segments: LogSegments[LogSegment],
    timestamps: SegmentTimestamps,
    targets: Sequence[int],
    log_start_offset: int,
    touch: Callable[[LogSegment], None],
    budget: LookupBudget | None = None,
) -> dict[int, TimestampAndOffset | None]:
    """The first record with a timestamp >= each of ``targets`` (ascending, distinct, >= 0) at
    or above ``log_start_offset``, by target; a target with no such record is left out or None.
    ``touch`` is called on each segment before it is searched (the descriptor budget); each
    segment's search bounded by ``budget`` when given."""
    found: dict[int, TimestampAndOffset | None] = {}
    watch = stopwatch("offsets_for_times") if budget is None else budget.stopwatch("offsets_for_times")
    start_slot = segments.floor_slot(log_start_offset)
    runs = timestamps.runs_reaching(segments, targets)
    watch.lap_each("segment_lookup", len(targets))
    for run_start, run_end, reaching in runs:
        run = targets if len(runs) == 1 else targets[run_start:run_end]
        _search_run(segments, run, reaching, start_slot, log_start_offset, touch, found, budget)
    return found


def _search_run(
    segments: LogSegments[LogSegment],
    targets: Sequence[int],
    reaching: int,
    start_slot: int,
    log_start_offset: int,
    touch: Callable[[LogSegment], None],
    found: dict[int, TimestampAndOffset | None],
    budget: LookupBudget | None = None,
) -> None:
    """Searches ``targets``, which share their first reaching segment ``reaching``, as
    ``_search_timestamp`` searches one: from the later of that segment and the one holding
    the log start offset, on through the later segments whose largest timestamp reaches a target
    still unanswered (a match below the log start offset is no match)."""
    pending = targets
    for slot in range(max(reaching, start_slot), len(segments)):
        segment = segments.at(slot)
        if slot == reaching:  # the running max vouches for the first segment reaching them
            searched = pending
        else:  # the pending targets ascend: those this segment reaches are a prefix
            reached = bisect_right(pending, segment.largest_timestamp())
            if not reached:
                continue
            searched = pending if reached == len(pending) else pending[:reached]
        touch(segment)
        if budget is None:
            answers = segment.find_offsets_by_timestamps(searched, log_start_offset)
        else:
            answers = _bounded(segment, budget, segment.find_offsets_by_timestamps, searched, log_start_offset)
        # In bulk: a target this segment leaves unanswered is kept as None (a later segment's
        # answer replaces it) and stays pending, in order, before those it did not search.
        found.update(zip(searched, answers))
        if None in answers:
            pending = [target for target, answer in zip(searched, answers) if answer is None] + pending[len(searched):]
        else:
            pending = pending[len(searched):]
        if not pending:
            return
