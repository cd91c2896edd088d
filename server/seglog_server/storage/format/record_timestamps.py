"""Offsets and timestamps of the records in a batch, without decoding keys, values or headers.

A lookup by timestamp ends inside one batch: the first record with a timestamp >= T (or, for
MAX_TIMESTAMP, == T). Decoding the whole batch with the codec builds every key, value and header
(about 23 us for ten 90-byte records); reading only each record's length, timestampDelta and
offsetDelta and skipping the rest takes a few microseconds, and usually stops at the first
record. Only uncompressed batches are walked this way; compressed ones go through the codec.

The walk is the codec's bounded ``walk_records``: every record's length is checked against the
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
    HEADER,
    LOG_OVERHEAD,
    NONE_REACHING,
    RECORDS_OFFSET,
    Compression,
    RecordBatch,
    first_record_reaching,
    walk_records,
)

from .file_records import HeaderField

__all__ = ["first_record_at_or_after", "offsets_and_timestamps"]

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08  # LogAppendTime: every record reads the batch maxTimestamp
_NO_COMPRESSION = int(Compression.NONE)


def offsets_and_timestamps(batch: bytes | memoryview) -> Iterator[tuple[int, int]]:
    """(offset, timestamp_ms) of each record of one complete batch, in order."""
    fields = HEADER.unpack_from(batch, 0)
    attributes = fields[HeaderField.ATTRIBUTES]
    if attributes & _COMPRESSION_MASK != _NO_COMPRESSION:
        for record in RecordBatch(batch).records():
            yield record.offset, record.timestamp_ms
        return
    base_offset = fields[HeaderField.BASE_OFFSET]
    base_timestamp = fields[HeaderField.BASE_TIMESTAMP]
    log_append_time = fields[HeaderField.MAX_TIMESTAMP] if attributes & _TIMESTAMP_TYPE_BIT else None
    end = fields[HeaderField.LENGTH] + LOG_OVERHEAD
    for timestamp_delta, offset_delta in walk_records(batch, RECORDS_OFFSET, end, fields[HeaderField.RECORDS_COUNT]):
        timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
        yield base_offset + offset_delta, timestamp


def first_record_at_or_after(
    batch: bytes | memoryview, timestamp_ms: int, starting_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp_ms) of the first record with a timestamp >= ``timestamp_ms`` and an
    offset >= ``starting_offset``, or None. Stops at the first match: the records after it are
    not walked. The common records of an uncompressed CreateTime batch go through the codec's
    fast loop (``first_record_reaching``); whatever it cannot vouch for, the reference walk."""
    fields = HEADER.unpack_from(batch, 0)
    if not fields[HeaderField.ATTRIBUTES] & (_COMPRESSION_MASK | _TIMESTAMP_TYPE_BIT) and type(batch) is bytes:
        base_offset, base_timestamp = fields[HeaderField.BASE_OFFSET], fields[HeaderField.BASE_TIMESTAMP]
        found = first_record_reaching(
            batch, RECORDS_OFFSET, fields[HeaderField.LENGTH] + LOG_OVERHEAD, fields[HeaderField.RECORDS_COUNT],
            base_timestamp, timestamp_ms, starting_offset - base_offset,
        )
        if found is NONE_REACHING:
            return None
        if found is not None:
            return base_offset + found[0], base_timestamp + found[1]
    for offset, timestamp in offsets_and_timestamps(batch):
        if timestamp >= timestamp_ms and offset >= starting_offset:
            return offset, timestamp
    return None
