"""BatchDirectory: one segment's batches in memory, for lookups by time that land in many batches.

A batched lookup whose targets land in distinct batches (100 random times over a few hundred
large batches, or over thousands of small ones) paid a whole search per target: two index
searches, the header reads of the entry's batch and the next, then the records (22-34 us of
CPU a target). The directory keeps, for each batch of the segment in file order, three int64
columns (24 bytes a batch)::

    positions      where the batch starts in the .log
    last_offsets   its last offset
    reach          the running maximum of the batches' maxTimestamps up to it

so the first batch whose maxTimestamp reaches a target is ``bisect_left(reach, target)`` (the
running maximum first reaches the target at that batch, and there it is the batch's own), and
the batch holding a starting offset ``bisect_left(last_offsets, offset)``. A lookup then reads
the found batch's header (61 bytes) and checks it against its entry (length, last offset,
maxTimestamp) before it trusts the entry, so bytes changed under the directory fail as the
per-target search fails; the record comes from the batch's record-time table, or one walk.

It is a cache: the files stay Kafka's. It is built by a header walk of the segment with the
rules of every other walk (the codec's ``BatchWalk``: each length checked against the file,
offsets rising inside the segment's bounds) and one of its own: no batch may span an offset
index entry (``IndexEntries``: a length rotted into one landing on a later header would skip
batches a search starting at that entry reads), extended by the same walk as the active segment
grows, a bounded part of the file a lookup (the segment's ``_DIRECTORY_EXTEND_BYTES``: a lookup
may run on the event loop; targets past the part entered are the scans'), and dropped by the segment whenever its bytes may change otherwise (truncation,
recovery, the first-use check). The walk stops at the first batch it refuses and says so
(``damaged``): targets past that point are left to the per-target search, which meets the
damage (or not) exactly as before. All directories together stay within ``DIRECTORY_BYTES_MAX``
(``DirectoryBudget``, least recently used out).
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable

from seglog.records import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, BatchStop, BatchWalk, CodecError

from ..format.file_records import HeaderField

__all__ = ["BatchDirectory", "DIRECTORIES", "DIRECTORY_BYTES_MAX", "DirectoryBudget", "IndexEntries"]

# Every directory of the process together: 24 bytes a batch, so 16 MiB hold some 700,000
# batches (70 million records in 100-record batches), beside the record-time tables' 16 MiB.
DIRECTORY_BYTES_MAX = 16 * 1024 * 1024
# A header walk reads this much at a time while the batches it meets are smaller: a few dozen
# small batches' headers a read (the bytes between them are read too: a walk of small batches
# reads the file). After a batch longer than that, it reads one header's bytes at the next one.
_WALK_CHUNK_BYTES = 256 * 1024
_ENTRY_BYTES = 3 * 8
_OBJECT_BYTES = 400  # the object and its three empty arrays, about
_ENTRY_PAGE = 256  # index entries fetched at a time by a walk (IndexEntries)
_NO_ENTRY = 1 << 62  # past any file: no entry ahead


class BatchDirectory:
    """The batches of one segment's ``.log`` up to ``end_position`` (see the module docstring).
    Not thread-safe: the owning log's lock serialises its segment's calls."""

    __slots__ = ("positions", "last_offsets", "reach", "end_position", "next_offset", "damaged", "__weakref__")

    def __init__(self, base_offset: int) -> None:
        self.positions = array("q")
        self.last_offsets = array("q")
        self.reach = array("q")
        self.end_position = 0  # the end of the last batch entered
        self.next_offset = base_offset  # a batch entered next must start at or above this
        self.damaged = False  # the walk refused the batch at end_position: nothing past it is known

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def size_bytes(self) -> int:
        return len(self.positions) * _ENTRY_BYTES + _OBJECT_BYTES

    def batch_end(self, index: int) -> int:
        """Where the batch ``index`` ends (the next one's position, or ``end_position``)."""
        return self.positions[index + 1] if index + 1 < len(self.positions) else self.end_position

    def extend(
        self, read: Callable[[int, int], bytes], file_end: int, offset_limit: int, size_bytes_max: int = 1 << 62,
        read_bytes_max: int = 1 << 62, index_positions: Callable[[int, int], list[int]] | None = None,
    ) -> bool:
        """Enters the batches from ``end_position`` towards ``file_end`` (the file's logical end),
        reading with ``read(position, size)`` at most ``read_bytes_max`` bytes (one header's more
        when less is left: each call enters at least a batch), so one call's walk is bounded and
        a large file is entered over several calls (``end_position`` says how far it got); False
        when it stopped because the directory grew past ``size_bytes_max`` (checked a chunk at a
        time: a segment of tiny batches must not build hundreds of MB before it is refused). A
        batch the walk refuses (a length past the file, offsets out of order or out of the
        bounds, a batch spanning an entry of ``index_positions``: see ``IndexEntries``), or a
        read shorter than asked, sets ``damaged`` and ends the walk; an OSError (or the read's
        own error) propagates with every batch entered before it kept."""
        assert file_end >= self.end_position, "a shrunk file drops its directory"
        positions, last_offsets, reach = self.positions, self.last_offsets, self.reach
        running_max = reach[-1] if reach else -(1 << 63)
        position = self.end_position
        chunk_bytes = _WALK_CHUNK_BYTES
        read_left = read_bytes_max
        f_base, f_delta, f_max = HeaderField.BASE_OFFSET, HeaderField.LAST_OFFSET_DELTA, HeaderField.MAX_TIMESTAMP
        f_length = HeaderField.LENGTH
        entries, fence = IndexEntries(index_positions), -1  # fence: the first entry past a batch's start
        while not self.damaged and file_end - position > 0 and read_left > 0:
            if self.size_bytes > size_bytes_max:
                return False
            size = min(chunk_bytes, file_end - position, max(read_left, RECORD_BATCH_OVERHEAD))
            read_left -= size
            chunk = read(position, size)
            if len(chunk) < size:  # the file ends before its size: damage, never read again
                self.damaged = True
                break
            walk = BatchWalk(chunk, 0, region_end=file_end - position, origin=position, torn_tail_ok=False,
                             offset_min=self.next_offset, offset_limit=offset_limit)
            batches = iter(walk)
            refused = -1  # where a batch spanning an index entry starts
            try:
                for at, fields in batches:
                    start = position + at
                    if start >= fence:
                        fence = entries.after(start)
                    if fence < start + LOG_OVERHEAD + fields[f_length]:
                        refused = start
                        break
                    running_max = max(running_max, fields[f_max])
                    positions.append(start)
                    last_offsets.append(fields[f_base] + fields[f_delta])
                    reach.append(running_max)
            except CodecError:
                self.damaged = True
            finally:
                batches.close()
                if refused < 0:
                    self.next_offset = walk.last_offset + 1
                    position += walk.position
                else:
                    self.damaged = True
                    self.next_offset = last_offsets[-1] + 1 if last_offsets else self.next_offset
                    position = refused
                self.end_position = position
            if walk.stop is not BatchStop.NEED_BYTES:
                break
            # After a batch longer than a chunk, read the next header alone.
            last_size = self.end_position - positions[-1] if len(positions) else 0
            chunk_bytes = RECORD_BATCH_OVERHEAD if last_size > _WALK_CHUNK_BYTES else _WALK_CHUNK_BYTES
        return True


class IndexEntries:
    """The positions of the offset index's entries ahead of a walk of the ``.log``, fetched a
    page at a time with ``index_positions(position, count)`` (the first ``count`` entries past
    ``position``, ascending: ``OffsetIndex.positions_after``).

    A search by time or offset starts at an entry's position and follows the batch lengths from
    there. A cache built by a walk from the segment's start follows them from position 0: the
    two meet the same batches only while every entry names a batch the walk entered. A length
    that rotted into another valid length (landing exactly on a later batch's header) makes the
    walk jump over batches a search starting at an entry between them still reads: so a walk
    refuses (as damage) a batch that spans an entry, and the search answers from there on."""

    __slots__ = ("_index_positions", "_ahead", "_next", "_exhausted")

    def __init__(self, index_positions: Callable[[int, int], list[int]] | None) -> None:
        self._index_positions = index_positions
        self._ahead: list[int] = []
        self._next = 0
        self._exhausted = index_positions is None

    def after(self, position: int) -> int:
        """The first entry's position past ``position`` (positions asked ascend), else past any file."""
        ahead, at = self._ahead, self._next
        while at < len(ahead) and ahead[at] <= position:
            at += 1
        if at == len(ahead):
            if self._exhausted:
                self._next = at
                return _NO_ENTRY
            ahead = self._ahead = self._index_positions(position, _ENTRY_PAGE)  # type: ignore[misc]
            at = 0
            if len(ahead) < _ENTRY_PAGE:
                self._exhausted = True  # the index holds no more (it does not change during a walk)
            if not ahead:
                self._next = 0
                return _NO_ENTRY
        self._next = at
        return ahead[at]


class DirectoryBudget:
    """Every directory of the process, least recently used first out, within ``bytes_max``.

    The budget holds the only lasting reference to each directory; a segment keeps a weak one,
    and a lookup a strong one while it runs. Dropping a directory from the budget (over the
    limit, or its segment's files changed) frees it once no lookup holds it; its segment builds
    a new one when a lookup next asks. Thread-safe: lookups of different logs run on the storage
    pool's threads (a directory itself is used under its log's lock only)."""

    def __init__(self, bytes_max: int = DIRECTORY_BYTES_MAX) -> None:
        self.bytes_max = bytes_max
        self.size = 0
        self._entries: OrderedDict[int, tuple[BatchDirectory, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def fits(self, size_bytes: int) -> bool:
        return size_bytes <= self.bytes_max

    def hold(self, directory: BatchDirectory) -> None:
        """Counts ``directory`` at its present size as the most recently used (entering it, or
        after it grew), dropping the least recently used others past the limit."""
        size = directory.size_bytes
        with self._lock:
            _, counted = self._entries.pop(id(directory), (None, 0))
            self._entries[id(directory)] = (directory, size)
            self.size += size - counted
            while self.size > self.bytes_max and len(self._entries) > 1:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.size -= dropped

    def drop(self, directory: BatchDirectory) -> None:
        with self._lock:
            _, counted = self._entries.pop(id(directory), (None, 0))
            self.size -= counted


DIRECTORIES = DirectoryBudget()
"""The process's directories (the storage's segments share the budget)."""
