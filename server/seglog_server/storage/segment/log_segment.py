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

Its searches by time (``find_offset_by_timestamp(s)``, ``offset_of_max_timestamp`` and the
lookup structures they build and keep) are ``SegmentTimeLookups`` (segment_time_lookups.py), the
mixin the class is built on.

Not thread-safe; the owning ``Log`` serialises calls with its lock.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import struct
from collections.abc import Callable, Iterator
from typing import NamedTuple

from seglog.records import LOG_OVERHEAD, BatchWalk, vouch_batches
from seglog.records import CodecError as _CodecError

from ..base import file_names
from ..format.abstract_index import RELATIVE_OFFSET_MAX
from ..base.clock import Clock
from ..base.errors import CorruptRecordError, IndexFullError, InvalidOffsetError, OffsetOverflowError
from ..format.file_records import BatchHeader, FileRecords, HeaderField, OffsetBounds, TimestampAndOffset
from ..base.fs import REAL_FS, FileSystem
from ..base.inline_calls import refuse_if_inline
from ..base.log_config import LogConfig
from ..base.observer import OBSERVER, PhaseTimer, stopwatch
from ..format.offset_index import OffsetIndex
from .lookup_budget import LookupRefused
from .segment_check import check_indexes, check_tail
from .segment_files import SegmentFiles
from .segment_recovery import RecoveryScan
from .segment_time_lookups import _OFFSET_LIMIT, _SCAN_BYTES_MAX, _SCAN_SLACK_BYTES, SegmentTimeLookups
from ..format.time_index import ENTRY as TIME_INDEX_ENTRY
from ..format.time_index import TimeIndex, TimestampOffset

__all__ = ["LogSegment", "RollReason", "SegmentStatistics", "written_head"]

_LOG = logging.getLogger(__name__)
# A batch's base offset, length, partition leader epoch and magic: what vouches for an index entry.
_HEAD = struct.Struct(">qiib")

_BASE_OFFSET = struct.Struct(">q")  # the batch's first field, rewritten when offsets are assigned
# baseOffset, length (the batch's own 4 bytes), partitionLeaderEpoch: a stamped batch's first 16
# bytes, the owner's epoch in cluster mode written over the producer's.
_STAMPED_HEAD = struct.Struct(">q4si")
_new_tuple = tuple.__new__


def written_head(batch: memoryview, base_offset: int, leader_epoch: int | None) -> tuple[bytes, int]:
    """The first bytes ``append_batch`` writes for ``batch`` and where the batch's own bytes take
    over: the head followed by ``batch[start:]`` is the batch as the segment holds it."""
    if leader_epoch is None:
        return _BASE_OFFSET.pack(base_offset), 8
    # baseOffset, the batch's own length, partitionLeaderEpoch; then magic onwards
    return _STAMPED_HEAD.pack(base_offset, bytes(batch[8:12]), leader_epoch), 16
_NO_TIMESTAMP = -1
_UNKNOWN = object()  # a cached answer not computed yet


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


class LogSegment(SegmentTimeLookups):
    """One segment: its ``FileRecords`` and lazily mapped ``OffsetIndex`` and ``TimeIndex``."""

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
        # Offset index rebuilds a read made after an entry disagreed with the log (statistics).
        self.index_rebuilt_on_read_count = 0
        self._offset_index_rebuilt = False  # by this process, from the log: its entries are true
        # Lookup counts of index objects dropped by release_handles, kept for statistics.
        self._retired_warm_lookup_count = 0
        self._retired_cold_lookup_count = 0
        self._init_time_lookups()
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
        (what retention.ms compares against). Known already (the lookups by time ask the active
        segment's at every lookup past the others), it is read without ``_load_max_timestamp``."""
        if self._pending_check is not None or not self._max_timestamp_known:
            self._load_max_timestamp()
        timestamp = self._max_timestamp_ms
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
        head, rest_start = written_head(batch, base_offset, leader_epoch)
        size = log.append_patched(head, batch[rest_start:])
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
        bounds = self.offset_bounds(offset_limit)
        entry = self._offset_index.lookup(offset)
        if starting_position > entry[1]:
            return self._log.search_for_offset_with_size(offset, starting_position, self._scan_bytes, bounds)
        return self._search_from_entry(offset, entry, bounds)

    # -- the index entry a search starts from: trusted only as far as the log agrees -----------
    def _search_from_entry(self, offset: int, entry: tuple[int, int], bounds: OffsetBounds) -> BatchHeader | None:
        """The first batch whose last offset is >= ``offset``, scanned from ``entry`` (the offset
        index's greatest entry at or below it). An entry names a batch's last offset and where
        that batch starts, so the batch found at the entry's own position must start at or
        below the entry's offset; one starting above it means the entry lies (a rotted offset or
        position) and the batches between the true position and this one would be skipped. So
        would a position past the log's end, or one inside a batch (the walk fails). Any of
        these: the index is rebuilt from the log and the search done again
        (``_index_disagrees``). The check costs two comparisons on the hot path."""
        position = entry[1]
        if position:
            if position >= self._log.size_in_bytes:  # (a read there fails with EINVAL: an I/O error)
                return self._index_disagrees(offset, entry, bounds, "its position is past the log's end")
            try:
                first = self._log.search_for_offset_with_size(offset, position, self._scan_bytes, bounds)
            except CorruptRecordError as exc:
                if self.index_rebuilt_on_read_count:
                    raise  # the index was rebuilt from this log: the damage is the log's own
                return self._index_disagrees(offset, entry, bounds, f"a walk from its position fails: {exc}")
        else:  # the segment's start: no entry involved (a failed walk is the log's own damage)
            return self._log.search_for_offset_with_size(offset, 0, self._scan_bytes, bounds)
        if first is not None and first[0] == position and (first[1] > entry[0] or entry[0] > offset):
            # (an entry above the offset sought: a search over entries out of order landed there)
            return self._index_disagrees(
                offset, entry, bounds, f"the batch at its position starts at offset {first[1]}")
        return first

    def _vouched_position(self, offset: int, entry: tuple[int, int]) -> int:
        """Where a lookup by time scans from for ``offset``: ``entry``'s position (the offset
        index's lookup of it) once the batch header there agrees with the entry (a v2 batch held
        by the log, starting inside the segment at or below the entry's offset), else the
        position the index rebuilt from the log gives. One read of a header the scan reads next
        anyway: only the scans that start from the offset index pay it."""
        position = entry[1]
        if not position:
            return 0
        if entry[0] <= offset and self.head_agrees(position, entry[0]):
            return position
        why = "the bytes at its position are no batch starting at or below its offset"
        if self._offset_index_rebuilt:
            # Rebuilt already (or tried: a full disk) and still disagreeing: from the start.
            self._refuse_scan_from_start()
            return 0
        rebuilt = self._rebuild_offset_index(
            "%s: the offset index entry (offset %d, position %d) disagrees with the log (%s); rebuilding the "
            "offset index from the log", self, entry[0], position, why)
        return self._offset_index.lookup(offset)[1] if rebuilt else 0

    def head_agrees(self, position: int, entry_offset: int) -> bool:
        """Whether a v2 batch the log holds whole starts at ``position`` (inside the log), at or
        below ``entry_offset`` and at or above the segment's base offset: one header read."""
        size = self._log.size_in_bytes
        if position >= size:
            return False
        head = self._log.read(position, _HEAD.size)
        if len(head) != _HEAD.size:
            return False
        base_offset, length, _, magic = _HEAD.unpack(head)
        return magic == 2 and self._base_offset <= base_offset <= entry_offset and position + LOG_OVERHEAD + length <= size

    def _scan_start_agrees(self, entry: tuple[int, int], first: tuple[BatchHeader, bytes, int] | None) -> bool | None:
        """Whether the batch at ``entry``'s position, as the scan that started there read it
        (``first``: what it found first, with the chunk holding it), starts at or below the
        entry's offset; None when that chunk was not read from the entry's position (the scan
        found its batch further on, or none): ``_vouched_position`` reads the header then."""
        if first is None:
            return None
        header, chunk, at = first
        if header.position - at != entry[1] or len(chunk) < _HEAD.size:
            return None
        base_offset, _, _, magic = _HEAD.unpack_from(chunk, 0)
        return magic == 2 and self._base_offset <= base_offset <= entry[0]

    def rebuild_offset_index_once(self) -> bool:
        """Rebuilds the offset index from the log unless this segment did already; whether it
        did. For a search that failed walking from an entry's position (a lookup by time), which
        then searches once more: a second failure is the log's own damage."""
        if self._offset_index_rebuilt or not self._offset_index.entry_count:
            return False
        return self._rebuild_offset_index(
            "%s: a search failed walking from an offset index entry's position; rebuilding the offset index "
            "from the log", self)

    def _index_disagrees(self, offset: int, entry: tuple[int, int], bounds: OffsetBounds, why: str) -> BatchHeader | None:
        """The search of ``_search_from_entry`` after a lying entry: logged, the offset index
        rebuilt from the log (Kafka rebuilds an index its load finds corrupt), then searched
        again, from the segment's start if the rebuilt index lies too."""
        if not self._offset_index_rebuilt:
            self._rebuild_offset_index(
                "%s: the offset index entry (offset %d, position %d) disagrees with the log (%s); rebuilding "
                "the offset index from the log", self, entry[0], entry[1], why)
        rebuilt = self._offset_index.lookup(offset)
        if 0 < rebuilt[1] < self._log.size_in_bytes:
            try:
                first = self._log.search_for_offset_with_size(offset, rebuilt[1], self._scan_bytes, bounds)
            except CorruptRecordError:
                first = None
            else:
                if first is None or first[0] != rebuilt[1] or first[1] <= rebuilt[0]:
                    return first
        self._refuse_scan_from_start()
        return self._log.search_for_offset_with_size(offset, 0, self._scan_bytes, bounds)

    def _refuse_scan_from_start(self) -> None:
        """InlineRefused (LookupRefused for a bounded lookup) before a scan from the segment's
        start that a lying entry forces: a walk as long as the segment, which the storage pool
        takes, never the event loop. Not only the rebuild's: once a full disk refused that, the
        index keeps its lie and every read meeting it would walk from the start inline."""
        what = "a scan from the segment's start past a lying offset index entry"
        if self.lookup_budget is not None:
            raise LookupRefused(what)
        refuse_if_inline(what)

    def _rebuild_offset_index(self, *warning: object) -> bool:
        """Whether the offset index was rebuilt from the ``.log``'s batch headers (the bounded
        walk), by the append path's rule (an entry when more than index.interval.bytes were
        appended since the last). Tried once per segment: a log that does not walk whole to its
        end keeps its index (the entries past the damage are the only way past it, and the
        reads meet the damage themselves); a full disk leaves the index as it was, in memory and
        in the file (the next load meets the lying entry and rebuilds then), and the guard passes
        over each entry that disagrees with the log by scanning from the segment's start."""
        # Not on the event loop: a walk of every header (the bounded lookup and the inline call go
        # to the storage pool, which rebuilds).
        if self.lookup_budget is not None:
            raise LookupRefused("the offset index's rebuild")
        refuse_if_inline("the offset index's rebuild")
        _LOG.warning(*warning)
        self._offset_index_rebuilt = True  # tried: not again by every read of the segment
        # For /metrics: a lying index is rot on the disk or a change from outside, whether or not
        # the rebuild below succeeds. The log directory: <dir>/<topic>-<partition>/<base>.log.
        OBSERVER.current.offset_index_rebuilt(os.path.dirname(os.path.dirname(self._log.path)))
        entries: list[tuple[int, int]] = []
        since, end = 0, 0
        last = self.base_offset - 1  # the offset the batch before ends at
        try:
            for position, fields in self._log.raw_headers(0):
                first = fields[HeaderField.BASE_OFFSET]
                if first <= last or fields[HeaderField.LAST_OFFSET_DELTA] < 0:
                    # Rotted offsets: an index of the batches up to here only (the entries must
                    # rise) would lose the entries past them, the only way past the damage.
                    _LOG.warning("%s: the offset index is kept: the batch at position %d starts at offset %d, "
                                 "not above %d where the batch before it ends", self, position, first, last)
                    return False
                last = first + fields[HeaderField.LAST_OFFSET_DELTA]
                if since > self._index_interval_bytes:
                    entries.append((last, position))
                    since = 0
                size = fields[HeaderField.LENGTH] + LOG_OVERHEAD
                since += size
                end = position + size
        except CorruptRecordError as exc:
            _LOG.warning("%s: the offset index is kept: the log does not walk whole to rebuild it (%s)", self, exc)
            return False
        if end != self._log.size_in_bytes:
            _LOG.warning("%s: the offset index is kept: the log walks whole only to byte %d of %d", self, end,
                         self._log.size_in_bytes)
            return False
        index = self._offset_index
        try:
            index.resize(max(index.max_index_bytes, index.file_bytes))  # room even if the interval shrank
            count = min(len(entries), index.max_entry_count)
            index.reserve_entries(count)  # the blocks first: no store below can fail half-way
        except OSError as exc:
            # A full disk, say: not the log's fault, so no I/O error for the read (that would take
            # the directory offline). The entries stay as they were, in memory and in the file,
            # so the next load finds them (and rebuilds the index then); here the guard scans the
            # log from the segment's start wherever an entry disagrees with it.
            _LOG.error("%s: rebuilding the offset index failed (%s); it is kept as it was, and its "
                       "entries that disagree with the log are passed over until the next load", self, exc)
            if self._log.is_sealed:
                with contextlib.suppress(OSError):
                    index.trim_to_valid_size()  # a crash must not find the grown tail as entries
            return False
        index.truncate()
        try:
            for entry_offset, position in entries[:count]:
                index.append(entry_offset, position)
        except (IndexFullError, InvalidOffsetError, OffsetOverflowError):
            pass  # the entries so far are true; reads past them walk on from the last
        if self._log.is_sealed:
            with contextlib.suppress(OSError):  # (a shrink; the close trims again)
                index.trim_to_valid_size()
        self.index_rebuilt_on_read_count += 1
        self._bytes_since_last_index_entry = None
        self._index_full_reason = _UNKNOWN
        return True

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
        entry = self._offset_index.lookup(start_offset)
        watch.lap_faults("index_search", "index_lookup")
        first = self._search_from_entry(start_offset, entry, bounds)
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
