"""Step 1 of a cleaning: decode one byte range's records into (digest, offset, ordinal)
entries, bucketed by the key shard that owns each digest.

The records are walked in bulk (record_walk.py; the codec decodes what the bulk walk does not
take), keys are digested with hashlib, and entries are packed with numpy as ENTRY (28 bytes) so
that a range ships as one bytes object per shard rather than one Python object per record
(Spark pickles each object it shuffles).  The
`ordinal` is the record's position among all the range's records (keyless ones included): the
shard answers "superseded" as one bit per ordinal, and the rewrite walks the same records in
the same order.
"""

from __future__ import annotations

import hashlib
import struct

try:  # CPython's built-in MD5: the same digests as hashlib's, at about half the cost per short key
    from _md5 import md5 as _md5
except ImportError:  # pragma: no cover - an interpreter without it
    _md5 = hashlib.md5

import numpy as np

from seglog.records import RecordBatch

from .layout import ByteRange, walk_headers
from .record_walk import RangeWalk, walk_range_records
from .snapshot import Snapshot

__all__ = [
    "ENTRY",
    "ENTRY_DTYPE",
    "RangeKeys",
    "range_batches",
    "range_digests",
    "range_keys",
    "read_range",
    "scan_range",
    "shard_of",
]

ENTRY = struct.Struct(
    ">"
    "16s"  # digest: the key's MD5 (the offset map's hash)
    "q"  # offset: the record's offset
    "i"  # ordinal: the record's index among the range's records
)
assert ENTRY.size == 28
# The digest byte that picks the shard: the last one, which the offset map's probes read only
# after 12 collisions, so that a shard's digests still spread over all of its map's slots.
SHARD_BYTE = 15


def shard_of(digest: bytes, shard_count: int) -> int:
    return digest[SHARD_BYTE] % shard_count


def read_range(snapshot: Snapshot, byte_range: ByteRange) -> bytes:
    """The range's bytes (one copy: record decoding is fastest on bytes)."""
    segment = snapshot.segments[byte_range.segment_index]
    with open(snapshot.segment_path(segment), "rb") as f:
        f.seek(byte_range.start)
        data = f.read(byte_range.end - byte_range.start)
    if len(data) != byte_range.end - byte_range.start:
        raise OSError(f"{segment.file}: short read of [{byte_range.start}, {byte_range.end})")
    return data


def iter_range_batches(snapshot: Snapshot, byte_range: ByteRange, data: bytes):
    """Each batch of the range, CRC-checked, as a RecordBatch over `data`."""
    where = f"{snapshot.segments[byte_range.segment_index].file}+{byte_range.start}"
    for position, _ in walk_headers(data, len(data), where):
        batch = RecordBatch(data, position)
        batch.ensure_valid()
        yield batch


class RangeKeys:
    """What step 1 found in one range: packed entries per shard, the record count, and the
    offsets its records span, [base_offset, end_offset) (0, 0 for a range of no records)."""

    __slots__ = ("range_id", "record_count", "entries", "base_offset", "end_offset")

    def __init__(self, range_id: int, record_count: int, entries: dict[int, bytes], base_offset: int = 0,
                 end_offset: int = 0) -> None:
        self.range_id = range_id
        self.record_count = record_count
        self.entries = entries
        self.base_offset = base_offset
        self.end_offset = end_offset


ENTRY_DTYPE = np.dtype([("digest", "V16"), ("offset", ">i8"), ("ordinal", ">i4")])  # ENTRY, as numpy reads it
assert ENTRY_DTYPE.itemsize == ENTRY.size


def range_batches(snapshot: Snapshot, byte_range: ByteRange, data: bytes) -> np.ndarray:
    """Positions of the range's batches, each CRC-checked (iter_range_batches)."""
    return np.fromiter((batch.position for batch in iter_range_batches(snapshot, byte_range, data)), dtype=np.int64)


def range_keys(walk: RangeWalk, data: bytes) -> tuple[np.ndarray, list]:
    """(offset per record ordinal, the keys of the keyed records in ordinal order)."""
    offsets = walk.offset
    keyed = walk.key_length >= 0
    if walk.decoded:
        for b, records in walk.decoded.items():
            first = int(walk.first[b])
            span = slice(first, first + len(records))
            offsets[span] = [record[0] for record in records]
            keyed[span] = [record[2] is not None for record in records]
    ordinals = np.flatnonzero(keyed)
    if not walk.decoded:
        starts = walk.key_start[ordinals]
        keys = list(map(data.__getitem__, map(slice, starts.tolist(), (starts + walk.key_length[ordinals]).tolist())))
        return offsets, ordinals, keys
    keys = []
    batch_of = walk.batch_of_records()[ordinals]
    for ordinal, b in zip(ordinals.tolist(), batch_of.tolist()):
        if b in walk.decoded:
            keys.append(walk.decoded[b][ordinal - int(walk.first[b])][2])
        else:
            start = int(walk.key_start[ordinal])
            keys.append(data[start : start + int(walk.key_length[ordinal])])
    return offsets, ordinals, keys


def range_digests(walk: RangeWalk, data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offset per record ordinal, ordinals of the keyed records, their keys' MD5 digests as
    an (n, 16) uint8 array)."""
    md5 = _md5
    if walk.decoded:
        offsets, ordinals, keys = range_keys(walk, data)
        digests = b"".join([md5(key).digest() for key in keys])
    else:  # every batch walked in bulk: digest the keys straight from their positions
        offsets = walk.offset
        ordinals = np.flatnonzero(walk.key_length >= 0)
        starts = walk.key_start[ordinals]
        ends = starts + walk.key_length[ordinals]
        digests = b"".join([md5(data[start:end]).digest() for start, end in zip(starts.tolist(), ends.tolist())])
    return offsets, ordinals, np.frombuffer(digests, dtype=np.uint8).reshape(-1, 16)


def scan_range(snapshot: Snapshot, byte_range: ByteRange, shard_count: int) -> RangeKeys:
    data = read_range(snapshot, byte_range)
    walk = walk_range_records(data, range_batches(snapshot, byte_range, data))
    offsets, ordinals, digests = range_digests(walk, data)
    entries = np.empty(len(ordinals), dtype=ENTRY_DTYPE)
    entries["digest"] = digests.view("V16").reshape(-1)
    entries["offset"] = offsets[ordinals]
    entries["ordinal"] = ordinals
    shards = digests[:, SHARD_BYTE] % shard_count
    order = np.argsort(shards, kind="stable")
    bounds = np.searchsorted(shards[order], np.arange(shard_count + 1))
    grouped = entries[order]
    packed = {
        shard: grouped[bounds[shard] : bounds[shard + 1]].tobytes()
        for shard in range(shard_count)
        if bounds[shard + 1] > bounds[shard]
    }
    span = (int(offsets[: walk.record_count].min()), int(offsets[: walk.record_count].max()) + 1) if walk.record_count else (0, 0)
    return RangeKeys(byte_range.range_id, walk.record_count, packed, *span)
