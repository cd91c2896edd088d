"""Kafka's page-cache-aware binary search over an index of fixed-size entries (kafka-storage.md 3.2).

An index file is an array of fixed-size big-endian entries, each a (key, value) pair of integers
sorted by key and by value: the offset index holds (relative offset, position), the time index
(timestamp, relative offset). A search looks for a target by key or by value and answers with a
*slot* (an entry's number in the file), never with an offset or a position.

Why the search is split into a warm and a cold section (KAFKA-6432, Kafka 2.1.0): the index is
mmap'd and nearly every lookup (followers, caught-up consumers) targets the newest entries. A plain
binary search over the whole file probes pages spread across it (for 13 pages: 0, 6, 9, 11, 12);
when the index grows by one page the probe set shifts (0, 7, 10, 12, 13) onto pages nobody touched
for a long time, which may have been evicted, and the first tail lookup after the growth waits on
the disk (seen as ~1 s produce latency spikes). So the search first asks whether the target lies in
the newest ``WARM_SECTION_BYTES`` of entries and, if so, searches only there. Every warm lookup
probes the section's first entry and its middle, and a tail lookup its last entry too, so all of
the section's (at most 3) pages are touched by every tail lookup and stay resident however the file
grows (bench/bench_index_pages.py measures this).

The functions are pure: they read a buffer (bytes, memoryview or mmap) and a slot count and hold no
state. Targets are compared with the raw stored integer, so a caller whose field is stored relative
to a base offset passes ``target - base_offset``.
"""

from __future__ import annotations

import bisect
import enum
import itertools
import operator
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

__all__ = [
    "LARGEST_LOWER_BOUND",
    "NO_SLOT",
    "SMALLEST_UPPER_BOUND",
    "SPAN_PER_TARGET_MAX",
    "WARM_SECTION_BYTES",
    "Bound",
    "EntryField",
    "EntryLayout",
    "Zone",
    "first_hot_slot",
    "largest_lower_bound_slot_for",
    "plain_slot_range_for",
    "recording",
    "slots_between",
    "slot_and_zone_for",
    "slot_zone_and_pages_for",
    "slot_range_for",
    "smallest_upper_bound_slot_for",
]

PAGE_BYTES_MIN = 4096
"""The smallest page size of any CPU Kafka (and seglog) runs on: x86, ARM, POWER, MIPS, SPARC."""

WARM_SECTION_BYTES = 8192
"""Bytes of the newest entries searched first. Small enough that the three entries a tail lookup
always probes (the section's first, middle and last) touch every page of it: 8192 bytes span at
most 3 pages of 4 KiB. Large enough that nearly every in-sync lookup lands in it: 8 KiB of index covers
about 4 MB of log (offset index) or 2.7 MB (time index) at Kafka's default index.interval.bytes.
Fixed, as in Kafka: not a configuration."""

# The warm section's first, middle and last probes are at most half the section apart, so no page
# of the section can fall between two probes.
assert WARM_SECTION_BYTES // 2 <= PAGE_BYTES_MIN

NO_SLOT = -1
"""Returned when no entry satisfies the bound (empty index, or every entry on the wrong side)."""

Buffer = bytes | bytearray | memoryview  # an mmap.mmap is accepted wherever a Buffer is


class Bound(enum.Enum):
    """Which neighbour of the target a search answers with (Kafka's SearchResultType)."""

    LARGEST_LOWER_BOUND = "largest lower bound"  # the greatest entry <= target
    SMALLEST_UPPER_BOUND = "smallest upper bound"  # the smallest entry >= target


LARGEST_LOWER_BOUND = Bound.LARGEST_LOWER_BOUND
SMALLEST_UPPER_BOUND = Bound.SMALLEST_UPPER_BOUND


class Zone(enum.StrEnum):
    """Which section of the index a search ran in; counted by the indexes' statistics().
    A StrEnum: it keys a dict on every lookup, and a plain Enum hashes through a Python call.

    ``NONE``: the lookup searched no section. The index was empty, or the target lies below its
    first entry (answered by comparing with that entry, as Kafka does, before any binary search).
    Both are the common case of a small or young log: a segment's first index entry is written
    only after ``index.interval.bytes`` of records, so every lookup into a fresh segment is one.
    Counting them as cold made a small setup read 100 % cold; they read at most the first page,
    which is no sign of a consumer far behind the tail."""

    WARM = "warm"
    COLD = "cold"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class EntryField:
    """One integer field of a fixed-size entry: what a search compares against its target."""

    name: str
    entry_bytes: int  # size of a whole entry; slot s starts at byte s * entry_bytes
    field_offset: int  # where this field starts inside an entry
    warm_entry_count: int  # entries in the warm section: WARM_SECTION_BYTES // entry_bytes
    unpack_from: Callable[[Buffer, int], tuple[int]]  # reads this one field at a byte position
    entry: struct.Struct  # the whole entry (for decoding a run of entries at once)
    index_in_entry: int  # this field's place in an unpacked entry


@dataclass(frozen=True, slots=True)
class EntryLayout:
    """An entry format seen by the search: its size and its key and value fields."""

    entry_bytes: int
    warm_entry_count: int
    key: EntryField
    value: EntryField

    @classmethod
    def of(cls, entry: struct.Struct, *, key_field: int, value_field: int) -> EntryLayout:
        """Derives the layout from an entry's ``struct.Struct``, so the format is written once.

        ``entry.format`` must be a byte order followed by one code per field (``">qi"``).
        """
        order, codes = entry.format[0], entry.format[1:]
        assert order in "><!", f"index entries are big-endian, got format {entry.format!r}"
        assert codes.isalpha(), f"one code per field expected, got format {entry.format!r}"
        warm_entry_count = WARM_SECTION_BYTES // entry.size

        def field(slot_in_entry: int) -> EntryField:
            code = codes[slot_in_entry]
            assert code in "bBhHiIlLqQ", f"field {slot_in_entry} of {entry.format!r} is not an integer"
            return EntryField(
                name=f"{entry.format}[{slot_in_entry}]",
                entry_bytes=entry.size,
                field_offset=struct.calcsize(order + codes[:slot_in_entry]),
                warm_entry_count=warm_entry_count,
                unpack_from=struct.Struct(order + code).unpack_from,
                entry=entry,
                index_in_entry=slot_in_entry,
            )

        return cls(entry.size, warm_entry_count, field(key_field), field(value_field))


def first_hot_slot(entry_count: int, field: EntryField) -> int:
    """The first slot of the warm section.

    Kafka's arithmetic, kept exactly: ``entries - 1 - warm_entries``, so the warm section holds
    ``warm_entries + 1`` slots (1025 offset entries, 683 time entries) once the index is longer.
    """
    return max(0, entry_count - 1 - field.warm_entry_count)


def slot_range_for(buffer: Buffer, entry_count: int, target: int, field: EntryField, bound: Bound) -> int:
    """The slot of the greatest entry <= target (LARGEST_LOWER_BOUND) or of the smallest entry >=
    target (SMALLEST_UPPER_BOUND), comparing ``field``; ``NO_SLOT`` if there is none.

    Kafka's ``indexSlotRangeFor``, decision for decision (see ``slot_and_zone_for``). A target
    below the first entry gives ``NO_SLOT`` for the lower bound and slot 0 for the upper bound.
    """
    return slot_and_zone_for(buffer, entry_count, target, field, bound)[0]


def slot_and_zone_for(
    buffer: Buffer, entry_count: int, target: int, field: EntryField, bound: Bound
) -> tuple[int, Zone]:
    """``slot_range_for`` plus the section it searched, for the indexes' warm/cold statistics:
    WARM when the warm section's first entry is below the target, NONE when the index is empty
    or its first entry above the target (no section searched), COLD otherwise.

    Quirk kept for bit-exactness with Kafka: the search never probes the first slot of its range
    (``mid`` rounds up, so it never equals ``lo``). The warm range starts at an entry strictly below
    the target, so that is harmless there; but on the cold path, SMALLEST_UPPER_BOUND for a target
    *equal to entry 0* answers slot 1 (``NO_SLOT`` for a one-entry index) instead of slot 0. Kafka
    uses this bound only in ``fetchUpperBoundOffset``, which needs *an* entry past the fetched
    range, not the smallest one, so the answer stays safe.
    """
    if entry_count == 0:
        return NO_SLOT, Zone.NONE
    unpack, entry_bytes, at = field.unpack_from, field.entry_bytes, field.field_offset
    first_hot = entry_count - 1 - field.warm_entry_count  # first_hot_slot(), inlined: hot path
    if first_hot < 0:
        first_hot = 0
    if unpack(buffer, first_hot * entry_bytes + at)[0] < target:
        last = entry_count - 1
        return _binary_search(buffer, target, unpack, entry_bytes, at, bound, first_hot, last, last), Zone.WARM
    if unpack(buffer, at)[0] > target:
        return (NO_SLOT if bound is LARGEST_LOWER_BOUND else 0), Zone.NONE
    return _binary_search(buffer, target, unpack, entry_bytes, at, bound, 0, first_hot, entry_count - 1), Zone.COLD


def slot_zone_and_pages_for(
    buffer: Buffer, entry_count: int, target: int, field: EntryField, bound: Bound, page_bytes: int
) -> tuple[int, Zone, int]:
    """``slot_and_zone_for`` plus how many distinct pages of ``page_bytes`` its probes read.

    The same probes, decision for decision (a property test holds it to the ``recording`` search);
    each probe's page goes into a set inline, so an observed lookup pays one ``set.add`` a probe
    rather than a Python call through a recording field."""
    if entry_count == 0:
        return NO_SLOT, Zone.NONE, 0
    unpack, entry_bytes, at = field.unpack_from, field.entry_bytes, field.field_offset
    first_hot = entry_count - 1 - field.warm_entry_count
    if first_hot < 0:
        first_hot = 0
    position = first_hot * entry_bytes + at
    pages = {position // page_bytes}
    if unpack(buffer, position)[0] < target:
        last = entry_count - 1
        slot = _binary_search_paged(buffer, target, unpack, entry_bytes, at, bound, first_hot, last, last,
                                    pages, page_bytes)
        return slot, Zone.WARM, len(pages)
    pages.add(at // page_bytes)
    if unpack(buffer, at)[0] > target:
        return (NO_SLOT if bound is LARGEST_LOWER_BOUND else 0), Zone.NONE, len(pages)
    slot = _binary_search_paged(buffer, target, unpack, entry_bytes, at, bound, 0, first_hot, entry_count - 1,
                                pages, page_bytes)
    return slot, Zone.COLD, len(pages)


def largest_lower_bound_slot_for(buffer: Buffer, entry_count: int, target: int, field: EntryField) -> int:
    """The slot of the greatest entry <= target; ``NO_SLOT`` if empty or target < entry 0."""
    return slot_range_for(buffer, entry_count, target, field, LARGEST_LOWER_BOUND)


def smallest_upper_bound_slot_for(buffer: Buffer, entry_count: int, target: int, field: EntryField) -> int:
    """The slot of the smallest entry >= target (with the quirk of ``slot_range_for``);
    ``NO_SLOT`` if empty or every entry < target."""
    return slot_range_for(buffer, entry_count, target, field, SMALLEST_UPPER_BOUND)


def plain_slot_range_for(buffer: Buffer, entry_count: int, target: int, field: EntryField, bound: Bound) -> int:
    """The search before KAFKA-6432: one binary search over the whole index.

    Same answers as ``slot_range_for`` over strictly increasing fields (quirk included; with equal
    neighbours either may stop on a different one of them), different probes. Kept as the baseline
    that bench/bench_index_pages.py measures the warm/cold search against; storage never calls it.
    """
    if entry_count == 0:
        return NO_SLOT
    unpack, entry_bytes, at = field.unpack_from, field.entry_bytes, field.field_offset
    if unpack(buffer, at)[0] > target:
        return NO_SLOT if bound is LARGEST_LOWER_BOUND else 0
    return _binary_search(buffer, target, unpack, entry_bytes, at, bound, 0, entry_count - 1, entry_count - 1)


SPAN_PER_TARGET_MAX = 32
"""Entries decoded per target, at most, when the targets between two known slots are answered
from the entries between them (``slots_between``). Decoding one entry and checking its order costs
about 0.065 us here, one binary search about 1.7 us (a dozen probes, each a Python-level unpack
and compare): break-even near 26 entries a target; 32 because each search also pays its shell
(the index's counts, the observer), which the decoded run does not."""


def slots_between(
    buffer: Buffer, first_slot: int, last_slot: int, targets: Sequence[int], field: EntryField
) -> list[int] | None:
    """The LARGEST_LOWER_BOUND slots of ``targets`` (ascending), all known to lie between the
    answers for a smaller target (``first_slot``, maybe ``NO_SLOT``) and a greater one
    (``last_slot``): the entries between them are decoded once and each target is a ``bisect``.

    Equal to ``slot_range_for`` per target whenever the keys strictly increase (every index
    seglog writes: an offset or a time index appends only above its last entry). None, for the
    caller to search target by target, when the entries between are not strictly increasing (a
    damaged file) or more than ``SPAN_PER_TARGET_MAX`` a target.
    """
    low = max(first_slot, 0)
    if last_slot < first_slot or last_slot - low >= SPAN_PER_TARGET_MAX * max(len(targets), 1):
        return None
    entry_bytes = field.entry_bytes
    entries = field.entry.iter_unpack(buffer[low * entry_bytes : (last_slot + 1) * entry_bytes])
    keys = list(map(operator.itemgetter(field.index_in_entry), entries))
    if not all(map(operator.lt, keys, itertools.islice(keys, 1, None))):
        return None
    # The search answers a slot whose key is <= its target (it moves only onto smaller keys), so
    # bisect finds each target at or after ``low``; NO_SLOT (-1) only when ``first_slot`` was.
    bisect_right = bisect.bisect_right
    return [low + bisect_right(keys, target) - 1 for target in targets]


def recording(field: EntryField, probed_slots: list[int]) -> EntryField:
    """A copy of ``field`` that appends every slot a search reads to ``probed_slots``.

    For benchmarks and tests that need to know which pages a search touches. The normal path pays
    nothing for it: the searches only ever call ``field.unpack_from``.
    """
    unpack, entry_bytes, at = field.unpack_from, field.entry_bytes, field.field_offset

    def unpack_and_record(buffer: Buffer, byte_position: int) -> tuple[int]:
        probed_slots.append((byte_position - at) // entry_bytes)
        return unpack(buffer, byte_position)

    return replace(field, unpack_from=unpack_and_record)


def _binary_search(
    buffer: Buffer,
    target: int,
    unpack: Callable[[Buffer, int], tuple[int]],
    entry_bytes: int,
    at: int,
    bound: Bound,
    lo: int,
    hi: int,
    last_slot: int,
) -> int:
    """Kafka's ``binarySearch`` over slots [lo, hi] of the field read by ``unpack`` at byte ``at``
    of each entry: an exact hit returns at once; otherwise ``lo`` ends on the greatest probed entry
    below the target. (The field is passed unpacked: attribute reads cost in a loop this hot.)"""
    while lo < hi:
        mid = (lo + hi + 1) >> 1  # the upper middle: never equals lo, hence the documented quirk
        found = unpack(buffer, mid * entry_bytes + at)[0]
        if found > target:
            hi = mid - 1
        elif found < target:
            lo = mid
        else:
            return mid
    if bound is LARGEST_LOWER_BOUND:
        return lo
    return NO_SLOT if lo == last_slot else lo + 1


def _binary_search_paged(
    buffer: Buffer,
    target: int,
    unpack: Callable[[Buffer, int], tuple[int]],
    entry_bytes: int,
    at: int,
    bound: Bound,
    lo: int,
    hi: int,
    last_slot: int,
    pages: set[int],
    page_bytes: int,
) -> int:
    """``_binary_search`` adding each probe's page to ``pages`` (kept separate so the unobserved
    search pays nothing for it)."""
    add = pages.add
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        position = mid * entry_bytes + at
        add(position // page_bytes)
        found = unpack(buffer, position)[0]
        if found > target:
            hi = mid - 1
        elif found < target:
            lo = mid
        else:
            return mid
    if bound is LARGEST_LOWER_BOUND:
        return lo
    return NO_SLOT if lo == last_slot else lo + 1
