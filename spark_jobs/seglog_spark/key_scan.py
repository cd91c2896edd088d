"""Step 1 of a cleaning: decode one byte range's records into (digest, offset, ordinal)
entries, bucketed by the key shard that owns each digest.

An entry is packed as ENTRY (28 bytes) so that a range ships as one bytes object per shard
rather than one Python object per record (Spark pickles each object it shuffles).  The
`ordinal` is the record's position among all the range's records (keyless ones included): the
shard answers "superseded" as one bit per ordinal, and the rewrite walks the same records in
the same order.
"""

from __future__ import annotations

import hashlib
import mmap
import struct

from seglog.records import RECORDS_OFFSET, RecordBatch
from seglog.records.varint import ZIGZAG_DECODE

from .layout import ByteRange, walk_headers
from .snapshot import Snapshot

__all__ = ["ENTRY", "RangeKeys", "read_range", "scan_range", "shard_of"]

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
    """What step 1 found in one range: packed entries per shard, and the record count."""

    __slots__ = ("range_id", "record_count", "entries")

    def __init__(self, range_id: int, record_count: int, entries: dict[int, bytes]) -> None:
        self.range_id = range_id
        self.record_count = record_count
        self.entries = entries


_CONTINUATION = 0x80


def _keys_fast(data: bytes, position: int, end: int, count: int, base_offset: int):
    """(offset, key) of each record of an uncompressed records area, reading only lengths,
    the offset delta and the key (values and headers are skipped by their lengths); None when
    a record has a varint longer than two bytes or the lengths do not land exactly on `end`,
    and the caller decodes the batch the careful way instead."""
    D, C = ZIGZAG_DECODE, _CONTINUATION
    out = []
    pos = position
    try:
        for _ in range(count):
            b = data[pos]
            if b < C:
                p, record_end = pos + 1, pos + 1 + D[b]
            else:
                b1 = data[pos + 1]
                if b1 >= C:
                    return None
                p = pos + 2
                record_end = p + D[b + (b1 << 7)]
            p += 1  # attributes
            b = data[p]  # timestampDelta: skipped
            if b < C:
                p += 1
            elif data[p + 1] < C:
                p += 2
            else:
                return None
            b = data[p]
            if b < C:
                offset_delta = D[b]
                p += 1
            else:
                b1 = data[p + 1]
                if b1 >= C:
                    return None
                offset_delta = D[b + (b1 << 7)]
                p += 2
            b = data[p]
            if b < C:
                size = D[b]
                p += 1
            else:
                b1 = data[p + 1]
                if b1 >= C:
                    return None
                size = D[b + (b1 << 7)]
                p += 2
            if size >= 0:
                key = data[p : p + size]
                if p + size > record_end:
                    return None
            elif size == -1:
                key = None
            else:
                return None
            if record_end > end or record_end <= p:
                return None
            out.append((base_offset + offset_delta, key))
            pos = record_end
    except IndexError:
        return None
    return out if pos == end else None


def batch_keys(batch: RecordBatch, data: bytes):
    """(offset, key) of each record of the batch (a view over `data`)."""
    if batch.compression == 0 and batch.records_count >= 0:
        start = batch.position + RECORDS_OFFSET
        found = _keys_fast(data, start, batch.position + batch.size_in_bytes, batch.records_count, batch.base_offset)
        if found is not None:
            return found
    return [(record[0], record[2]) for record in batch.records()]


def scan_range(snapshot: Snapshot, byte_range: ByteRange, shard_count: int) -> RangeKeys:
    data = read_range(snapshot, byte_range)
    buckets = [bytearray() for _ in range(shard_count)]
    pack, md5, shard_byte = ENTRY.pack, hashlib.md5, SHARD_BYTE
    ordinal = 0
    for batch in iter_range_batches(snapshot, byte_range, data):
        for offset, key in batch_keys(batch, data):
            if key is not None:
                digest = md5(key).digest()
                buckets[digest[shard_byte] % shard_count] += pack(digest, offset, ordinal)
            ordinal += 1
    entries = {shard: bytes(bucket) for shard, bucket in enumerate(buckets) if bucket}
    return RangeKeys(byte_range.range_id, ordinal, entries)
