"""The shell shared by the mmap'd indexes (Kafka's ``AbstractIndex`` plus ``LazyIndex``).

An index file is an array of fixed-size entries (the subclass knows the format). This base knows
everything else:

- **Lazy opening.** Constructing an index touches nothing on disk. The file is opened, created and
  preallocated if missing, and mmap'd on first use (a lookup, an append, a flush, a size question).
  Renaming or deleting an index that was never used only moves or removes the file if it exists,
  and creates nothing (KAFKA-7283, KAFKA-9373: brokers with tens of thousands of segments spent
  start-up and shutdown in mmap calls).
- **Preallocation.** A new file is sized to ``max_index_bytes`` rounded down to whole entries, so
  appends are stores into the mapping. The size is sparse (``ftruncate``): a new partition's two
  indexes hold no blocks, so 10,000 empty partitions do not hold 200 GB of disk.
- **Space before stores.** A store into a hole of a mapped file allocates the block at page-fault
  time; on a full disk that fault is SIGBUS, which kills the process with nothing logged (Kafka
  has the same gap: its MappedByteBuffer stores fault the JVM). So before an entry is stored, the
  free slots under it are written with zeros through ``pwrite`` (``RESERVE_AHEAD_BYTES`` at a
  time, just ahead of the write position, never the whole preallocated size): the file system
  reserves the blocks in that call, so a full disk is an ``OSError`` raised before anything
  changed, and the stores that follow land on pages that already have their space. Zeros rather
  than ``posix_fallocate``: fallocated blocks are *unwritten* extents that ext4 converts at
  writeback, and a flush of a freshly written index cost about twice as much that way
  (bench/bench_index_append.py, which also measures writing every entry with ``pwrite``).
  Copy-on-write file systems (btrfs) allocate again at writeback and stay exposed; seglog's
  directories belong on ext4, xfs or tmpfs. **Reads** fault too where the file system allocates
  on a read of a hole (tmpfs does): so an existing file is mapped only once its holes have blocks
  (``_back_holes_locked``: posix_fallocate, an OSError naming the file when the disk is full), and
  ``reset`` (recovery) empties a file before mapping it. ``trim_to_valid_size`` (on roll and close) cuts it back to
  the valid entries, because on reopening **every full slot of an existing file is an entry**: an
  untrimmed file after a crash reads as full of zero entries, which is why indexes above the
  recovery point are rebuilt from the log.
- **A file cut from outside.** seglog never shrinks a mapped file without remapping it, but an
  operator or another program may: every use of the mapping first compares the file's length (an
  fstat of the mapping's descriptor) with the length mapped, and a shorter file is
  ``CorruptIndexError`` instead of SIGBUS at the first load past its end (``_check_length_locked``).
- **Resizing** (``resize``, ``reset``), flushing (msync), closing and unmapping.
- **Releasing** (``release_mapping``): the mapping (and the descriptor CPython's mmap keeps for it)
  is given back while the entry counts are kept, so even an active segment's index can leave the
  process-wide descriptor budget and be mapped again on its next use.

Thread safety: every public method holds the index's lock, lookups included. Kafka lets lookups
run lock-free on Linux against a duplicate of the mapping; in CPython that buys no parallelism (the
GIL serialises the probes anyway) and would let a reader probe a mapping whose file a concurrent
trim just shrank, which is SIGBUS, not an exception. The lock is a fraction of what the shell
(lock, open check, result tuple) adds to the bare search: about 1 us on a 2-3 us search
(bench/bench_index_lookup.py shows both).

All file access goes through the injected ``FileSystem``; the mapping comes from ``fs.mmap`` too,
so a fault injector can hand out a wrapped mapping to fail flushes.
"""

from __future__ import annotations

import bisect
import enum
import io
import mmap
import operator
import os
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from seglog_server.storage.base.errors import CorruptIndexError, OffsetOverflowError
from seglog_server.storage.base.fs import REAL_FS, FileSystem
from seglog_server.storage.format.index_search import (
    LARGEST_LOWER_BOUND,
    Bound,
    Buffer,
    EntryField,
    EntryLayout,
    Zone,
    first_hot_slot,
    recording,
    slot_and_zone_for,
    slot_zone_and_pages_for,
    slots_between,
)
from seglog_server.storage.base.observer import OBSERVER, PAGE_BYTES, page_of

__all__ = [
    "DEFAULT_MAX_INDEX_BYTES",
    "RELATIVE_OFFSET_MAX",
    "AbstractIndex",
    "IndexSearchExplanation",
    "IndexStatistics",
]

DEFAULT_MAX_INDEX_BYTES = 10 * 1024 * 1024
"""Kafka's ``segment.index.bytes`` default: 1,310,720 offset entries, 873,813 time entries."""

RESERVE_AHEAD_BYTES = 16 * 1024
"""Bytes of free slots backed with real blocks at a time: four pages, 2,048 offset entries (about
8 MiB of log at the default index.interval.bytes), so the extra open + pwrite + close is paid once
per thousands of appends while a new index holds at most 20 KiB it does not use yet."""

_ZEROS = bytes(RESERVE_AHEAD_BYTES + mmap.PAGESIZE)  # what a reservation writes: never more

RELATIVE_OFFSET_MAX = 2**31 - 1
"""Relative offsets are stored as int32 and must not be negative (Kafka's ``Integer.MAX_VALUE``)."""


class _State(enum.Enum):
    UNMATERIALIZED = "unmaterialized"  # only a path: nothing opened, created or mapped yet
    OPEN = "open"  # file mapped (or known to be 0 bytes long, which mmap cannot map)
    RELEASED = "released"  # unmapped by release_mapping(); counts kept, mapped again on next use
    CLOSED = "closed"  # unmapped by close(), close_handler() or delete_if_exists(); unusable


@dataclass(frozen=True, slots=True)
class IndexStatistics:
    """A snapshot of one index. An index never used reports ``is_materialized=False`` and zero
    counts rather than opening its file to find out."""

    path: str
    is_materialized: bool
    entry_count: int
    max_entry_count: int
    size_in_bytes: int  # bytes of valid entries: entry_count * entry size
    file_bytes: int  # current file length, preallocation included
    warm_lookup_count: int  # lookups answered in the warm section (the newest 8 KiB)
    cold_lookup_count: int  # lookups that fell back to the cold section (Zone.NONE: in neither)


@dataclass(frozen=True, slots=True)
class IndexSearchExplanation:
    """The path of one index search, for ExplainLookup."""

    path: str
    index: str  # "offset" | "time"
    entry_count: int
    zone: Zone
    slot: int  # the answer (NO_SLOT: none)
    probed_slots: tuple[int, ...]  # in probe order
    pages: tuple[int, ...]  # distinct file pages the probes read, in first-touch order
    pages_resident: tuple[bool, ...] = ()  # per page: in the page cache before the search


class AbstractIndex:
    """Generic mmap'd index of fixed-size entries; subclasses declare ``ENTRY`` and ``LAYOUT``."""

    ENTRY: ClassVar[struct.Struct]
    LAYOUT: ClassVar[EntryLayout]
    KIND: ClassVar[str] = "index"  # names the index in messages ("offset index", "time index")
    LABEL: ClassVar[str] = "index"  # the observer's ``index`` label ("offset", "time")

    def __init__(
        self,
        path: str,
        base_offset: int,
        max_index_bytes: int = DEFAULT_MAX_INDEX_BYTES,
        *,
        writable: bool = True,
        fs: FileSystem = REAL_FS,
    ) -> None:
        assert base_offset >= 0, f"base offset must not be negative, got {base_offset}"
        self._path = os.fspath(path)
        self._base_offset = base_offset
        self._max_index_bytes = max_index_bytes
        self._writable = writable
        self._fs = fs
        self._lock = threading.Lock()
        self._state = _State.UNMATERIALIZED
        self._mmap: mmap.mmap | None = None  # None while unmaterialised, closed, or 0 bytes long
        self._buffer: Buffer = b""  # what searches read: the mapping, or b"" when there is none
        self._file_bytes = 0
        self._reserved_bytes = 0  # bytes from the file's start known to be backed by blocks
        self._entry_count = 0
        self._max_entry_count = 0
        self._lookup_counts = dict.fromkeys(Zone, 0)  # subclasses count each lookup's zone
        # field name -> (recording copy of the field, its probe list): made on first observed use
        self._recorders: dict[str, tuple[EntryField, list[int]]] | None = None
        self._after_entries_changed_locked()  # subclasses' caches start as "empty index"

    # -- what every index answers without opening its file ------------------------------------
    @property
    def path(self) -> str:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def max_index_bytes(self) -> int:
        return self._max_index_bytes

    @property
    def is_materialized(self) -> bool:
        """True while the file is open and mapped: after first use, until closed."""
        return self._state is _State.OPEN

    @property
    def is_closed(self) -> bool:
        return self._state is _State.CLOSED

    @property
    def is_released(self) -> bool:
        """True after ``release_mapping`` until the next use maps the file again."""
        return self._state is _State.RELEASED

    def can_append_offset(self, offset: int) -> bool:
        """Whether ``offset`` is representable relative to this index's base offset."""
        return 0 <= offset - self._base_offset <= RELATIVE_OFFSET_MAX

    def relative_offset(self, offset: int) -> int:
        relative = offset - self._base_offset
        if not 0 <= relative <= RELATIVE_OFFSET_MAX:
            raise OffsetOverflowError(
                f"offset {offset} is not representable in {self.KIND} {self._path}: expected an "
                f"offset in [{self._base_offset}, {self._base_offset + RELATIVE_OFFSET_MAX}]"
            )
        return relative

    # -- sizes (these open the file, as Kafka's LazyIndex.get() does) -------------------------
    @property
    def entry_count(self) -> int:
        with self._lock:
            self._open_for_counts_locked()
            return self._entry_count

    @property
    def max_entry_count(self) -> int:
        with self._lock:
            self._open_for_counts_locked()
            return self._max_entry_count

    @property
    def size_in_bytes(self) -> int:
        """Bytes of valid entries (not the preallocated file length)."""
        with self._lock:
            self._open_for_counts_locked()
            return self._entry_count * self.LAYOUT.entry_bytes

    @property
    def file_bytes(self) -> int:
        """The file's current length, preallocated slots included (Kafka's ``length()``)."""
        with self._lock:
            self._open_for_counts_locked()
            return self._file_bytes

    def is_full(self) -> bool:
        with self._lock:
            self._open_for_counts_locked()
            return self._is_full_locked()

    def statistics(self) -> IndexStatistics:
        with self._lock:
            return IndexStatistics(
                path=self._path,
                is_materialized=self.is_materialized,
                entry_count=self._entry_count,
                max_entry_count=self._max_entry_count,
                size_in_bytes=self._entry_count * self.LAYOUT.entry_bytes,
                file_bytes=self._file_bytes,
                warm_lookup_count=self._lookup_counts[Zone.WARM],
                cold_lookup_count=self._lookup_counts[Zone.COLD],
            )

    # -- life cycle -----------------------------------------------------------------------------
    def resize(self, new_bytes: int) -> bool:
        """Sets the file length to ``new_bytes`` rounded down to whole entries and remaps; the
        entries are kept. False if the length was already that. Used to trim (roll, close) and to
        regrow the active segment's index (load, truncation)."""
        with self._lock:
            self._open_locked()
            return self._resize_locked(new_bytes)

    def trim_to_valid_size(self) -> bool:
        """Cuts the preallocated tail so that reopening finds exactly the valid entries."""
        with self._lock:
            self._open_locked()
            return self._resize_locked(self._entry_count * self.LAYOUT.entry_bytes)

    def reset(self) -> None:
        """Drops every entry and regrows the file to ``max_index_bytes``. An index not mapped
        yet (recovery's case) empties its file before mapping it: the old entries are not
        wanted, and after a crash the file may be a preallocated, sparse one whose holes a
        mapping must never touch (see ``_back_holes_locked``)."""
        with self._lock:
            if self._state is _State.UNMATERIALIZED or self._state is _State.RELEASED:
                self._unmap_mapping()
                self._materialize_locked(discard=True)
                self._state = _State.OPEN
                self._after_entries_changed_locked()
                return
            self._open_locked()
            self._truncate_to_entries_locked(0)
            self._resize_locked(self._max_index_bytes)

    def truncate(self) -> None:
        """Drops every entry (the file keeps its length)."""
        with self._lock:
            self._open_locked()
            self._truncate_to_entries_locked(0)

    def flush(self) -> None:
        """msync the mapping. Opens (and so creates) the file first, as Kafka's does. A released
        index has no mapping to sync: munmap kept its dirty pages in the page cache, where an
        fsync of the file finds them; mapping it again here would hold a descriptor the budget
        does not know of."""
        with self._lock:
            if self._state is _State.RELEASED:
                return
            self._open_locked()
            if self._mmap is not None:
                self._mmap.flush()

    def reserve_next_entry(self) -> None:
        """Backs the next free slot with blocks now (OSError on a full disk), so that the store
        a later append makes cannot fault. A full index reserves nothing."""
        with self._lock:
            # Always through the length check, even when the slot is reserved already: the
            # segment calls this before it writes the batch an entry is due for, so a file cut
            # from outside is refused here, with nothing written, not after the batch is in the
            # log (the counts, is_full and file_bytes, skip the check: they touch no page).
            self._open_locked()
            if self._writable and not self._is_full_locked():
                self._reserve_locked((self._entry_count + 1) * self.LAYOUT.entry_bytes)

    def reserve_entries(self, count: int) -> None:
        """Backs the slots of the first ``count`` entries (at most the file's) with blocks now:
        OSError on a full disk with no entry touched (zeros go over free slots only), so that
        rewriting every entry afterwards (a rebuild) cannot fail half-way."""
        with self._lock:
            self._open_locked()
            if not self._writable:
                return
            end = min(count, self._max_entry_count) * self.LAYOUT.entry_bytes
            held = self._entry_count * self.LAYOUT.entry_bytes  # the entries' slots have their blocks
            self._reserved_bytes = max(self._reserved_bytes, min(end, held))
            while self._reserved_bytes < end:  # one RESERVE_AHEAD_BYTES step at a time
                self._reserve_locked(max(self._reserved_bytes, held) + 1)

    def release_mapping(self) -> None:
        """Unmaps (giving back the mapping's descriptor) but keeps the entry counts; the next use
        maps the file again. Unlike ``close`` nothing is trimmed, so an active segment's index
        keeps its free slots."""
        with self._lock:
            if self._state is _State.OPEN:
                self._unmap_mapping()
                self._state = _State.RELEASED

    def close(self) -> None:
        """Trims to the valid entries and unmaps. A never-used index stays untouched on disk."""
        with self._lock:
            if self._state is _State.RELEASED and self._writable:
                self._open_locked()  # map again to trim: reopening must find only entries
            try:
                if self._state is _State.OPEN and self._writable:
                    self._resize_locked(self._entry_count * self.LAYOUT.entry_bytes)
            finally:
                self._unmap_locked()  # unmapped even when trimming failed

    def close_handler(self) -> None:
        """Unmaps without trimming (Kafka's forced unmap, KAFKA-4614)."""
        with self._lock:
            self._unmap_locked()

    def delete_if_exists(self) -> bool:
        """Unmaps and removes the file; True if there was one to remove."""
        with self._lock:
            self._unmap_locked()
            try:
                self._fs.unlink(self._path)
            except FileNotFoundError:
                return False
            return True

    def rename_to(self, path: str) -> None:
        """Moves the file to ``path`` (atomic replace). A never-used index whose file does not
        exist only changes its path: nothing is created."""
        path = os.fspath(path)
        with self._lock:
            try:
                self._fs.replace(self._path, path)
            except FileNotFoundError:
                if self._state is not _State.UNMATERIALIZED or self._fs.exists(self._path):
                    raise
            finally:
                self._path = path

    def update_parent_dir(self, directory: str) -> None:
        """Follows a rename of the whole partition directory (the file already moved with it)."""
        with self._lock:
            self._path = os.path.join(os.fspath(directory), os.path.basename(self._path))

    def __enter__(self) -> AbstractIndex:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._path!r}, base_offset={self._base_offset}, state={self._state.value})"

    # -- for subclasses (caller holds the lock) ----------------------------------------------
    def _search_locked(
        self, target: int, field: EntryField, bound: Bound, held: list[tuple] | None = None
    ) -> tuple[int, Zone]:
        """The warm/cold search over the mapping, counted by zone; with an observer installed,
        also the distinct pages its probes read (the caller counts page faults around it).
        ``held``: a bounded lookup's (lookup_budget.py), which counts the search only if it
        answers: (index, zone, pages) appended to it, for ``count_held``."""
        observer = OBSERVER.current
        if not observer.enabled:
            slot, zone = slot_and_zone_for(self._buffer, self._entry_count, target, field, bound)
            if held is None:
                self._lookup_counts[zone] += 1
            else:
                held.append((self, zone, None))
            return slot, zone
        slot, zone, pages = slot_zone_and_pages_for(self._buffer, self._entry_count, target, field, bound, PAGE_BYTES)
        if held is not None:
            held.append((self, zone, pages))
            return slot, zone
        self._lookup_counts[zone] += 1
        # ``_value_``: an Enum's ``value`` is a Python-level property, hashing one a Python call.
        observer.index_lookup(self.LABEL, zone._value_, pages)
        return slot, zone

    def count_held(self, zone: Zone, pages: int | None) -> None:
        """Counts a search a bounded lookup held (``held`` above) now that it answered: the
        zone, and with an observer the pages (None: none was installed when it searched)."""
        with self._lock:
            self._lookup_counts[zone] += 1
        observer = OBSERVER.current
        if observer.enabled and pages is not None:
            observer.index_lookup(self.LABEL, zone._value_, pages)

    def _sorted_search_locked(
        self, targets: Sequence[int], field: EntryField, held: list[tuple] | None = None
    ) -> list[int]:
        """The LARGEST_LOWER_BOUND slot of each of ``targets`` (ascending): the first and the
        last searched as ``_search_locked`` does, the ones between answered from the entries
        between those two slots, decoded once (``slots_between``); target by target when that
        run is long, its keys out of order, or the targets not ascending.

        Counted as one lookup a target, each in the zone its own search would have run in. With
        an observer, each target is one ``index_lookup``: the first and the last with the pages
        their searches probed, the first of those between with the pages of the decoded run and
        the rest with none (they read no index page), so the pages' sum is what the lookups read.
        ``held``: as ``_search_locked``'s, for every target.
        """
        count = len(targets)
        if count < 3 or not all(map(operator.le, targets, targets[1:])):
            return [self._search_locked(target, field, LARGEST_LOWER_BOUND, held)[0] for target in targets]
        first = self._search_locked(targets[0], field, LARGEST_LOWER_BOUND, held)[0]
        last = self._search_locked(targets[-1], field, LARGEST_LOWER_BOUND, held)[0]
        between = targets[1:-1]
        slots = slots_between(self._buffer, first, last, between, field)
        if slots is None:
            slots = [self._search_locked(target, field, LARGEST_LOWER_BOUND, held)[0] for target in between]
        else:
            self._count_between_locked(between, field, max(first, 0), last, held)
        slots.insert(0, first)
        slots.append(last)
        return slots

    def _count_between_locked(
        self, targets: Sequence[int], field: EntryField, low: int, high: int, held: list[tuple] | None = None
    ) -> None:
        """Counts ``targets`` (ascending), answered from the decoded slots [low, high], by zone,
        as ``slot_and_zone_for`` would: none below the first entry (or all, in an empty index),
        warm above the warm section's first entry, cold between. ``held``: as ``_search_locked``'s."""
        entry_count = self._entry_count
        none_count = cold_count = len(targets)  # none_count: targets below the first entry
        if entry_count > 0:
            at = first_hot_slot(entry_count, field) * field.entry_bytes + field.field_offset
            cold_count = bisect.bisect_right(targets, field.unpack_from(self._buffer, at)[0])
            none_count = bisect.bisect_left(targets, field.unpack_from(self._buffer, field.field_offset)[0])
        observer = OBSERVER.current
        pages = None  # the pages of the decoded run, counted with the first target
        if observer.enabled and targets:
            entry_bytes = field.entry_bytes
            pages = page_of((high + 1) * entry_bytes - 1) - page_of(low * entry_bytes) + 1
        if held is None:
            self._lookup_counts[Zone.NONE] += none_count
            self._lookup_counts[Zone.COLD] += cold_count - none_count
            self._lookup_counts[Zone.WARM] += len(targets) - cold_count
            if pages is None:
                return
        for number in range(len(targets)):
            zone = Zone.NONE if number < none_count else Zone.COLD if number < cold_count else Zone.WARM
            if held is not None:
                held.append((self, zone, None if pages is None else pages if number == 0 else 0))
            else:
                observer.index_lookup(self.LABEL, zone._value_, pages if number == 0 else 0)

    def _recorded_search_locked(
        self, target: int, field: EntryField, bound: Bound
    ) -> tuple[int, Zone, list[int]]:
        """The same search, returning the slots it probed. The recording copy of ``field`` and
        its list are made once per index and reused (the caller holds the lock)."""
        recorders = self._recorders
        if recorders is None:
            recorders = self._recorders = {}
        recorder = recorders.get(field.name)
        if recorder is None:
            probed: list[int] = []
            recorder = recorders[field.name] = (recording(field, probed), probed)
        recording_field, probed_slots = recorder
        probed_slots.clear()
        slot, zone = slot_and_zone_for(self._buffer, self._entry_count, target, recording_field, bound)
        return slot, zone, probed_slots

    def _explain_locked(self, target: int, field: EntryField) -> IndexSearchExplanation:
        slot, zone, probed_slots = self._recorded_search_locked(target, field, LARGEST_LOWER_BOUND)
        self._lookup_counts[zone] += 1
        pages = self._pages_of(probed_slots, field)
        observer = OBSERVER.current
        if observer.enabled:
            observer.index_lookup(self.LABEL, zone.value, len(pages))
        return IndexSearchExplanation(
            self._path, self.LABEL, self._entry_count, zone, slot, tuple(probed_slots), tuple(pages)
        )

    @staticmethod
    def _pages_of(probed_slots: list[int], field: EntryField) -> list[int]:
        """The distinct index pages the probes read, in first-touch order."""
        entry_bytes, at = field.entry_bytes, field.field_offset
        return list(dict.fromkeys([page_of(slot * entry_bytes + at) for slot in probed_slots]))

    def _open_locked(self) -> None:
        """Materialises on first use; raises on a closed index. Cheap when already open: one
        fstat (``_check_length_locked``) before the caller touches the mapping."""
        if self._state is _State.OPEN:
            if self._mmap is not None:
                self._check_length_locked(self._mmap)
            return
        if self._state is _State.CLOSED:
            raise ValueError(f"{self.KIND} {self._path} is closed")
        if self._state is _State.RELEASED:
            self._remap_locked()
            self._state = _State.OPEN
            return
        self._materialize_locked()
        self._state = _State.OPEN
        self._after_entries_changed_locked()

    def _check_length_locked(self, mapping: mmap.mmap) -> None:
        """``CorruptIndexError`` when the file is now shorter than its mapping: cut from outside
        the process (seglog never shrinks a mapped file without remapping it). A load or store
        past a mapped file's end is SIGBUS, which Python cannot catch: it would kill the whole
        service for one partition's damaged file. ``mmap.size()`` is an fstat of the mapping's
        own descriptor. A cut landing between this check and the access still faults: the
        window is one lookup or one append under the index's lock."""
        length = mapping.size()
        if length < self._file_bytes:
            raise CorruptIndexError(
                f"{self.KIND} {self._path} is {length} bytes long, shorter than the {self._file_bytes} "
                f"bytes mapped: cut from outside seglog (a restart rebuilds it from the log)"
            )

    def _open_for_counts_locked(self) -> None:
        """For questions the entry counts answer: a released index answers from memory instead
        of mapping its file again (retention and roll checks ask them of every segment, and a
        mapping made there would hold a descriptor outside the open-segment budget). An open
        one too, without ``_check_length_locked``'s fstat: the counts touch no mapped page (the
        roll check asks ``is_full`` of both indexes after every indexed append)."""
        if self._state is not _State.RELEASED and self._state is not _State.OPEN:
            self._open_locked()

    def _writable_buffer_locked(self, end_bytes: int) -> mmap.mmap:
        """The mapping, with ``[0, end_bytes)`` backed by blocks: stores below ``end_bytes``
        cannot fault on a full disk (the reservation raises OSError first)."""
        if not self._writable:
            raise io.UnsupportedOperation(f"{self.KIND} {self._path} was opened read-only")
        assert self._mmap is not None, "a writable index with a free slot has a mapping"
        if end_bytes > self._reserved_bytes:
            self._reserve_locked(end_bytes)
        return self._mmap

    def _reserve_locked(self, end_bytes: int) -> None:
        assert end_bytes <= self._file_bytes, (end_bytes, self._file_bytes)
        if end_bytes <= self._reserved_bytes:
            return
        # Zeros over free slots only (from the end of the valid entries, which are never
        # rewritten), up to RESERVE_AHEAD_BYTES past the write position, page-aligned, never past
        # the file's end (a write there would grow the file, and every full slot of a file reads
        # as an entry on reopening).
        start = max(self._reserved_bytes, self._entry_count * self.LAYOUT.entry_bytes)
        stop = min(self._file_bytes, _round_up(end_bytes + RESERVE_AHEAD_BYTES, mmap.PAGESIZE))
        assert stop - start <= len(_ZEROS), (start, stop)
        zeros = memoryview(_ZEROS)
        fd = self._fs.open(self._path, os.O_RDWR)
        try:
            position = start
            while position < stop:  # pwrite may write less than asked; ENOSPC raises here
                position += self._fs.pwrite(fd, zeros[: stop - position], position)
        finally:
            self._fs.close(fd)
        self._reserved_bytes = stop

    def _is_full_locked(self) -> bool:
        return self._entry_count >= self._max_entry_count

    def _entry_appended_locked(self) -> None:
        self._entry_count += 1
        assert self._entry_count <= self._max_entry_count
        assert self._entry_count * self.LAYOUT.entry_bytes <= self._file_bytes

    def _truncate_to_entries_locked(self, entry_count: int) -> None:
        assert 0 <= entry_count <= self._entry_count, (entry_count, self._entry_count)
        self._entry_count = entry_count
        self._after_entries_changed_locked()

    def _after_entries_changed_locked(self) -> None:
        """Hook: refresh whatever the subclass caches about its last entry."""

    # -- the file -------------------------------------------------------------------------------
    def _materialize_locked(self, *, discard: bool = False) -> None:
        """Opens and maps the file (creating it if missing); ``discard``: emptied first, as new."""
        entry_bytes = self.LAYOUT.entry_bytes
        fd, newly_created = self._open_file()
        try:
            if discard and not newly_created:
                self._fs.ftruncate(fd, 0)  # frees its blocks too: room for the rebuilt entries
                newly_created = True
            if newly_created:
                if self._max_index_bytes < entry_bytes:
                    raise ValueError(
                        f"invalid max index size for {self.KIND} {self._path}: expected at least "
                        f"{entry_bytes} bytes, got {self._max_index_bytes}"
                    )
                self._fs.ftruncate(fd, _round_down(self._max_index_bytes, entry_bytes))
            self._file_bytes = self._fs.fsize(fd)
            if not newly_created:
                self._back_holes_locked(fd)
            self._set_mapping(self._map(fd, self._file_bytes))
        except BaseException:
            if newly_created:
                # Left behind, a preallocated file would reopen as max_entry_count zero entries.
                self._remove_quietly()
            raise
        finally:
            self._fs.close(fd)
        self._max_entry_count = self._file_bytes // entry_bytes
        # Which pages of an existing file are holes is not known: the first store reserves (its
        # zeros go only over free slots, past the valid entries).
        self._reserved_bytes = 0
        # A new file has no entries; in an existing one every full slot is an entry.
        self._entry_count = 0 if newly_created else self._max_entry_count

    def _back_holes_locked(self, fd: int) -> None:
        """An existing file is read through its mapping wherever it has entries, and in an
        existing file every slot is an entry. A hole (a file preallocated and never trimmed: a
        crash) has no page behind it; on tmpfs even a *read* of a hole allocates one, so on a
        full file system the first lookup or the last-entry read was SIGBUS, killing the
        process in recovery. So the holes get blocks first (posix_fallocate), which fails with
        an OSError naming the file instead; a read-only index refuses the file. Recovery never
        gets here (``reset`` empties the file unmapped); the sanity checks read with pread."""
        hole = self._fs.data_end(fd, self._file_bytes)
        if hole >= self._file_bytes:
            return
        if not self._writable:
            raise CorruptIndexError(
                f"{self.KIND} {self._path}: a hole from byte {hole} of {self._file_bytes} (preallocated, "
                f"never trimmed: rebuild it from the log)"
            )
        try:
            self._fs.fallocate(fd, hole, self._file_bytes - hole)
        except OSError as exc:
            raise OSError(
                exc.errno, f"{exc.strerror} (backing the holes of {self.KIND} {self._path} before mapping it)",
                self._path,
            ) from exc

    def _open_file(self) -> tuple[int, bool]:
        if not self._writable:
            return self._fs.open(self._path, os.O_RDONLY), False
        try:
            return self._fs.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL), True
        except FileExistsError:
            return self._fs.open(self._path, os.O_RDWR), False

    def _remap_locked(self) -> None:
        """Maps a released index again. A file whose length changed meanwhile (nothing in seglog
        does that) is read afresh, as on first use."""
        fd = self._fs.open(self._path, os.O_RDWR if self._writable else os.O_RDONLY)
        try:
            if self._fs.fsize(fd) == self._file_bytes:
                self._set_mapping(self._map(fd, self._file_bytes))
                return
        finally:
            self._fs.close(fd)
        self._materialize_locked()
        self._after_entries_changed_locked()

    def _remove_quietly(self) -> None:
        try:
            self._fs.unlink(self._path)
        except OSError:
            pass  # the error being raised already says what went wrong

    def _map(self, fd: int, length: int) -> mmap.mmap | None:
        # mmap cannot map 0 bytes; an empty file has no entries to read, so no mapping is needed.
        return self._fs.mmap(fd, length, self._writable) if length > 0 else None

    def _resize_locked(self, new_bytes: int) -> bool:
        entry_bytes = self.LAYOUT.entry_bytes
        rounded = _round_down(new_bytes, entry_bytes)
        if rounded == self._file_bytes:
            return False
        if not self._writable:
            raise io.UnsupportedOperation(f"{self.KIND} {self._path} was opened read-only")
        if rounded < self._entry_count * entry_bytes:
            raise ValueError(
                f"cannot resize {self.KIND} {self._path} to {rounded} bytes: it holds "
                f"{self._entry_count} entries ({self._entry_count * entry_bytes} bytes)"
            )
        fd = self._fs.open(self._path, os.O_RDWR)
        try:
            self._fs.ftruncate(fd, rounded)  # if this fails, nothing has changed
            self._file_bytes = rounded
            self._reserved_bytes = min(self._reserved_bytes, rounded)  # a cut frees the blocks
            # Should mapping fail, the old mapping stays: only slots inside both it and the
            # resized file may be written (past the file's end a store is SIGBUS).
            self._max_entry_count = min(self._max_entry_count, rounded // entry_bytes)
            mapping = self._map(fd, rounded)
        finally:
            self._fs.close(fd)
        self._unmap_mapping()
        self._set_mapping(mapping)
        self._max_entry_count = rounded // entry_bytes
        self._after_entries_changed_locked()
        return True

    def _unmap_locked(self) -> None:
        self._unmap_mapping()
        self._state = _State.CLOSED

    def _set_mapping(self, mapping: mmap.mmap | None) -> None:
        assert self._mmap is None, "the old mapping is closed before a new one is made"
        self._mmap = mapping
        # An empty file has no mapping; b"" stands in, as no search reads a buffer of 0 entries.
        self._buffer = mapping if mapping is not None else b""

    def _unmap_mapping(self) -> None:
        mapping, self._mmap, self._buffer = self._mmap, None, b""
        if mapping is not None:
            mapping.close()


def _round_up(number: int, factor: int) -> int:
    """The least multiple of ``factor`` not below ``number`` (67, 8 -> 72)."""
    return -factor * (-number // factor)


def _round_down(number: int, factor: int) -> int:
    """The greatest multiple of ``factor`` not above ``number`` (67, 8 -> 64)."""
    return factor * (number // factor)
