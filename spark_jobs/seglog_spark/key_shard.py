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
from .offset_map import SkimpyOffsetMap

__all__ = ["DEFAULT_LOAD_FACTOR", "MAP_SLOTS_MAX", "ShardResult", "decide_from_trail", "decide_shard", "decide_shard_trailed", "or_bitmaps", "trail_size_max"]

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
# A shard map holds fewer slots than this (a trail's rows are 4 bytes): plan_cleaning refuses more.
MAP_SLOTS_MAX = _ROW_LIMIT - 1


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
    rows those puts landed on, checked range by range (_place_checked: each row's digest with its
    last offset below the end; entries never move, so a later put could only fill another empty
    slot or update an offset), and only the decisions run again, not the puts.  Otherwise the
    shard is decided anew; its map is allocated only once the way is known (one map at a time)."""
    chunks = sorted(chunks, key=lambda chunk: chunk[0])
    entries = [np.frombuffer(packed, dtype=ENTRY_DTYPE) for _, _, packed in chunks]
    refuse = _refusal(shard, source)
    slots = SkimpyOffsetMap.slots_of(map_bytes)
    full_at, counts, counters, rows = _read_trail(refuse, trail, shard, slots, first_dirty_offset, entries)
    cut = _cut(entries, end_offset, full_at, first_dirty_offset)
    if cut is None:
        del rows
        return decide_shard(shard, chunks, first_dirty_offset=first_dirty_offset, map_bytes=map_bytes,
                            load_factor=load_factor, end_offset=end_offset)
    offset_map = SkimpyOffsetMap(map_bytes)  # only now: deciding anew above allocates its own
    bounds = np.concatenate(([0], np.cumsum(counts[:cut])))
    put_rows = [rows[bounds[i] : bounds[i + 1]].astype(np.int64) for i in range(cut)]
    del rows
    _place_checked(refuse, offset_map, put_rows, entries[:cut], first_dirty_offset, int(offset_map.slots * load_factor),
                   counters[cut - 1] if cut else (0, 0, 0))
    positions = [put_rows.pop(0) * offset_map.entry_bytes for _ in range(cut)]
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
    rows = np.frombuffer(trail, dtype="<i4", count=total, offset=tables)
    outside = (rows < 0) | (rows >= slots)
    if outside.any():
        raise refuse(f"a put on row {int(rows[outside][0])}, outside the map's {slots} slots")
    return full_at, counts, counters, rows


def _place_checked(refuse, offset_map: SkimpyOffsetMap, put_rows, entries, first_dirty_offset: int, capacity: int,
                   counters) -> None:
    """Fills the empty `offset_map` in as putting each range's dirty entries in order leaves it,
    from the rows the trail says those puts landed on (`put_rows`: a range's rows), after
    checking, range by range, that they are the rows the puts land on: the puts on one row all
    of one digest; a row already holding a digest only that digest's; each digest's row on its
    probe sequence, every slot its probes met before it holding another digest, put before it
    (entries never move); no put after the map held `capacity` digests; the trail's counters
    then equal the puts' (size, lookups, probes).  Grouped by row (4-byte ints sorted a range
    at a time), not by digest."""
    table, hash_bytes = offset_map._table(), offset_map.hash_bytes
    words = table.view("<u8")  # a slot as 3 words: the digest's two, then the offset
    size = lookups = probes = 0
    last_range = max((i for i, rows in enumerate(put_rows) if len(rows)), default=-1)
    for index, (rows, found) in enumerate(zip(put_rows, entries)):
        count = len(rows)
        if not count:
            continue
        dirty = found[found["offset"] >= first_dirty_offset]
        digests = _digests(dirty)
        row, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
        key = digests[first]
        key_words = key.view("<u8")
        puts_words = digests.view("<u8")
        other = (puts_words[:, 0] != key_words[inverse, 0]) | (puts_words[:, 1] != key_words[inverse, 1])
        if other.any():
            wrong = int(np.flatnonzero(other)[0])
            raise refuse(f"put {lookups + wrong} on row {int(rows[wrong])}, which an earlier put of another key took")
        del other, puts_words, digests
        held = words[row]
        new = (held == 0).all(axis=1)
        if (~new & ((held[:, 0] != key_words[:, 0]) | (held[:, 1] != key_words[:, 1]))).any():
            raise refuse("two keys on one row")
        del held
        size += int(new.sum())
        if size > capacity or (size == capacity and capacity and (index != last_range or int(first[new].max()) != count - 1)):
            raise refuse(f"{size} keys put, beyond the map's {capacity} before it is full")
        flat = key.reshape(-1)
        attempt = np.zeros(len(row), dtype=np.int64)
        pending = np.arange(len(row))
        tries = np.zeros(len(row), dtype=np.int64)
        while pending.size:
            if (tries >= offset_map._max_attempts).any():
                raise refuse("a key's row is not on its probe sequence")
            where = offset_map._positions(flat, pending, tries)
            landed = where == row[pending]
            attempt[pending[landed]] = tries[landed]
            pending, tries, where = pending[~landed], tries[~landed], where[~landed]
            if not pending.size:
                break
            # Before its row, a key's probes meet only other keys' slots, taken before it: before
            # this range, or (for a key new in it) by a key new in it first put earlier.
            met = words[where]
            mine = key_words[pending]
            ok = (met != 0).any(axis=1) & ((met[:, 0] != mine[:, 0]) | (met[:, 1] != mine[:, 1]))
            at = np.minimum(np.searchsorted(row, where), len(row) - 1)
            ok |= ((row[at] == where) & new[at] & new[pending] & (first[at] < first[pending])
                   & ((key_words[at, 0] != mine[:, 0]) | (key_words[at, 1] != mine[:, 1])))
            if not ok.all():
                raise refuse("a key's row is not the first free slot its probes met when it was put")
            tries = tries + 1
        lookups += count
        probes += int((attempt[inverse] + 1).sum())
        last = np.zeros(len(row), dtype=np.int64)  # each row's last put of the range
        np.maximum.at(last, inverse, np.arange(count))
        table[row[new], :hash_bytes] = key[new]
        table[row, hash_bytes:] = dirty["offset"][last].astype(">i8").view(np.uint8).reshape(-1, 8)
    if tuple(int(value) for value in counters) != (size, lookups, probes):
        raise refuse(f"counters (size, lookups, probes) {tuple(int(v) for v in counters)}, its puts' {(size, lookups, probes)}")
    offset_map.size, offset_map.lookups, offset_map.probes = size, lookups, probes


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
