"""The sparse offset index of a segment: the ``.index`` file (kafka-storage.md 3.3).

Maps offsets to byte positions in the segment's ``.log``, one entry per ``index.interval.bytes``
of log or so (sparse: most offsets have no entry). To read from offset O, look up the greatest
entry with offset <= O and scan batch headers forward from its position.

Layout: an array of 8-byte entries, big-endian, with no header::

    slot 0: relative_offset (int32) | position (int32)
    slot 1: ...

For base offset 45, offset 50 at position 4096 is stored as ``00000005 00001000``. Offsets and
positions both increase from slot to slot. An entry's offset is ``base_offset + relative_offset``.

A lookup below the first entry (or in an empty index) answers ``(base_offset, 0)``: the start of
the segment, where a scan can always begin.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import NamedTuple

from seglog_server.storage.format.abstract_index import AbstractIndex, IndexSearchExplanation
from seglog_server.storage.base.errors import CorruptIndexError, IndexFullError, InvalidOffsetError
from seglog_server.storage.format.index_search import (
    LARGEST_LOWER_BOUND,
    NO_SLOT,
    SMALLEST_UPPER_BOUND,
    Buffer,
    EntryLayout,
    slot_range_for,
)

__all__ = ["ENTRY", "LAYOUT", "POSITION_MAX", "OffsetIndex", "OffsetPosition"]

ENTRY = struct.Struct(
    ">"  # big-endian, as Java's mmap'd ByteBuffer writes it
    "i"  # relative_offset: offset - base_offset, in [0, 2^31-1]; the search key
    "i"  # position: byte position in the .log of the batch holding that offset; the search value
)
LAYOUT = EntryLayout.of(ENTRY, key_field=0, value_field=1)
assert LAYOUT.entry_bytes == 8 and LAYOUT.warm_entry_count == 1024

POSITION_MAX = 2**31 - 1
"""Positions are int32: a Kafka segment file never exceeds Integer.MAX_VALUE bytes."""


class OffsetPosition(NamedTuple):
    offset: int
    position: int


# NamedTuple's generated __new__ is a Python function; tuple.__new__ builds the same object in half
# the time, which matters on the lookup path.
_new_offset_position = functools.partial(tuple.__new__, OffsetPosition)


class OffsetIndex(AbstractIndex):
    """A segment's ``.index``: lazily mmap'd, preallocated, searched warm section first."""

    ENTRY = ENTRY
    LAYOUT = LAYOUT
    KIND = "offset index"
    LABEL = "offset"

    _last_offset: int

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or the base offset when the index is empty."""
        with self._lock:
            self._open_for_counts_locked()
            return self._last_offset

    def lookup(self, offset: int, held: list[tuple] | None = None) -> OffsetPosition:
        """The entry with the greatest offset <= ``offset``; ``(base_offset, 0)`` when there is none.
        ``held``: a bounded lookup's (``_search_locked``)."""
        with self._lock:
            self._open_locked()
            buffer = self._buffer
            slot, zone = self._search_locked(offset - self._base_offset, LAYOUT.key, LARGEST_LOWER_BOUND, held)
            if slot == NO_SLOT:
                return OffsetPosition(self._base_offset, 0)
            return self._parse_locked(buffer, slot)

    def lookup_positions(self, offsets: Sequence[int], held: list[tuple] | None = None) -> list[int]:
        """``lookup(o).position`` for each of ``offsets`` (ascending), searched together
        (``_sorted_search_locked``): OffsetsForTimes with many targets in one segment."""
        with self._lock:
            self._open_locked()
            buffer, base_offset, unpack = self._buffer, self._base_offset, ENTRY.unpack_from
            slots = self._sorted_search_locked([offset - base_offset for offset in offsets], LAYOUT.key, held)
            return [0 if slot == NO_SLOT else unpack(buffer, slot * ENTRY.size)[1] for slot in slots]

    def explain_lookup(self, offset: int) -> tuple[IndexSearchExplanation, OffsetPosition]:
        """``lookup`` with the search's path laid out (ExplainLookup); counted like a lookup."""
        with self._lock:
            self._open_locked()
            explanation = self._explain_locked(offset - self._base_offset, LAYOUT.key)
            if explanation.slot == NO_SLOT:
                return explanation, OffsetPosition(self._base_offset, 0)
            return explanation, self._parse_locked(self._buffer, explanation.slot)

    def entry(self, slot: int) -> OffsetPosition:
        with self._lock:
            self._open_locked()
            if not 0 <= slot < self._entry_count:
                raise IndexError(
                    f"slot {slot} out of range for {self.KIND} {self._path} of {self._entry_count} entries"
                )
            return self._parse_locked(self._buffer, slot)

    def positions_after(self, position: int, count: int) -> list[int]:
        """The positions of up to ``count`` entries from the first whose position is above
        ``position``, ascending: a cache's walk of the ``.log`` checks its batches against them
        (a search starts at an entry's position). Not counted as a lookup."""
        with self._lock:
            self._open_locked()
            buffer, entry_count = self._buffer, self._entry_count
            # (the greatest entry at or below it, then on: the smallest-upper-bound search may
            # answer a later entry than the smallest, see index_search.slot_and_zone_for)
            slot = slot_range_for(buffer, entry_count, position, LAYOUT.value, LARGEST_LOWER_BOUND) + 1
            unpack, size = ENTRY.unpack_from, ENTRY.size
            found = [unpack(buffer, at * size)[1] for at in range(slot, min(slot + count, entry_count))]
            return [at for at in found if at > position]

    def fetch_upper_bound_offset(self, start: OffsetPosition, fetch_bytes: int) -> OffsetPosition | None:
        """An entry at or past ``start.position + fetch_bytes``: an offset certainly outside a fetch
        of ``fetch_bytes`` from ``start`` (not always the smallest such; see index_search)."""
        with self._lock:
            self._open_locked()
            buffer = self._buffer
            slot, zone = self._search_locked(start.position + fetch_bytes, LAYOUT.value, SMALLEST_UPPER_BOUND)
            if slot == NO_SLOT:
                return None
            return self._parse_locked(buffer, slot)

    def append(self, offset: int, position: int) -> None:
        """Adds an entry; ``offset`` must exceed the last entry's (equal to the base offset is fine
        for the first entry). Raises IndexFullError, InvalidOffsetError, OffsetOverflowError in
        Kafka's order of checks."""
        assert 0 <= position <= POSITION_MAX, f"position {position} is not an int32 file position"
        with self._lock:
            self._open_locked()
            if self._is_full_locked():
                raise IndexFullError(
                    f"attempt to append to a full {self.KIND} {self._path} ({self._entry_count} entries)"
                )
            if self._entry_count > 0 and offset <= self._last_offset:
                raise InvalidOffsetError(
                    f"attempt to append offset {offset} to slot {self._entry_count} of {self.KIND} "
                    f"{self._path}: expected an offset above the last one, {self._last_offset}"
                )
            relative = self.relative_offset(offset)
            position_in_file = self._entry_count * ENTRY.size
            buffer = self._writable_buffer_locked(position_in_file + ENTRY.size)  # may raise ENOSPC
            ENTRY.pack_into(buffer, position_in_file, relative, position)
            self._entry_appended_locked()
            self._last_offset = offset

    def truncate_to(self, offset: int) -> None:
        """Removes every entry with an offset >= ``offset``; past the end it changes nothing."""
        with self._lock:
            self._open_locked()
            buffer, target = self._buffer, offset - self._base_offset
            slot = slot_range_for(buffer, self._entry_count, target, LAYOUT.key, LARGEST_LOWER_BOUND)
            if slot == NO_SLOT:
                entry_count = 0  # every entry is at or above the offset
            elif ENTRY.unpack_from(buffer, slot * ENTRY.size)[0] == target:
                entry_count = slot  # an entry for exactly this offset goes too
            else:
                entry_count = slot + 1  # keep the greatest entry below the offset
            self._truncate_to_entries_locked(entry_count)

    def sanity_check(self) -> None:
        """CorruptIndexError if the last offset is below the base offset or the file holds a
        partial entry."""
        with self._lock:
            self._open_locked()
            if self._entry_count > 0 and self._last_offset < self._base_offset:
                raise CorruptIndexError(
                    f"corrupt {self.KIND} {self._path}: {self._entry_count} entries but the last "
                    f"offset {self._last_offset} is below the base offset {self._base_offset}"
                )
            if self._file_bytes % ENTRY.size != 0:
                raise CorruptIndexError(
                    f"corrupt {self.KIND} {self._path}: expected a length that is a multiple of "
                    f"{ENTRY.size}, found {self._file_bytes} bytes"
                )

    def _after_entries_changed_locked(self) -> None:
        if self._entry_count == 0:
            self._last_offset = self._base_offset
        else:
            self._last_offset = self._parse_locked(self._buffer, self._entry_count - 1).offset

    def _parse_locked(self, buffer: Buffer, slot: int) -> OffsetPosition:
        relative, position = ENTRY.unpack_from(buffer, slot * ENTRY.size)
        return _new_offset_position((self._base_offset + relative, position))
