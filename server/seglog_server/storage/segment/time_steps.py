"""TimeSteps: one segment's time-step table, answering lookups by time without reading the log.

The answer to a target T (from a segment, for a starting offset S) is the first record in log
order with a timestamp >= T, when its offset is >= S. Every record before it is below T, so
that record raised the running maximum of the timestamps: it is a *step*. The table keeps every
step of the segment in log order, two int64 columns (16 bytes a step)::

    timestamps   the step's timestamp (strictly ascending)
    offsets      the offset of the record that made it

and the first record reaching T is the step ``bisect_left(timestamps, T)``: no index search, no
read of the ``.log``. A step below S says nothing about S's answer (the caller searches as
before). Steps are at most the records and at most the distinct milliseconds: a million records
produced over a second or two make about 1,500.

The steps follow the reference search exactly, batch headers included: the search picks the
first batch whose header's maxTimestamp reaches T and walks its records. So a batch whose
maxTimestamp raises the running maximum is walked (``record_steps``: compiled, every rule of
``walk_records``) and must hold a record carrying that maxTimestamp (a LogAppendTime batch: its
first record, at the header's time, whatever timestampDelta it carries); a batch that raises
nothing is entered by its header alone (the search never walks it: an earlier batch reaches
every target it could). A batch the walk refuses, whose records disagree with its header, or
whose header the codec's ``BatchWalk`` refuses (lengths against the file, offsets rising inside
the segment's bounds), or that spans an offset index entry (a length rotted onto a later header:
the search starting at that entry reads the batches it jumps over) ends the table there
(``damaged``): targets past its last step are the per-target search's, which meets the damage
(or not) exactly as before.

It is a cache: the files stay Kafka's. The active segment's table is fed by the appends (the
batch is in hand, a compressed one's records as its validation decompressed them:
``append_batch``), and a segment without one (after a restart, dropped from the
budget, an append the feed does not take) builds it from the ``.log`` a bounded part at a time
(``extend``). The segment drops it whenever its bytes may change otherwise than by appends
(truncation, recovery, deletion). All tables together stay within ``TIME_STEPS_BYTES_MAX``
(``DirectoryBudget``, least recently used out).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

from seglog.records import HEADER, LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, BatchStop, BatchWalk, CodecError, walk_records
from seglog.records.walk_compiled import record_steps

from ..base.errors import CorruptRecordError
from ..format.file_records import HeaderField
from ..format.record_timestamps import _records_area
from .batch_directory import DirectoryBudget, IndexEntries

__all__ = ["TIME_STEPS", "TIME_STEPS_BYTES_MAX", "TimeSteps"]

# Every table of the process together: 16 bytes a step, so 32 MiB hold two million steps (a
# million records with a distinct millisecond each, twice; the benchmark's million records make
# about 1,500).
TIME_STEPS_BYTES_MAX = 32 * 1024 * 1024
# A build reads this much at a time while the batches it meets are smaller.
_WALK_CHUNK_BYTES = 256 * 1024
_STEP_BYTES = 2 * 8
_OBJECT_BYTES = 400  # the object and its two empty arrays, about
_TIMESTAMP_TYPE_BIT = 0x08  # LogAppendTime: every record reads the batch maxTimestamp
_COMPRESSION_MASK = 0x07
_NO_STEP = -(1 << 63)


class TimeSteps:
    """The steps of one segment's ``.log`` up to ``end_position`` (see the module docstring).
    Not thread-safe: the owning log's lock serialises its segment's calls."""

    __slots__ = ("timestamps", "offsets", "end_position", "next_offset", "damaged", "__weakref__")

    def __init__(self, base_offset: int) -> None:
        self.timestamps = array("q")
        self.offsets = array("q")
        self.end_position = 0  # the end of the last batch entered
        self.next_offset = base_offset  # a batch entered next must start at or above this
        self.damaged = False  # a batch at end_position was refused: nothing past it is known

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def size_bytes(self) -> int:
        return len(self.timestamps) * _STEP_BYTES + _OBJECT_BYTES

    @property
    def running_max(self) -> int:
        return self.timestamps[-1] if self.timestamps else _NO_STEP

    def enter(self, batch: bytes | memoryview, position: int, size: int, fields: tuple,
              records_area: bytes | None = None) -> bool:
        """Enters the whole batch ``batch[:size]`` whose header ``fields`` (the bytes' own: its
        base offset the one written) was checked, at ``position`` = ``end_position``; False
        (the table unchanged, ``damaged`` set) when its records refuse the walk or disagree with
        its header. ``records_area``: a compressed batch's records already decompressed (else
        decompressed here when walked)."""
        max_timestamp = fields[HeaderField.MAX_TIMESTAMP]
        base_offset = fields[HeaderField.BASE_OFFSET]
        if max_timestamp > self.running_max:
            base_timestamp = fields[HeaderField.BASE_TIMESTAMP]
            log_append_time = fields[HeaderField.ATTRIBUTES] & _TIMESTAMP_TYPE_BIT
            try:
                if records_area is not None and fields[HeaderField.ATTRIBUTES] & _COMPRESSION_MASK:
                    data, start, end = records_area, 0, len(records_area)
                else:
                    data, start, end = _records_area(batch, fields)
                if log_append_time:
                    # Every record reads maxTimestamp: the first record is the step, whatever its
                    # own timestampDelta (even INT64_MIN, which no floor is below). The whole walk
                    # for its verdict, then the first record's offsetDelta.
                    count = fields[HeaderField.RECORDS_COUNT]
                    record_steps(data, start, end, count, 0, base_offset, _NO_STEP)
                    first = next(walk_records(data, start, end, min(count, 1)), None)
                    offsets = () if first is None else (base_offset + first[1],)
                    if offsets and not _NO_STEP <= offsets[0] < -_NO_STEP:
                        raise OverflowError("the first record's offset is past int64")
                else:
                    timestamps, offsets, _ = record_steps(data, start, end, fields[HeaderField.RECORDS_COUNT],
                                                          base_timestamp, base_offset, self.running_max)
            except (CodecError, CorruptRecordError, OverflowError):
                self.damaged = True
                return False
            if log_append_time:
                if not offsets:
                    self.damaged = True
                    return False
                self.timestamps.append(max_timestamp)
                self.offsets.append(offsets[0])
            else:
                if not timestamps or timestamps[-1] != max_timestamp:
                    self.damaged = True  # the search trusts the header, the records say otherwise
                    return False
                self.timestamps.extend(timestamps)
                self.offsets.extend(offsets)
        self.end_position = position + size
        self.next_offset = base_offset + fields[HeaderField.LAST_OFFSET_DELTA] + 1
        return True

    def extend(
        self, read: Callable[[int, int], bytes], file_end: int, offset_limit: int, size_bytes_max: int = 1 << 62,
        read_bytes_max: int = 1 << 62, index_positions: Callable[[int, int], list[int]] | None = None,
    ) -> bool:
        """Enters the batches from ``end_position`` towards ``file_end`` (the file's logical end),
        reading with ``read(position, size)`` at most about ``read_bytes_max`` bytes (each call
        enters at least a batch), so one call's work is bounded and a large file is entered over
        several calls; False when it stopped because the table grew past ``size_bytes_max``. A
        batch refused (its header by the codec's ``BatchWalk``, its records by the walk, a batch
        spanning an entry of ``index_positions``: see ``batch_directory.IndexEntries``, a read
        shorter than asked) sets ``damaged`` and ends the walk; an OSError propagates with every
        batch entered before it kept."""
        assert file_end >= self.end_position, "a shrunk file drops its table"
        position = self.end_position
        read_left = read_bytes_max
        f_base, f_length = HeaderField.BASE_OFFSET, HeaderField.LENGTH
        entries, fence = IndexEntries(index_positions), -1  # fence: the first entry past a batch's start
        while not self.damaged and file_end - position > 0 and read_left > 0:
            if self.size_bytes > size_bytes_max:
                return False
            size = min(_WALK_CHUNK_BYTES, file_end - position, max(read_left, RECORD_BATCH_OVERHEAD))
            chunk = read(position, size)
            if len(chunk) < size:  # the file ends before its size: damage, never read again
                self.damaged = True
                break
            walk = BatchWalk(chunk, 0, region_end=file_end - position, origin=position, torn_tail_ok=False,
                             offset_min=self.next_offset, offset_limit=offset_limit)
            entered = 0
            try:
                for at, fields in walk:
                    batch_size = fields[f_length] + LOG_OVERHEAD
                    if position + at >= fence:
                        fence = entries.after(position + at)
                    if fence < position + at + batch_size:  # a search from that entry reads other batches
                        self.damaged = True
                        break
                    if at + batch_size <= len(chunk):
                        batch = memoryview(chunk)[at: at + batch_size]
                    else:
                        batch = read(position + at, batch_size)  # a batch longer than the chunk
                        if len(batch) < batch_size or HEADER.unpack_from(batch, 0)[f_base] != fields[f_base]:
                            self.damaged = True
                            break
                    if not self.enter(batch, position + at, batch_size, fields):
                        break
                    entered += batch_size
            except CodecError:
                self.damaged = True
            read_left -= max(entered, RECORD_BATCH_OVERHEAD)
            if self.damaged or walk.stop is not BatchStop.NEED_BYTES or self.end_position == position:
                break  # the walk ended (the file's end, or damage), or made no progress
            position = self.end_position
        return True


TIME_STEPS = DirectoryBudget(TIME_STEPS_BYTES_MAX)
"""The process's time-step tables (the storage's segments share the budget)."""
