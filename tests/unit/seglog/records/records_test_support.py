"""Helpers for the record codec tests: hand-assembled batches with a correct CRC, so a test
can put any (malformed) records area behind a header that passes ensure_valid()."""

from __future__ import annotations

from seglog.records import ATTRIBUTES_OFFSET, HEADER, LOG_OVERHEAD, MAGIC, RECORD_BATCH_OVERHEAD, crc32c
from seglog.records.varint import encode_varint, encode_varlong

TIMESTAMP_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z, the timestamp of kafka-storage.md 2.4

# kafka-storage.md 2.4: one record, key null, value "test", baseOffset 0, epoch 0, CreateTime.
ONE_RECORD_BATCH = bytes.fromhex(
    "0000000000000000" "0000003c" "00000000" "02" "ce68b28d" "0000" "00000000"
    "0000018bcfe56800" "0000018bcfe56800" "ffffffffffffffff" "ffff" "ffffffff" "00000001"
    "1400000001087465737400"
)
# kafka-storage.md 2.4: k1/v1 at delta 0; k2/v2 at offsetDelta 1, tsDelta 5, header "h"="x".
TWO_RECORD_BATCH = bytes.fromhex(
    "00000000000000640000004b0000000002ac5d24150000000000010000018bcfe568000000018bcfe56805"
    "ffffffffffffffffffffffffffff0000000214000000046b31047631001c000a02046b320476320202680278"
)


def raw_batch(
    records_area: bytes,
    records_count: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = 0,
    magic: int = MAGIC,
    attributes: int = 0,
    last_offset_delta: int | None = None,
    base_timestamp: int = TIMESTAMP_MS,
    max_timestamp: int = TIMESTAMP_MS,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    crc: int | None = None,
) -> bytes:
    """A batch around `records_area` (already compressed if the attributes say so), with the
    correct CRC unless `crc` is given."""
    if last_offset_delta is None:
        last_offset_delta = records_count - 1
    fields = [
        base_offset,
        RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(records_area),
        partition_leader_epoch,
        magic,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    ]
    packed = HEADER.pack(*fields) + records_area
    fields[4] = crc32c(packed[ATTRIBUTES_OFFSET:]) if crc is None else crc
    return HEADER.pack(*fields) + records_area


def record_body(
    *,
    timestamp_delta: int = 0,
    offset_delta: int = 0,
    key: bytes | None = None,
    value: bytes | None = b"v",
    headers: tuple = (),
    header_count: int | None = None,
    attributes: int = 0,
) -> bytes:
    """The bytes of one record after its length varint."""

    def nullable(data):
        return encode_varint(-1) if data is None else encode_varint(len(data)) + data

    parts = [bytes([attributes]), encode_varlong(timestamp_delta), encode_varint(offset_delta), nullable(key), nullable(value)]
    parts.append(encode_varint(len(headers) if header_count is None else header_count))
    for header_key, header_value in headers:
        parts.append(encode_varint(len(header_key)) + header_key)
        parts.append(nullable(header_value))
    return b"".join(parts)


def record(body: bytes, length: int | None = None) -> bytes:
    """A record: its length varint (the body's size unless `length` is given) and body."""
    return encode_varint(len(body) if length is None else length) + body
