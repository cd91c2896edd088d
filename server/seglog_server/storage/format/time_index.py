"""The time index of a segment: the ``.timeindex`` file (kafka-storage.md 3.4).

Maps timestamps to offsets. An entry (T, O) means: the greatest timestamp seen in the segment up to
offset O is T, so any record with a timestamp above T sits after O. To find the first record with
a timestamp >= T', look up the greatest entry with timestamp <= T' and scan from its offset.

Layout: an array of 12-byte entries, big-endian, with no header::

    slot 0: timestamp_ms (int64) | relative_offset (int32)
    slot 1: ...

For base offset 45, (1700000000000, 50) is stored as ``0000018bcfe56800 00000005``. Timestamps
strictly increase from slot to slot; offsets never decrease (two entries may share an offset).

Differences from the offset index, all Kafka's:
- ``is_full()`` already at ``max_entry_count - 1`` entries: the last slot is kept for the entry
  written when the segment rolls or closes (``maybe_append(..., skip_full_check=True)``).
- ``maybe_append`` appends only when the timestamp exceeds the last entry's; an equal one is
  ignored, which makes the roll/close entry idempotent and leaves a segment of timestamp-less
  records with an empty time index.
- ``truncate_to(offset)`` searches by offset (the entry's value), not by timestamp.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import NamedTuple

from seglog.records import NO_TIMESTAMP  # the empty index's last-entry timestamp
from seglog_server.storage.format.abstract_index import AbstractIndex, IndexSearchExplanation
from seglog_server.storage.base.errors import CorruptIndexError, IndexFullError, InvalidOffsetError
from seglog_server.storage.format.index_search import (
    LARGEST_LOWER_BOUND,
    NO_SLOT,
    Buffer,
    EntryLayout,
    slot_range_for,
)

__all__ = ["ENTRY", "LAYOUT", "NO_TIMESTAMP", "TimeIndex", "TimestampOffset"]

ENTRY = struct.Struct(
    ">"  # big-endian, as Java's mmap'd ByteBuffer writes it
    "q"  # timestamp_ms: the greatest record timestamp up to this offset; the search key
    "i"  # relative_offset: offset - base_offset, in [0, 2^31-1]; the search value
)
LAYOUT = EntryLayout.of(ENTRY, key_field=0, value_field=1)
assert LAYOUT.entry_bytes == 12 and LAYOUT.warm_entry_count == 682


class TimestampOffset(NamedTuple):
    timestamp_ms: int
    offset: int


# NamedTuple's generated __new__ is a Python function; tuple.__new__ builds the same object in half
# the time, which matters on the lookup path.
_new_timestamp_offset = functools.partial(tuple.__new__, TimestampOffset)


class TimeIndex(AbstractIndex):
    """A segment's ``.timeindex``: lazily mmap'd, preallocated, searched warm section first."""

    ENTRY = ENTRY
    LAYOUT = LAYOUT
    KIND = "time index"
    LABEL = "time"

    _last_entry: TimestampOffset

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(NO_TIMESTAMP, base_offset)`` when the index is empty."""
        with self._lock:
            self._open_for_counts_locked()
            return self._last_entry

    def lookup(self, timestamp_ms: int, held: list[tuple] | None = None) -> TimestampOffset:
        """The entry with the greatest timestamp <= ``timestamp_ms``; ``(NO_TIMESTAMP,
        base_offset)`` when there is none. ``held``: a bounded lookup's (``_search_locked``)."""
        with self._lock:
            self._open_locked()
            buffer = self._buffer
            slot, zone = self._search_locked(timestamp_ms, LAYOUT.key, LARGEST_LOWER_BOUND, held)
            if slot == NO_SLOT:
                return TimestampOffset(NO_TIMESTAMP, self._base_offset)
            return self._parse_locked(buffer, slot)

    def lookup_offsets(self, timestamps_ms: Sequence[int], held: list[tuple] | None = None) -> list[int]:
        """``lookup(t).offset`` for each of ``timestamps_ms`` (ascending), searched together
        (``_sorted_search_locked``): OffsetsForTimes with many targets in one segment."""
        with self._lock:
            self._open_locked()
            buffer, base_offset, unpack = self._buffer, self._base_offset, ENTRY.unpack_from
            slots = self._sorted_search_locked(timestamps_ms, LAYOUT.key, held)
            return [
                base_offset if slot == NO_SLOT else base_offset + unpack(buffer, slot * ENTRY.size)[1]
                for slot in slots
            ]

    def explain_lookup(self, timestamp_ms: int) -> tuple[IndexSearchExplanation, TimestampOffset]:
        """``lookup`` with the search's path laid out (ExplainLookup); counted like a lookup."""
        with self._lock:
            self._open_locked()
            explanation = self._explain_locked(timestamp_ms, LAYOUT.key)
            if explanation.slot == NO_SLOT:
                return explanation, TimestampOffset(NO_TIMESTAMP, self._base_offset)
            return explanation, self._parse_locked(self._buffer, explanation.slot)

    def entry(self, slot: int) -> TimestampOffset:
        with self._lock:
            self._open_locked()
            if not 0 <= slot < self._entry_count:
                raise IndexError(
                    f"slot {slot} out of range for {self.KIND} {self._path} of {self._entry_count} entries"
                )
            return self._parse_locked(self._buffer, slot)

    def maybe_append(self, timestamp_ms: int, offset: int, skip_full_check: bool = False) -> None:
        """Appends (timestamp_ms, offset) if ``timestamp_ms`` exceeds the last entry's timestamp.

        Raises IndexFullError (unless ``skip_full_check``, used on roll and close),
        InvalidOffsetError for an offset below the last entry's, ValueError for a timestamp below
        it (a caller bug: callers pass the greatest timestamp so far), OffsetOverflowError.
        """
        with self._lock:
            self._open_locked()
            if not skip_full_check and self._is_full_locked():
                raise IndexFullError(
                    f"attempt to append to a full {self.KIND} {self._path} ({self._entry_count} entries)"
                )
            last = self._last_entry
            if self._entry_count > 0 and offset < last.offset:
                raise InvalidOffsetError(
                    f"attempt to append offset {offset} to slot {self._entry_count} of {self.KIND} "
                    f"{self._path}: expected at least the last offset, {last.offset}"
                )
            if self._entry_count > 0 and timestamp_ms < last.timestamp_ms:
                raise ValueError(
                    f"attempt to append timestamp {timestamp_ms} to slot {self._entry_count} of "
                    f"{self.KIND} {self._path}: expected at least the last timestamp, {last.timestamp_ms}"
                )
            if timestamp_ms > last.timestamp_ms:
                if self._entry_count >= self._max_entry_count:  # even the reserved slot is taken
                    raise IndexFullError(
                        f"no slot left in {self.KIND} {self._path} ({self._entry_count} entries)"
                    )
                relative = self.relative_offset(offset)
                position = self._entry_count * ENTRY.size
                buffer = self._writable_buffer_locked(position + ENTRY.size)  # may raise ENOSPC
                ENTRY.pack_into(buffer, position, timestamp_ms, relative)
                self._entry_appended_locked()
                self._last_entry = TimestampOffset(timestamp_ms, offset)

    def truncate_to(self, offset: int) -> None:
        """Removes every entry with an offset >= ``offset`` (searching by offset); past the end it
        changes nothing. With two entries sharing that offset, Kafka's search may stop on the second
        and keep the first; kept as is."""
        with self._lock:
            self._open_locked()
            buffer, target = self._buffer, offset - self._base_offset
            slot = slot_range_for(buffer, self._entry_count, target, LAYOUT.value, LARGEST_LOWER_BOUND)
            if slot == NO_SLOT:
                entry_count = 0  # every entry is at or above the offset
            elif ENTRY.unpack_from(buffer, slot * ENTRY.size)[1] == target:
                entry_count = slot  # an entry for exactly this offset goes too
            else:
                entry_count = slot + 1  # keep the greatest entry below the offset
            self._truncate_to_entries_locked(entry_count)

    def sanity_check(self) -> None:
        """CorruptIndexError if the last timestamp is below the first, the last offset below the
        base offset, or the file holds a partial entry."""
        with self._lock:
            self._open_locked()
            last = self._last_entry
            if self._entry_count > 0:
                first_timestamp_ms = ENTRY.unpack_from(self._buffer, 0)[0]
                if last.timestamp_ms < first_timestamp_ms:
                    raise CorruptIndexError(
                        f"corrupt {self.KIND} {self._path}: the last timestamp {last.timestamp_ms} "
                        f"is below the first, {first_timestamp_ms}"
                    )
                if last.offset < self._base_offset:
                    raise CorruptIndexError(
                        f"corrupt {self.KIND} {self._path}: the last offset {last.offset} is below "
                        f"the base offset {self._base_offset}"
                    )
            if self._file_bytes % ENTRY.size != 0:
                raise CorruptIndexError(
                    f"corrupt {self.KIND} {self._path}: expected a length that is a multiple of "
                    f"{ENTRY.size}, found {self._file_bytes} bytes"
                )

    def _is_full_locked(self) -> bool:
        # The last slot is reserved for the entry maybe_append(skip_full_check=True) writes on roll.
        return self._entry_count >= self._max_entry_count - 1

    def _after_entries_changed_locked(self) -> None:
        if self._entry_count == 0:
            self._last_entry = TimestampOffset(NO_TIMESTAMP, self._base_offset)
        else:
            self._last_entry = self._parse_locked(self._buffer, self._entry_count - 1)

    def _parse_locked(self, buffer: Buffer, slot: int) -> TimestampOffset:
        timestamp_ms, relative = ENTRY.unpack_from(buffer, slot * ENTRY.size)
        return _new_timestamp_offset((timestamp_ms, self._base_offset + relative))
