"""Lookups by time over a tiered log's remote segments (OffsetsForTimes below the local log start):
the local search's steps on the store's objects, so both answer alike.

For a target ``t >= 0``, the remote segments wholly below the local log and reaching the log start
offset are searched in offset order, each only when its largest timestamp (its state record's
``max_timestamp_ms``, the local ``largest_timestamp()`` at upload) reaches ``t``, as the local
search skips segments below it. In one segment: the time index's greatest entry <= ``t``
(``index_search``, on the ``.timeindex`` object fetched whole once per segment), the offset
index's position of ``max(entry offset, log start)``, then batch headers read through the chunk
cache up to the first batch whose max timestamp reaches ``t`` and whose last offset reaches the
log start, and its first such record (``first_record_at_or_after``). A segment without one sends
the search on, then to the local log.

MAX_TIMESTAMP (-3) compares the remote segments' largest timestamps with the local log's: the
earliest segment holding the greatest one answers its first record carrying it, found as the
first record reaching that timestamp (the same index search and header walk: one body read).

Store calls happen outside the log's lock (the segments never change once copied); the store
failing raises ``RemoteStorageUnavailableError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from seglog.records import HEADER, LOG_OVERHEAD
from seglog.records import CodecError as _CodecError

from ..base.errors import CorruptRemoteObjectError
from ..format.file_records import HeaderField, TimestampAndOffset
from ..format.index_search import NO_SLOT, largest_lower_bound_slot_for
from ..format.record_timestamps import first_record_at_or_after
from ..format.time_index import ENTRY as TIME_ENTRY
from ..format.time_index import LAYOUT as TIME_LAYOUT

if TYPE_CHECKING:  # the remote package loads boto3: only where a store is configured
    from ..remote.remote_segment_metadata import RemoteLogSegmentMetadata
    from .remote_log_tier import RemoteLogTier

__all__ = ["remote_offset_for_timestamp", "remote_offset_of_max_timestamp", "remote_segments_below"]


def remote_segments_below(tier: RemoteLogTier, log_start_offset: int,
                          local_start_offset: int) -> list[RemoteLogSegmentMetadata]:
    """The remote segments reads use: wholly below the local log, reaching the log start."""
    return [m for m in tier.segments()
            if m.end_offset >= log_start_offset and m.end_offset < local_start_offset]


def remote_offset_for_timestamp(tier: RemoteLogTier, segments: list[RemoteLogSegmentMetadata],
                                timestamp_ms: int, log_start_offset: int) -> TimestampAndOffset | None:
    """The first record with a timestamp >= ``timestamp_ms`` at or above ``log_start_offset`` in
    ``segments`` (ascending), or None: the local log answers then."""
    assert timestamp_ms >= 0, timestamp_ms
    for metadata in segments:
        if metadata.max_timestamp_ms < timestamp_ms:
            continue
        entry_offset = _time_index_lookup(tier, metadata, timestamp_ms)
        position = tier.position_for(metadata, max(entry_offset, log_start_offset))
        found = _scan(tier, metadata, position, timestamp_ms, log_start_offset)
        if found is not None:
            return found
    return None


def remote_offset_of_max_timestamp(tier: RemoteLogTier, segments: list[RemoteLogSegmentMetadata],
                                   local_max_timestamp_ms: int) -> TimestampAndOffset | None:
    """The first record carrying the log's greatest timestamp when a remote segment holds it
    (the earliest such segment, as the local search's ``max`` picks the first), else None."""
    best = max(segments, key=lambda m: m.max_timestamp_ms, default=None)
    if best is None or best.max_timestamp_ms < local_max_timestamp_ms or best.max_timestamp_ms < 0:
        return None
    # The first record with a timestamp >= the segment's greatest is the first carrying it: the
    # time index and a walk of batch headers find its batch, and only that batch's body is read
    # (reading every body from the start costs a whole segment's GETs and fills the chunk cache).
    return remote_offset_for_timestamp(tier, [best], best.max_timestamp_ms, best.base_offset)


def _time_index_lookup(tier: RemoteLogTier, metadata: RemoteLogSegmentMetadata, timestamp_ms: int) -> int:
    """The offset of the time index's greatest entry <= ``timestamp_ms`` (the segment's base
    offset when none), as ``TimeIndex.lookup`` answers on the local file."""
    index = tier.index_of(metadata, ".timeindex")
    slot = largest_lower_bound_slot_for(index, _time_entry_count(index), timestamp_ms, TIME_LAYOUT.key)
    if slot == NO_SLOT:
        return metadata.base_offset
    return metadata.base_offset + TIME_ENTRY.unpack_from(index, slot * TIME_ENTRY.size)[1]


def _time_entry_count(index: bytes) -> int:
    """Entries before a preallocated zero tail: a relative offset of 0 past slot 0 is no entry
    (offsets only grow); slot 0 of zeros is read as (0, base offset), which searches alike."""
    count = len(index) // TIME_ENTRY.size
    for slot in range(1, count):
        if TIME_ENTRY.unpack_from(index, slot * TIME_ENTRY.size)[1] == 0:
            return slot
    return count


def _scan(tier: RemoteLogTier, metadata: RemoteLogSegmentMetadata, position: int, timestamp_ms: int,
          log_start_offset: int) -> TimestampAndOffset | None:
    while position + HEADER.size <= metadata.segment_bytes:
        fields = HEADER.unpack_from(tier.read_bytes(metadata, position, HEADER.size), 0)
        size = fields[HeaderField.LENGTH] + LOG_OVERHEAD
        last_offset = fields[HeaderField.BASE_OFFSET] + fields[HeaderField.LAST_OFFSET_DELTA]
        if size < HEADER.size or position + size > metadata.segment_bytes:
            raise CorruptRemoteObjectError(
                f"remote segment {metadata.segment_id} (base offset {metadata.base_offset}): a batch "
                f"of {size} bytes at position {position} runs past its {metadata.segment_bytes} bytes")
        if fields[HeaderField.MAX_TIMESTAMP] >= timestamp_ms and last_offset >= log_start_offset:
            batch = tier.read_bytes(metadata, position, size)
            try:
                match = first_record_at_or_after(batch, timestamp_ms, log_start_offset)
            except _CodecError as exc:
                raise _corrupt(metadata, position, exc) from exc
            if match is not None:
                return TimestampAndOffset(match[1], match[0])
        position += size
    return None


def _corrupt(metadata: RemoteLogSegmentMetadata, position: int, exc: Exception) -> CorruptRemoteObjectError:
    return CorruptRemoteObjectError(
        f"remote segment {metadata.segment_id} (base offset {metadata.base_offset}): the batch at "
        f"position {position} does not decode: {exc}")
