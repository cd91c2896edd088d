"""RecordBatchBuilder: Kafka's bytes exactly, round trips through every codec, edge records,
argument checks, and a property test over arbitrary records."""

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.records import (
    Compression,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    UnsupportedCompressionError,
)

from records_test_support import ONE_RECORD_BATCH, TIMESTAMP_MS, TWO_RECORD_BATCH


def build(records, **kwargs) -> RecordBatch:
    builder = RecordBatchBuilder(**kwargs)
    for fields in records:
        builder.append(**fields)
    batch = RecordBatch(builder.build())
    batch.ensure_valid()
    return batch


def test_builds_the_one_record_golden_batch_byte_for_byte():
    builder = RecordBatchBuilder(partition_leader_epoch=0)
    assert builder.append(b"test", timestamp_ms=TIMESTAMP_MS) == 0
    assert builder.build() == ONE_RECORD_BATCH


def test_builds_the_two_record_golden_batch_byte_for_byte():
    builder = RecordBatchBuilder(base_offset=100, partition_leader_epoch=0)
    assert builder.append(b"v1", b"k1", TIMESTAMP_MS) == 0
    assert builder.append(b"v2", b"k2", TIMESTAMP_MS + 5, [("h", b"x")]) == 1
    assert builder.build() == TWO_RECORD_BATCH


def test_append_returns_consecutive_offset_deltas_and_counts():
    builder = RecordBatchBuilder()
    assert [builder.append(b"v", timestamp_ms=1) for _ in range(3)] == [0, 1, 2]
    assert builder.record_count == 3


def test_estimated_size_is_the_exact_uncompressed_size():
    builder = RecordBatchBuilder()
    assert builder.estimated_size_in_bytes == 61
    builder.append(b"v" * 100, b"k" * 16, TIMESTAMP_MS)
    builder.append(b"w", None, TIMESTAMP_MS, [("h", None)])
    assert builder.estimated_size_in_bytes == len(builder.build())


def test_estimated_size_of_a_compressed_builder_is_its_uncompressed_size():
    builder = RecordBatchBuilder(compression=Compression.GZIP)
    builder.append(b"v" * 1000, timestamp_ms=1)
    assert len(builder.build()) < builder.estimated_size_in_bytes == 61 + 1 + 1 + 1 + 1 + 1 + 2 + 1000 + 1 + 1


def test_timestamp_defaults_to_the_wall_clock():
    before = time.time_ns() // 1_000_000
    batch = build([{"value": b"v"}])
    after = time.time_ns() // 1_000_000
    assert before <= batch.records()[0].timestamp_ms <= after


def test_base_timestamp_is_the_first_records_and_max_timestamp_the_largest():
    batch = build([{"value": b"a", "timestamp_ms": 500}, {"value": b"b", "timestamp_ms": 900}, {"value": b"c", "timestamp_ms": 100}])
    assert (batch.base_timestamp, batch.max_timestamp) == (500, 900)
    assert [r.timestamp_ms for r in batch.records()] == [500, 900, 100]


def test_records_without_timestamps_keep_no_timestamp():
    batch = build([{"value": b"a", "timestamp_ms": -1}, {"value": b"b", "timestamp_ms": -1}])
    assert batch.max_timestamp == -1 and [r.timestamp_ms for r in batch.records()] == [-1, -1]


ALL_CODECS = list(Compression)
EDGE_RECORDS = [
    {"value": b"plain", "key": b"key", "timestamp_ms": TIMESTAMP_MS},
    {"value": b"null key", "key": None, "timestamp_ms": TIMESTAMP_MS + 1},
    {"value": None, "key": b"tombstone", "timestamp_ms": TIMESTAMP_MS + 2},
    {"value": None, "key": None, "timestamp_ms": TIMESTAMP_MS + 3},
    {"value": b"", "key": b"", "timestamp_ms": TIMESTAMP_MS + 4},
    {"value": b"h", "key": b"k", "timestamp_ms": TIMESTAMP_MS + 5, "headers": [("a", b"1"), ("null", None), ("", b""), ("ü", b"\x00")]},
    {"value": bytes(range(256)) * 4096, "key": b"large", "timestamp_ms": TIMESTAMP_MS + 6},
    {"value": b"earlier", "timestamp_ms": TIMESTAMP_MS - 10_000},
    {"value": b"much later", "timestamp_ms": TIMESTAMP_MS + (1 << 33)},
    {"value": bytearray(b"bytearray"), "key": memoryview(b"memoryview"), "timestamp_ms": TIMESTAMP_MS + 7},
]


def expected(records, base_offset=0):
    return [
        Record((base_offset + delta, r["timestamp_ms"], None if r.get("key") is None else bytes(r["key"]), None if r["value"] is None else bytes(r["value"]), tuple(r.get("headers", ()))))
        for delta, r in enumerate(records)
    ]


@pytest.mark.parametrize("compression", ALL_CODECS)
def test_edge_records_round_trip_through_every_codec(compression):
    batch = build(EDGE_RECORDS, compression=compression, base_offset=1000)
    assert batch.compression is compression
    assert batch.records() == expected(EDGE_RECORDS, base_offset=1000)


@pytest.mark.parametrize("compression", [c for c in ALL_CODECS if c != Compression.NONE])
def test_compressed_batches_are_smaller_for_compressible_records(compression):
    records = [{"value": b"the same value again " * 5, "timestamp_ms": TIMESTAMP_MS} for _ in range(100)]
    assert build(records, compression=compression).size_in_bytes < build(records).size_in_bytes / 3


@pytest.mark.parametrize("compression", ALL_CODECS)
def test_many_records_round_trip_with_two_byte_offset_deltas(compression):
    records = [{"value": b"v%d" % i, "key": b"k%d" % i, "timestamp_ms": TIMESTAMP_MS + i // 10} for i in range(10_000)]
    batch = build(records, compression=compression)
    assert batch.last_offset_delta == 9999 and batch.records_count == 10_000
    assert batch.records() == expected(records)


@pytest.mark.parametrize("compression", ALL_CODECS)
def test_log_append_time_control_and_transactional_flags_round_trip(compression):
    records = [{"value": b"\x00\x00\x00\x00\x00\x07", "key": b"\x00\x00\x00\x01", "timestamp_ms": 5}, {"value": b"x", "timestamp_ms": 9}]
    batch = build(
        records,
        compression=compression,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        is_control=True,
        is_transactional=True,
        producer_id=42,
        producer_epoch=1,
        base_sequence=0,
    )
    assert batch.is_control and batch.is_transactional and batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp_ms for r in batch.records()] == [9, 9]
    assert batch.records()[0].key == b"\x00\x00\x00\x01"


def test_delete_horizon_takes_the_base_timestamp_and_records_keep_their_timestamps():
    horizon = TIMESTAMP_MS + 86_400_000
    batch = build([{"value": b"a", "timestamp_ms": TIMESTAMP_MS}, {"value": None, "key": b"k", "timestamp_ms": TIMESTAMP_MS + 9}], delete_horizon_ms=horizon)
    assert batch.delete_horizon_ms == horizon == batch.base_timestamp
    assert batch.attributes & 0x40
    assert [r.timestamp_ms for r in batch.records()] == [TIMESTAMP_MS, TIMESTAMP_MS + 9]
    assert batch.max_timestamp == TIMESTAMP_MS + 9


def test_producer_fields_are_written_as_given():
    batch = build([{"value": b"v", "timestamp_ms": 1}], producer_id=-1, producer_epoch=3, base_sequence=-1)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, 3, -1)


def test_build_twice_gives_the_same_bytes():
    builder = RecordBatchBuilder(compression=Compression.ZSTD)
    builder.append(b"v", timestamp_ms=1)
    assert builder.build() == builder.build()


# -- argument checks --------------------------------------------------------------------------


def test_build_without_records_is_refused():
    with pytest.raises(ValueError, match="a record batch needs at least one record: expected an append\\(\\) before build\\(\\), found none"):
        RecordBatchBuilder().build()


def test_unknown_compression_is_unsupported():
    with pytest.raises(UnsupportedCompressionError, match="found 7"):
        RecordBatchBuilder(compression=7)


@pytest.mark.parametrize("timestamp", [-2, -1000])
def test_timestamp_below_minus_one_is_refused(timestamp):
    builder = RecordBatchBuilder()
    with pytest.raises(ValueError, match=f"timestamp_ms must be >= 0 or -1 \\(no timestamp\\), found {timestamp}"):
        builder.append(b"v", timestamp_ms=timestamp)
    builder.append(b"v", timestamp_ms=10)
    with pytest.raises(ValueError, match=f"found {timestamp}"):
        builder.append(b"v", timestamp_ms=timestamp)
    assert builder.record_count == 1


@pytest.mark.parametrize("timestamp", [1.5, "10"])
def test_timestamp_that_is_not_an_int_is_refused(timestamp):
    builder = RecordBatchBuilder()
    builder.append(b"v", timestamp_ms=10)
    with pytest.raises(TypeError, match="timestamp_ms must be an int"):
        builder.append(b"v", timestamp_ms=timestamp)


@pytest.mark.parametrize(("field", "bad"), [("value", "text"), ("key", 12)])
def test_key_and_value_must_be_bytes_like(field, bad):
    builder = RecordBatchBuilder()
    with pytest.raises(TypeError, match=f"{field} must be bytes, bytearray, memoryview or None, found {type(bad).__name__}"):
        builder.append(**{"value": b"v", "timestamp_ms": 1, field: bad})
    assert builder.record_count == 0 and builder.estimated_size_in_bytes == 61


def test_a_refused_record_leaves_the_builder_as_it_was():
    builder = RecordBatchBuilder()
    builder.append(b"a", timestamp_ms=5)
    size = builder.estimated_size_in_bytes
    with pytest.raises(TypeError):
        builder.append("not bytes", timestamp_ms=7)
    builder.append(b"b", timestamp_ms=6)
    batch = RecordBatch(builder.build())
    assert builder.estimated_size_in_bytes > size and batch.max_timestamp == 6
    assert [r.value for r in batch.records()] == [b"a", b"b"]


def test_a_refused_first_record_does_not_fix_the_base_timestamp():
    builder = RecordBatchBuilder()
    with pytest.raises(TypeError):
        builder.append(object(), timestamp_ms=5)
    builder.append(b"v", timestamp_ms=70)
    assert RecordBatch(builder.build()).base_timestamp == 70


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("base_offset", 1 << 63, "base_offset must be in"),
        ("partition_leader_epoch", 1 << 31, "partition_leader_epoch must be in"),
        ("producer_id", -(1 << 63) - 1, "producer_id must be in"),
        ("producer_epoch", 1 << 15, "producer_epoch must be in \\[-32768, 32767\\], found 32768"),
        ("base_sequence", 1 << 31, "base_sequence must be in"),
        ("delete_horizon_ms", -5, "delete_horizon_ms must be in \\[0, "),
    ],
)
def test_header_fields_out_of_range_are_refused(name, value, message):
    with pytest.raises(ValueError, match=message):
        RecordBatchBuilder(**{name: value})


def test_timestamp_type_must_be_known():
    with pytest.raises(ValueError):
        RecordBatchBuilder(timestamp_type=2)


def test_the_builder_copies_mutable_values():
    value = bytearray(b"before")
    builder = RecordBatchBuilder()
    builder.append(value, timestamp_ms=1)
    value[:] = b"after!"
    assert RecordBatch(builder.build()).records()[0].value == b"before"


# -- property: any records survive a build and a read, through any codec ---------------------

nullable_bytes = st.none() | st.binary(max_size=200)
timestamps = st.integers(min_value=-1, max_value=(1 << 62))
record_fields = st.fixed_dictionaries(
    {"value": nullable_bytes, "key": nullable_bytes, "timestamp_ms": timestamps},
    optional={"headers": st.lists(st.tuples(st.text(max_size=8), nullable_bytes), max_size=3)},
)


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(record_fields, min_size=1, max_size=30),
    compression=st.sampled_from(ALL_CODECS),
    base_offset=st.integers(min_value=0, max_value=(1 << 62)),
)
def test_any_records_round_trip(records, compression, base_offset):
    batch = build(records, compression=compression, base_offset=base_offset)
    assert batch.records() == expected(records, base_offset=base_offset)
    assert batch.max_timestamp == max(r["timestamp_ms"] for r in records)
    assert batch.base_timestamp == records[0]["timestamp_ms"]


_PRODUCER_FIELDS = {"producer_id": 7, "producer_epoch": 1, "base_sequence": 3}


@pytest.mark.parametrize(
    ("name", "value", "error", "message"),
    [
        ("producer_id", 1 << 63, ValueError, "producer_id must be in"),
        ("producer_epoch", -(1 << 15) - 1, ValueError, "producer_epoch must be in"),
        ("base_sequence", 1 << 31, ValueError, "base_sequence must be in"),
        ("producer_epoch", True, TypeError, "producer_epoch must be an int, found bool"),
        ("base_sequence", 3.0, TypeError, "base_sequence must be an int, found float"),
    ],
)
def test_producer_fields_given_later_are_checked_as_the_constructor_checks_them(name, value, error, message):
    """The constructor, set_producer and a sealed batch's build test the common case in one
    expression; a field out of range or of another type is named as each field's own check names it."""
    with pytest.raises(error, match=message):
        RecordBatchBuilder(**{**_PRODUCER_FIELDS, name: value})
    builder = RecordBatchBuilder()
    builder.append(b"v", timestamp_ms=1)
    with pytest.raises(error, match=message):
        builder.set_producer(**{**_PRODUCER_FIELDS, name: value})
    with pytest.raises(error, match=message):
        builder.seal().build(**{**_PRODUCER_FIELDS, name: value})
    builder.set_producer(**_PRODUCER_FIELDS)
    assert RecordBatch(builder.build()).producer_id == 7


@pytest.mark.parametrize(("name", "value"), [("base_offset", 1.5), ("partition_leader_epoch", False)])
def test_header_fields_of_another_type_are_refused(name, value):
    with pytest.raises(TypeError, match=f"{name} must be an int"):
        RecordBatchBuilder(**{name: value})
