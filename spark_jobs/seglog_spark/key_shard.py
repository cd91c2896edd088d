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
every shard's `full_at`.  A shard's map may hold offsets past that end (its own map filled later,
or not at all), and a record superseded only by one past the end must be kept: so when a map
filled, every shard is decided again with `end_offset`, the end the driver chose, and entries at
or above it neither enter the map nor are decided (Kafka's map holds only [first dirty, end)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .key_scan import ENTRY_DTYPE
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
    end_offset: int | None = None,
) -> ShardResult:
    """`chunks`: (range_id, record_count, packed entries) of this shard, in any order.  The map
    is filled and read in bulk (SkimpyOffsetMap.put_digests/get_digests), one range at a time.
    With `end_offset`, entries at or above it are left out: neither put nor decided."""
    chunks = sorted(chunks, key=lambda chunk: chunk[0])
    offset_map = SkimpyOffsetMap(map_bytes)
    capacity = int(offset_map.slots * load_factor)
    entries = [np.frombuffer(packed, dtype=ENTRY_DTYPE) for _, _, packed in chunks]
    if end_offset is not None:
        entries = [found[found["offset"] < end_offset] for found in entries]
    full_at = None
    put_positions = []
    for found in entries:  # 1: the dirty entries into the map, in offset order, until it is full
        dirty = found[found["offset"] >= first_dirty_offset]
        if full_at is not None or not len(dirty):
            put_positions.append(np.zeros(0, dtype=np.int64))
            continue
        consumed, positions = offset_map.put_digests(_digests(dirty), dirty["offset"].astype(np.int64), capacity)
        put_positions.append(positions)
        if consumed < len(dirty):
            full_at = int(dirty["offset"][consumed])
    bitmaps: dict[int, bytes] = {}
    records = 0
    for (range_id, record_count, _), found, positions in zip(chunks, entries, put_positions):
        if full_at is not None:  # 2: decide every entry below where the map filled
            found = found[found["offset"] < full_at]
        if not len(found):
            continue
        records += len(found)
        offsets = found["offset"].astype(np.int64)
        latest = np.empty(len(found), dtype=np.int64)
        dirty = offsets >= first_dirty_offset
        latest[dirty] = offset_map.offsets_at(positions[: int(dirty.sum())])
        latest[~dirty] = offset_map.get_digests(_digests(found[~dirty]))
        superseded = found["ordinal"][offsets < latest].astype(np.int64)
        if superseded.size:
            bits = np.zeros(record_count, dtype=bool)
            bits[superseded] = True
            bitmaps[range_id] = np.packbits(bits, bitorder="little").tobytes()
    return ShardResult(
        shard, bitmaps, full_at, offset_map.size, offset_map.slots, offset_map.lookups, offset_map.probes, records
    )


def _digests(entries: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(entries["digest"]).view(np.uint8).reshape(-1, 16)


def or_bitmaps(first: bytes, second: bytes) -> bytes:
    """Bitwise OR of two bitmaps of the same range (shards own disjoint records)."""
    assert len(first) == len(second), (len(first), len(second))
    return np.bitwise_or(np.frombuffer(first, dtype=np.uint8), np.frombuffer(second, dtype=np.uint8)).tobytes()
