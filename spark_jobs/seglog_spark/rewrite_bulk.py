"""Step 3 in bulk: the record filter of rewrite.py applied to a range's regular batches
(record_walk.py) with numpy, writing the bytes the record-by-record filter writes.

- one pass decides every record (keyless, superseded, expired tombstone, kept) and every
  batch (verbatim, rebuilt, dropped, or left to the reference filter);
- a verbatim batch is copied;
- a rebuilt record is a new length and timestampDelta in front of its original bytes from
  offsetDelta on (offsets, key, value and the empty headers do not change, and the walk only
  takes records whose varints are in the shortest form, as the builder writes them); the
  rebuilt header is written field by field and its CRC last.
Batches the walk does not take, and rebuilt batches whose timestamps the builder would check
(below -1, or so large that a delta could overflow), go through the reference filter.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from seglog.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER,
    LOG_OVERHEAD,
    MAGIC,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    Compression,
    TimestampType,
    crc32c,
)
from seglog.records.attributes import DELETE_HORIZON_MASK, make_attributes

from .record_walk import RangeWalk, walk_range_records

__all__ = ["filter_bulk"]

_CRC = struct.Struct(">I")  # the header's crc field, written after the bytes it covers
_REBUILT_ATTRIBUTES = (  # what RecordBatchBuilder writes for an uncompressed CreateTime batch
    make_attributes(Compression.NONE, TimestampType.CREATE_TIME),
    make_attributes(Compression.NONE, TimestampType.CREATE_TIME, has_delete_horizon=True),
)
# Timestamps in [-1, 2^61) and bases below 2^61: every delta and its zigzag form fit an int64.
_SAFE_TIMESTAMP = 1 << 61


@dataclass
class _Decision:
    """Per batch: counts and what becomes of it; per kept record of a rebuilt batch: its
    ordinal and timestamp."""

    keyless: np.ndarray
    superseded: np.ndarray
    dropped_tombstone: np.ndarray
    kept_count: np.ndarray
    horizon_set: np.ndarray  # the rebuilt batch carries a delete horizon
    base: np.ndarray  # the rebuilt batch's base timestamp
    verbatim: np.ndarray
    rebuilt: np.ndarray
    bulk: np.ndarray  # decided here (the others go through the reference filter)
    kept_rebuilt: np.ndarray
    timestamps: np.ndarray


def _decide(walk: RangeWalk, bitmap, now: int, new_horizon: int) -> _Decision:
    headers, total = walk.headers, walk.record_count
    batches = len(walk.counts)
    superseded = np.zeros(total, dtype=bool)
    if bitmap is not None:
        superseded = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")[:total].astype(bool)
    batch_of = walk.batch_of_records()
    has_horizon = (headers["attributes"] & DELETE_HORIZON_MASK) != 0
    horizon = headers["base_timestamp"].astype(np.int64)
    keyless, tombstone = walk.key_length < 0, walk.value_length < 0
    dropped_tombstone = ~keyless & ~superseded & tombstone & (has_horizon & (now >= horizon))[batch_of]
    kept = ~keyless & ~superseded & ~dropped_tombstone
    regular_record = walk.regular[batch_of]
    kept_count = np.bincount(batch_of[kept & regular_record], minlength=batches)
    set_horizon = (np.bincount(batch_of[kept & tombstone & regular_record], minlength=batches) > 0) & ~has_horizon
    verbatim = walk.regular & (kept_count > 0) & (kept_count == walk.counts) & ~set_horizon
    rebuilt = walk.regular & (kept_count > 0) & ~verbatim
    kept_rebuilt = np.flatnonzero(kept & rebuilt[batch_of])
    # The base timestamp: the delete horizon if the batch has or gets one, else the first kept record's.
    first_kept = np.zeros(batches, dtype=np.int64)
    with_kept, at = np.unique(batch_of[kept_rebuilt], return_index=True)
    first_kept[with_kept] = kept_rebuilt[at]
    first_timestamp = walk.timestamp[first_kept] if total else np.zeros(batches, dtype=np.int64)
    base = np.where(set_horizon, new_horizon, np.where(has_horizon, horizon, first_timestamp))
    timestamps = walk.timestamp[kept_rebuilt]
    unsafe = np.zeros(batches, dtype=bool)
    unsafe[batch_of[kept_rebuilt[(timestamps < -1) | (timestamps >= _SAFE_TIMESTAMP)]]] = True
    unsafe |= rebuilt & ((base < -1) | (base >= _SAFE_TIMESTAMP) | (has_horizon & (horizon < 0)))
    if unsafe.any():
        rebuilt &= ~unsafe
        keep = rebuilt[batch_of[kept_rebuilt]]
        kept_rebuilt, timestamps = kept_rebuilt[keep], timestamps[keep]
    return _Decision(keyless, superseded, dropped_tombstone, kept_count, set_horizon | has_horizon, base,
                     verbatim, rebuilt, walk.regular & ~unsafe, kept_rebuilt, timestamps)


def _count(walk: RangeWalk, decision: _Decision, stats) -> None:
    bulk_record = decision.bulk[walk.batch_of_records()]
    stats.records_read += int(walk.counts[decision.bulk].sum())
    stats.keyless_dropped += int((decision.keyless & bulk_record).sum())
    stats.records_superseded += int((~decision.keyless & decision.superseded & bulk_record).sum())
    stats.tombstones_dropped += int((decision.dropped_tombstone & bulk_record).sum())
    stats.records_kept += int(decision.kept_count[decision.bulk].sum())
    stats.batches_rebuilt += int(decision.rebuilt.sum())


def _varint_sizes(unsigned: np.ndarray) -> np.ndarray:
    size = np.ones(len(unsigned), dtype=np.int64)
    for bits in range(7, 64, 7):
        size += unsigned >= (np.uint64(1) << np.uint64(bits))
    return size


def _put_varints(out: np.ndarray, at: np.ndarray, unsigned: np.ndarray, size: np.ndarray) -> None:
    for k in range(int(size.max(initial=0))):
        going = size > k
        byte = (unsigned[going] >> np.uint64(7 * k)) & np.uint64(0x7F)
        byte |= np.where(size[going] > k + 1, np.uint64(0x80), np.uint64(0))
        out[at[going] + k] = byte.astype(np.uint8)


@dataclass
class _Records:
    """The rebuilt records: batch, zigzag timestampDelta and length fields, sizes, tails."""

    batch: np.ndarray
    delta: np.ndarray
    delta_size: np.ndarray
    length: np.ndarray
    length_size: np.ndarray
    size: np.ndarray
    tail_start: np.ndarray
    tail_size: np.ndarray


def _rebuilt_records(walk: RangeWalk, decision: _Decision) -> _Records:
    batch = walk.batch_of_records()[decision.kept_rebuilt]
    delta = decision.timestamps - decision.base[batch]
    delta = ((delta << 1) ^ (delta >> 63)).astype(np.uint64)  # zigzag
    delta_size = _varint_sizes(delta)
    tail_start = walk.tail_start[decision.kept_rebuilt]
    tail_size = walk.record_end[decision.kept_rebuilt] - tail_start
    body = 1 + delta_size + tail_size  # attributes, timestampDelta, the rest unchanged
    length = (body << 1).astype(np.uint64)  # zigzag of a positive length
    length_size = _varint_sizes(length)
    return _Records(batch, delta, delta_size, length, length_size, length_size + body, tail_start, tail_size)


def _write_records(out: bytearray, data: bytes, records: _Records, batch_start: np.ndarray) -> None:
    """Each rebuilt record at its place after its batch's header."""
    if not len(records.batch):
        return
    before = np.cumsum(records.size) - records.size
    starts_batch = np.flatnonzero(np.r_[True, records.batch[1:] != records.batch[:-1]])
    first_before = np.repeat(before[starts_batch], np.diff(np.r_[starts_batch, len(records.batch)]))
    at = batch_start[records.batch] + RECORD_BATCH_OVERHEAD + before - first_before
    out_array = np.frombuffer(out, dtype=np.uint8)
    _put_varints(out_array, at, records.length, records.length_size)
    out_array[at + records.length_size] = 0  # attributes
    _put_varints(out_array, at + records.length_size + 1, records.delta, records.delta_size)
    tail_at = at + records.length_size + 1 + records.delta_size
    view, source = memoryview(out), memoryview(data)
    for to, start, size in zip(tail_at.tolist(), records.tail_start.tolist(), records.tail_size.tolist()):
        view[to : to + size] = source[start : start + size]


def _write_headers(out: bytearray, walk: RangeWalk, decision: _Decision, records: _Records, batch_start, records_bytes) -> None:
    max_timestamp = np.full(len(walk.counts), NO_TIMESTAMP, dtype=np.int64)
    np.maximum.at(max_timestamp, records.batch, decision.timestamps)
    view = memoryview(out)
    for b in np.flatnonzero(decision.rebuilt).tolist():
        h = walk.headers[b]
        at = int(batch_start[b])
        end = at + RECORD_BATCH_OVERHEAD + int(records_bytes[b])
        HEADER.pack_into(
            out, at, int(h["base_offset"]), end - at - LOG_OVERHEAD, int(h["partition_leader_epoch"]), MAGIC, 0,
            _REBUILT_ATTRIBUTES[bool(decision.horizon_set[b])], int(h["last_offset_delta"]), int(decision.base[b]),
            int(max_timestamp[b]), int(h["producer_id"]), int(h["producer_epoch"]), int(h["base_sequence"]),
            int(decision.kept_count[b]),
        )
        _CRC.pack_into(out, at + CRC_OFFSET, crc32c(view[at + ATTRIBUTES_OFFSET : end]))


def _retained_empty(headers, upper_bound: int, last_batches: dict[int, int]) -> np.ndarray:
    """Per batch, whether it stays even with no record left (rewrite._retains_empty): it ends
    the cleaned range, or it is the last batch of the producer the manifest names for it."""
    last_offset = headers["base_offset"].astype(np.int64) + headers["last_offset_delta"]
    retained = last_offset + 1 == upper_bound
    if last_batches:
        named = np.isin(last_offset, np.fromiter(last_batches, dtype=np.int64, count=len(last_batches)))
        producer_ids = headers["producer_id"]
        for b in np.flatnonzero(named).tolist():
            retained[b] |= last_batches[int(last_offset[b])] == int(producer_ids[b])
    return retained


def filter_bulk(data: bytes, positions: np.ndarray, bitmap, now: int, new_horizon: int, upper_bound: int,
                last_batches: dict[int, int], stats, filter_one, empty) -> bytes:
    """The range's output.  `filter_one(walk, b)` filters batch b the reference way (bytes or
    None); `empty(b)` is batch b as an empty batch (one that ends the cleaned range, or a
    producer's last batch in `last_batches`: last offset -> producer id)."""
    walk = walk_range_records(data, positions)
    decision = _decide(walk, bitmap, now, new_horizon)
    _count(walk, decision, stats)
    headers = walk.headers
    out_size = np.zeros(len(positions), dtype=np.int64)
    out_size[decision.verbatim] = headers["length"][decision.verbatim].astype(np.int64) + LOG_OVERHEAD
    placed = {}  # batch -> bytes written by the reference filter or as an empty batch
    for b in np.flatnonzero(~decision.bulk).tolist():
        placed[b] = filter_one(walk, b)
    retained = _retained_empty(headers, upper_bound, last_batches)
    for b in np.flatnonzero(decision.bulk & (decision.kept_count == 0) & retained).tolist():
        placed[b] = empty(b)
    placed = {b: part for b, part in placed.items() if part is not None}
    for b, part in placed.items():
        out_size[b] = len(part)
    records = _rebuilt_records(walk, decision)
    records_bytes = np.zeros(len(positions), dtype=np.int64)
    np.add.at(records_bytes, records.batch, records.size)
    out_size[decision.rebuilt] = RECORD_BATCH_OVERHEAD + records_bytes[decision.rebuilt]
    batch_start = np.concatenate(([0], np.cumsum(out_size)))
    out = bytearray(int(batch_start[-1]))
    _write_records(out, data, records, batch_start)
    _write_headers(out, walk, decision, records, batch_start, records_bytes)
    view, source = memoryview(out), memoryview(data)
    for b in np.flatnonzero(decision.verbatim).tolist():
        at, start, size = int(batch_start[b]), int(positions[b]), int(out_size[b])
        view[at : at + size] = source[start : start + size]
    for b, part in placed.items():
        view[int(batch_start[b]) : int(batch_start[b]) + len(part)] = part
    return bytes(out)
