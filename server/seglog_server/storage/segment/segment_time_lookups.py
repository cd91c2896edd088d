"""A segment's searches by time (kafka-storage.md section 4): ``SegmentTimeLookups``, the part of
``LogSegment`` that answers ``find_offset_by_timestamp(s)`` and ``offset_of_max_timestamp``.

It holds the glue between the segment's files and the lookup structures beside it: the time-step
table (time_steps.py: fed by the appends, else built and extended here), the batch directory
(batch_directory.py), the record-time tables of large batches (record_timestamps.py), the
bounded search's budget checks (lookup_budget.py) and the lookup stopwatch. A mixin, as the
searches read the segment's own files and indexes and keep their caches' state on it;
``LogSegment`` (log_segment.py) is the one class built from it, so callers see one object.

Not thread-safe; the owning ``Log`` serialises calls with its lock.
"""

from __future__ import annotations

import struct
import weakref
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence

from seglog.records import ATTRIBUTES_OFFSET as _ATTRIBUTES_OFFSET
from seglog.records import HEADER, LAST_OFFSET_DELTA_OFFSET, LOG_OVERHEAD, MAX_TIMESTAMP_OFFSET
from seglog.records import CodecError as _CodecError
from seglog.records.walk_compiled import step_answers

from ..base.errors import CorruptRecordError
from ..base.observer import PhaseTimer, stopwatch
from ..format.file_records import BatchHeader, FileRecords, OffsetBounds, TimestampAndOffset
from ..format.offset_index import OffsetIndex
from ..format.record_timestamps import RECORD_TIMES, first_records_at_or_after, offsets_and_timestamps
from ..format.time_index import TimeIndex
from .batch_directory import DIRECTORIES, BatchDirectory
from .lookup_budget import LookupBudget, LookupRefused
from .time_steps import TIME_STEPS, TimeSteps

__all__ = ["SegmentTimeLookups"]

# No next segment: every int64 offset is below this.
_OFFSET_LIMIT = 2**63 - 1
_HEADER_BYTES = HEADER.size

# A directory lookup reads a batch this small whole at once (header and records: one pread);
# a larger one's header first, as its record-time table may answer without its records.
_WHOLE_READ_BYTES_MAX = 8 * 1024
# A directory entry's check of the header read back: baseOffset, length, lastOffsetDelta and
# maxTimestamp, the fields it was entered from (at HEADER's offsets).
_ENTRY_CHECK = struct.Struct(
    f">qi{LAST_OFFSET_DELTA_OFFSET - LOG_OVERHEAD}xi{MAX_TIMESTAMP_OFFSET - LAST_OFFSET_DELTA_OFFSET - 4}xq"
)
assert _ENTRY_CHECK.size == MAX_TIMESTAMP_OFFSET + 8
_UNKNOWN = object()  # a scan's first step not taken yet
_INDEX_LIED = object()  # a scan's first batch disagreed with the offset-index entry it started from
_SCAN_SLACK_BYTES = 2048  # room for the batch straddling the interval's end and its header
# The byte of a batch header holding its compression codec (the low bits of attributes, int16).
_COMPRESSION_AT = _ATTRIBUTES_OFFSET + 1
_SCAN_BYTES_MAX = 64 * 1024
# A segment's batch directory is built once its batched lookups have searched this many targets
# by the per-target path a MiB of .log: the walk that builds it reads the file (measured here:
# 0.2 ms of CPU a MiB of 100-record batches, a 61-byte read a batch of 3,400 records: 0.01 ms a
# MiB), and each target it answers saves 10-20 us: paid back after some 13 targets a MiB. A
# segment asked a few times keeps the index searches and reads nothing more.
_DIRECTORY_TARGETS_PER_MIB = 16
# The most of the .log one lookup call walks to build or extend the directory (about 0.8 ms of
# CPU for 100-record batches, in 256 KiB reads): a lookup runs under the log's lock, often on
# the event loop, so a large segment (or everything appended to the active one since its last
# lookup) is entered over several calls; the targets past the part entered so far are answered
# by the scans meanwhile.
_DIRECTORY_EXTEND_BYTES = 4 << 20
# The most of the .log one lookup call walks to build or extend the time-step table
# (time_steps.py) of a segment without one (a restart, dropped from the budget): as the
# directory's. It is built after as many targets a MiB as the directory; the active segment's is
# fed by its appends instead.
_STEPS_EXTEND_BYTES = 4 << 20


def _no_directory() -> None:
    return None


class SegmentTimeLookups:
    """The searches by time of one segment (``LogSegment``'s base: its files and indexes are
    the segment's own, set up by ``LogSegment.__init__``)."""

    # The budget of the bounded lookup by time searching this segment now (set around the call
    # by timestamp_lookups.py, under the log's lock), else None: the search is unbounded.
    lookup_budget: LookupBudget | None = None

    # The segment's own, set up by LogSegment.__init__ (log_segment.py).
    _log: FileRecords
    _offset_index: OffsetIndex
    _time_index: TimeIndex
    _base_offset: int
    _scan_bytes: int
    _lookup_scan_bytes: int
    _pending_check: object
    _check_once: Callable[[], None]
    offset_bounds: Callable[..., OffsetBounds]
    max_timestamp_and_offset_so_far: Callable[[], TimestampAndOffset]
    # The offset index entry's position once the log agrees with it (else the rebuilt index's).
    _vouched_position: Callable[[int, tuple[int, int]], int]
    rebuild_offset_index_once: Callable[[], bool]
    index_rebuilt_on_read_count: int  # the offset index rebuilt from the log by this process: its entries are true
    _scan_start_agrees: Callable[..., bool | None]
    head_agrees: Callable[[int, int], bool]

    def _init_time_lookups(self) -> None:
        """The lookup caches' state: none built yet."""
        # The batch directory (batch_directory.py): weakly held (the budget holds it), built once
        # enough batched-lookup targets were searched here without it (_DIRECTORY_TARGETS_PER_MIB).
        self._directory_ref: Callable[[], BatchDirectory | None] = _no_directory
        self._directory_targets = 0
        self._directory_refused = False  # larger than the whole budget: not built until truncated
        # The time-step table (time_steps.py): weakly held (the budget holds it), fed by the
        # appends from the segment's first batch, else built as the directory is.
        self._steps_ref: Callable[[], TimeSteps | None] = _no_directory
        self._steps_targets = 0
        self._steps_refused = False  # larger than the whole budget: not built until truncated

    def _feed_time_steps(self, steps: TimeSteps, batch: memoryview, base_offset: int, position: int,
                         size: int, records_area: bytes | None) -> None:
        """Enters the batch just written at ``position`` into the table (its bytes in hand: no
        read). A compressed batch raising the table's maximum is walked in ``records_area``, the
        records its validation decompressed (else decompressed here): every append is entered,
        so the table keeps up with the file whatever the producer compresses."""
        fields = HEADER.unpack_from(batch, 0)
        count = len(steps)
        steps.enter(batch, position, size, (base_offset, *fields[1:]), records_area)
        if len(steps) != count:
            if TIME_STEPS.fits(steps.size_bytes):
                TIME_STEPS.hold(steps)
            else:
                self.drop_time_steps()
                self._steps_refused = True

    def find_offset_by_timestamp(
        self, timestamp_ms: int, starting_offset: int, watch: PhaseTimer | None = None
    ) -> TimestampAndOffset | None:
        """The first record (in log order) with a timestamp >= ``timestamp_ms`` and an offset >=
        ``starting_offset``, or None. ``watch``: the caller's offsets_for_times stopwatch,
        restarted here (else one of its own), so the index search's lap and faults leave out the
        segment's first-use check, as a fetch's do."""
        if self._pending_check is not None:
            _refuse_if_bounded(self.lookup_budget, "the segment's first-use check")
            self._check_once()
        if watch is None:
            watch = self._lookup_stopwatch()
        else:
            watch.restart()
        steps = self._steps_ref()
        if steps is not None:  # fed by the appends, or built by batched lookups (never built here)
            answers, rest = self._answers_from_steps(steps, (timestamp_ms,), starting_offset)
            if not rest:
                # The table answered from memory, no file page touched: the phase is timed, and
                # no fault count is taken (two getrusage calls a lookup saved).
                watch.lap("index_search")
                return answers[0]
        watch.mark_faults()  # the faults of what reads the files from here
        if self._directory_ref() is not None:  # batched lookups built one: it answers (never built here)
            directory = self._batch_directory(1)
            if directory is not None:
                watch.lap_faults("index_search", "index_lookup")
                return self._find_in_directory(directory, [timestamp_ms], starting_offset, watch)[0]
        held = None if self.lookup_budget is None else self.lookup_budget.held_searches
        entry = self._time_index.lookup(timestamp_ms, held)
        target = max(entry.offset, starting_offset)
        offset_entry = self._offset_index.lookup(target, held)
        position = offset_entry[1]
        if position >= self._log.size_in_bytes and position:  # (a read there is EINVAL: an I/O error)
            position = self._vouched_position(target, offset_entry)
        watch.lap_faults("index_search", "index_lookup")
        try:
            if not position:
                return self._scan_for_timestamp(timestamp_ms, 0, starting_offset, _UNKNOWN)[0]
            # The entry is trusted as far as the log agrees (LogSegment._search_from_entry): the
            # batch at its position, read by the scan's first read anyway, must start at or below
            # its offset; when the scan's answer lies further on, one more header read says so.
            try:
                answer, first = self._scan_for_timestamp(timestamp_ms, position, starting_offset, _UNKNOWN)
            except CorruptRecordError:
                if self.index_rebuilt_on_read_count:
                    raise  # from the index rebuilt from this log: the damage is the log's own
                # Rebuilt now, or the rebuild failed (a full disk): from the segment's start then,
                # as a read does (a log that does not walk whole meets its damage there).
                rebuilt = self.rebuild_offset_index_once()
                return self._scan_for_timestamp(
                    timestamp_ms, self._offset_index.lookup(target)[1] if rebuilt else 0, starting_offset,
                    _UNKNOWN)[0]
            agrees = self._scan_start_agrees(offset_entry, first) if offset_entry[0] <= target else False
            if agrees:
                return answer
            vouched = self._vouched_position(target, offset_entry)  # a lie: the index rebuilt
            if agrees is None and vouched == position:
                return answer
            return self._scan_for_timestamp(timestamp_ms, vouched, starting_offset, _UNKNOWN)[0]
        finally:
            watch.lap_faults("log_scan", "log_read")

    def answer_from_time_steps(self, timestamp_ms: int, starting_offset: int) -> TimestampAndOffset | None:
        """``find_offset_by_timestamp``'s answer when the segment's time-step table gives it from
        memory and it is a record (no first-use check pending, nothing read or built, no lap
        taken: the caller times it); else None, and that search answers (no table, a step below
        ``starting_offset``, none reaching the target in a table ending before the file, or no
        record here)."""
        if self._pending_check is not None:
            return None
        steps = self._steps_ref()
        if steps is None:
            return None
        answers, rest = step_answers(steps.timestamps, steps.offsets, (timestamp_ms,), starting_offset,
                                     not steps.damaged and steps.end_position == self._log.size_in_bytes,
                                     TimestampAndOffset)
        return None if rest else answers[0]

    def find_offsets_by_timestamps(
        self, timestamps_ms: Sequence[int], starting_offset: int
    ) -> list[TimestampAndOffset | None]:
        """``find_offset_by_timestamp`` for each of ``timestamps_ms`` (ascending), with the same
        answers: the index searches of all the targets run together, and a target whose scan
        would start where the previous target's did, when the batch that scan found first
        reaches it (or it found none), starts from that batch without walking to it again; the
        targets landing in one batch are answered by one walk of its records
        (``first_records_at_or_after``), not one walk each.

        Why that batch is the answer: the targets ascend, and every batch the previous scan
        passed had a max timestamp below the previous target (or offsets below
        ``starting_offset``): below this one too. Only walks the per-target path would make too
        are made, so a damaged file raises the same errors."""
        if self._pending_check is not None:
            _refuse_if_bounded(self.lookup_budget, "the segment's first-use check")
            self._check_once()
        steps = self._time_steps(len(timestamps_ms))
        if steps is None:
            return self._find_without_steps(timestamps_ms, starting_offset)
        watch = self._lookup_stopwatch(mark_faults=True)
        results, rest = self._answers_from_steps(steps, timestamps_ms, starting_offset)
        watch.lap_each("index_search", len(timestamps_ms) - len(rest))
        if rest:
            for number, answer in zip(rest, self._find_without_steps([timestamps_ms[n] for n in rest], starting_offset)):
                results[number] = answer
        return results

    def _find_without_steps(
        self, timestamps_ms: Sequence[int], starting_offset: int
    ) -> list[TimestampAndOffset | None]:
        """``find_offsets_by_timestamps`` by the batch directory, else the index searches and scans."""
        watch = self._lookup_stopwatch(mark_faults=True)
        directory = self._batch_directory(len(timestamps_ms))
        if directory is not None:
            watch.lap_each("index_search", len(timestamps_ms))  # (its extension: the index step)
            return self._find_in_directory(directory, timestamps_ms, starting_offset, watch)
        return self._find_by_scans(timestamps_ms, starting_offset)

    def _find_by_scans(
        self, timestamps_ms: Sequence[int], starting_offset: int
    ) -> list[TimestampAndOffset | None]:
        """``find_offsets_by_timestamps`` by the index searches and header scans; once more after
        the offset index is rebuilt from the log when a scan from one of its positions fails (a
        rotted entry pointing inside a batch: LogSegment._search_from_entry) or a scan's first
        batch starts above the offset its index search was for (an entry that lies)."""
        try:
            results = self._find_by_index_scans(timestamps_ms, starting_offset)
        except CorruptRecordError:
            if self.index_rebuilt_on_read_count:
                raise  # from the index rebuilt from this log: the damage is the log's own
            if self.rebuild_offset_index_once():
                return self._find_by_index_scans(timestamps_ms, starting_offset)
            results = _INDEX_LIED  # the rebuild failed (a full disk): each target from the start
        if results is _INDEX_LIED and self.rebuild_offset_index_once():
            results = self._find_by_index_scans(timestamps_ms, starting_offset)
        if results is _INDEX_LIED:  # rebuilt already, or the log does not walk whole: each target alone
            return [self._scan_for_timestamp(t, 0, starting_offset, _UNKNOWN)[0] for t in timestamps_ms]
        return results  # type: ignore[return-value]

    def _find_by_index_scans(
        self, timestamps_ms: Sequence[int], starting_offset: int
    ) -> list[TimestampAndOffset | None]:
        count = len(timestamps_ms)
        watch = self._lookup_stopwatch(mark_faults=True)
        held = None if self.lookup_budget is None else self.lookup_budget.held_searches
        entry_offsets = self._time_index.lookup_offsets(timestamps_ms, held)
        positions = self._offset_index.lookup_positions(
            [offset if offset > starting_offset else starting_offset for offset in entry_offsets], held
        )
        watch.lap_each("index_search", count)
        watch.faults("index_lookup")
        results: list[TimestampAndOffset | None] = []
        scan_position, first = -1, _UNKNOWN  # where the last scan started, and what it found first
        number = 0
        try:
            while number < count:
                timestamp_ms, position = timestamps_ms[number], positions[number]
                if not (position == scan_position and (first is None or first[0].max_timestamp >= timestamp_ms)):
                    if position >= self._log.size_in_bytes and position:  # (a read there is EINVAL)
                        return _INDEX_LIED  # type: ignore[return-value]
                    first = self._log.find_batch_for_timestamp(
                        timestamp_ms, position, starting_offset, self._lookup_scan_bytes, self.offset_bounds(),
                        None if self.lookup_budget is None else self.lookup_budget.charge_scan,
                    )
                    scan_position = position
                    if position:  # the entry trusted as far as the log agrees (LogSegment._search_from_entry)
                        sought = entry_offsets[number] if entry_offsets[number] > starting_offset else starting_offset
                        agrees = self._scan_start_agrees((sought, position), first)
                        if not (agrees or (agrees is None and self.head_agrees(position, sought))):
                            return _INDEX_LIED  # type: ignore[return-value]
                if first is None:
                    results.append(None)
                    number += 1
                    continue
                # The targets after this one that start here and that the batch reaches land in it
                # too: one walk of its records (or one table) answers them all.
                run_end, max_timestamp = number + 1, first[0].max_timestamp
                while run_end < count and positions[run_end] == position and timestamps_ms[run_end] <= max_timestamp:
                    run_end += 1
                run = timestamps_ms[number:run_end]
                for target, match in zip(run, self._records_reaching(first, run, starting_offset)):
                    if match is None:  # every match there sits below starting_offset: on to the next batches
                        results.append(self._scan_for_timestamp(target, position, starting_offset, first)[0])
                    else:
                        results.append(TimestampAndOffset(match[1], match[0]))
                number = run_end
        finally:
            watch.lap_each("log_scan", number)
            watch.faults("log_read")
        return results

    def _lookup_stopwatch(self, mark_faults: bool = False) -> PhaseTimer:
        """The offsets_for_times stopwatch of a search here: a bounded one's laps held by its
        budget until it answers (a refused search counts nothing)."""
        if self.lookup_budget is None:
            return stopwatch("offsets_for_times", mark_faults)
        return self.lookup_budget.stopwatch("offsets_for_times", mark_faults)

    # -- the time-step table -----------------------------------------------------------------
    def _answers_from_steps(
        self, steps: TimeSteps, timestamps_ms: Sequence[int], starting_offset: int
    ) -> tuple[list[TimestampAndOffset | None], list[int]]:
        """The answers of ``timestamps_ms`` (ascending) from the table, and the numbers of the targets it
        cannot answer (left None): their step lies below ``starting_offset``, or no step reaches
        them and the table ends before the file's end or at a batch it refused. One call for all
        the targets (``step_answers``: the bisections and the answers in C where built)."""
        whole = not steps.damaged and steps.end_position == self._log.size_in_bytes
        return step_answers(steps.timestamps, steps.offsets, timestamps_ms, starting_offset, whole, TimestampAndOffset)

    def records_from_time_steps(
        self, timestamps_ms: Sequence[int], starting_offset: int
    ) -> list[TimestampAndOffset] | None:
        """``find_offsets_by_timestamps``'s answers to ``timestamps_ms`` (any order, repeats
        allowed) when the segment's time-step table gives every one of them from memory and
        each is a record; else None, and that search answers (no table, a first-use check
        pending, the file shrunk under the table or grown past it (that search extends it), a
        step below ``starting_offset``, or no record here). Nothing is read, built, extended or
        timed (the caller counts the laps once it answers); the table is held as that search
        holds it (least recently used last)."""
        if self._pending_check is not None:
            return None
        steps = self._steps_ref()
        if steps is None:
            return None
        file_end = self._log.size_in_bytes
        if file_end < steps.end_position or (steps.end_position < file_end and not steps.damaged):
            return None
        answers, rest = self._answers_from_steps(steps, timestamps_ms, starting_offset)
        if rest or None in answers:
            return None
        TIME_STEPS.hold(steps)
        return answers

    def _new_time_steps(self) -> TimeSteps:
        self.drop_time_steps()
        steps = TimeSteps(self._base_offset)
        self._steps_ref = weakref.ref(steps)
        TIME_STEPS.hold(steps)
        return steps

    def _time_steps(self, target_count: int) -> TimeSteps | None:
        """The segment's table, extended towards the end of its ``.log`` by at most
        ``_STEPS_EXTEND_BYTES`` (it may end before the file: the targets past it are searched as
        before), or None (not yet worth building, or larger than the budget)."""
        steps = self._steps_ref()
        file_end = self._log.size_in_bytes
        if steps is not None and file_end < steps.end_position:  # the file shrank under it
            self.drop_time_steps()
            steps = None
        if steps is None:
            if self._steps_ref is not _no_directory:  # the budget dropped it: count again
                self._steps_ref, self._steps_targets = _no_directory, 0
            if self.lookup_budget is not None:  # (a refused search counts nothing)
                self.lookup_budget.keep(self, "_steps_targets")
            self._steps_targets += target_count
            if self._steps_refused or self._steps_targets * (1 << 20) < file_end * _DIRECTORY_TARGETS_PER_MIB:
                return None
            _refuse_if_bounded(self.lookup_budget, "a time-step table's build")
            steps = self._new_time_steps()
        if steps.end_position < file_end and not steps.damaged:
            _refuse_if_bounded(self.lookup_budget, "a time-step table's extension")
            try:
                whole = steps.extend(self._log.read, file_end, _OFFSET_LIMIT, TIME_STEPS.bytes_max, _STEPS_EXTEND_BYTES,
                                     self._offset_index.positions_after)
            except OSError:  # (the steps entered before it stand; the search meets the error)
                whole = True
            if not whole or not TIME_STEPS.fits(steps.size_bytes):
                self.drop_time_steps()
                self._steps_refused = True
                return None
        TIME_STEPS.hold(steps)
        return steps

    def drop_time_steps(self) -> None:
        """Forgets the time-step table (the file's bytes may change otherwise than by appends)."""
        steps = self._steps_ref()
        if steps is not None:
            TIME_STEPS.drop(steps)
        self._steps_ref = _no_directory
        self._steps_targets = 0
        self._steps_refused = False

    # -- the batch directory ----------------------------------------------------------------
    def _batch_directory(self, target_count: int) -> BatchDirectory | None:
        """The segment's directory, extended towards the end of its ``.log`` by at most
        ``_DIRECTORY_EXTEND_BYTES`` (it may end before the file: see ``_find_in_directory``), or
        None (not yet worth building, larger than the budget, or a read failed: the scans
        answer, and meet what failed)."""
        directory = self._directory_ref()
        file_end = self._log.size_in_bytes
        if directory is None or file_end < directory.end_position:
            if directory is not None:  # the file shrank under it (not through this segment)
                DIRECTORIES.drop(directory)
            if self._directory_ref is not _no_directory:
                # The budget dropped it (lookups on more segments than it holds), or the file
                # shrank: a new one is built after as many targets again, so a working set larger
                # than the budget costs at most a build for each time the scans' cost would have
                # paid for one.
                self._directory_ref, self._directory_targets = _no_directory, 0
            if self.lookup_budget is not None:  # (a refused search counts nothing)
                self.lookup_budget.keep(self, "_directory_targets")
            self._directory_targets += target_count
            if self._directory_refused or self._directory_targets * (1 << 20) < file_end * _DIRECTORY_TARGETS_PER_MIB:
                return None
            _refuse_if_bounded(self.lookup_budget, "a batch directory's build")
            self._drop_directory_only()
            directory = BatchDirectory(self._base_offset)
            self._directory_ref = weakref.ref(directory)
        if directory.end_position < file_end and not directory.damaged:
            budget = self.lookup_budget
            if budget is not None:
                # A bounded search extends it when the bytes the extension reads fit what is left
                # (the appends feed the table, not the directory: refusing every extension sent
                # the first lookup after each append to the pool). Its targets count kept: a drop
                # below (grown past the budget) is put back as the rest of a refused search is.
                budget.charge(min(file_end - directory.end_position, _DIRECTORY_EXTEND_BYTES),
                              "a batch directory's extension")
                budget.keep(self, "_directory_targets")
            try:
                whole = directory.extend(
                    self._log.read, file_end, _OFFSET_LIMIT, DIRECTORIES.bytes_max, _DIRECTORY_EXTEND_BYTES,
                    self._offset_index.positions_after,
                )
            except (OSError, CorruptRecordError):  # (a file shorter than its size: the scans meet it)
                DIRECTORIES.hold(directory)
                return None
            if not whole or not DIRECTORIES.fits(directory.size_bytes):
                self._drop_directory_only()
                self._directory_refused = True
                return None
        DIRECTORIES.hold(directory)
        return directory

    def drop_batch_directory(self) -> None:
        """Forgets the directory and the time-step table (the file's bytes may change otherwise
        than by appends)."""
        self._drop_directory_only()
        self.drop_time_steps()

    def _drop_directory_only(self) -> None:
        directory = self._directory_ref()
        if directory is not None:
            DIRECTORIES.drop(directory)
        self._directory_ref = _no_directory
        self._directory_targets = 0
        self._directory_refused = False

    def _find_in_directory(
        self, directory: BatchDirectory, timestamps_ms: Sequence[int], starting_offset: int, watch: PhaseTimer
    ) -> list[TimestampAndOffset | None]:
        """``find_offsets_by_timestamps`` from the directory: each target's batch by a bisection
        (the first whose running maximum reaches it), then its record from the batch's table or
        one walk of the batch shared by the targets landing in it. A target the directory cannot
        answer alone (its batch lies below ``starting_offset``'s, its match below that offset,
        or past a batch the directory's walk refused), and every target after a read or a walk
        fails, is searched by the scans: the same answer or the same error."""
        count, batch_count = len(timestamps_ms), len(directory)
        reach = directory.reach
        # Past its last batch it knows nothing when the walk stopped there (damage) or has not
        # got to the end of the file yet: those targets are the scans'.
        partial = directory.damaged or directory.end_position < self._log.size_in_bytes
        lowest = bisect_left(directory.last_offsets, starting_offset)
        results: list[TimestampAndOffset | None] = [None] * count
        rest: list[int] = []  # the numbers of the targets left to the scans
        number = 0
        try:
            while number < count:
                index = bisect_left(reach, timestamps_ms[number])
                if index < lowest or index == batch_count:
                    if index < lowest or partial:
                        rest.append(number)
                    number += 1  # (past every batch of a whole file: no record reaches it)
                    continue
                run_end = number + 1
                largest = reach[index]  # the batch's own maxTimestamp (the running max first reaches there)
                while run_end < count and timestamps_ms[run_end] <= largest:
                    run_end += 1
                run = timestamps_ms[number:run_end]
                answers = self._directory_records(directory, index, run, starting_offset)
                for offset, match in enumerate(answers, number):
                    if match is None:
                        rest.append(offset)  # every match there sits below starting_offset
                    else:
                        results[offset] = TimestampAndOffset(match[1], match[0])
                number = run_end
        except (OSError, _CodecError, CorruptRecordError):
            rest.extend(range(number, count))
        finally:
            watch.lap_each("log_scan", count)
            watch.faults("log_read")
        if rest:
            for offset, answer in zip(rest, self._find_by_scans([timestamps_ms[n] for n in rest], starting_offset)):
                results[offset] = answer
        return results

    def _directory_records(
        self, directory: BatchDirectory, index: int, timestamps_ms: list[int], starting_offset: int
    ) -> list[tuple[int, int] | None]:
        """The answers of ``first_records_at_or_after`` in the directory's batch ``index``: its
        header read and checked against the entry, then its table, else one walk of its bytes.
        OSError, or the codec's error when the batch cannot be read, is not the one entered
        (the bytes changed since), or its records lie."""
        position, end = directory.positions[index], directory.batch_end(index)
        size = end - position
        budget = self.lookup_budget
        # A small batch in one read; a larger one's header first (its table may answer).
        if budget is not None:
            budget.charge(size if size <= _WHOLE_READ_BYTES_MAX else _HEADER_BYTES, "a batch's read")
        data = self._log.read(position, size if size <= _WHOLE_READ_BYTES_MAX else _HEADER_BYTES)
        if len(data) < _HEADER_BYTES:
            raise _CodecError(f"{self._log.path}: the batch at {position} ends past the file")
        base_offset, length, delta, max_timestamp = _ENTRY_CHECK.unpack_from(data)
        if (length + LOG_OVERHEAD != size or base_offset + delta != directory.last_offsets[index]
                or max_timestamp != directory.reach[index]):
            raise _CodecError(f"{self._log.path}: the batch at {position} is not the one the directory entered")

        def whole() -> bytes:
            return data if len(data) == size else self._read_whole(position, end)

        answers = RECORD_TIMES.answers(self._log.path, data, 0, position, timestamps_ms, starting_offset,
                                       whole if budget is None else _refuse_table_build)
        if answers is not None:
            return answers
        if budget is not None:
            _charge_walk(budget, data, 0, size)
        return first_records_at_or_after(whole(), timestamps_ms, starting_offset)

    def _read_whole(self, position: int, end: int) -> bytes:
        data = self._log.read(position, end - position)
        if len(data) != end - position:
            raise _CodecError(f"{self._log.path}: the batch at {position} ends past the file")
        return data

    def _records_reaching(
        self, found: tuple[BatchHeader, bytes, int], timestamps_ms: list[int], starting_offset: int
    ) -> list[tuple[int, int] | None]:
        """(offset, timestamp) of the first record with a timestamp >= each of ``timestamps_ms``
        (ascending) and an offset >= ``starting_offset`` in the batch ``found`` (header, chunk,
        where it starts in the chunk), or None: from the batch's table when it has one (a large
        batch: RECORD_TIMES), else by one walk of its records."""
        header, chunk, at = found
        fits = 2 * header.size_in_bytes + _SCAN_SLACK_BYTES
        self._lookup_scan_bytes = fits if self._scan_bytes < fits <= _SCAN_BYTES_MAX else self._scan_bytes
        budget = self.lookup_budget
        answers = RECORD_TIMES.answers(
            self._log.path, chunk, at, header.position, timestamps_ms, starting_offset,
            (lambda: self._log.batch_bytes(header, chunk, at)) if budget is None else _refuse_table_build,
        )
        if answers is not None:
            return answers
        if budget is not None:
            _charge_walk(budget, chunk, at, header.size_in_bytes)
        try:
            return first_records_at_or_after(self._log.batch_bytes(header, chunk, at), timestamps_ms, starting_offset)
        except _CodecError as exc:
            raise self._undecodable(header, exc) from exc

    def _scan_for_timestamp(
        self, timestamp_ms: int, position: int, starting_offset: int, first: object
    ) -> tuple[TimestampAndOffset | None, tuple[BatchHeader, bytes, int] | None]:
        """The lookup's scan from ``position``: the first batch with a max timestamp >=
        ``timestamp_ms`` and a last offset >= ``starting_offset``, then its first such record, on
        to the next batch when the record's offset is below ``starting_offset``. Also returns
        what the first step found (``first``: that step's answer when already known)."""
        scan_bytes = self._lookup_scan_bytes
        charge = None if self.lookup_budget is None else self.lookup_budget.charge_scan
        if first is _UNKNOWN:
            first = self._log.find_batch_for_timestamp(
                timestamp_ms, position, starting_offset, scan_bytes, self.offset_bounds(), charge
            )
        found = first
        while found is not None:
            header = found[0]  # type: ignore[index]
            match = self._records_reaching(found, [timestamp_ms], starting_offset)[0]  # type: ignore[arg-type]
            if match is not None:
                return TimestampAndOffset(match[1], match[0]), first  # type: ignore[return-value]
            found = self._log.find_batch_for_timestamp(  # the match was below starting_offset
                timestamp_ms, header.position + header.size_in_bytes, starting_offset, scan_bytes,
                self.offset_bounds(), charge,
            )
        return None, first  # type: ignore[return-value]

    def offset_of_max_timestamp(self) -> TimestampAndOffset | None:
        """The segment's greatest timestamp and the first record offset carrying it."""
        if self._pending_check is not None:
            _refuse_if_bounded(self.lookup_budget, "the segment's first-use check")
            self._check_once()
        max_timestamp, offset = self.max_timestamp_and_offset_so_far()
        if max_timestamp < 0:
            return None
        budget = self.lookup_budget
        position = self._vouched_position(offset, self._offset_index.lookup(
            offset, None if budget is None else budget.held_searches))
        for header in self._log.batch_headers(position, None if budget is None else budget.charge_scan):
            if header.max_timestamp == max_timestamp:
                if budget is not None:
                    budget.charge(header.size_in_bytes, "a batch's read")
                data = self._log.read(header.position, header.size_in_bytes)
                if budget is not None:
                    _charge_walk(budget, data, 0, 0)  # (its records decompressed: refused)
                for record_offset, timestamp in self._offsets_and_timestamps(header, data):
                    if timestamp == max_timestamp:
                        return TimestampAndOffset(max_timestamp, record_offset)
        return None

    def _offsets_and_timestamps(self, header: BatchHeader, data: bytes | memoryview) -> Iterator[tuple[int, int]]:
        """(offset, timestamp) of each record of the batch at ``header``, its bytes ``data``."""
        try:
            yield from offsets_and_timestamps(data)
        except _CodecError as exc:
            raise self._undecodable(header, exc) from exc

    def _undecodable(self, header: BatchHeader, exc: Exception) -> CorruptRecordError:
        return CorruptRecordError(
            f"{self._log.path}: cannot decode the batch at position {header.position} "
            f"(offsets {header.base_offset}..{header.last_offset}): {exc}"
        )


def _refuse_if_bounded(budget: LookupBudget | None, what: str) -> None:
    """LookupRefused for ``what`` when a bounded lookup searches (``budget`` not None)."""
    if budget is not None:
        raise LookupRefused(what)


def _refuse_table_build() -> bytes:
    """A bounded lookup's ``read_batch`` for RECORD_TIMES: a record-time table is built by the
    unbounded search only (its batch read whole and walked)."""
    raise LookupRefused("a record-time table's build")


def _charge_walk(budget: LookupBudget, data: bytes | memoryview, at: int, size: int) -> None:
    """Charges ``budget`` the walk of the records of the batch whose header is at ``at`` in
    ``data``: refused for a compressed batch (its records decompressed), else its ``size`` bytes
    when ``data`` does not hold them whole (read for the walk)."""
    if data[at + _COMPRESSION_AT] & 0x07:
        raise LookupRefused("a compressed batch's records decompressed")
    if at + size > len(data):
        budget.charge(size, "a batch's read for its records")
