"""decode=true bounds its work before doing it: a stored batch whose header's record count alone
cannot fit the response budget is refused (or left for the next fetch) without being
decompressed, and a compressed one is decompressed only up to the room left."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
    Compression,
    RecordBatchBuilder,
    crc32c,
)
from seglog.records.compression import compress
from seglog_server.config import DECODED_RECORD_OVERHEAD_BYTES
from seglog_server.rpc.conversions import decode_batches
from seglog_server.rpc.errors import ResponseTooLargeError, StoredBatchCorruptError

BUDGET_BYTES = 64 * 1024


def stored(*values: bytes, compression: Compression = Compression.NONE, base_offset: int = 0) -> bytes:
    builder = RecordBatchBuilder(compression=compression, base_offset=base_offset)
    for value in values:
        builder.append(value, timestamp_ms=1)
    return builder.build()


def with_area(template: bytes, area: bytes, count: int) -> bytes:
    """``template``'s header over ``area``, claiming ``count`` records, with a valid CRC."""
    buf = bytearray(template[:RECORDS_OFFSET]) + area
    struct.pack_into(">i", buf, LENGTH_OFFSET, len(buf) - LOG_OVERHEAD)
    struct.pack_into(">i", buf, RECORDS_COUNT_OFFSET, count)
    struct.pack_into(">i", buf, LAST_OFFSET_DELTA_OFFSET, count - 1)
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(bytes(buf[ATTRIBUTES_OFFSET:])))
    return bytes(buf)


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(BUDGET_BYTES // DECODED_RECORD_OVERHEAD_BYTES, 1 << 30),
    junk=st.binary(min_size=1, max_size=64),
    compression=st.sampled_from([Compression.GZIP, Compression.ZSTD, Compression.LZ4, Compression.SNAPPY]),
)
def test_a_count_beyond_the_budget_is_refused_from_the_header_before_any_decompression(count, junk, compression):
    # The area is junk no codec decompresses: reaching it would raise StoredBatchCorruptError.
    bomb = with_area(stored(b"x", compression=compression), junk, count)
    with pytest.raises(ResponseTooLargeError, match=rf"decodes to {count} records, above the {BUDGET_BYTES} bytes"):
        decode_batches(bomb, 0, BUDGET_BYTES)


@settings(max_examples=30, deadline=None)
@given(count=st.integers(BUDGET_BYTES // DECODED_RECORD_OVERHEAD_BYTES, 1 << 20))
def test_a_bomb_behind_a_good_batch_ends_the_response_there_undecoded(count):
    good = stored(b"a", b"b")
    bomb = with_area(stored(b"x", compression=Compression.ZSTD, base_offset=2), b"junk", count)
    decoded, kept_bytes = decode_batches(good + bomb, 0, BUDGET_BYTES)
    assert [record.value for record in decoded] == [b"a", b"b"]
    assert kept_bytes == len(good)


def test_a_compressed_area_larger_than_the_room_is_not_decompressed_past_it():
    # 40 records of 4 KiB of zeros: a few hundred bytes of gzip, 160 KiB decompressed.
    big = stored(*[bytes(4096)] * 40, compression=Compression.GZIP)
    assert len(big) < 2048
    with pytest.raises(ResponseTooLargeError, match="decodes to records of more than"):
        decode_batches(big, 0, BUDGET_BYTES)
    decoded, _ = decode_batches(big, 0, 1 << 20)  # room enough: decoded as before
    assert len(decoded) == 40


def test_a_real_record_count_bomb_is_refused_without_decoding_it():
    area = b"".join(bytes([14, 0, 0]) + _varint(i) + b"\x01\x01\x00" for i in range(50_000))
    bomb = with_area(stored(b"x", compression=Compression.ZSTD), compress(Compression.ZSTD, area), 50_000)
    with pytest.raises(ResponseTooLargeError, match="50000 records"):
        decode_batches(bomb, 0, BUDGET_BYTES)


def test_a_corrupt_stored_batch_within_the_budget_is_still_data_loss():
    broken = with_area(stored(b"x", compression=Compression.GZIP), b"junk", 2)
    with pytest.raises(StoredBatchCorruptError):
        decode_batches(broken, 0, BUDGET_BYTES)


def _varint(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
