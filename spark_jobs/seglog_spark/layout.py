"""The batch layout of a snapshot's segments, from batch headers only (no record is decoded).

One walk per segment, on the driver, checks what the rest of the cleaning relies on and plans
its work:
- every batch is whole, magic 2, inside the segment's offset range, above the batch before it,
  and neither transactional nor control (UnsupportedBatchError: see errors.py);
- the segment is cut into byte ranges at batch boundaries, about `range_bytes` each, so that
  one large segment is decoded by many tasks at once;
- the offset- and time-index entries the segment's indexes hold are counted by the per-batch
  rule the log uses (kafka-storage.md 4.1), because Kafka groups segments by index size too.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

from seglog.records import HEADER, LOG_OVERHEAD, MAGIC, NO_TIMESTAMP, RECORD_BATCH_OVERHEAD
from seglog.records.attributes import CONTROL_MASK, TRANSACTIONAL_MASK

from .errors import SnapshotError, UnsupportedBatchError
from .snapshot import Snapshot

__all__ = ["ByteRange", "SegmentLayout", "read_layout", "walk_headers"]

RELATIVE_OFFSET_MAX = (1 << 31) - 1  # index entries store offset - base as an int32
OFFSET_INDEX_ENTRY_BYTES = 8
TIME_INDEX_ENTRY_BYTES = 12

_unpack = HEADER.unpack_from


@dataclass(frozen=True)
class ByteRange:
    """Bytes [start, end) of segment `segment_index`: whole batches, decoded by one task."""

    range_id: int
    segment_index: int
    start: int
    end: int


@dataclass(frozen=True)
class SegmentLayout:
    segment_index: int
    batch_count: int
    offset_index_bytes: int
    time_index_bytes: int
    ranges: tuple[ByteRange, ...]


def walk_headers(buffer, size: int, where: str):
    """Yield (position, header fields) of each batch in buffer[:size], checking that each is a
    whole v2 batch; CorruptRecord-style problems raise SnapshotError naming `where`."""
    position = 0
    while position < size:
        if size - position < RECORD_BATCH_OVERHEAD:
            raise SnapshotError(f"{where}: {size - position} trailing bytes at position {position}, less than a batch header")
        fields = _unpack(buffer, position)
        batch_bytes = fields[1] + LOG_OVERHEAD
        if batch_bytes < RECORD_BATCH_OVERHEAD or position + batch_bytes > size:
            raise SnapshotError(
                f"{where}: batch at position {position} declares {batch_bytes} bytes; expected at least "
                f"{RECORD_BATCH_OVERHEAD} and at most the {size - position} left in the file"
            )
        if fields[3] != MAGIC:
            raise SnapshotError(f"{where}: batch at position {position}: expected magic {MAGIC}, found {fields[3]}")
        yield position, fields
        position += batch_bytes


def read_layout(snapshot: Snapshot, segment_index: int, range_bytes: int, first_range_id: int) -> SegmentLayout:
    segment = snapshot.segments[segment_index]
    path = snapshot.segment_path(segment)
    interval = snapshot.settings.index_interval_bytes
    ranges: list[ByteRange] = []
    range_start = 0
    offset_entries = time_entries = batch_count = 0
    last_entry_position = 0
    max_timestamp = last_time_entry = NO_TIMESTAMP
    previous_next = segment.base_offset
    last_next = segment.base_offset
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        buffer = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) if size else b""
        try:
            for position, fields in walk_headers(buffer, size, path):
                base, last = fields[0], fields[0] + fields[6]
                if fields[5] & (TRANSACTIONAL_MASK | CONTROL_MASK):
                    kind = "control" if fields[5] & CONTROL_MASK else "transactional"
                    raise UnsupportedBatchError(
                        f"{path}: the {kind} batch at offset {base} (position {position}) cannot be cleaned: "
                        f"seglog writes no transactions and its cleaner refuses them rather than guess producer state"
                    )
                if base < previous_next or last < base or last >= segment.next_offset or last - segment.base_offset > RELATIVE_OFFSET_MAX:
                    raise SnapshotError(
                        f"{path}: batch at position {position} holds offsets [{base}, {last}]; expected them above "
                        f"{previous_next - 1} and below the segment's next offset {segment.next_offset}"
                    )
                previous_next = last_next = last + 1
                batch_count += 1
                if fields[8] > max_timestamp:
                    max_timestamp = fields[8]
                if position - last_entry_position > interval:
                    offset_entries += 1
                    if max_timestamp > last_time_entry:
                        time_entries += 1
                        last_time_entry = max_timestamp
                    last_entry_position = position
                if position - range_start >= range_bytes:
                    ranges.append(ByteRange(first_range_id + len(ranges), segment_index, range_start, position))
                    range_start = position
        finally:
            if size:
                buffer.close()
    if size > range_start:
        ranges.append(ByteRange(first_range_id + len(ranges), segment_index, range_start, size))
    if batch_count and last_next != segment.next_offset:
        raise SnapshotError(f"{path}: the last batch ends at offset {last_next}, the manifest says {segment.next_offset}")
    if max_timestamp > last_time_entry:
        time_entries += 1  # the entry written when the segment rolled
    return SegmentLayout(
        segment_index,
        batch_count,
        offset_entries * OFFSET_INDEX_ENTRY_BYTES,
        time_entries * TIME_INDEX_ENTRY_BYTES,
        tuple(ranges),
    )
