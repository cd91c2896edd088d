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
single-process engine).  A Spark task keeps no map for a later stage: the first leaves a trail
(trail_of: the row each put landed on), from which decide_from_trail fills the map in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import CleanerError
from .key_scan import ENTRY_DTYPE
from .offset_map import SkimpyOffsetMap

__all__ = ["DEFAULT_LOAD_FACTOR", "ShardResult", "ShardState", "decide_again", "decide_from_trail", "decide_shard", "decide_shard_keeping", "or_bitmaps", "trail_of"]

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
    cut = _cut(entries, end_offset, state.full_at, state.first_dirty_offset)
    if cut is None:
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


def trail_of(state: ShardState) -> bytes:
    """What decide_from_trail needs besides the shard's entries, as bytes a Spark task leaves for
    the next stage (a map does not outlive its task): where the map filled, its counters after
    each range's puts, and the slot row of every put in put order (4 bytes a dirty entry)."""
    counts = [len(positions) for positions in state.put_positions]
    header = [len(counts), -1 if state.full_at is None else state.full_at, *counts,
              *(value for triple in state.counters for value in triple)]
    rows = np.concatenate([np.zeros(0, dtype=np.int64), *state.put_positions]) // state.offset_map.entry_bytes
    return np.array(header, dtype="<i8").tobytes() + rows.astype("<i4").tobytes()


def decide_from_trail(
    shard: int,
    chunks,
    trail: bytes,
    *,
    first_dirty_offset: int,
    map_bytes: int,
    load_factor: float = DEFAULT_LOAD_FACTOR,
    end_offset: int,
) -> ShardResult:
    """decide_shard(..., end_offset=end_offset) on `chunks`, given the trail (trail_of) their
    first decision left: the map the puts below the end leave is filled in at once from the
    rows the puts landed on (SkimpyOffsetMap.place), each row's digest with its last offset
    below the end, rather than probed for again.  Falls back to deciding anew as decide_again."""
    chunks = sorted(chunks, key=lambda chunk: chunk[0])
    count = int(np.frombuffer(trail, dtype="<i8", count=1)[0])
    if count != len(chunks):
        raise CleanerError(f"key shard {shard}: its trail names {count} ranges, its entries {len(chunks)}: "
                           f"the first decision's files changed under the job")
    header = np.frombuffer(trail, dtype="<i8", count=2 + 4 * count)
    full_at = None if header[1] == -1 else int(header[1])
    counts = header[2 : 2 + count]
    counters = header[2 + count :].reshape(-1, 3)
    entries = [np.frombuffer(packed, dtype=ENTRY_DTYPE) for _, _, packed in chunks]
    cut = _cut(entries, end_offset, full_at, first_dirty_offset)
    if cut is None:
        return decide_shard(shard, chunks, first_dirty_offset=first_dirty_offset, map_bytes=map_bytes,
                            load_factor=load_factor, end_offset=end_offset)
    offset_map = SkimpyOffsetMap(map_bytes)
    bounds = np.concatenate(([0], np.cumsum(counts[:cut])))
    rows = np.frombuffer(trail, dtype="<i4", count=int(bounds[-1]), offset=8 * len(header)).astype(np.int64)
    dirty = [found[found["offset"] >= first_dirty_offset] for found in entries[:cut]]
    put = np.concatenate([np.zeros(0, dtype=ENTRY_DTYPE), *dirty])
    if len(put) != len(rows):
        raise CleanerError(f"key shard {shard}: its trail names {len(rows)} puts below offset {end_offset}, its entries "
                           f"{len(put)}: the first decision's files changed under the job")
    placed, last = np.unique(rows[::-1], return_index=True)  # each row's last put below the end
    size, lookups, probes = (int(value) for value in counters[cut - 1]) if cut else (0, 0, 0)
    offset_map.place(placed, _digests(put[::-1][last]), put["offset"][::-1][last].astype(np.int64), size, lookups, probes)
    positions = [rows[bounds[i] : bounds[i + 1]] * offset_map.entry_bytes for i in range(cut)]
    return _decide(shard, offset_map, chunks[:cut], entries[:cut], positions, None, first_dirty_offset)


def _cut(entries, end_offset: int, full_at: int | None, first_dirty_offset: int) -> int | None:
    """How many leading ranges lie wholly below `end_offset`, when the map the puts of their
    entries leave is the one deciding below the end needs; None when it is not: the end falls
    inside a range, or above where the map filled, or an all-zero digest was put at offset 0
    (its slot reads as empty and a later digest may take it: SkimpyOffsetMap.put_digests)."""
    cut = 0
    while cut < len(entries) and (not len(entries[cut]) or int(entries[cut]["offset"][-1]) < end_offset):
        cut += 1
    if cut < len(entries) and int(entries[cut]["offset"][0]) < end_offset:
        return None
    if full_at is not None and full_at < end_offset:
        return None
    first = next((found for found in entries if len(found)), None)
    if first is not None and int(first["offset"][0]) == 0 == first_dirty_offset and bytes(first["digest"][0]) == bytes(16):
        return None
    return cut


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
