"""The records of one byte range walked in bulk (numpy): every batch's record fields at once,
for the scan (offsets and keys) and the rewrite (keys, values, timestamps, record bounds).

Record i of every batch is decoded in the same numpy step, so the Python work is per record
*index* (about 100 steps for batches of 100 records), not per record.  Only the record shape
the codec's encoder writes is walked so: an uncompressed CreateTime batch whose records have
attributes 0, varints in their shortest form (of at most 4 bytes, 8 for timestampDelta), no
headers, and fields that fill each record and the records area exactly.  Any other batch is
"irregular" (`regular[b]` False) and is decoded with the codec (RecordBatch.records()), which
also names what is wrong with a corrupt one; so the walk never accepts bytes the codec would
refuse, and a record it accepts re-encodes to the same bytes.

Positions are into the range's bytes; record arrays are indexed by the record's ordinal in the
range (batch b's records are first[b] .. first[b] + count[b] - 1), and hold garbage for the
records of irregular batches, whose codec records are in `decoded[b]`.
"""

from __future__ import annotations

import numpy as np

from seglog.records import RECORD_BATCH_OVERHEAD, RecordBatch
from seglog.records.attributes import COMPRESSION_MASK, TIMESTAMP_TYPE_MASK

__all__ = ["BATCH_HEADER", "RangeWalk", "walk_range_records"]

# The 61-byte batch header (seglog.records.HEADER) as a numpy record, to read every header at once.
BATCH_HEADER = np.dtype(
    [
        ("base_offset", ">i8"),
        ("length", ">i4"),
        ("partition_leader_epoch", ">i4"),
        ("magic", "i1"),
        ("crc", ">u4"),
        ("attributes", ">i2"),
        ("last_offset_delta", ">i4"),
        ("base_timestamp", ">i8"),
        ("max_timestamp", ">i8"),
        ("producer_id", ">i8"),
        ("producer_epoch", ">i2"),
        ("base_sequence", ">i4"),
        ("records_count", ">i4"),
    ]
)
assert BATCH_HEADER.itemsize == RECORD_BATCH_OVERHEAD

_MIN_RECORD_BYTES = 7  # length, attributes, timestampDelta, offsetDelta, key and value lengths, headersCount
_VARINT_BYTES = 4  # longest int32 varint walked in bulk (lengths and deltas up to 2^27)
_VARLONG_BYTES = 8  # longest timestampDelta walked in bulk (56 bits: no int64 overflow)
# When so few batches are still being walked that a numpy step costs more than decoding their
# records one by one, they are left to the codec.
_FEW_BATCHES = 4
_FEW_AFTER_RECORDS = 64


class RangeWalk:
    """Per batch: header fields, `first` record ordinal, `regular`.  Per record ordinal:
    `offset`, `timestamp`, `record_start`, `tail_start` (the offsetDelta field: from there to
    `record_end` a rebuilt record is copied unchanged), `record_end`, `key_start`, `key_length`
    and `value_length` (-1: null)."""

    __slots__ = (
        "positions", "headers", "counts", "first", "regular", "record_count", "decoded",
        "offset", "timestamp", "record_start", "tail_start", "record_end", "key_start", "key_length", "value_length",
    )

    def batch_of_records(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.counts)), self.counts)


def _varints(buffer: np.ndarray, last: int, at: np.ndarray, bytes_max: int):
    """(values, sizes, ok) of the zigzag varints starting at each of `at`: ok is False where a
    varint is longer than `bytes_max` or not in its shortest form."""
    byte = buffer[np.minimum(at, last)].astype(np.int64)
    unsigned = byte & 0x7F
    size = np.ones(len(at), dtype=np.int64)
    ok = np.ones(len(at), dtype=bool)
    going = np.flatnonzero(byte >= 0x80)
    shift = 7
    while going.size:
        if shift == 7 * bytes_max:
            ok[going] = False
            break
        byte = buffer[np.minimum(at[going] + (shift // 7), last)].astype(np.int64)
        unsigned[going] |= (byte & 0x7F) << shift
        size[going] += 1
        ends = byte < 0x80
        ok[going[ends & (byte == 0)]] = False  # a last byte of 0: not the shortest form
        going = going[~ends]
        shift += 7
    return (unsigned >> 1) ^ -(unsigned & 1), size, ok


def walk_range_records(data: bytes, positions: np.ndarray) -> RangeWalk:
    """Walk the batches starting at `positions` in `data` (whole batches, checked by the
    caller's header walk)."""
    walk = RangeWalk()
    buffer = np.frombuffer(data, dtype=np.uint8)
    positions = np.asarray(positions, dtype=np.int64)
    walk.positions = positions
    headers = buffer[positions[:, None] + np.arange(RECORD_BATCH_OVERHEAD)].view(BATCH_HEADER).reshape(-1)
    walk.headers = headers
    counts = headers["records_count"].astype(np.int64)
    area_start = positions + RECORD_BATCH_OVERHEAD
    area_end = positions + 12 + headers["length"].astype(np.int64)
    regular = (
        (headers["attributes"] & (COMPRESSION_MASK | TIMESTAMP_TYPE_MASK) == 0)
        & (counts >= 0)
        & (counts * _MIN_RECORD_BYTES <= area_end - area_start)
    )
    # The others are decoded by the codec first (which refuses a corrupt one), so that a
    # record count is never trusted before it is known to be real.
    walk.decoded = {int(b): RecordBatch(data, int(positions[b])).records() for b in np.flatnonzero(~regular)}
    for b, records in walk.decoded.items():
        counts[b] = len(records)
    walk.counts = counts
    first = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    walk.first = first
    total = int(counts.sum())
    walk.record_count = total
    fields = {name: np.zeros(total, dtype=np.int64) for name in (
        "offset", "timestamp", "record_start", "tail_start", "record_end", "key_start", "key_length", "value_length")}
    cursor = area_start.copy()
    active = np.flatnonzero(regular & (counts > 0))
    last = len(buffer) - 1
    base_offset = headers["base_offset"].astype(np.int64)
    base_timestamp = headers["base_timestamp"].astype(np.int64)
    index = 0
    while active.size:
        if active.size < _FEW_BATCHES and index >= _FEW_AFTER_RECORDS:
            regular[active] = False
            break
        at = cursor[active]
        length, size, ok = _varints(buffer, last, at, _VARINT_BYTES)
        body = at + size
        record_end = body + length
        ok &= (length > 0) & (buffer[np.minimum(body, last)] == 0)  # attributes 0
        timestamp_delta, size, good = _varints(buffer, last, body + 1, _VARLONG_BYTES)
        ok &= good
        tail = body + 1 + size
        offset_delta, offset_size, good = _varints(buffer, last, tail, _VARINT_BYTES)
        ok &= good
        key_length, key_size, good = _varints(buffer, last, tail + offset_size, _VARINT_BYTES)
        ok &= good & (key_length >= -1)
        key_start = tail + offset_size + key_size
        key_end = key_start + np.maximum(key_length, 0)
        value_length, size, good = _varints(buffer, last, key_end, _VARINT_BYTES)
        ok &= good & (value_length >= -1)
        value_end = key_end + size + np.maximum(value_length, 0)
        ok &= (value_end + 1 == record_end) & (buffer[np.minimum(value_end, last)] == 0)  # headersCount 0
        ok &= record_end <= area_end[active]
        ordinal = first[active] + index
        batch_timestamp = base_timestamp[active]
        fields["offset"][ordinal] = base_offset[active] + offset_delta
        fields["timestamp"][ordinal] = batch_timestamp + timestamp_delta
        fields["record_start"][ordinal] = at
        fields["tail_start"][ordinal] = tail
        fields["record_end"][ordinal] = record_end
        fields["key_start"][ordinal] = key_start
        fields["key_length"][ordinal] = key_length
        fields["value_length"][ordinal] = value_length
        cursor[active] = record_end
        regular[active[~ok]] = False
        index += 1
        active = active[ok & (index < counts[active])]
    regular &= cursor == area_end
    walk.regular = regular
    for b in np.flatnonzero(~regular):
        if int(b) not in walk.decoded:
            walk.decoded[int(b)] = RecordBatch(data, int(positions[b])).records()
    for name, values in fields.items():
        setattr(walk, name, values)
    return walk

