"""The records area: encoding, the decoder's fast and careful paths, malformed records."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog.records import CorruptRecordError, Record
from seglog.records.record_codec import decode_records, encode_headers, encode_record
from seglog.records.varint import encode_varint

from records_test_support import record, record_body


def decode(area: bytes, count: int, *, base_offset: int = 100, base_timestamp: int = 1000, log_append_time_ms=None):
    return decode_records(area, 0, len(area), count, base_offset, base_timestamp, log_append_time_ms)


def test_encode_record_matches_kafkas_bytes_for_a_null_key():
    # kafka-storage.md 2.4: len=10, attr, tsDelta 0, offDelta 0, key=null, value "test", 0 headers
    assert encode_record(0, 0, None, b"test").hex() == "14000000010874657374" + "00"


def test_encode_record_matches_kafkas_bytes_with_a_header():
    assert encode_record(1, 5, b"k2", b"v2", [("h", b"x")]).hex() == "1c000a02046b320476320202680278"


def test_encode_headers_writes_null_header_values_as_minus_one():
    assert encode_headers([("a", None), ("é", b"")]) == b"\x04" + b"\x02a\x01" + b"\x04\xc3\xa9\x00"


@pytest.mark.parametrize("bad", ["str", 5, [b"x"]])
def test_encode_record_rejects_values_that_are_not_bytes(bad):
    with pytest.raises(TypeError, match=f"value must be bytes, bytearray, memoryview or None, found {type(bad).__name__}"):
        encode_record(0, 0, None, bad)


def test_encode_record_rejects_null_header_keys():
    with pytest.raises(TypeError, match="a header key must be a str \\(never None\\), found NoneType"):
        encode_record(0, 0, None, b"v", [(None, b"x")])


def test_encode_record_rejects_headers_that_are_not_pairs():
    with pytest.raises(TypeError, match="a header must be a \\(str, bytes-or-None\\) pair, found 'abc'"):
        encode_record(0, 0, None, b"v", ["abc"])


def test_encode_record_copies_bytearray_and_memoryview():
    assert encode_record(0, 0, bytearray(b"k"), memoryview(b"v")) == encode_record(0, 0, b"k", b"v")


def test_decode_gives_absolute_offsets_and_timestamps():
    area = record(record_body(offset_delta=0, timestamp_delta=0)) + record(record_body(offset_delta=3, timestamp_delta=-7))
    assert decode(area, 2) == [Record((100, 1000, None, b"v", ())), Record((103, 993, None, b"v", ()))]


def test_decode_reads_log_append_time_for_every_record():
    area = record(record_body(timestamp_delta=0)) + record(record_body(offset_delta=1, timestamp_delta=50))
    assert [r.timestamp_ms for r in decode(area, 2, log_append_time_ms=4242)] == [4242, 4242]


def test_decode_of_long_varints_takes_the_careful_path_to_the_same_result():
    body = record_body(timestamp_delta=1 << 40, offset_delta=1 << 20, key=b"k" * 9000, value=b"v" * 70000)
    assert decode(record(body), 1) == [Record((100 + (1 << 20), 1000 + (1 << 40), b"k" * 9000, b"v" * 70000, ()))]


def test_decode_reads_headers_with_null_values():
    body = record_body(headers=((b"a", b"1"), (b"b", None)))
    assert decode(record(body), 1)[0].headers == (("a", b"1"), ("b", None))


def test_decode_reads_overlong_varints_like_kafka():
    body = b"\x00" + b"\x80\x00" + b"\x80\x00" + b"\x81\x00" + b"\x82\x00" + b"v" + b"\x80\x00"
    assert decode(record(body), 1) == [Record((100, 1000, None, b"v", ()))]


def test_decode_of_zero_records_from_nothing_is_empty():
    assert decode(b"", 0) == []


# -- malformed records: each raises CorruptRecordError saying what was expected and found --
# record_body() is 7 bytes (attributes, timestampDelta, offsetDelta, null key, value length,
# b"v", headersCount) and record() puts a one-byte length in front: 8 bytes per record.


def test_bytes_left_after_the_declared_count_are_an_incorrect_batch_size():
    area = record(record_body()) + b"\x00\x00\x00"
    with pytest.raises(CorruptRecordError, match="Incorrect declared batch size, records still remaining: expected the records area to end after 1 records at byte 8, found 3 more bytes"):
        decode(area, 1)


def test_fewer_records_than_declared_is_a_premature_end():
    area = record(record_body())
    with pytest.raises(CorruptRecordError, match="Incorrect declared batch size, premature EOF reached: expected 2 records, record 1 starts at byte 8, where the records area ends"):
        decode(area, 2)


def test_negative_record_count_is_rejected():
    with pytest.raises(CorruptRecordError, match="Found invalid record count: expected >= 0, found -1"):
        decode(b"", -1)


def test_record_longer_than_the_area_is_a_premature_end():
    area = record(record_body(), length=40)
    with pytest.raises(CorruptRecordError, match="record 0 at byte 0 declares 40 bytes, but only 7 remain"):
        decode(area, 1)


def test_record_length_larger_than_its_fields_is_an_invalid_record_size():
    area = record(record_body() + b"\x00\x00")
    with pytest.raises(CorruptRecordError, match="Invalid record size of record 0 at byte 0: expected to read 9 bytes in record payload, but instead read 7"):
        decode(area, 1)


def test_record_length_smaller_than_its_fields_is_caught():
    body = record_body(value=b"value")
    area = record(body, length=len(body) - 2) + b"\x00" * 4
    with pytest.raises(CorruptRecordError, match="Invalid value length in record 0: 5 bytes declared, but only 4 bytes remain in the record"):
        decode(area, 1)


@pytest.mark.parametrize("length", [0, -1])
def test_record_length_below_one_is_rejected(length):
    with pytest.raises(CorruptRecordError, match=f"Invalid record size of record 0 at byte 0: expected > 0, found {length}"):
        decode(encode_varint(length) + b"\x00" * 8, 1)


def test_varint_longer_than_five_bytes_is_illegal():
    body = b"\x00\x00" + b"\xff" * 6 + b"\x01" + b"\x01\x02v\x00"
    with pytest.raises(CorruptRecordError, match="Illegal varint at byte 3: expected it to end within 5 bytes"):
        decode(record(body), 1)


def test_varint_cut_by_the_end_of_the_data_is_truncated():
    with pytest.raises(CorruptRecordError, match="Truncated varint at byte 0"):
        decode(b"\x80\x80", 1)


def test_negative_header_count_is_rejected():
    area = record(record_body(header_count=-1))
    with pytest.raises(CorruptRecordError, match="Found invalid number of record headers in record 0: expected >= 0, found -1"):
        decode(area, 1)


def test_header_count_beyond_the_record_is_rejected():
    area = record(record_body(header_count=50))
    with pytest.raises(CorruptRecordError, match="50 headers declared, but only 0 bytes remain in the record"):
        decode(area, 1)


def test_negative_header_key_size_is_rejected():
    body = record_body(header_count=1) + encode_varint(-1) + encode_varint(-1)
    with pytest.raises(CorruptRecordError, match="Invalid negative header key size in record 0: expected >= 0, found -1"):
        decode(record(body), 1)


def test_header_key_that_is_not_utf8_is_rejected():
    body = record_body(headers=((b"\xff\xfe", b"x"),))
    with pytest.raises(CorruptRecordError, match="Invalid header key in record 0: expected UTF-8, found"):
        decode(record(body), 1)


def test_key_length_below_minus_one_is_rejected():
    body = b"\x00\x00\x00" + encode_varint(-2) + encode_varint(1) + b"v\x00"
    with pytest.raises(CorruptRecordError, match="Invalid key length in record 0: expected >= -1, found -2"):
        decode(record(body), 1)


def test_error_names_the_record_index():
    area = record(record_body()) + record(record_body(header_count=-3))
    with pytest.raises(CorruptRecordError, match="in record 1: expected >= 0, found -3"):
        decode(area, 2)


def test_record_cut_at_the_end_of_the_data_is_a_premature_end():
    area = record(record_body(value=b"v" * 100))
    with pytest.raises(CorruptRecordError, match="record 0 at byte 0 declares 107 bytes, but only 60 remain"):
        decode_records(area[:62], 0, 62, 1, 0, 0)


def test_decode_stops_at_end_even_when_the_data_goes_on():
    area = record(record_body())
    assert decode_records(area + b"\xff\xff", 0, len(area), 1, 0, 0) == [Record((0, 0, None, b"v", ()))]


nullable_bytes = st.none() | st.binary(max_size=300)
records_strategy = st.lists(
    st.tuples(
        st.integers(min_value=-(1 << 40), max_value=1 << 40),
        nullable_bytes,
        nullable_bytes,
        st.lists(st.tuples(st.text(max_size=5), nullable_bytes), max_size=3),
    ),
    max_size=20,
)


@given(records_strategy)
def test_encode_then_decode_gives_back_every_field(fields):
    area = b"".join(encode_record(delta, ts, key, value, headers) for delta, (ts, key, value, headers) in enumerate(fields))
    decoded = decode(area, len(fields), base_offset=0, base_timestamp=0)
    assert decoded == [(delta, ts, key, value, tuple(headers)) for delta, (ts, key, value, headers) in enumerate(fields)]
