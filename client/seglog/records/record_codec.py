"""The records area of a v2 batch: encoding and decoding Kafka's DefaultRecord bodies.

Each record, back to back after the 61-byte header (or inside the one compressed stream)::

    length            varint   bytes that follow in this record
    attributes        int8     unused, 0
    timestampDelta    varlong  timestamp - batch baseTimestamp
    offsetDelta       varint   offset - batch baseOffset
    keyLength         varint   -1 for a null key
    key               bytes
    valueLength       varint   -1 for a null value (a tombstone)
    value             bytes
    headersCount      varint   >= 0
      headerKeyLength   varint   >= 0 (header keys are never null)
      headerKey         bytes    UTF-8
      headerValueLength varint   -1 for a null header value
      headerValue       bytes

Parsing rules (Kafka's DefaultRecord.readFrom and DefaultRecordBatch's iterators): each
record must consume exactly `length` bytes; after recordsCount records no byte may remain
("Incorrect declared batch size"); running out of bytes first is an error too.

Speed: decode_records runs a loop specialised for the shape nearly every record has (one-
or two-byte varints, no headers) and hands any other record to _decode_record, which
checks everything and names the problem.  RecordBatchBuilder.append has the matching
encoder fast path; encode_record is the general encoder.
"""

from __future__ import annotations

from .errors import CorruptRecordError
from .record import Record
from .varint import (
    ENCODED_NULL,
    INT32_MAX,
    ZIGZAG_DECODE,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)

# Bytes of a record without key, value and headers, at most: length (5) + attributes (1) +
# timestampDelta (10) + offsetDelta (5) (Kafka's MAX_RECORD_OVERHEAD).
RECORD_OVERHEAD_BYTES_MAX = 21
_ATTRIBUTES = b"\x00"  # per-record attributes: unused by Kafka, always written as 0
_NO_HEADERS = b"\x00"  # headersCount 0
_CONTINUATION = 0x80
_NULL_LENGTH = -1
_EMPTY = ()


def _as_bytes(data, what: str) -> bytes | None:
    """bytes for a key/value/header value: bytes pass through, other bytes-like objects are
    copied (so later changes by the caller cannot reach the batch), None stays None."""
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"{what} must be bytes, bytearray, memoryview or None, found {type(data).__name__}")


def _encode_nullable(data: bytes | None) -> bytes:
    if data is None:
        return ENCODED_NULL
    return encode_varint(len(data)) + data


def encode_headers(headers) -> bytes:
    """headersCount and the headers of one record."""
    parts = []
    for header in headers:
        try:
            key, value = header
        except (TypeError, ValueError):
            raise TypeError(f"a header must be a (str, bytes-or-None) pair, found {header!r}") from None
        if not isinstance(key, str):
            raise TypeError(f"a header key must be a str (never None), found {type(key).__name__}")
        encoded_key = key.encode("utf-8")
        parts.append(encode_varint(len(encoded_key)) + encoded_key)
        parts.append(_encode_nullable(_as_bytes(value, "a header value")))
    return encode_varint(len(parts) // 2) + b"".join(parts)


def encode_record(offset_delta: int, timestamp_delta: int, key, value, headers=()) -> bytes:
    """One whole record (length prefix included).  Checks every argument's type and range."""
    key = _as_bytes(key, "key")
    value = _as_bytes(value, "value")
    body = b"".join(
        (
            _ATTRIBUTES,
            encode_varlong(timestamp_delta),
            encode_varint(offset_delta),
            _encode_nullable(key),
            _encode_nullable(value),
            encode_headers(headers) if headers else _NO_HEADERS,
        )
    )
    if len(body) > INT32_MAX:
        raise ValueError(f"a record must be at most {INT32_MAX} bytes, found {len(body)}")
    return encode_varint(len(body)) + body


def _premature_end(index: int, count: int, detail: str) -> CorruptRecordError:
    return CorruptRecordError(
        f"Incorrect declared batch size, premature EOF reached: expected {count} records, "
        f"record {index} {detail}"
    )


def _read_nullable(data, p: int, record_end: int, index: int, what: str) -> tuple[bytes | None, int]:
    size, p = decode_varint(data, p)
    if size == _NULL_LENGTH:
        return None, p
    if size < _NULL_LENGTH:
        raise CorruptRecordError(f"Invalid {what} length in record {index}: expected >= -1, found {size}")
    if p + size > record_end:
        raise CorruptRecordError(
            f"Invalid {what} length in record {index}: {size} bytes declared, but only "
            f"{record_end - p} bytes remain in the record"
        )
    return bytes(data[p : p + size]), p + size


def _read_headers(data, p: int, record_end: int, index: int) -> tuple[tuple, int]:
    count, p = decode_varint(data, p)
    if count < 0:
        raise CorruptRecordError(f"Found invalid number of record headers in record {index}: expected >= 0, found {count}")
    if count > record_end - p:
        raise CorruptRecordError(
            f"Found invalid number of record headers in record {index}: {count} headers "
            f"declared, but only {record_end - p} bytes remain in the record"
        )
    headers = []
    for _ in range(count):
        key_size, p = decode_varint(data, p)
        if key_size < 0:
            raise CorruptRecordError(
                f"Invalid negative header key size in record {index}: expected >= 0, found {key_size}"
            )
        if p + key_size > record_end:
            raise CorruptRecordError(
                f"Invalid header key size in record {index}: {key_size} bytes declared, but only "
                f"{record_end - p} bytes remain in the record"
            )
        try:
            key = bytes(data[p : p + key_size]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"Invalid header key in record {index}: expected UTF-8, found {exc}") from None
        value, p = _read_nullable(data, p + key_size, record_end, index, "header value")
        headers.append((key, value))
    return tuple(headers), p


def _decode_record(data, pos: int, end: int, out: list, count: int, base_offset: int, base_timestamp: int) -> int:
    """Decode the record at `pos` with every check, append its fields to `out`, return the
    position after it.  Raises CorruptRecordError naming what was expected and found."""
    index = len(out)
    if pos >= end:
        raise _premature_end(index, count, f"starts at byte {pos}, where the records area ends")
    length, p = decode_varint(data, pos)
    if length <= 0:
        raise CorruptRecordError(f"Invalid record size of record {index} at byte {pos}: expected > 0, found {length}")
    record_end = p + length
    if record_end > end:
        raise _premature_end(index, count, f"at byte {pos} declares {length} bytes, but only {end - p} remain")
    p += 1  # attributes: unused
    timestamp_delta, p = decode_varlong(data, p)
    offset_delta, p = decode_varint(data, p)
    key, p = _read_nullable(data, p, record_end, index, "key")
    value, p = _read_nullable(data, p, record_end, index, "value")
    headers, p = _read_headers(data, p, record_end, index)
    if p != record_end:
        raise CorruptRecordError(
            f"Invalid record size of record {index} at byte {pos}: expected to read {length} bytes "
            f"in record payload, but instead read {p - (record_end - length)}"
        )
    out.append(Record((base_offset + offset_delta, base_timestamp + timestamp_delta, key, value, headers)))
    return p


def decode_records(
    data,
    position: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time_ms: int | None = None,
) -> list[Record]:
    """Decode the `count` records in data[position:end] (a bytes object: indexing bytes is the
    fastest byte access Python has).  Every record's timestamp reads `log_append_time_ms`
    when it is given (LogAppendTime batches), else base_timestamp + its delta."""
    if count < 0:
        raise CorruptRecordError(f"Found invalid record count: expected >= 0, found {count}")
    out: list = []
    try:
        complete = _decode_fast(data, position, count, base_offset, base_timestamp, out, end) == end
    except IndexError:  # a read ran off the end of `data`
        complete = False
    if not complete:
        # The fast loop checks each record against its own length but leaves the area's
        # bounds to this one comparison; the careful pass names what is wrong, and where.
        out = _decode_careful(data, position, end, count, base_offset, base_timestamp)
    if log_append_time_ms is None:
        return out
    return [Record((offset, log_append_time_ms, key, value, headers)) for offset, _, key, value, headers in out]


def _decode_careful(data, position: int, end: int, count: int, base_offset: int, base_timestamp: int) -> list:
    """Decode every record with every check (raising CorruptRecordError on the first problem)."""
    out: list = []
    pos = position
    for _ in range(count):
        pos = _decode_record(data, pos, end, out, count, base_offset, base_timestamp)
    if pos != end:
        raise CorruptRecordError(
            f"Incorrect declared batch size, records still remaining: expected the records area "
            f"to end after {count} records at byte {pos}, found {end - pos} more bytes"
        )
    return out


def _decode_fast(data, pos: int, count: int, base_offset: int, base_timestamp: int, out: list, end: int) -> int:
    """The decoder's hot loop, for records whose varints are one or two bytes long and that
    have no headers; every other record goes through _decode_record.  Checks that each
    record's fields fill exactly its declared length, not that records stay before `end`:
    returns the position after the last record, which the caller compares with `end`."""
    D = ZIGZAG_DECODE
    C = _CONTINUATION
    no_headers = _EMPTY
    record = Record
    append = out.append
    slow = _decode_record
    for _ in range(count):
        b = data[pos]
        if b < C:
            p = pos + 1
            record_end = p + D[b]
        else:
            b1 = data[pos + 1]
            if b1 >= C:
                pos = slow(data, pos, end, out, count, base_offset, base_timestamp)
                continue
            p = pos + 2
            record_end = p + D[b + (b1 << 7)]
        b = data[p + 1]  # timestampDelta, after the unused attributes byte at p
        if b < C:
            timestamp_delta = D[b]
            p += 2
        else:
            b1 = data[p + 2]
            if b1 >= C:
                pos = slow(data, pos, end, out, count, base_offset, base_timestamp)
                continue
            timestamp_delta = D[b + (b1 << 7)]
            p += 3
        b = data[p]  # offsetDelta
        if b < C:
            offset_delta = D[b]
            p += 1
        else:
            b1 = data[p + 1]
            if b1 >= C:
                pos = slow(data, pos, end, out, count, base_offset, base_timestamp)
                continue
            offset_delta = D[b + (b1 << 7)]
            p += 2
        b = data[p]  # keyLength
        if b < C:
            size = D[b]
            p += 1
        else:
            b1 = data[p + 1]
            if b1 >= C:
                pos = slow(data, pos, end, out, count, base_offset, base_timestamp)
                continue
            size = D[b + (b1 << 7)]
            p += 2
        if size >= 0:
            key = data[p : p + size]
            p += size
        elif size == _NULL_LENGTH:
            key = None
        else:
            pos = slow(data, pos, end, out, count, base_offset, base_timestamp)
            continue
        b = data[p]  # valueLength
        if b < C:
            size = D[b]
            p += 1
        else:
            b1 = data[p + 1]
            if b1 >= C:
                pos = slow(data, pos, end, out, count, base_offset, base_timestamp)
                continue
            size = D[b + (b1 << 7)]
            p += 2
        if size >= 0:
            value = data[p : p + size]
            p += size
        elif size == _NULL_LENGTH:
            value = None
        else:
            pos = slow(data, pos, end, out, count, base_offset, base_timestamp)
            continue
        if data[p] or p + 1 != record_end:  # headers present, or the sizes do not add up
            pos = slow(data, pos, end, out, count, base_offset, base_timestamp)
            continue
        append(record((base_offset + offset_delta, base_timestamp + timestamp_delta, key, value, no_headers)))
        pos = record_end
    return pos
