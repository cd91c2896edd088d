"""Offsets and timestamps of the records in a batch, without decoding keys, values or headers.

A lookup by timestamp ends inside one batch: the first record with a timestamp >= T (or, for
MAX_TIMESTAMP, == T). Decoding the whole batch with the codec builds every key, value and header
(about 23 us for ten 90-byte records); reading only each record's length, timestampDelta and
offsetDelta and skipping the rest takes a few microseconds, and usually stops at the first
record. Only uncompressed batches are walked this way; compressed ones go through the codec.

The walk trusts each record's length and reads no further than it needs; a batch whose records
area is garbage (a valid CRC over bad framing, or bytes corrupted on disk with the CRC rewritten)
can make it read past the batch. That surfaces as the codec's ``CorruptRecordError``, never as
``IndexError``: the segment turns it into the storage's corrupt-batch error.

The record layout is the codec's (``seglog.records``, kafka-storage.md 2.3); this walk uses the
codec's varint functions and reads only the three leading fields::

    length          varint   bytes that follow in this record
    attributes      int8     unused
    timestampDelta  varlong  record timestamp = batch baseTimestamp + delta
    offsetDelta     varint   record offset = batch baseOffset + delta
    ...                      key, value, headers: skipped
"""

from __future__ import annotations

from collections.abc import Iterator

from seglog.records import HEADER, RECORDS_OFFSET, Compression, CorruptRecordError, RecordBatch
from seglog.records.varint import ZIGZAG_DECODE, decode_varint, decode_varlong

from .file_records import HeaderField

__all__ = ["first_record_at_or_after", "offsets_and_timestamps"]

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08  # LogAppendTime: every record reads the batch maxTimestamp
_ATTRIBUTES_BYTES = 1
_CONTINUATION = 0x80  # a varint byte with this bit set is followed by another
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
    position = RECORDS_OFFSET
    for _ in range(fields[HeaderField.RECORDS_COUNT]):
        try:
            length, body = _varint(batch, position)
            timestamp_delta, after = _varlong(batch, body + _ATTRIBUTES_BYTES)
            offset_delta, _ = _varint(batch, after)
        except IndexError:
            raise _overrun(batch, position) from None
        timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
        yield base_offset + offset_delta, timestamp
        position = body + length


def first_record_at_or_after(
    batch: bytes | memoryview, timestamp_ms: int, starting_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp_ms) of the first record with a timestamp >= ``timestamp_ms`` and an
    offset >= ``starting_offset``, or None. The walk of ``offsets_and_timestamps`` with the
    one- and two-byte varint cases inlined: this loop ends every lookup by timestamp."""
    fields = HEADER.unpack_from(batch, 0)
    attributes = fields[HeaderField.ATTRIBUTES]
    if attributes & (_COMPRESSION_MASK | _TIMESTAMP_TYPE_BIT):
        for offset, timestamp in offsets_and_timestamps(batch):
            if timestamp >= timestamp_ms and offset >= starting_offset:
                return offset, timestamp
        return None
    try:
        return _first_uncompressed_at_or_after(batch, fields, timestamp_ms, starting_offset)
    except IndexError:
        raise _overrun(batch, RECORDS_OFFSET) from None


def _first_uncompressed_at_or_after(
    batch: bytes | memoryview, fields: tuple, timestamp_ms: int, starting_offset: int
) -> tuple[int, int] | None:
    base_offset = fields[HeaderField.BASE_OFFSET]
    base_timestamp = fields[HeaderField.BASE_TIMESTAMP]
    table, more = ZIGZAG_DECODE, _CONTINUATION
    position = RECORDS_OFFSET
    for _ in range(fields[HeaderField.RECORDS_COUNT]):
        first = batch[position]  # length: one byte up to 63, two up to 8191
        if first < more:
            length, body = table[first], position + 1
        elif batch[position + 1] < more:
            length, body = table[first + (batch[position + 1] << 7)], position + 2
        else:
            length, body = decode_varint(batch, position)
        first = batch[body + _ATTRIBUTES_BYTES]  # timestampDelta, after the attributes byte
        if first < more:
            timestamp_delta, after = table[first], body + _ATTRIBUTES_BYTES + 1
        else:
            timestamp_delta, after = _varlong(batch, body + _ATTRIBUTES_BYTES)
        if base_timestamp + timestamp_delta >= timestamp_ms:
            first = batch[after]
            offset_delta = table[first] if first < more else _varint(batch, after)[0]
            if base_offset + offset_delta >= starting_offset:
                return base_offset + offset_delta, base_timestamp + timestamp_delta
        position = body + length
    return None


def _overrun(batch: bytes | memoryview, position: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"Truncated records area: expected {HEADER.unpack_from(batch, 0)[HeaderField.RECORDS_COUNT]} "
        f"records inside the {len(batch)}-byte batch, found the walk from byte {position} running past its end"
    )


def _varint(data, position: int) -> tuple[int, int]:
    """One- and two-byte varints (nearly all here) from the codec's table, others decoded."""
    first = data[position]
    if first < _CONTINUATION:
        return ZIGZAG_DECODE[first], position + 1
    second = data[position + 1]
    if second < _CONTINUATION:
        return ZIGZAG_DECODE[first + (second << 7)], position + 2
    return decode_varint(data, position)


def _varlong(data, position: int) -> tuple[int, int]:
    first = data[position]
    if first < _CONTINUATION:
        return ZIGZAG_DECODE[first], position + 1
    second = data[position + 1]
    if second < _CONTINUATION:
        return ZIGZAG_DECODE[first + (second << 7)], position + 2
    return decode_varlong(data, position)
