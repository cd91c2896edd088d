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
- nothing kept: dropped, except two kinds of batch that stay as empty 61-byte batches (Kafka's
  RETAIN_EMPTY, with their offsets, producer id, epoch and base sequence): the batch that ends
  the cleaned range, so the log's last offset never moves backwards, and the last batch of each
  producer the manifest names, so producer state rebuilt from the log still knows the
  producer's last sequence and epoch (a late retry of it stays a duplicate).

The regular batches of a range (record_walk.py) are filtered in bulk (rewrite_bulk.py); the
others go record by record through the codec and RecordBatchBuilder (`_filter_batch`, the
reference the bulk path is tested against).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from seglog.records import RecordBatch, RecordBatchBuilder, build_empty_batch

from .key_scan import range_batches, read_range
from .layout import ByteRange
from .rewrite_bulk import filter_bulk
from .snapshot import Snapshot

__all__ = ["RangeOutput", "rewrite_range"]

INT64_MAX = (1 << 63) - 1


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


def _retains_empty(batch, upper_bound: int, last_batches: dict[int, int]) -> bool:
    """Kafka's RETAIN_EMPTY: the batch ending the cleaned range, or a producer's last batch."""
    if batch.next_offset == upper_bound:
        return True
    return batch.producer_id >= 0 and last_batches.get(batch.last_offset) == batch.producer_id


def _filter_batch(batch, records, ordinal: int, bitmap, now: int, new_horizon: int, upper_bound: int, stats: RangeOutput,
                  last_batches: dict[int, int]):
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
    if _retains_empty(batch, upper_bound, last_batches):
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
    last_batches = snapshot.producer_last_batches
    if not bulk:
        parts, ordinal = [], 0
        for position in positions.tolist():
            batch = RecordBatch(data, position)
            records = batch.records()
            part = _filter_batch(batch, records, ordinal, bitmap, now, new_horizon, upper_bound, stats, last_batches)
            ordinal += len(records)
            if part is not None:
                parts.append(part)
        output = b"".join(parts)
    else:

        def filter_one(walk, b):
            batch = RecordBatch(data, int(positions[b]))
            records = walk.decoded[b] if b in walk.decoded else batch.records()
            return _filter_batch(batch, records, int(walk.first[b]), bitmap, now, new_horizon, upper_bound, stats,
                                 last_batches)

        def empty(b):
            return _empty(RecordBatch(data, int(positions[b])))

        output = filter_bulk(data, positions, bitmap, now, new_horizon, upper_bound, last_batches, stats, filter_one,
                             empty)
    stats.bytes_written = len(output)
    return output, stats


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
