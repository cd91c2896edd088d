"""LogSegment: one ``.log`` plus its offset and time indexes (kafka-storage.md section 4).

A segment holds the batches with offsets from its base offset up to the next segment's. Appends
add an offset-index entry (last offset of the batch -> the batch's position) and a time-index
entry (greatest timestamp so far -> its batch's last offset) once more than
``index.interval.bytes`` of log were written since the previous entry. The check runs *before*
the batch's own size is counted and once per batch (Kafka 4.x, KAFKA-806), so appends, recovery
and any chunking of the same batches build the same indexes.

The segment is lazy: opening one touches no file. Its ``.log`` descriptor opens on the first read
or write, each index mmaps on first use, and the largest timestamp is read from the time index
only when asked for.

Not thread-safe; the owning ``Log`` serialises calls with its lock.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import struct
import weakref
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from seglog.records import HEADER, LAST_OFFSET_DELTA_OFFSET, LOG_OVERHEAD, MAX_TIMESTAMP_OFFSET, BatchWalk, vouch_batches
from seglog.records import CodecError as _CodecError
from seglog.records.walk_compiled import step_answers

from ..base import file_names
from ..format.abstract_index import RELATIVE_OFFSET_MAX
from ..base.clock import Clock
from ..base.errors import CorruptRecordError, OffsetOverflowError
from ..format.file_records import BatchHeader, FileRecords, HeaderField, OffsetBounds, TimestampAndOffset
from ..base.fs import REAL_FS, FileSystem
from ..base.log_config import LogConfig
from ..base.observer import PhaseTimer, stopwatch
from ..format.offset_index import OffsetIndex
from ..format.record_timestamps import RECORD_TIMES, first_records_at_or_after, offsets_and_timestamps
from .batch_directory import DIRECTORIES, BatchDirectory
from .lookup_budget import LookupBudget, LookupRefused
from seglog.records import ATTRIBUTES_OFFSET as _ATTRIBUTES_OFFSET
from .segment_check import check_indexes, check_tail
from .segment_files import SegmentFiles
from .segment_recovery import RecoveryScan
from .time_steps import TIME_STEPS, TimeSteps
from ..format.time_index import ENTRY as TIME_INDEX_ENTRY
from ..format.time_index import TimeIndex, TimestampOffset

__all__ = ["LogSegment", "RollReason", "SegmentStatistics"]

_LOG = logging.getLogger(__name__)

_BASE_OFFSET = struct.Struct(">q")  # the batch's first field, rewritten when offsets are assigned
# baseOffset, length (the batch's own 4 bytes), partitionLeaderEpoch: a stamped batch's first 16
# bytes, the owner's epoch in cluster mode written over the producer's.
_STAMPED_HEAD = struct.Struct(">q4si")
# No next segment: every int64 offset is below this.
_OFFSET_LIMIT = 2**63 - 1
_new_tuple = tuple.__new__
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
_NO_TIMESTAMP = -1
_UNKNOWN = object()  # a cached answer not computed yet
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


class RollReason(enum.Enum):
    """Why the active segment was replaced (KAFKA-12555 asks for these to be visible)."""

    SIZE = "size"  # the batch would push the segment past segment.bytes
    TIME = "time"  # segment.ms (minus jitter) since the segment's first batch
    OFFSET_INDEX_FULL = "offset_index_full"
    TIME_INDEX_FULL = "time_index_full"
    OFFSET_OVERFLOW = "offset_overflow"  # the batch's last offset is not representable relative to the base
    RETENTION = "retention"  # every segment was due for deletion: roll so one remains
    REQUESTED = "requested"  # an explicit Log.roll()


class SegmentStatistics(NamedTuple):
    base_offset: int
    size_in_bytes: int
    warm_lookup_count: int
    cold_lookup_count: int
    index_materialized: bool


class LogSegment:
    """One segment: its ``FileRecords`` and lazily mapped ``OffsetIndex`` and ``TimeIndex``."""

    # The budget of the bounded lookup by time searching this segment now (set around the call
    # by timestamp_lookups.py, under the log's lock), else None: the search is unbounded.
    lookup_budget: LookupBudget | None = None

    def __init__(
        self,
        log: FileRecords,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        base_offset: int,
        *,
        index_interval_bytes: int,
        roll_jitter_ms: int = 0,
        clock: Clock,
        fs: FileSystem = REAL_FS,
    ) -> None:
        assert base_offset >= 0 and roll_jitter_ms >= 0
        self._fs = fs
        self._log = log
        self._offset_index = offset_index
        self._time_index = time_index
        self._base_offset = base_offset
        self._index_interval_bytes = index_interval_bytes
        # First read of a header scan: the batch sought starts within about one index interval
        # (plus one batch) of the entry the offset index gave.
        self._scan_bytes = min(max(index_interval_bytes, 0) + _SCAN_SLACK_BYTES, _SCAN_BYTES_MAX)
        # A lookup by time's first read: the index entry it starts from usually points at the
        # batch before the answer, so a read of two batches (the size of the last one found)
        # holds both headers and the answer's bytes: one pread, not three (the batch at the
        # entry, the next header, the answer's body). Batches too large for that keep the
        # index-sized read (their headers are all a lookup with a record-time table reads).
        self._lookup_scan_bytes = self._scan_bytes
        self._roll_jitter_ms = roll_jitter_ms
        self._clock = clock
        self._created_ms = clock.time_ms()
        self._rolling_based_timestamp: int | None = None
        # Greatest batch max timestamp so far and that batch's last offset; unknown until first
        # needed, then read from the time index's last entry (Kafka's maxTimestampAndOffsetSoFar).
        self._max_timestamp_known = False
        self._max_timestamp_ms = _NO_TIMESTAMP
        self._offset_of_max_timestamp = base_offset
        # Bytes appended since the last offset-index entry; None until first needed on a segment
        # loaded from disk, where it is the log size minus the last entry's position.
        self._bytes_since_last_index_entry: int | None = None
        # Which index is full (a roll reason) or None; _UNKNOWN after anything that may change it.
        self._index_full_reason: object = _UNKNOWN
        # (next segment's base offset, tail bytes max, before_cut) while the files, loaded
        # without recovery, are still to be checked against each other on first use
        # (segment_check.py).
        self._pending_check: tuple[int, Callable[[int], None] | None] | None = None
        self.repaired_on_first_use = False
        # Bytes the first-use check cut from the end (statistics; the range it lost was written
        # down by the check's ``before_cut`` before the cut).
        self.cut_on_first_use_bytes = 0
        # Lookup counts of index objects dropped by release_handles, kept for statistics.
        self._retired_warm_lookup_count = 0
        self._retired_cold_lookup_count = 0
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
        self.last_read_position = 0  # where the last read() started (under the Log's lock)
        self.last_read_rest_bytes = 0  # bytes from there to the segment's end at the time

    @classmethod
    def open(
        cls,
        directory: str,
        base_offset: int,
        config: LogConfig,
        *,
        clock: Clock,
        fs: FileSystem = REAL_FS,
        suffix: str = "",
        create: bool = False,
        roll_jitter_ms: int = 0,
    ) -> LogSegment:
        """A segment for existing files (nothing is opened yet) or, with ``create``, a new one."""
        log_path = file_names.log_path(directory, base_offset, suffix)
        if create:
            preallocate = config.segment_bytes if config.preallocate else 0
            log = FileRecords.create(log_path, fs=fs, preallocate_bytes=preallocate)
        else:
            log = FileRecords(log_path, fs=fs)
        index_bytes = config.segment_index_bytes
        return cls(
            log,
            OffsetIndex(file_names.offset_index_path(directory, base_offset, suffix), base_offset, index_bytes, fs=fs),
            TimeIndex(file_names.time_index_path(directory, base_offset, suffix), base_offset, index_bytes, fs=fs),
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            roll_jitter_ms=roll_jitter_ms,
            clock=clock,
            fs=fs,
        )

    # -- properties -------------------------------------------------------------------------
    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def log(self) -> FileRecords:
        return self._log

    @property
    def offset_index(self) -> OffsetIndex:
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        return self._time_index

    @property
    def files(self) -> SegmentFiles:
        """The three files as they are now (the checks and the recovery scan take this)."""
        return SegmentFiles(self._base_offset, self._log, self._offset_index, self._time_index)

    @property
    def size_in_bytes(self) -> int:
        return self._log.size_in_bytes

    @property
    def index_interval_bytes(self) -> int:
        return self._index_interval_bytes

    @property
    def roll_jitter_ms(self) -> int:
        return self._roll_jitter_ms

    @property
    def created_ms(self) -> int:
        return self._created_ms

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self._base_offset <= RELATIVE_OFFSET_MAX

    def _ensure_offset_in_range(self, offset: int) -> None:
        if not 0 <= offset - self._base_offset <= RELATIVE_OFFSET_MAX:
            raise OffsetOverflowError(
                f"{self._log.path}: offset {offset} is not representable in a segment with base "
                f"offset {self._base_offset}: expected at most {self._base_offset + RELATIVE_OFFSET_MAX}"
            )

    # -- deferred load check ----------------------------------------------------------------
    def defer_check(self, next_offset_max: int, before_cut: Callable[[int], None] | None = None) -> None:
        """An inactive segment loaded without recovery: its index tails and log tail are checked
        (and the segment recovered if they disagree) on first use, not at start-up, so a clean
        start of many segments stays one object per segment.

        ``before_cut(new next offset)`` runs before the recovery a failed check makes cuts the
        log, as the loader's recovery does (``recover``): the offsets up to ``next_offset_max``
        are written down there, whichever use finds the damage (a read, a lookup by time asking
        the largest timestamp, retention, the cleaner), since once cut the segment looks whole
        to every later check. If it raises, nothing was cut and the check stays pending."""
        self._pending_check = (next_offset_max, before_cut)

    @contextlib.contextmanager
    def handles_as_found(self) -> Iterator[None]:
        """Around a question asked of a segment that is not being *used* (its largest timestamp
        for retention or for the first level of a lookup by time, a first-use check, an
        explanation): a segment that held no descriptor before holds none after. Only a use the
        ``Log`` reports to the open-segment budget (``OpenSegments.touch``) may leave descriptors
        open; anything else opened here would sit outside the budget until the process runs
        out (a lookup by time after a restart once asked every segment of every log)."""
        held = self.holds_handles
        try:
            yield
        finally:
            if not held:
                self.release_handles()

    def ensure_checked(self) -> None:
        """Runs the deferred first-use check now if it is pending (for a use that reaches the
        files without asking the segment, as the cleaner's hard link does)."""
        if self._pending_check is not None:
            self._check_once()

    def _check_once(self) -> None:
        pending, self._pending_check = self._pending_check, None
        if pending is None:
            return
        try:
            with self.handles_as_found():
                self._check(*pending)
        except OSError:
            # Not checked: a later use checks again (a descriptor shortage, EMFILE, passes; a
            # failed disk fails again, as the use itself would).
            self._pending_check = pending
            raise

    def _check(self, next_offset_max: int, before_cut: Callable[[int], None] | None) -> None:
        problem = check_indexes(self.files, self._fs, next_offset_max)
        if problem is None:
            problem, _ = check_tail(self.files, self._fs, next_offset_max)
        if problem is None:
            return
        _LOG.warning("%s: recovering on first use, its files disagree: %s", self, problem)
        sealed = self._log.is_sealed
        try:
            truncated = self.recover(next_offset_max, before_cut)
        finally:
            if sealed:
                self._log.seal()
        self.repaired_on_first_use = True
        if truncated:
            self.cut_on_first_use_bytes += truncated
            _LOG.warning("%s: cut %d invalid bytes from its end", self, truncated)

    # -- timestamps -------------------------------------------------------------------------
    def _load_max_timestamp(self) -> None:
        if self._pending_check is not None:
            self._check_once()
        if not self._max_timestamp_known:
            with self.handles_as_found():  # a question: retention and lookups ask every segment
                last = self._last_time_index_entry()
            self._max_timestamp_ms, self._offset_of_max_timestamp = last.timestamp_ms, last.offset
            self._max_timestamp_known = True

    def _last_time_index_entry(self) -> TimestampOffset:
        """The time index's last entry. An index not mapped yet is read with one pread of its
        last slot instead: the same answer (every full slot of an existing file is an entry),
        without an mmap, which holds a file descriptor for as long as it lives. Retention and
        lookups by time ask this of every segment."""
        index = self._time_index
        if index.is_materialized or index.is_released:
            return index.last_entry  # a released index keeps its count; its file may be preallocated
        try:
            fd = self._fs.open(index.path, os.O_RDONLY)
        except FileNotFoundError:
            return index.last_entry  # creates the file, as Kafka's lazy index does
        try:
            entry_count = self._fs.fsize(fd) // TIME_INDEX_ENTRY.size
            if entry_count == 0:
                return TimestampOffset(_NO_TIMESTAMP, self._base_offset)
            slot = self._fs.pread(fd, TIME_INDEX_ENTRY.size, (entry_count - 1) * TIME_INDEX_ENTRY.size)
        finally:
            self._fs.close(fd)
        timestamp_ms, relative_offset = TIME_INDEX_ENTRY.unpack(slot)
        return TimestampOffset(timestamp_ms, self._base_offset + relative_offset)

    @property
    def max_timestamp_so_far(self) -> int:
        """The greatest batch max timestamp in the segment (may map the time index)."""
        self._load_max_timestamp()
        return self._max_timestamp_ms

    def max_timestamp_and_offset_so_far(self) -> TimestampAndOffset:
        """(greatest timestamp, last offset of the first batch holding it), or (-1, base)."""
        self._load_max_timestamp()
        return TimestampAndOffset(self._max_timestamp_ms, self._offset_of_max_timestamp)

    def largest_record_timestamp(self) -> int | None:
        timestamp = self.max_timestamp_so_far
        return timestamp if timestamp >= 0 else None

    def largest_timestamp(self) -> int:
        """The greatest record timestamp, or the ``.log`` file's mtime when there is none
        (what retention.ms compares against)."""
        timestamp = self.max_timestamp_so_far
        return timestamp if timestamp >= 0 else self._log.last_modified_ms()

    def _load_first_batch_timestamp(self) -> None:
        if self._rolling_based_timestamp is None:
            with self.handles_as_found():  # a question (the cleaner asks every segment)
                for header in self._log.batch_headers(0):
                    self._rolling_based_timestamp = header.max_timestamp
                    break

    def time_waited_for_roll(self, now_ms: int, message_timestamp_ms: int) -> int:
        """Record time since the first batch when it has a timestamp, else wall time since the
        segment object was created."""
        self._load_first_batch_timestamp()
        first = self._rolling_based_timestamp
        if first is not None and first >= 0:
            return message_timestamp_ms - first
        return now_ms - self._created_ms

    def first_batch_timestamp(self) -> int | None:
        self._load_first_batch_timestamp()
        first = self._rolling_based_timestamp
        return first if first is not None and first >= 0 else None

    # -- roll -------------------------------------------------------------------------------
    def should_roll(
        self,
        *,
        max_segment_bytes: int,
        max_segment_ms: int,
        messages_bytes: int,
        max_timestamp_ms: int,
        last_offset: int,
        now_ms: int,
    ) -> RollReason | None:
        """Why an append of ``messages_bytes`` ending at ``last_offset`` must go to a new
        segment, or None (Kafka's shouldRoll, in its order). Runs on every append, so the
        indexes' fullness is cached between index appends instead of asked twice each time."""
        size = self._log.size_in_bytes
        if size > max_segment_bytes - messages_bytes:
            return RollReason.SIZE
        if size > 0:
            first = self._rolling_based_timestamp
            if first is None:
                self._load_first_batch_timestamp()
                first = self._rolling_based_timestamp
            waited = max_timestamp_ms - first if first is not None and first >= 0 else now_ms - self._created_ms
            if waited > max_segment_ms - self._roll_jitter_ms:
                return RollReason.TIME
        full = self._index_full_reason
        if full is _UNKNOWN:
            full = self._index_full_reason = self._compute_index_full_reason()
        if full is not None:
            return full
        if not 0 <= last_offset - self._base_offset <= RELATIVE_OFFSET_MAX:
            return RollReason.OFFSET_OVERFLOW
        return None

    def _compute_index_full_reason(self) -> RollReason | None:
        if self._offset_index.is_full():
            return RollReason.OFFSET_INDEX_FULL
        if self._time_index.is_full():
            return RollReason.TIME_INDEX_FULL
        return None

    # -- appends ----------------------------------------------------------------------------
    def append_batch(self, batch: memoryview, base_offset: int, last_offset: int, max_timestamp_ms: int,
                     leader_epoch: int | None = None, records_area: bytes | None = None) -> int:
        """Appends one batch whose 8-byte base offset field is written as ``base_offset`` (and,
        when given, its partitionLeaderEpoch as ``leader_epoch``) while the rest of ``batch``
        goes out untouched: the CRC covers neither field (kafka-storage.md 2.1), so no byte is
        copied nor checksummed again. ``records_area``: a compressed batch's records as its
        validation decompressed them (the time-step table's feed walks them, else decompresses
        them again). Returns the position it was written at."""
        assert base_offset >= self._base_offset and last_offset >= base_offset
        if last_offset - self._base_offset > RELATIVE_OFFSET_MAX:
            self._ensure_offset_in_range(last_offset)
        log = self._log
        position = log.size_in_bytes
        self._reserve_index_entry_if_due(position)  # before the write: a full disk changes nothing
        if leader_epoch is None:
            size = log.append_patched(_BASE_OFFSET.pack(base_offset), batch[8:])
        else:  # baseOffset, the batch's own length, partitionLeaderEpoch; then magic onwards
            size = log.append_patched(_STAMPED_HEAD.pack(base_offset, bytes(batch[8:12]), leader_epoch), batch[16:])
        if position == 0:
            self._rolling_based_timestamp = max_timestamp_ms
        self._index_batch(position, last_offset, max_timestamp_ms, size)
        steps = self._steps_ref()
        if steps is None and position == 0 and not self._steps_refused:
            steps = self._new_time_steps()  # a new segment: its table is fed from the first batch
        if steps is not None and steps.end_position == position and not steps.damaged:
            try:
                self._feed_time_steps(steps, batch, base_offset, position, size, records_area)
            except Exception:  # (MemoryError, a bug): the batch is written, the append stands
                # The table is a cache: dropped, a lookup builds it again from the file.
                _LOG.exception("segment %s: the time-step table dropped: the batch at %d was not entered",
                               self._base_offset, position)
                self.drop_time_steps()
        return position

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

    def _reserve_index_entry_if_due(self, position: int) -> None:
        """Backs the slots the coming batch's index entries will take with blocks, so that on a
        full disk the append fails (OSError) before its batch is written, never half-way with a
        batch in the log and no offsets handed out for it."""
        since = self._bytes_since_last_index_entry
        if since is None:
            since = self._bytes_since_last_index_entry = self._bytes_since_index_entry_on_disk(position)
        if since > self._index_interval_bytes:
            self._offset_index.reserve_next_entry()
            self._time_index.reserve_next_entry()

    def append(self, records: bytes | bytearray | memoryview) -> int:
        """Appends batches that already carry their offsets; returns the position of the first.
        Index entries are added per batch, exactly as ``append_batch`` would."""
        view = memoryview(records)
        headers = _headers_of(view)
        if not headers:
            return self._log.size_in_bytes
        self._ensure_offset_in_range(headers[0].base_offset)
        self._ensure_offset_in_range(headers[-1].last_offset)
        start = self._log.size_in_bytes
        if start == 0:
            self._rolling_based_timestamp = headers[0].max_timestamp
        self._log.append((view[: headers[-1].position + headers[-1].size_in_bytes],))
        for header in headers:
            self._index_batch(start + header.position, header.last_offset, header.max_timestamp, header.size_in_bytes)
        return start

    def _index_batch(self, position: int, last_offset: int, max_timestamp_ms: int, size: int) -> None:
        if not self._max_timestamp_known:
            self._load_max_timestamp()
        if max_timestamp_ms > self._max_timestamp_ms:
            self._max_timestamp_ms, self._offset_of_max_timestamp = max_timestamp_ms, last_offset
        since = self._bytes_since_last_index_entry
        if since is None:
            since = self._bytes_since_index_entry_on_disk(position)
        if since > self._index_interval_bytes:
            self._offset_index.append(last_offset, position)
            self._time_index.maybe_append(self._max_timestamp_ms, self._offset_of_max_timestamp)
            self._index_full_reason = _UNKNOWN
            since = 0
        self._bytes_since_last_index_entry = since + size

    def _bytes_since_index_entry_on_disk(self, end_position: int) -> int:
        """What the per-batch rule leaves in the counter for the bytes before ``end_position``:
        the distance from the last indexed batch's start (or from 0 when none is indexed)."""
        entry_count = self._offset_index.entry_count
        last_position = self._offset_index.entry(entry_count - 1).position if entry_count else 0
        return end_position - last_position

    # -- reads ------------------------------------------------------------------------------
    def offset_bounds(self, offset_limit: int | None = None) -> OffsetBounds:
        """The offsets this segment's batches may hold: [base offset, ``offset_limit``), the
        next segment's base offset (no upper bound for the last segment)."""
        # tuple.__new__: OffsetBounds(...) without its Python-level __new__ (once per read and lookup)
        return _new_tuple(OffsetBounds, (self._base_offset, _OFFSET_LIMIT if offset_limit is None else offset_limit))

    def translate_offset(
        self, offset: int, starting_position: int = 0, offset_limit: int | None = None
    ) -> BatchHeader | None:
        """The first batch whose last offset is >= ``offset`` (index lookup, then a header scan
        that checks every batch it passes against the segment's offsets)."""
        if self._pending_check is not None:
            self._check_once()
        position = self._offset_index.lookup(offset).position
        return self._log.search_for_offset_with_size(
            offset, max(position, starting_position), self._scan_bytes, self.offset_bounds(offset_limit)
        )

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_batch: bool = False,
        offset_limit: int | None = None,
        watch: PhaseTimer | None = None,
    ) -> bytes | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_bytes`` of them (or
        the first batch whatever its size, with ``min_one_batch``) and none at or past
        ``max_position``. None when no batch in this segment reaches ``start_offset``.
        ``watch``: the caller's fetch stopwatch, restarted here (else one of its own).

        Every batch handed out is checked against where it came from (its length inside the
        segment, its offsets inside [base offset, ``offset_limit``) and above the previous
        batch's, magic 2): ``CorruptRecordError`` otherwise, never a shorter answer."""
        found = self.read_with_next_offset(start_offset, max_bytes, max_position, min_one_batch, offset_limit, watch)
        return None if found is None else found[0]

    def read_with_next_offset(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_batch: bool = False,
        offset_limit: int | None = None,
        watch: PhaseTimer | None = None,
    ) -> tuple[bytes, int] | None:
        """``read``, with the offset after the last batch read (``start_offset`` when none):
        the walk that checked the batches knows it, so Fetch need not walk them again."""
        if max_bytes < 0:
            raise ValueError(f"invalid max_bytes {max_bytes} for a read of {self._log.path}")
        if self._pending_check is not None:
            self._check_once()
        bounds = self.offset_bounds(offset_limit)
        if watch is None:
            watch = stopwatch("fetch", mark_faults=True)
        else:
            watch.restart(mark_faults=True)
        position = self._offset_index.lookup(start_offset).position
        watch.lap_faults("index_search", "index_lookup")
        first = self._log.search_for_offset_with_size(start_offset, position, self._scan_bytes, bounds)
        watch.lap("log_scan")
        if first is None:
            return None
        # Where this read starts, and the bytes from there to the segment's end: Log.read turns
        # them into the read's age in bytes.
        self.last_read_position = first.position
        limit = max(max_bytes, first.size_in_bytes) if min_one_batch else max_bytes
        size_bytes = self._log.size_in_bytes
        self.last_read_rest_bytes = size_bytes - first.position
        end = size_bytes if max_position is None else max_position
        fetch_bytes = min(end - first.position, limit)
        if fetch_bytes <= 0:
            return b"", start_offset
        data = self._log.read(first.position, fetch_bytes)
        watch.lap_faults("log_read", "log_read")
        whole, next_offset = self._whole_checked_batches(data, first, end - first.position, bounds)
        if whole == 0:
            return b"", start_offset
        return (data if whole == len(data) else data[:whole]), next_offset

    def _whole_checked_batches(
        self, data: bytes, first: BatchHeader, region_bytes: int, bounds: OffsetBounds
    ) -> tuple[int, int]:
        """The length of the whole batches at the start of ``data`` (read from ``first.position``,
        ``region_bytes`` before the end of the segment), each checked by the bounded walk, and
        the offset after the last of them."""
        size, offset_limit = len(data), bounds.offset_limit
        # The batches whole in ``data``, in one tight loop; then the common end: one batch cut
        # by max_bytes whose header passes and whose length stays inside the segment.
        _, position, next_offset, _ = vouch_batches(data, 0, size, size, first.base_offset, offset_limit)
        if position == size:
            return size, next_offset
        _, beyond, _, _ = vouch_batches(data, position, size, region_bytes, next_offset, offset_limit)
        if beyond > size:
            return position, next_offset
        # Anything else (a lie, a header cut short) by the rules, from there.
        walk = BatchWalk(
            data, position, region_end=region_bytes, origin=first.position, torn_tail_ok=False,
            offset_min=next_offset, offset_limit=offset_limit,
        )
        try:
            for position, fields in walk:  # the rest by the rules: a batch cut by max_bytes, or a lie
                if position + fields[HeaderField.LENGTH] + LOG_OVERHEAD > size:
                    return position, next_offset  # cut by max_bytes: the batch is whole in the segment
                next_offset = fields[HeaderField.BASE_OFFSET] + fields[HeaderField.LAST_OFFSET_DELTA] + 1
        except _CodecError as exc:
            served = walk.position
            if 0 < served and served + 8 <= size and _BASE_OFFSET.unpack_from(data, served)[0] < next_offset:
                # Offsets that do not rise: this batch or the one before it lies (the CRC does not
                # cover the base offset), and which one cannot be told. Serving the one before
                # could skip offsets (a first batch rotted upwards claims the next one's offsets),
                # so it is held back too: the read that starts at it answers DATA_LOSS.
                served, next_offset = self._without_last_batch(data, served, first)
            if served > 0:
                return served, next_offset  # serve the good batches; the next read starts at the bad one
            raise CorruptRecordError(f"{self._log.path}: {exc}") from exc
        return walk.position, next_offset

    @staticmethod
    def _without_last_batch(data: bytes, served: int, first: BatchHeader) -> tuple[int, int]:
        """The length of the batches of ``data[:served]`` (already checked) before its last one,
        and the offset after them."""
        last_start, before_last, next_offset = 0, first.base_offset, first.base_offset
        for position, fields in BatchWalk(data, 0, served, torn_tail_ok=False):
            last_start, before_last = position, next_offset
            next_offset = fields[HeaderField.BASE_OFFSET] + fields[HeaderField.LAST_OFFSET_DELTA] + 1
        return last_start, before_last

    def read_next_offset(self) -> int:
        """The offset the next batch appended here would get (scans from the last index entry)."""
        if self._pending_check is not None:
            self._check_once()
        entry_count = self._offset_index.entry_count
        position = self._offset_index.entry(entry_count - 1).position if entry_count else 0
        next_offset = self._base_offset
        for _, fields in self._log.raw_headers(position):
            next_offset = fields[HeaderField.BASE_OFFSET] + fields[HeaderField.LAST_OFFSET_DELTA] + 1
        return next_offset

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
        entry = self._time_index.lookup(timestamp_ms)
        position = self._offset_index.lookup(max(entry.offset, starting_offset)).position
        watch.lap_faults("index_search", "index_lookup")
        try:
            return self._scan_for_timestamp(timestamp_ms, position, starting_offset, _UNKNOWN)[0]
        finally:
            watch.lap_faults("log_scan", "log_read")

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
        """``find_offsets_by_timestamps`` by the index searches and header scans."""
        count = len(timestamps_ms)
        watch = self._lookup_stopwatch(mark_faults=True)
        entry_offsets = self._time_index.lookup_offsets(timestamps_ms)
        positions = self._offset_index.lookup_positions(
            [offset if offset > starting_offset else starting_offset for offset in entry_offsets]
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
                    first = self._log.find_batch_for_timestamp(
                        timestamp_ms, position, starting_offset, self._lookup_scan_bytes, self.offset_bounds(),
                        None if self.lookup_budget is None else self.lookup_budget.charge_scan,
                    )
                    scan_position = position
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
        position = self._offset_index.lookup(offset).position
        budget = self.lookup_budget
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

    # -- recovery and truncation ------------------------------------------------------------
    def recover(self, next_offset_max: int | None = None, before_cut: Callable[[int], None] | None = None) -> int:
        """Rebuilds both indexes from the log, checking every batch's CRC, and cuts the log at the
        first torn, corrupt or out-of-order batch (or, given the next segment's base offset
        ``next_offset_max``, the first batch reaching it). Returns the bytes cut.
        ``before_cut(new next offset)`` runs before a cut is made (the loader writes down the
        offsets it loses first: if that fails, the files are as they were)."""
        self._log.unseal()
        self.drop_batch_directory()
        self._offset_index.reset()
        self._time_index.reset()
        self._index_full_reason = _UNKNOWN
        scan = RecoveryScan(self.files, self._index_interval_bytes, next_offset_max)
        scan.run()
        truncated = self._log.size_in_bytes - scan.valid_bytes
        if truncated and before_cut is not None:
            before_cut(scan.next_offset)
        self._log.truncate_to(scan.valid_bytes)
        self._offset_index.trim_to_valid_size()
        self._max_timestamp_ms, self._offset_of_max_timestamp = scan.max_timestamp_ms, scan.offset_of_max_timestamp
        self._max_timestamp_known = True
        self._time_index.maybe_append(self._max_timestamp_ms, self._offset_of_max_timestamp, skip_full_check=True)
        self._time_index.trim_to_valid_size()
        self._index_full_reason = _UNKNOWN
        self._bytes_since_last_index_entry = scan.valid_bytes - scan.last_index_entry_position
        if scan.valid_bytes == 0:
            self._rolling_based_timestamp = None
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Drops every batch holding an offset >= ``offset`` (the whole batch, so a cut inside a
        batch or inside an offset gap removes that next batch). Returns the bytes removed."""
        if self._pending_check is not None:
            self._check_once()
        first_cut = self.translate_offset(offset)
        self.drop_batch_directory()
        self._log.unseal()  # the segment may take appends again
        self._offset_index.truncate_to(offset)
        self._time_index.truncate_to(offset)
        # The segment may become active again: give its indexes room to grow.
        self._offset_index.resize(self._offset_index.max_index_bytes)
        self._time_index.resize(self._time_index.max_index_bytes)
        self._index_full_reason = _UNKNOWN
        removed = 0 if first_cut is None else self._log.truncate_to(first_cut.position)
        if self._log.size_in_bytes == 0:
            self._created_ms = self._clock.time_ms()
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = None
        self._max_timestamp_ms, self._offset_of_max_timestamp = self._read_largest_timestamp()
        self._max_timestamp_known = True
        return removed

    def _read_largest_timestamp(self) -> TimestampAndOffset:
        last_entry = self._time_index.last_entry
        position = self._offset_index.lookup(last_entry.offset).position
        after = self._log.largest_timestamp_after(position)
        if after.timestamp_ms > last_entry.timestamp_ms:
            return after
        return TimestampAndOffset(last_entry.timestamp_ms, last_entry.offset)

    def has_overflow(self) -> bool:
        next_offset = self.read_next_offset()
        return next_offset > self._base_offset and not self.can_convert_to_relative_offset(next_offset - 1)

    # -- life cycle -------------------------------------------------------------------------
    def on_become_inactive_segment(self) -> None:
        """On roll: write the final time-index entry and trim the indexes and the log."""
        self._load_max_timestamp()
        self._time_index.maybe_append(self._max_timestamp_ms, self._offset_of_max_timestamp, skip_full_check=True)
        self._offset_index.trim_to_valid_size()
        self._time_index.trim_to_valid_size()
        self._index_full_reason = _UNKNOWN
        self._log.trim()
        self._log.seal()

    def resize_indexes(self, max_index_bytes: int) -> None:
        self._offset_index.resize(max_index_bytes)
        self._time_index.resize(max_index_bytes)
        self._index_full_reason = _UNKNOWN

    def flush(self) -> None:
        """fsync the log and msync both indexes (creating index files never used so far)."""
        self._log.flush()
        self._offset_index.flush()
        self._time_index.flush()

    def files_to_sync(self) -> list[str]:
        """The paths a flush must fsync: the log first, then the index files that exist. An active
        (unsealed) segment's index files are created first, as Kafka's flush does; an inactive
        segment's unmapped indexes are synced by path, not mapped again."""
        paths = [self._log.path]
        for index in (self._offset_index, self._time_index):
            if not self._log.is_sealed and not index.is_materialized and not index.is_released:
                index.flush()  # creates the (empty, preallocated) file
            if index.is_materialized or self._fs.exists(index.path):
                paths.append(index.path)
        return paths

    def close(self) -> None:
        """Final time-index entry, trim and unmap the indexes, trim and close the log; no fsync."""
        self.drop_batch_directory()
        try:
            if self._max_timestamp_known and self._time_index.is_materialized:
                self._time_index.maybe_append(
                    self._max_timestamp_ms, self._offset_of_max_timestamp, skip_full_check=True
                )
        finally:
            try:
                self._offset_index.close()
                self._time_index.close()
            finally:
                self._log.close()

    def close_handlers(self) -> None:
        """Unmaps and closes without writing anything (the disk may have failed)."""
        self._offset_index.close_handler()
        self._time_index.close_handler()
        self._log.close_handler()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        self._log.rename_to(file_names.replace_suffix(self._log.path, old_suffix, new_suffix))
        self._offset_index.rename_to(file_names.replace_suffix(self._offset_index.path, old_suffix, new_suffix))
        self._time_index.rename_to(file_names.replace_suffix(self._time_index.path, old_suffix, new_suffix))

    def has_suffix(self, suffix: str) -> bool:
        return all(path.endswith(suffix) for path in (self._log.path, self._offset_index.path, self._time_index.path))

    def delete_if_exists(self) -> None:
        """Removes the log and both index files; missing files are fine."""
        self.drop_batch_directory()
        self._offset_index.delete_if_exists()
        self._time_index.delete_if_exists()
        self._log.delete_if_exists()

    def last_modified_ms(self) -> int:
        return self._log.last_modified_ms()

    def set_last_modified_ms(self, mtime_ms: int) -> None:
        self._log.set_last_modified_ms(mtime_ms)
        for path in (self._offset_index.path, self._time_index.path):
            if self._fs.exists(path):
                self._fs.set_mtime_ms(path, mtime_ms)

    def release_handles(self) -> None:
        """Closes the ``.log`` descriptor and unmaps both indexes of an inactive segment; all
        reopen on next use. Each mapping holds a descriptor (CPython's mmap dups it), so a log
        of thousands of segments keeps only its recently used ones open (see ``Log``)."""
        self._log.close_handler()
        # Released, not closed: the counts stay (an active segment's index keeps its free slots
        # and is not trimmed), so the segment can be released whether it is active or not.
        self._offset_index.release_mapping()
        self._time_index.release_mapping()

    @property
    def holds_handles(self) -> bool:
        """Whether the segment holds a descriptor or a mapping right now."""
        return self._log.is_open or self._offset_index.is_materialized or self._time_index.is_materialized

    def statistics(self) -> SegmentStatistics:
        """Cheap for the thousands of segments never used since load: an index that was never
        opened has answered no lookup, so it is not asked (its statistics() takes its lock)."""
        warm, cold = self._retired_warm_lookup_count, self._retired_cold_lookup_count
        for index in (self._offset_index, self._time_index):
            if index.is_materialized or index.is_closed or index.is_released:
                stats = index.statistics()
                warm += stats.warm_lookup_count
                cold += stats.cold_lookup_count
        return SegmentStatistics(
            base_offset=self._base_offset,
            size_in_bytes=self._log.size_in_bytes,
            warm_lookup_count=warm,
            cold_lookup_count=cold,
            index_materialized=self._offset_index.is_materialized,
        )

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self._base_offset}, size={self._log.size_in_bytes}, path={self._log.path!r})"


def _headers_of(view: memoryview) -> list[BatchHeader]:
    """Headers of the batches in an in-memory buffer, which must hold complete batches only."""
    headers = []
    walk = BatchWalk(view, torn_tail_ok=False)
    try:
        for position, fields in walk:
            headers.append(
                BatchHeader(
                    position,
                    fields[HeaderField.BASE_OFFSET],
                    fields[HeaderField.LENGTH] + LOG_OVERHEAD,
                    fields[HeaderField.BASE_OFFSET] + fields[HeaderField.LAST_OFFSET_DELTA],
                    fields[HeaderField.MAX_TIMESTAMP],
                )
            )
    except _CodecError as exc:
        raise CorruptRecordError(f"appended bytes: {exc}") from exc
    if walk.position != len(view):
        raise CorruptRecordError(f"{len(view) - walk.position} trailing bytes after the batch at {walk.position}")
    return headers


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
