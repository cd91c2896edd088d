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
went through the puts of the entries below it (no map filled below it).  So the first decision
leaves a trail (decide_shard_trailed: the slot row each put landed on, 4 bytes a dirty entry),
and the second fills the map those puts alone leave in from it (decide_from_trail), putting
nothing twice.  The trail, not the map, is what an engine keeps between the two: the baseline
in memory, a Spark task in a file or an object for the next stage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import CleanerError
from .key_scan import ENTRY_DTYPE
from .offset_map import SkimpyOffsetMap, unique_digests

__all__ = ["DEFAULT_LOAD_FACTOR", "ShardResult", "decide_from_trail", "decide_shard", "decide_shard_trailed", "or_bitmaps", "trail_size_max"]

# Kafka's log.cleaner.io.buffer.load.factor: beyond 90 % full, probe chains grow quickly.
DEFAULT_LOAD_FACTOR = 0.9

# A trail: magic, then little-endian int64s version, shard, slots, first dirty offset, range
# count, full_at (-1: none), then each range's put count, each range's (size, lookups, probes)
# after its puts, then an int32 slot row a put.  Read back from a file or an object it is bytes
# from outside the process: decide_from_trail checks every field against the shard's entries.
_TRAIL_MAGIC = b"SGLTRAIL"
_TRAIL_VERSION = 1
_TRAIL_HEADER_BYTES = len(_TRAIL_MAGIC) + 6 * 8
_ROW_LIMIT = 1 << 31


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
    return _decide_shard(shard, chunks, first_dirty_offset, map_bytes, load_factor, end_offset)[0]


def decide_shard_trailed(
    shard: int,
    chunks,
    *,
    first_dirty_offset: int,
    map_bytes: int,
    load_factor: float = DEFAULT_LOAD_FACTOR,
) -> tuple[ShardResult, bytes]:
    """decide_shard with no end, and the shard's trail: what decide_from_trail needs besides the
    entries to decide the shard below a lower end without putting an entry again.  The trail
    holds where the map filled, its counters after each range's puts, and the slot row of every
    put in put order (4 bytes a dirty entry); an engine keeps it, or writes it for a later
    stage, rather than the map."""
    result, offset_map, put_positions, counters = _decide_shard(shard, chunks, first_dirty_offset, map_bytes, load_factor, None)
    if offset_map.slots >= _ROW_LIMIT:
        raise CleanerError(f"key shard {shard}: a map of {offset_map.slots} slots: a trail's 4-byte rows hold fewer than {_ROW_LIMIT}")
    counts = [len(positions) for positions in put_positions]
    header = [_TRAIL_VERSION, shard, offset_map.slots, first_dirty_offset, len(counts),
              -1 if result.full_at is None else result.full_at, *counts,
              *(value for triple in counters for value in triple)]
    rows = np.concatenate([np.zeros(0, dtype=np.int64), *put_positions]) // offset_map.entry_bytes
    return result, _TRAIL_MAGIC + np.array(header, dtype="<i8").tobytes() + rows.astype("<i4").tobytes()


def trail_size_max(chunks) -> int:
    """A trail's bytes at most for a shard's `chunks`: its header, 32 bytes a range, 4 bytes an
    entry (what a reader of a trail from outside the process caps its read at)."""
    return _TRAIL_HEADER_BYTES + 32 * len(chunks) + 4 * sum(len(packed) // ENTRY_DTYPE.itemsize for _, _, packed in chunks)


def _decide_shard(shard, chunks, first_dirty_offset, map_bytes, load_factor, end_offset):
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
    return result, offset_map, put_positions, counters


def decide_from_trail(
    shard: int,
    chunks,
    trail: bytes,
    *,
    first_dirty_offset: int,
    map_bytes: int,
    load_factor: float = DEFAULT_LOAD_FACTOR,
    end_offset: int,
    source: str = "its trail",
) -> ShardResult:
    """decide_shard(..., end_offset=end_offset) on `chunks`, given the trail their first decision
    left (decide_shard_trailed).  When the end falls between ranges and below where the map
    filled, the map the puts of the entries below it alone leave is filled in at once from the
    rows those puts landed on (SkimpyOffsetMap.place: each row's digest with its last offset
    below the end; entries never move, so a later put could only fill another empty slot or
    update an offset), and only the decisions run again, not the puts.  Otherwise the shard is
    decided anew."""
    chunks = sorted(chunks, key=lambda chunk: chunk[0])
    entries = [np.frombuffer(packed, dtype=ENTRY_DTYPE) for _, _, packed in chunks]
    offset_map = SkimpyOffsetMap(map_bytes)
    refuse = _refusal(shard, source)
    full_at, counts, counters, rows = _read_trail(refuse, trail, shard, offset_map.slots, first_dirty_offset, entries)
    cut = _cut(entries, end_offset, full_at, first_dirty_offset)
    if cut is None:
        return decide_shard(shard, chunks, first_dirty_offset=first_dirty_offset, map_bytes=map_bytes,
                            load_factor=load_factor, end_offset=end_offset)
    bounds = np.concatenate(([0], np.cumsum(counts[:cut])))
    rows = rows[: int(bounds[-1])]
    dirty = [found[found["offset"] >= first_dirty_offset] for found in entries[:cut]]
    put = np.concatenate([np.zeros(0, dtype=ENTRY_DTYPE), *dirty])
    digests = _digests(put)
    _place_checked(refuse, offset_map, rows, digests, put["offset"].astype(np.int64),
                   int(offset_map.slots * load_factor), counters[cut - 1] if cut else (0, 0, 0))
    positions = [rows[bounds[i] : bounds[i + 1]] * offset_map.entry_bytes for i in range(cut)]
    return _decide(shard, offset_map, chunks[:cut], entries[:cut], positions, None, first_dirty_offset)


def _refusal(shard: int, source: str):
    def refuse(what: str) -> CleanerError:
        return CleanerError(f"key shard {shard}: {source}: {what}: the first decision's trail is not this shard's, "
                            f"or it changed under the job")
    return refuse


def _read_trail(refuse, trail: bytes, shard: int, slots: int, first_dirty_offset: int, entries):
    """The trail's header, per-range put counts, counters and rows, each checked against what
    this shard's entries and map make them (a trail from a file or an object is bytes from
    outside the process): (full_at, counts, counters (range, 3), rows)."""
    if len(trail) < _TRAIL_HEADER_BYTES:
        raise refuse(f"{len(trail)} bytes, shorter than a trail's {_TRAIL_HEADER_BYTES}-byte header")
    if trail[: len(_TRAIL_MAGIC)] != _TRAIL_MAGIC:
        raise refuse("not a trail (its first bytes are not a trail's)")
    version, trail_shard, trail_slots, trail_dirty, count, full_at = (
        int(value) for value in np.frombuffer(trail, dtype="<i8", count=6, offset=len(_TRAIL_MAGIC)))
    if version != _TRAIL_VERSION:
        raise refuse(f"trail version {version}, this cleaner reads {_TRAIL_VERSION}")
    if trail_shard != shard:
        raise refuse(f"the trail of key shard {trail_shard}")
    if trail_slots != slots:
        raise refuse(f"the trail of a map of {trail_slots} slots, this one has {slots}")
    if trail_dirty != first_dirty_offset:
        raise refuse(f"a trail whose first dirty offset is {trail_dirty}, this cleaning's {first_dirty_offset}")
    if count != len(entries):
        raise refuse(f"its trail names {count} ranges, its entries {len(entries)}")
    if full_at < -1:
        raise refuse(f"the map filled at offset {full_at}")
    full_at = None if full_at == -1 else full_at
    tables = _TRAIL_HEADER_BYTES + 32 * count
    if len(trail) < tables:
        raise refuse(f"{len(trail)} bytes, cut inside its {count} ranges' counts ({tables} bytes)")
    counts = np.frombuffer(trail, dtype="<i8", count=count, offset=_TRAIL_HEADER_BYTES).astype(np.int64)
    counters = np.frombuffer(trail, dtype="<i8", count=3 * count, offset=_TRAIL_HEADER_BYTES + 8 * count).reshape(-1, 3)
    # What the first decision put of each range: its dirty entries below where the map filled.
    expected = np.array([int(((found["offset"] >= first_dirty_offset)
                              & (True if full_at is None else found["offset"] < full_at)).sum()) for found in entries],
                        dtype=np.int64)
    if count and (counts != expected).any():
        wrong = int(np.flatnonzero(counts != expected)[0])
        raise refuse(f"its trail names {int(counts[wrong])} puts in its range {wrong}, its entries {int(expected[wrong])}")
    total = int(expected.sum())
    if len(trail) != tables + 4 * total:
        raise refuse(f"{len(trail)} bytes, a trail of {total} puts is {tables + 4 * total}")
    rows = np.frombuffer(trail, dtype="<i4", count=total, offset=tables).astype(np.int64)
    outside = (rows < 0) | (rows >= slots)
    if outside.any():
        raise refuse(f"a put on row {int(rows[outside][0])}, outside the map's {slots} slots")
    return full_at, counts, counters, rows


def _place_checked(refuse, offset_map: SkimpyOffsetMap, rows, digests, offsets, capacity: int, counters) -> None:
    """Fills the empty `offset_map` in as putting `digests` with `offsets` in order leaves it,
    from the rows the trail says those puts landed on, after checking that they are the rows
    the puts land on: each digest on one row of its own, each row the first slot of its digest's
    probe sequence not taken by a digest first put before it (entries never move), no put after
    the map held `capacity` digests; the trail's counters then equal the puts' (size, lookups,
    probes)."""
    first, inverse = unique_digests(digests)
    own = rows[first]
    if (rows != own[inverse]).any():
        wrong = int(np.flatnonzero(rows != own[inverse])[0])
        raise refuse(f"put {wrong} on row {int(rows[wrong])}, an earlier put of its key on row {int(own[inverse[wrong]])}")
    owner = np.full(offset_map.slots, -1, dtype=np.int64)
    owner[own] = np.arange(len(first))
    if (owner[own] != np.arange(len(first))).any():
        raise refuse(f"{len(first)} keys put on {len(np.unique(own))} rows: two keys on one row")
    if len(first) > capacity or (len(first) == capacity and capacity and int(first[-1]) < len(rows) - 1):
        raise refuse(f"{len(first)} keys put, beyond the map's {capacity} before it is full")
    distinct = np.ascontiguousarray(digests[first])
    flat = distinct.reshape(-1)
    attempt = np.zeros(len(first), dtype=np.int64)
    pending = np.arange(len(first))
    tries = np.zeros(len(first), dtype=np.int64)
    while pending.size:
        if (tries >= offset_map._max_attempts).any():
            raise refuse("a key's row is not on its probe sequence")
        where = offset_map._positions(flat, pending, tries)
        landed = where == own[pending]
        attempt[pending[landed]] = tries[landed]
        # Before its row, a key's probes meet only slots of keys first put before it.
        before = owner[where[~landed]]
        if ((before < 0) | (before >= pending[~landed])).any():
            raise refuse("a key's row is not the first free slot its probes met when it was put")
        pending, tries = pending[~landed], tries[~landed] + 1
    size, lookups, probes = len(first), len(rows), int((attempt[inverse] + 1).sum())
    if tuple(int(value) for value in counters) != (size, lookups, probes):
        raise refuse(f"counters (size, lookups, probes) {tuple(int(v) for v in counters)}, its puts' {(size, lookups, probes)}")
    last = np.zeros(len(first), dtype=np.int64)  # each key's last put below the end
    np.maximum.at(last, inverse, np.arange(len(rows)))
    offset_map.place(own, distinct, offsets[last], size, lookups, probes)


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
