"""Step 3 of a cleaning: rewrite one byte range's batches through Kafka's record filter
(kafka-storage.md 6.3, Cleaner.shouldRetainRecord and MemoryRecords.filterTo).

Per record (every record here is below the end of what the offset map indexed):
- no key: dropped (Kafka counts it invalid);
- superseded (its bit is set: a later record has the same key): dropped;
- a tombstone in a batch whose delete horizon has passed (cleaning time >= horizon): dropped;
- otherwise kept, with its offset.
Per batch:
- every record kept and no horizon to set: the original bytes, verbatim;
- some records kept, or a kept tombstone in a batch without a horizon: rebuilt with the same
  base offset, last offset, producer fields, epoch and compression; the first time a kept
  tombstone is rewritten the batch's horizon becomes cleaning time + delete.retention.ms
  (attribute bit 6, baseTimestamp; record timestamp deltas rebased);
- nothing kept: dropped, except the batch that ends the cleaned range, which stays as an empty
  61-byte batch so the log's last offset never moves backwards.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import struct

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
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    build_empty_batch,
    crc32c,
)
from seglog.records.attributes import DELETE_HORIZON_MASK, make_attributes

from .key_scan import range_batches, read_range
from .record_walk import walk_range_records
from .layout import ByteRange
from .snapshot import Snapshot

__all__ = ["RangeOutput", "rewrite_range"]

INT64_MAX = (1 << 63) - 1
_CRC = struct.Struct(">I")


@dataclass
class RangeOutput:
    range_id: int
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    records_superseded: int = 0
    tombstones_dropped: int = 0
    keyless_dropped: int = 0
    batches_rebuilt: int = 0
    extra: dict = field(default_factory=dict)


def _rebuild(batch, kept, delete_horizon_ms) -> bytes:
    builder = RecordBatchBuilder(
        compression=batch.compression,
        timestamp_type=batch.timestamp_type,
        base_offset=batch.base_offset,
        partition_leader_epoch=batch.partition_leader_epoch,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        is_transactional=batch.is_transactional,
        is_control=batch.is_control,
        delete_horizon_ms=delete_horizon_ms,
    )
    base = batch.base_offset
    for offset, timestamp_ms, key, value, headers in kept:
        builder.append_at(offset - base, value, key, timestamp_ms, headers)
    return builder.build(last_offset_delta=batch.last_offset_delta)


def _empty(batch) -> bytes:
    return build_empty_batch(
        base_offset=batch.base_offset,
        last_offset_delta=batch.last_offset_delta,
        max_timestamp_ms=batch.max_timestamp,
        timestamp_type=batch.timestamp_type,
        partition_leader_epoch=batch.partition_leader_epoch,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        is_transactional=batch.is_transactional,
        is_control=batch.is_control,
    )


def _filter_batch(batch, records, ordinal: int, bitmap, now: int, new_horizon: int, upper_bound: int, stats: RangeOutput):
    """The output bytes of one batch (None: dropped), record by record: the reference filter,
    used for every batch the bulk path does not take."""
    horizon = batch.delete_horizon_ms
    tombstones_expire = horizon is not None and now >= horizon
    kept = []
    kept_tombstone = False
    for record in records:
        if record[2] is None:
            stats.keyless_dropped += 1
        elif bitmap is not None and bitmap[ordinal >> 3] >> (ordinal & 7) & 1:
            stats.records_superseded += 1
        elif record[3] is None:
            if tombstones_expire:
                stats.tombstones_dropped += 1
            else:
                kept.append(record)
                kept_tombstone = True
        else:
            kept.append(record)
        ordinal += 1
    stats.records_read += len(records)
    stats.records_kept += len(kept)
    set_horizon = kept_tombstone and horizon is None
    if kept and len(kept) == len(records) and not set_horizon:
        return bytes(batch.view)
    if kept:
        stats.batches_rebuilt += 1
        return _rebuild(batch, kept, new_horizon if set_horizon else horizon)
    if batch.next_offset == upper_bound:
        return _empty(batch)
    return None


def filter_range(snapshot: Snapshot, byte_range: ByteRange, bitmap: bytes | None, upper_bound: int, *, bulk: bool = True):
    """(output bytes of the range's surviving batches, stats).  `bulk` False filters every
    batch record by record (the reference the bulk path is tested against)."""
    stats = RangeOutput(byte_range.range_id)
    data = read_range(snapshot, byte_range)
    stats.bytes_read = len(data)
    now = snapshot.cleaning_time_ms
    new_horizon = min(INT64_MAX, now + snapshot.settings.delete_retention_ms)
    positions = range_batches(snapshot, byte_range, data)
    if not bulk:
        parts, ordinal = [], 0
        for position in positions.tolist():
            batch = RecordBatch(data, position)
            records = batch.records()
            part = _filter_batch(batch, records, ordinal, bitmap, now, new_horizon, upper_bound, stats)
            ordinal += len(records)
            if part is not None:
                parts.append(part)
        output = b"".join(parts)
    else:
        output = _filter_bulk(data, positions, bitmap, now, new_horizon, upper_bound, stats)
    stats.bytes_written = len(output)
    return output, stats


_REBUILT_ATTRIBUTES = (
    make_attributes(Compression.NONE, TimestampType.CREATE_TIME),
    make_attributes(Compression.NONE, TimestampType.CREATE_TIME, has_delete_horizon=True),
)
_SAFE_TIMESTAMP = 1 << 61  # timestamps below this (and >= -1) re-encode without int64 overflow


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


def _filter_bulk(data: bytes, positions: np.ndarray, bitmap, now: int, new_horizon: int, upper_bound: int, stats: RangeOutput) -> bytes:
    """The reference filter's output for the whole range, with the regular batches (see
    record_walk.py) filtered and rebuilt in numpy: a rebuilt record is its original bytes from
    offsetDelta on, behind a new length and timestampDelta (only the base timestamp moves)."""
    walk = walk_range_records(data, positions)
    headers, counts, first, total = walk.headers, walk.counts, walk.first, walk.record_count
    batches = len(positions)
    if bitmap is not None:
        superseded = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")[:total].astype(bool)
    else:
        superseded = np.zeros(total, dtype=bool)
    batch_of = walk.batch_of_records()
    has_horizon = (headers["attributes"] & DELETE_HORIZON_MASK) != 0
    horizon = headers["base_timestamp"].astype(np.int64)
    next_offset = headers["base_offset"].astype(np.int64) + headers["last_offset_delta"] + 1
    keyless = walk.key_length < 0
    tombstone = walk.value_length < 0
    dropped_tombstone = ~keyless & ~superseded & tombstone & (has_horizon & (now >= horizon))[batch_of]
    kept = ~keyless & ~superseded & ~dropped_tombstone
    regular_record = walk.regular[batch_of]
    kept_count = np.bincount(batch_of[kept & regular_record], minlength=batches)
    kept_tombstones = np.bincount(batch_of[kept & tombstone & regular_record], minlength=batches)
    set_horizon = (kept_tombstones > 0) & ~has_horizon
    verbatim = walk.regular & (kept_count > 0) & (kept_count == counts) & ~set_horizon
    rebuilt = walk.regular & (kept_count > 0) & ~verbatim
    # The base timestamp of each rebuilt batch: its delete horizon, else its first kept record's.
    first_kept = np.full(batches, -1, dtype=np.int64)
    kept_rebuilt = np.flatnonzero(kept & rebuilt[batch_of])
    ordered_batches, at = np.unique(batch_of[kept_rebuilt], return_index=True)
    first_kept[ordered_batches] = kept_rebuilt[at]
    base = np.where(set_horizon, new_horizon, np.where(has_horizon, horizon, walk.timestamp[np.maximum(first_kept, 0)]))
    timestamps = walk.timestamp[kept_rebuilt]
    unsafe = np.zeros(batches, dtype=bool)
    unsafe[batch_of[kept_rebuilt[(timestamps < -1) | (timestamps >= _SAFE_TIMESTAMP)]]] = True
    unsafe |= rebuilt & ((base < -1) | (base >= _SAFE_TIMESTAMP) | (has_horizon & (horizon < 0)))
    if unsafe.any():  # left to the reference, which refuses what the builder refuses
        rebuilt &= ~unsafe
        verbatim &= ~unsafe
        keep = rebuilt[batch_of[kept_rebuilt]]
        kept_rebuilt, timestamps = kept_rebuilt[keep], timestamps[keep]
    bulk = walk.regular & ~unsafe
    bulk_record = bulk[batch_of]
    stats.records_read += int(counts[bulk].sum())
    stats.keyless_dropped += int((keyless & bulk_record).sum())
    stats.records_superseded += int((~keyless & superseded & bulk_record).sum())
    stats.tombstones_dropped += int((dropped_tombstone & bulk_record).sum())
    stats.records_kept += int(kept_count[bulk].sum())
    stats.batches_rebuilt += int(rebuilt.sum())

    # Sizes: every output batch, then every rebuilt record.
    out_size = np.zeros(batches, dtype=np.int64)
    batch_bytes = headers["length"].astype(np.int64) + LOG_OVERHEAD
    out_size[verbatim] = batch_bytes[verbatim]
    others = {}
    for b in np.flatnonzero(~bulk).tolist():
        batch = RecordBatch(data, int(positions[b]))
        records = walk.decoded.get(b) or batch.records()
        part = _filter_batch(batch, records, int(first[b]), bitmap, now, new_horizon, upper_bound, stats)
        if part is not None:
            others[b] = part
            out_size[b] = len(part)
    empties = {}
    for b in np.flatnonzero(bulk & (kept_count == 0) & (next_offset == upper_bound)).tolist():
        empties[b] = _empty(RecordBatch(data, int(positions[b])))
        out_size[b] = len(empties[b])
    rebuilt_batch = batch_of[kept_rebuilt]
    delta = timestamps - base[rebuilt_batch]
    zigzag = ((delta << 1) ^ (delta >> 63)).astype(np.uint64)
    delta_size = _varint_sizes(zigzag)
    tail_start = walk.tail_start[kept_rebuilt]
    tail_size = walk.record_end[kept_rebuilt] - tail_start
    body = 1 + delta_size + tail_size
    length = (body << 1).astype(np.uint64)
    length_size = _varint_sizes(length)
    record_size = length_size + body
    records_bytes = np.zeros(batches, dtype=np.int64)
    np.add.at(records_bytes, rebuilt_batch, record_size)
    out_size[rebuilt] = RECORD_BATCH_OVERHEAD + records_bytes[rebuilt]
    out_start = np.zeros(batches + 1, dtype=np.int64)
    np.cumsum(out_size, out=out_start[1:])
    out = bytearray(int(out_start[-1]))
    if not out:
        return bytes(out)
    view = memoryview(out)
    source = memoryview(data)

    # Rebuilt records: length, attributes 0 and timestampDelta in numpy, the rest copied.
    before = np.cumsum(record_size) - record_size
    batch_start_before = np.zeros(batches, dtype=np.int64)
    first_in_batch = np.flatnonzero(np.r_[True, rebuilt_batch[1:] != rebuilt_batch[:-1]]) if len(rebuilt_batch) else np.zeros(0, dtype=np.int64)
    batch_start_before[rebuilt_batch[first_in_batch]] = before[first_in_batch]
    record_at = out_start[rebuilt_batch] + RECORD_BATCH_OVERHEAD + before - batch_start_before[rebuilt_batch]
    out_array = np.frombuffer(out, dtype=np.uint8)
    _put_varints(out_array, record_at, length, length_size)
    out_array[record_at + length_size] = 0
    _put_varints(out_array, record_at + length_size + 1, zigzag, delta_size)
    tail_at = record_at + length_size + 1 + delta_size
    for at, start, end in zip(tail_at.tolist(), tail_start.tolist(), (tail_start + tail_size).tolist()):
        view[at : at + end - start] = source[start:end]

    # Rebuilt headers (CRC last), copied and reference-filtered batches.
    max_timestamp = np.full(batches, NO_TIMESTAMP, dtype=np.int64)
    np.maximum.at(max_timestamp, rebuilt_batch, timestamps)
    horizon_set = set_horizon | has_horizon
    pack_into, crc_struct = HEADER.pack_into, _CRC.pack_into
    for b in np.flatnonzero(rebuilt).tolist():
        h = headers[b]
        at = int(out_start[b])
        end = at + RECORD_BATCH_OVERHEAD + int(records_bytes[b])
        pack_into(
            out, at, int(h["base_offset"]), end - at - LOG_OVERHEAD, int(h["partition_leader_epoch"]), MAGIC, 0,
            _REBUILT_ATTRIBUTES[bool(horizon_set[b])], int(h["last_offset_delta"]), int(base[b]), int(max_timestamp[b]),
            int(h["producer_id"]), int(h["producer_epoch"]), int(h["base_sequence"]), int(kept_count[b]),
        )
        crc_struct(out, at + CRC_OFFSET, crc32c(view[at + ATTRIBUTES_OFFSET : end]))
    for b in np.flatnonzero(verbatim).tolist():
        at, start = int(out_start[b]), int(positions[b])
        view[at : at + int(out_size[b])] = source[start : start + int(out_size[b])]
    for b, part in (*others.items(), *empties.items()):
        at = int(out_start[b])
        view[at : at + len(part)] = part
    view.release()
    return bytes(out)


def rewrite_range(
    snapshot: Snapshot, byte_range: ByteRange, bitmap: bytes | None, upper_bound: int, out_path: str | None
) -> RangeOutput:
    """Filter the range; write its surviving batches to `out_path` (None: a dry run)."""
    output, stats = filter_range(snapshot, byte_range, bitmap, upper_bound)
    if out_path is not None:
        with open(out_path, "wb") as f:
            f.write(output)
            f.flush()
            os.fsync(f.fileno())
    return stats
