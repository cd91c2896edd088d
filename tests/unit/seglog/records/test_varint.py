"""Zigzag varints and varlongs: Kafka's ByteUtils vectors, limits and malformed input."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog.records import CorruptRecordError
from seglog.records.varint import (
    ENCODED_VARINTS,
    ENCODED_VARINTS_SIZE,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    PREFIXED_SIZES,
    VARINT_BYTES_MAX,
    VARINT_SIZES,
    VARLONG_BYTES_MAX,
    ZIGZAG_DECODE,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
)

# (value, encoding) pairs from Kafka's ByteUtilsTest.testVarintSerde and protobuf's zigzag table.
VARINT_VECTORS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-2, "03"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (-8192, "ff7f"),
    (8192, "808001"),
    (-8193, "818001"),
    (1048575, "feff7f"),
    (-1048576, "ffff7f"),
    (1048576, "80808001"),
    (-1048577, "81808001"),
    (134217727, "feffff7f"),
    (-134217728, "ffffff7f"),
    (134217728, "8080808001"),
    (-134217729, "8180808001"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
]
VARLONG_VECTORS = VARINT_VECTORS + [
    (INT32_MAX + 1, "8080808010"),
    (1 << 35, "808080808002"),
    (1_700_000_000_000, "80a0abfef962"),  # checked against protobuf's _VarintBytes
    (INT64_MAX, "feffffffffffffffff01"),
    (INT64_MIN, "ffffffffffffffffff01"),
]


@pytest.mark.parametrize(("value", "encoded"), VARINT_VECTORS)
def test_encode_varint_matches_kafka_bytes(value, encoded):
    assert encode_varint(value).hex() == encoded
    assert size_of_varint(value) == len(encoded) // 2


@pytest.mark.parametrize(("value", "encoded"), VARINT_VECTORS)
def test_decode_varint_reads_kafka_bytes_and_returns_next_position(value, encoded):
    data = b"\xaa" + bytes.fromhex(encoded) + b"\xbb"
    assert decode_varint(data, 1) == (value, 1 + len(encoded) // 2)


@pytest.mark.parametrize(("value", "encoded"), VARLONG_VECTORS)
def test_varlong_encodes_and_decodes_kafka_bytes(value, encoded):
    assert encode_varlong(value).hex() == encoded
    assert decode_varlong(bytes.fromhex(encoded)) == (value, len(encoded) // 2)
    assert size_of_varint(value) == len(encoded) // 2


@pytest.mark.parametrize("value", [INT32_MAX + 1, INT32_MIN - 1])
def test_encode_varint_rejects_values_outside_int32(value):
    with pytest.raises(ValueError, match=f"int32, found {value}"):
        encode_varint(value)


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1])
def test_encode_varlong_rejects_values_outside_int64(value):
    with pytest.raises(ValueError, match=f"int64, found {value}"):
        encode_varlong(value)


def test_decode_varint_rejects_a_sixth_byte():
    data = bytes.fromhex("ffffffffff01")
    with pytest.raises(CorruptRecordError, match=f"Illegal varint at byte 0: expected it to end within {VARINT_BYTES_MAX} bytes, found ffffffffff"):
        decode_varint(data)


def test_decode_varlong_rejects_an_eleventh_byte():
    data = bytes.fromhex("ffffffffffffffffffff01")
    with pytest.raises(CorruptRecordError, match=f"Illegal varlong at byte 0: expected it to end within {VARLONG_BYTES_MAX} bytes"):
        decode_varlong(data)


@pytest.mark.parametrize("decode", [decode_varint, decode_varlong])
def test_decode_of_a_varint_cut_short_names_the_truncation(decode):
    with pytest.raises(CorruptRecordError, match="Truncated var(int|long) at byte 1: expected a terminating byte, found the end of the data after 2 bytes"):
        decode(b"\x00\x80\x80", 1)


@pytest.mark.parametrize("decode", [decode_varint, decode_varlong])
def test_decode_at_the_end_of_the_data_names_the_truncation(decode):
    with pytest.raises(CorruptRecordError, match="after 0 bytes"):
        decode(b"\x02", 1)


def test_decode_varint_keeps_the_low_32_bits_of_a_five_byte_varint_like_kafka():
    # Kafka's readVarint shifts the fifth byte's payload left by 28 into an int: the bits
    # beyond 32 fall off.  0x7f in the fifth byte sets bits 28..34 of the unsigned form.
    assert decode_varint(bytes.fromhex("ffffffff7f")) == (INT32_MIN, 5)


def test_decode_accepts_an_overlong_encoding_of_a_small_value():
    assert decode_varint(b"\x82\x00") == (1, 2)


@pytest.mark.parametrize("value", [0, 1, 63, 64, 100, 8191])
def test_tables_hold_the_encoding_and_sizes_of_small_values(value):
    assert ENCODED_VARINTS[value] == encode_varint(value)
    assert VARINT_SIZES[value] == size_of_varint(value)
    assert PREFIXED_SIZES[value] == value + size_of_varint(value)


def test_tables_cover_every_value_below_their_size():
    assert len(ENCODED_VARINTS) == len(VARINT_SIZES) == len(PREFIXED_SIZES) == ENCODED_VARINTS_SIZE


@given(st.integers(min_value=-(1 << 13), max_value=(1 << 13) - 1))
def test_zigzag_decode_table_reads_every_one_and_two_byte_varint(value):
    encoded = encode_varint(value)
    index = encoded[0] if len(encoded) == 1 else encoded[0] + (encoded[1] << 7)
    assert ZIGZAG_DECODE[index] == value


@given(st.integers(min_value=INT32_MIN, max_value=INT32_MAX))
def test_varint_round_trips_every_int32(value):
    encoded = encode_varint(value)
    assert decode_varint(encoded) == (value, len(encoded))
    assert len(encoded) == size_of_varint(value) <= VARINT_BYTES_MAX


@given(st.integers(min_value=INT64_MIN, max_value=INT64_MAX))
def test_varlong_round_trips_every_int64(value):
    encoded = encode_varlong(value)
    assert decode_varlong(encoded) == (value, len(encoded))
    assert len(encoded) <= VARLONG_BYTES_MAX
