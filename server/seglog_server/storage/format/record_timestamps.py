"""Offsets and timestamps of the records in a batch, without decoding keys, values or headers.

A lookup by timestamp ends inside one batch: the first record with a timestamp >= T (or, for
MAX_TIMESTAMP, == T). Decoding the whole batch with the codec builds every key, value and header
(about 23 us for ten 90-byte records); reading only each record's length, timestampDelta and
offsetDelta and skipping the rest takes a few microseconds, and usually stops at the first
record. A compressed batch is decompressed (within the codec's limit) and its records area
walked the same way.

The lookup's walk is the codec's ``seek_record``: compiled where the install built it (a few
nanoseconds a record instead of a few hundred: a lookup on a 3,400-record batch that
``send_many`` wrote walked some 150 µs in Python), the Python walk otherwise, both equal to
the bounded ``walk_records``: every record's length is checked against the
records area and every key, value and header length against its record before the walk moves,
so a batch whose records area is garbage (a valid CRC over bad framing, or bytes corrupted on
disk with the CRC rewritten) raises the codec's ``CorruptRecordError``, which the segment turns
into the storage's corrupt-batch error; the walk never runs past the batch or loops on a count.

The record layout is the codec's (``seglog.records``, kafka-storage.md 2.3); the walk yields
the two leading fields a lookup needs::

    length          varint   bytes that follow in this record
    attributes      int8     unused
    timestampDelta  varlong  record timestamp = batch baseTimestamp + delta
    offsetDelta     varint   record offset = batch baseOffset + delta
    ...                      key, value, headers: skipped
"""

from __future__ import annotations

from collections.abc import Iterator

from seglog.records import (
    DECOMPRESSED_BYTES_MAX,
    HEADER,
    LOG_OVERHEAD,
    RECORDS_OFFSET,
    Compression,
    decompress,
    seek_record,
    seek_records,
    walk_records,
)

from .file_records import HeaderField

__all__ = ["first_record_at_or_after", "first_records_at_or_after", "offsets_and_timestamps"]

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08  # LogAppendTime: every record reads the batch maxTimestamp
_NO_COMPRESSION = int(Compression.NONE)
# Timestamp targets (as deltas) every record reaches, and none does: a LogAppendTime batch's
# records all carry its maxTimestamp, so either all reach the target or none.
_EVERY_RECORD = -(1 << 64)
_NO_RECORD = 1 << 64


def _records_area(batch: bytes | memoryview, fields: tuple) -> tuple[bytes | memoryview, int, int]:
    """(buffer, start, end) of the batch's records, decompressed when the batch is compressed
    (the codec's DecompressionLimitError past its limit)."""
    end = fields[HeaderField.LENGTH] + LOG_OVERHEAD
    compression = fields[HeaderField.ATTRIBUTES] & _COMPRESSION_MASK
    if compression == _NO_COMPRESSION:
        return batch, RECORDS_OFFSET, end
    area = decompress(compression, memoryview(batch)[RECORDS_OFFSET:end], DECOMPRESSED_BYTES_MAX)
    return area, 0, len(area)


def offsets_and_timestamps(batch: bytes | memoryview) -> Iterator[tuple[int, int]]:
    """(offset, timestamp_ms) of each record of one complete batch, in order."""
    fields = HEADER.unpack_from(batch, 0)
    base_offset = fields[HeaderField.BASE_OFFSET]
    base_timestamp = fields[HeaderField.BASE_TIMESTAMP]
    log_append_time = (
        fields[HeaderField.MAX_TIMESTAMP] if fields[HeaderField.ATTRIBUTES] & _TIMESTAMP_TYPE_BIT else None
    )
    data, start, end = _records_area(batch, fields)
    for timestamp_delta, offset_delta in walk_records(data, start, end, fields[HeaderField.RECORDS_COUNT]):
        timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
        yield base_offset + offset_delta, timestamp


def first_record_at_or_after(
    batch: bytes | memoryview, timestamp_ms: int, starting_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp_ms) of the first record with a timestamp >= ``timestamp_ms`` and an
    offset >= ``starting_offset``, or None. Stops at the first match: the records after it are
    not walked (CorruptRecordError for a lie before it, as ``walk_records`` names it)."""
    fields = HEADER.unpack_from(batch, 0)
    base_offset, base_timestamp = fields[HeaderField.BASE_OFFSET], fields[HeaderField.BASE_TIMESTAMP]
    data, start, end = _records_area(batch, fields)
    log_append_time = fields[HeaderField.ATTRIBUTES] & _TIMESTAMP_TYPE_BIT
    if log_append_time:
        max_timestamp = fields[HeaderField.MAX_TIMESTAMP]
        target_delta = _EVERY_RECORD if max_timestamp >= timestamp_ms else _NO_RECORD
    else:
        target_delta = timestamp_ms - base_timestamp
    found = seek_record(data, start, end, fields[HeaderField.RECORDS_COUNT], target_delta, starting_offset - base_offset)
    if found is None:
        return None
    offset_delta, timestamp_delta = found
    timestamp = max_timestamp if log_append_time else base_timestamp + timestamp_delta
    return base_offset + offset_delta, timestamp


def first_records_at_or_after(
    batch: bytes | memoryview, timestamps_ms: list[int], starting_offset: int
) -> list[tuple[int, int] | None]:
    """``first_record_at_or_after`` for each of ``timestamps_ms`` (ascending), in one walk of
    the batch's records (to the last target's record): a batched lookup sends many targets to
    one large batch, and walking it once for all of them is what makes that cheap.
    CorruptRecordError when the walk of any of them alone would raise."""
    fields = HEADER.unpack_from(batch, 0)
    base_offset, base_timestamp = fields[HeaderField.BASE_OFFSET], fields[HeaderField.BASE_TIMESTAMP]
    data, start, end = _records_area(batch, fields)
    log_append_time = fields[HeaderField.ATTRIBUTES] & _TIMESTAMP_TYPE_BIT
    if log_append_time:
        max_timestamp = fields[HeaderField.MAX_TIMESTAMP]
        target_deltas = [_EVERY_RECORD if max_timestamp >= t else _NO_RECORD for t in timestamps_ms]
    else:
        target_deltas = [t - base_timestamp for t in timestamps_ms]
    found = seek_records(data, start, end, fields[HeaderField.RECORDS_COUNT], target_deltas,
                         starting_offset - base_offset)
    return [
        None if answer is None
        else (base_offset + answer[0], max_timestamp if log_append_time else base_timestamp + answer[1])
        for answer in found
    ]
