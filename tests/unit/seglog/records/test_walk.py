"""The bounded walkers, fuzzed: whatever the bytes say, a walk terminates, raises nothing but
the codec's errors, never yields a batch or record outside the bytes it was given, and agrees
with the codec's decoder on what is valid.

Each property is the one that would have caught a bug class seglog had:
- a batch length <= -12 walked backwards forever (next_offset_after in the rpc conversions);
- a length running past the segment made a read stop quietly and skip to the next segment;
- a rotted base offset (outside the CRC) was served as real offsets;
- a record whose key length overran the record passed produce validation (a poison batch);
- a record count of 2**31 with backwards record lengths spun a lookup by time.
"""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.records import (
    HEADER,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    RECORDS_OFFSET,
    BatchStop,
    BatchWalk,
    CodecError,
    CorruptRecordError,
    RecordBatchBuilder,
    iter_batches,
    walk_records,
)
from seglog.records.record_codec import decode_records, encode_record
from seglog.records.varint import encode_varint

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_LENGTH = struct.Struct(">i")
_BASE_OFFSET = struct.Struct(">q")


def batch_bytes(count: int, base_offset: int = 0, value: bytes = b"v" * 10, headers=()) -> bytes:
    builder = RecordBatchBuilder(base_offset=base_offset)
    for index in range(count):
        builder.append(value, key=b"k%d" % index, timestamp_ms=1_700_000_000_000 + index, headers=headers)
    return builder.build()


def log_of(*counts: int) -> bytes:
    parts, offset = [], 0
    for count in counts:
        parts.append(batch_bytes(count, offset))
        offset += count
    return b"".join(parts)


# -- BatchWalk ---------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [-12, -13, -61, -(2**31), 0, 13])
def test_a_length_at_or_below_minus_12_raises_instead_of_walking_backwards(length):
    data = bytearray(log_of(1, 2))
    _LENGTH.pack_into(data, len(batch_bytes(1)) + LENGTH_OFFSET, length)
    with pytest.raises(CorruptRecordError, match=f"Found record size {length}"):
        list(BatchWalk(bytes(data)))


def test_a_length_past_the_region_is_a_torn_tail_or_an_error_as_asked():
    data = log_of(1, 2)
    first = len(batch_bytes(1))
    walk = BatchWalk(data[:-5])
    assert [position for position, _ in walk] == [0]
    assert walk.stop is BatchStop.TORN_TAIL and walk.position == first
    with pytest.raises(CorruptRecordError, match=f"Truncated the batch at position {first + 100}"):
        list(BatchWalk(data[:-5], origin=100, torn_tail_ok=False))


def test_a_header_past_the_buffer_but_inside_the_region_asks_for_more_bytes():
    data = log_of(1, 2)
    first = len(batch_bytes(1))
    walk = BatchWalk(data[: first + 20], region_end=len(data))
    assert [position for position, _ in walk] == [0]
    assert walk.stop is BatchStop.NEED_BYTES and walk.position == first


@pytest.mark.parametrize(
    ("second_base", "limit", "message"),
    [(0, 2**63 - 1, "base offset 0, expected at least 1"), (5, 6, "last offset 6, expected below 6")],
)
def test_offset_checks_refuse_a_base_offset_that_rotted(second_base, limit, message):
    data = bytearray(log_of(1, 2))
    _BASE_OFFSET.pack_into(data, len(batch_bytes(1)), second_base)
    with pytest.raises(CorruptRecordError, match=message):
        list(BatchWalk(bytes(data), offset_min=0, offset_limit=limit))
    assert len(list(BatchWalk(bytes(data)))) == 2  # without offset checks: only the framing


def _lie(data: bytes, lies: list[tuple[int, int, int]]) -> bytes:
    """``data`` with some int32/int64 fields overwritten at random places (lengths, offsets)."""
    buf = bytearray(data)
    for where, size, value in lies:
        where %= max(1, len(buf) - 8)
        if size == 4:
            buf[where : where + 4] = (value & 0xFFFFFFFF).to_bytes(4, "big")
        else:
            buf[where : where + 8] = (value & (2**64 - 1)).to_bytes(8, "big")
    return bytes(buf)


lies = st.lists(
    st.tuples(
        st.integers(0, 10_000),
        st.sampled_from([4, 8]),
        st.one_of(st.integers(-(2**31), 2**31), st.sampled_from([-12, -13, -61, 0, 13, 48, 49, 2**31 - 1])),
    ),
    max_size=4,
)


@FUZZ
@given(
    counts=st.lists(st.integers(1, 20), min_size=1, max_size=6),
    lies=lies,
    cut=st.integers(0, 10_000),
    origin=st.integers(0, 2**20),
    region_extra=st.integers(0, 100_000),
    checked=st.booleans(),
)
def test_batch_walk_terminates_and_yields_only_batches_inside_what_it_was_given(
    counts, lies, cut, origin, region_extra, checked
):
    data = _lie(log_of(*counts), lies)
    data = data[: len(data) - cut % (len(data) + 1)]
    region_end = len(data) + region_extra
    walk = BatchWalk(data, region_end=region_end, origin=origin, offset_min=0 if checked else None)
    previous_end = 0
    steps = 0
    try:
        for position, fields in walk:
            steps += 1
            size = fields[1] + LOG_OVERHEAD
            assert position == previous_end and position + HEADER.size <= len(data)
            assert size >= HEADER.size and position + size <= region_end
            previous_end = position + size
    except CodecError:
        pass
    assert steps <= len(data) // HEADER.size
    assert walk.position <= len(data) or walk.position <= region_end


@FUZZ
@given(data=st.binary(max_size=4096), position=st.integers(0, 100), end=st.one_of(st.none(), st.integers(0, 5000)))
def test_batch_walk_over_random_bytes_raises_only_codec_errors(data, position, end):
    try:
        for found, _ in BatchWalk(data, position, end, offset_min=0):
            assert found + HEADER.size <= len(data)
    except CodecError:
        pass
    try:
        for batch in iter_batches(data, position, end):
            assert batch.position + batch.size_in_bytes <= len(data)
    except CodecError:
        pass


# -- walk_records ------------------------------------------------------------------------------


def _area(batch: bytes) -> bytes:
    return batch[RECORDS_OFFSET:]


def _decoded_or_error(area: bytes, count: int):
    try:
        return [(r.timestamp_ms, r.offset) for r in decode_records(area, 0, len(area), count, 0, 0)]
    except CodecError:
        return None


def _walked_or_error(area: bytes, count: int):
    try:
        return list(walk_records(area, 0, len(area), count))
    except CodecError:
        return None


@FUZZ
@given(
    count=st.integers(1, 30),
    value=st.binary(max_size=300),
    with_headers=st.booleans(),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    claimed=st.integers(-3, 40),
)
def test_record_walk_accepts_exactly_what_the_decoder_accepts(count, value, with_headers, flips, claimed):
    headers = (("h", b"x"), ("n", None)) if with_headers else ()
    area = bytearray(_area(batch_bytes(count, value=value, headers=headers)))
    for where, byte in flips:
        area[where % len(area)] = byte
    area = bytes(area)
    decoded = _decoded_or_error(area, claimed)
    walked = _walked_or_error(area, claimed)
    assert (decoded is None) == (walked is None)
    if walked is not None:
        assert [(timestamp, offset) for timestamp, offset in walked] == decoded


@FUZZ
@given(data=st.binary(max_size=2048), count=st.integers(-5, 2**31 - 1))
def test_record_walk_over_random_bytes_terminates_with_a_codec_error_or_whole_records(data, count):
    steps = 0
    try:
        for _ in walk_records(data, 0, len(data), count):
            steps += 1
            assert steps <= len(data) // 2  # a record is at least 2 bytes
    except CodecError:
        pass


def _record_with(key_length: int) -> bytes:
    """A record whose key length field says ``key_length`` over a 3-byte key."""
    body = b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(key_length) + b"key" + encode_varint(-1) + b"\x00"
    return encode_varint(len(body)) + body


@pytest.mark.parametrize("key_length", [4, 100, -2, 2**31 - 1])
def test_a_key_length_overrunning_its_record_is_refused_naming_the_record(key_length):
    area = encode_record(0, 0, b"k", b"v") + _record_with(key_length)
    with pytest.raises(CorruptRecordError, match="record 1"):
        list(walk_records(area, 0, len(area), 2))


def test_an_over_long_varint_is_refused():
    record = encode_record(0, 0, b"k", b"v")
    over_long = b"\x80\x80\x80\x80\x80\x00"  # six bytes for an int32
    area = over_long[:0] + bytes([record[0]]) + b"\x00" + b"\xff" * 10 + b"\x01" + record[4:]
    with pytest.raises(CorruptRecordError, match="Illegal var"):
        list(walk_records(area, 0, len(area), 1))


def test_a_huge_header_count_is_refused_before_any_header_is_read():
    body = b"\x00\x00\x00\x01\x01" + encode_varint(2**30)
    area = encode_varint(len(body)) + body
    with pytest.raises(CorruptRecordError, match="invalid number of record headers"):
        list(walk_records(area, 0, len(area), 1))


# -- decompression bombs -----------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["GZIP", "SNAPPY", "LZ4", "ZSTD"])
def test_a_decompression_bomb_is_refused_without_allocating_its_size(compression):
    from seglog.records import Compression, DecompressionLimitError, RecordBatch
    from seglog.records.compression import compress

    plain = encode_record(0, 0, None, bytes(64 * 1024 * 1024))  # 64 MiB of zeros in one record
    records = compress(Compression[compression], plain)
    builder_batch = bytearray(batch_bytes(1))
    data = bytes(builder_batch[:RECORDS_OFFSET]) + records
    data = bytearray(data)
    _LENGTH.pack_into(data, LENGTH_OFFSET, len(data) - LOG_OVERHEAD)
    struct.pack_into(">h", data, 21, int(Compression[compression]))
    tracemalloc.start()
    try:
        with pytest.raises(DecompressionLimitError, match="decompressed_bytes_max"):
            RecordBatch(bytes(data)).records(decompressed_bytes_max=1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024 + 2 * len(data)


def test_record_walk_refuses_a_header_key_that_is_not_utf8_as_the_decoder_does():
    # Found by the property above: one record whose header key byte became 0x80.
    area = bytearray(_area(batch_bytes(1, value=b"", headers=(("h", b"x"), ("n", None)))))
    area[area.index(b"h"[0], 8)] = 0x80
    area = bytes(area)
    assert _decoded_or_error(area, 1) is None
    with pytest.raises(CodecError, match="header key .* expected UTF-8"):
        list(walk_records(area, 0, len(area), 1))
