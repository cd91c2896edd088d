"""Step 2 of a cleaning: one key shard decides which of its records are superseded.

The shard's entries arrive grouped by range; ranges are numbered in offset order and entries
inside a range are in offset order, so sorting by range id replays the shard's part of the log
in offset order.  Then, as Kafka's Cleaner.buildOffsetMap and shouldRetainRecord do:
1. every entry at or above the first dirty offset is put into a bounded SkimpyOffsetMap, until
   the map holds `load_factor` of its slots ("full"): the offset of the first entry left out
   is the shard's `full_at`;
2. every entry below `full_at` (clean ones included) whose offset is below the map's offset
   for its digest is superseded: its bit is set in its range's bitmap.  A dirty entry reads
   the map's offset at the slot its put used (entries never move: no probing twice); a clean
   entry looks its digest up.
Entries at or above `full_at` are left undecided; the driver cleans only segments wholly below
every shard's `full_at`.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from .key_scan import ENTRY
from .offset_map import SkimpyOffsetMap

__all__ = ["DEFAULT_LOAD_FACTOR", "ShardResult", "decide_shard", "or_bitmaps"]

# Kafka's log.cleaner.io.buffer.load.factor: beyond 90 % full, probe chains grow quickly.
DEFAULT_LOAD_FACTOR = 0.9


@dataclass(frozen=True)
class ShardResult:
    shard: int
    bitmaps: dict[int, bytes]  # range id -> one bit per record ordinal, 1 = superseded
    full_at: int | None  # offset of the first dirty entry the map had no room for
    entries: int
    slots: int
    lookups: int
    probes: int
    records: int


def decide_shard(
    shard: int,
    chunks,
    *,
    first_dirty_offset: int,
    map_bytes: int,
    load_factor: float = DEFAULT_LOAD_FACTOR,
) -> ShardResult:
    """`chunks`: (range_id, record_count, packed entries) of this shard, in any order."""
    chunks = sorted(chunks, key=lambda chunk: chunk[0])
    offset_map = SkimpyOffsetMap(map_bytes)
    capacity = int(offset_map.slots * load_factor)
    positions = array("q")
    full_at = _build_map(offset_map, chunks, first_dirty_offset, capacity, positions)
    bitmaps: dict[int, bytes] = {}
    get, offset_at, iter_unpack = offset_map.get_digest, offset_map.offset_at, ENTRY.iter_unpack
    records = 0
    put_index = 0
    for range_id, record_count, packed in chunks:
        bitmap = bytearray((record_count + 7) >> 3)
        marked = False
        for digest, offset, ordinal in iter_unpack(packed):
            if full_at is not None and offset >= full_at:
                break
            records += 1
            if offset >= first_dirty_offset:
                latest = offset_at(positions[put_index])
                put_index += 1
            else:
                latest = get(digest)
            if offset < latest:
                bitmap[ordinal >> 3] |= 1 << (ordinal & 7)
                marked = True
        if marked:
            bitmaps[range_id] = bytes(bitmap)
    return ShardResult(
        shard, bitmaps, full_at, offset_map.size, offset_map.slots, offset_map.lookups, offset_map.probes, records
    )


def _build_map(offset_map: SkimpyOffsetMap, chunks, first_dirty_offset: int, capacity: int, positions) -> int | None:
    """Put the dirty entries in offset order; `positions` gets each put's entry position."""
    put, keep = offset_map.put_digest, positions.append
    for _, _, packed in chunks:
        for digest, offset, _ in ENTRY.iter_unpack(packed):
            if offset < first_dirty_offset:
                continue
            if offset_map.size >= capacity:
                return offset
            keep(put(digest, offset))
    return None


def or_bitmaps(first: bytes, second: bytes) -> bytes:
    """Bitwise OR of two bitmaps of the same range (shards own disjoint records)."""
    assert len(first) == len(second), (len(first), len(second))
    return (int.from_bytes(first, "little") | int.from_bytes(second, "little")).to_bytes(len(first), "little")
