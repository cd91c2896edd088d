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
That end is a segment's base offset, so it falls between ranges, and every shard's map already
went through the puts of the entries below it (no map filled below it): decide_again takes each
map back to where those puts left it and decides again from there, putting nothing twice (the
single-process engine; a Spark task keeps no map for a later stage, so the job decides anew).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .key_scan import ENTRY_DTYPE
from .offset_map import SkimpyOffsetMap

__all__ = ["DEFAULT_LOAD_FACTOR", "ShardResult", "ShardState", "decide_again", "decide_shard", "decide_shard_keeping", "or_bitmaps"]

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
    return decide_shard_keeping(
        shard, chunks, first_dirty_offset=first_dirty_offset, map_bytes=map_bytes, load_factor=load_factor,
        end_offset=end_offset,
    )[0]


@dataclass
class ShardState:
    """What a shard's decision left behind, for decide_again: its entries, the map, where each
    dirty entry's put landed and the map's counters after each range's puts."""
    shard: int
    chunks: list
    entries: list
    put_positions: list
    counters: list  # (size, lookups, probes) after each range's puts, before any get
    offset_map: SkimpyOffsetMap | None
    full_at: int | None
    first_dirty_offset: int
    map_bytes: int
    load_factor: float


def decide_shard_keeping(
    shard: int,
    chunks,
    *,
    first_dirty_offset: int,
    map_bytes: int,
    load_factor: float = DEFAULT_LOAD_FACTOR,
    end_offset: int | None = None,
) -> tuple[ShardResult, ShardState]:
    """decide_shard, and the state decide_again needs to decide the shard below a lower end
    without putting a single entry again."""
    chunks = sorted(chunks, key=lambda chunk: chunk[0])
    offset_map = SkimpyOffsetMap(map_bytes)
    capacity = int(offset_map.slots * load_factor)
    entries = [np.frombuffer(packed, dtype=ENTRY_DTYPE) for _, _, packed in chunks]
    if end_offset is not None:
        entries = [found[found["offset"] < end_offset] for found in entries]
    full_at = None
    put_positions, counters = [], []
    for found in entries:  # 1: the dirty entries into the map, in offset order, until it is full
        dirty = found[found["offset"] >= first_dirty_offset]
        if full_at is not None or not len(dirty):
            put_positions.append(np.zeros(0, dtype=np.int64))
        else:
            consumed, positions = offset_map.put_digests(_digests(dirty), dirty["offset"].astype(np.int64), capacity)
            put_positions.append(positions)
            if consumed < len(dirty):
                full_at = int(dirty["offset"][consumed])
        counters.append((offset_map.size, offset_map.lookups, offset_map.probes))
    result = _decide(shard, offset_map, chunks, entries, put_positions, full_at, first_dirty_offset)
    state = ShardState(shard, chunks, entries, put_positions, counters, offset_map, full_at, first_dirty_offset,
                       map_bytes, load_factor)
    return result, state


def decide_again(state: ShardState, end_offset: int) -> ShardResult:
    """The ShardResult decide_shard(..., end_offset=end_offset) gives on the same chunks, from the
    state the shard's first decision kept (which is used up).  When `end_offset` falls between
    ranges and below where this shard's map filled, the map that puts of the entries below it
    alone leave is the first decision's map taken back (SkimpyOffsetMap.rewind): slots first
    filled at or past the end emptied, and a key whose latest offset is at or past the end
    given back its latest offset below it.  So only the decisions run again, against that map,
    not the puts.  Otherwise (an end inside a range, or above where the map filled) the shard
    is decided from its entries again."""
    offset_map, state.offset_map = state.offset_map, None
    if offset_map is None:
        raise ValueError(f"shard {state.shard}: its state was used up by an earlier decide_again")
    entries = state.entries
    cut = 0
    while cut < len(entries) and (not len(entries[cut]) or int(entries[cut]["offset"][-1]) < end_offset):
        cut += 1
    straddles = cut < len(entries) and int(entries[cut]["offset"][0]) < end_offset
    if straddles or (state.full_at is not None and state.full_at < end_offset) or _zero_digest_first(state):
        return decide_shard(state.shard, state.chunks, first_dirty_offset=state.first_dirty_offset,
                            map_bytes=state.map_bytes, load_factor=state.load_factor, end_offset=end_offset)
    first_dirty, entry_bytes = state.first_dirty_offset, offset_map.entry_bytes
    below = state.put_positions[:cut]
    kept_rows = np.concatenate([np.zeros(0, dtype=np.int64), *below]) // entry_bytes
    kept_offsets = np.concatenate(
        [np.zeros(0, dtype=np.int64)] + [found["offset"][found["offset"] >= first_dirty].astype(np.int64) for found in entries[:cut]]
    )
    later_rows = np.concatenate([np.zeros(0, dtype=np.int64), *state.put_positions[cut:]]) // entry_bytes
    held = np.zeros(offset_map.slots, dtype=bool)
    held[kept_rows] = True
    emptied = later_rows[~held[later_rows]]
    past_end = offset_map.offsets_at(kept_rows * entry_bytes) >= end_offset
    # The last put below the end of each row now holding an offset past it (puts come in
    # offset order, so the last one in put order).
    rows, last = np.unique(kept_rows[past_end][::-1], return_index=True)
    offsets = kept_offsets[past_end][::-1][last]
    size, lookups, probes = state.counters[cut - 1] if cut else (0, 0, 0)
    offset_map.rewind(emptied, rows, offsets, size, lookups, probes)
    return _decide(state.shard, offset_map, state.chunks[:cut], entries[:cut], below, None, first_dirty)


def _zero_digest_first(state: ShardState) -> bool:
    """An all-zero digest put at offset 0 leaves a slot that reads as empty and that a later
    digest may take (SkimpyOffsetMap.put_digests): no map to take back then."""
    for found in state.entries:
        if len(found):
            return int(found["offset"][0]) == 0 == state.first_dirty_offset and bytes(found["digest"][0]) == bytes(16)
    return False


def _decide(shard, offset_map, chunks, entries, put_positions, full_at, first_dirty_offset) -> ShardResult:
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
