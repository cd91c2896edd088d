"""Cross-check against kafka-python 3.0.12's independent pure-Python record classes
(kafka.record.default_records / memory_records): batches we build parse there with valid
CRCs and the same fields, and batches it builds parse here, for every codec.

kafka-python needs python-snappy for snappy, which seglog does not install; the autouse
`kp_snappy` fixture gives kafka.codec a two-function stand-in backed by cramjam's raw snappy,
so that kafka-python's own xerial framing and detection code runs against ours.
"""

import types

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kp_codec
from kafka.record.default_records import ControlRecord, DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from seglog.records import Compression, RecordBatch, RecordBatchBuilder, TimestampType, iter_batches

from records_test_support import TIMESTAMP_MS

KP_BATCH_SIZE_MAX = 1 << 30  # kafka-python's builder refuses records past batch_size; ours has no such limit

COMPRESSIBLE = b"a value that compresses well, " * 4
RECORDS = [
    (b"key-0", COMPRESSIBLE, TIMESTAMP_MS, []),
    (None, COMPRESSIBLE + b"null key", TIMESTAMP_MS + 1, []),
    (b"tombstone", None, TIMESTAMP_MS + 2, []),
    (b"", b"", TIMESTAMP_MS + 3, []),
    (b"h", COMPRESSIBLE, TIMESTAMP_MS + 4, [("trace", b"\x01\x02"), ("null", None), ("", b"")]),
    (b"large", bytes(range(256)) * 600, TIMESTAMP_MS + 5, []),
    (b"earlier", COMPRESSIBLE, TIMESTAMP_MS - 100_000, []),
] + [(b"k%d" % i, COMPRESSIBLE + b"%d" % i, TIMESTAMP_MS + i // 7, []) for i in range(200)]


@pytest.fixture(autouse=True)
def kp_snappy(monkeypatch):
    shim = types.SimpleNamespace(
        compress=lambda data: bytes(cramjam.snappy.compress_raw(data)),
        decompress=lambda data: bytes(cramjam.snappy.decompress_raw(bytes(data))),
    )
    monkeypatch.setattr(kp_codec, "snappy", shim)


CODECS = [pytest.param(c, id=c.name.lower()) for c in Compression]


def ours(records, compression, **kwargs) -> bytes:
    builder = RecordBatchBuilder(compression=compression, **kwargs)
    for key, value, timestamp, headers in records:
        builder.append(value, key, timestamp, headers)
    return builder.build()


def theirs(records, compression, *, producer_id=-1, producer_epoch=-1, base_sequence=-1, transactional=False) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(compression),
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=KP_BATCH_SIZE_MAX,
    )
    for offset, (key, value, timestamp, headers) in enumerate(records):
        assert builder.append(offset, timestamp, key, value, headers) is not None
    return bytes(builder.build())


def kp_fields(record):
    return (record.offset, record.timestamp, record.key, record.value, [tuple(h) for h in record.headers])


def our_fields(record):
    return (record.offset, record.timestamp_ms, record.key, record.value, list(record.headers))


@pytest.mark.parametrize("compression", CODECS)
def test_kafka_python_reads_our_batches(compression):
    data = ours(RECORDS, compression, base_offset=0, producer_id=9, producer_epoch=2, base_sequence=40, is_transactional=True)
    (kp_batch,) = list(MemoryRecords(data))
    assert kp_batch.validate_crc()
    assert kp_batch.compression_type == compression
    assert (kp_batch.base_offset, kp_batch.last_offset_delta, kp_batch.records_count) == (0, len(RECORDS) - 1, len(RECORDS))
    assert (kp_batch.first_timestamp, kp_batch.max_timestamp) == (TIMESTAMP_MS, TIMESTAMP_MS + 200 // 7)
    assert (kp_batch.producer_id, kp_batch.producer_epoch, kp_batch.base_sequence) == (9, 2, 40)
    assert kp_batch.is_transactional and not kp_batch.is_control_batch and kp_batch.timestamp_type == 0
    expected = [(offset, ts, key, value, headers) for offset, (key, value, ts, headers) in enumerate(RECORDS)]
    assert [kp_fields(r) for r in kp_batch] == expected


@pytest.mark.parametrize("compression", CODECS)
def test_we_read_kafka_pythons_batches(compression):
    data = theirs(RECORDS, compression, producer_id=9, producer_epoch=2, base_sequence=40, transactional=True)
    batch = RecordBatch(data)
    batch.ensure_valid()
    assert batch.compression is compression
    assert (batch.base_offset, batch.last_offset_delta, batch.records_count) == (0, len(RECORDS) - 1, len(RECORDS))
    assert (batch.base_timestamp, batch.max_timestamp) == (TIMESTAMP_MS, TIMESTAMP_MS + 200 // 7)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional) == (9, 2, 40, True)
    expected = [(offset, ts, key, value, headers) for offset, (key, value, ts, headers) in enumerate(RECORDS)]
    assert [our_fields(r) for r in batch.records()] == expected


def test_uncompressed_batches_are_byte_identical():
    # kafka-python always writes partition leader epoch 0; everything else is the format.
    assert ours(RECORDS, Compression.NONE, partition_leader_epoch=0) == theirs(RECORDS, Compression.NONE)


@pytest.mark.parametrize("compression", CODECS)
def test_both_walk_a_buffer_of_mixed_batches_alike(compression):
    data = b"".join(
        [
            ours(RECORDS[:3], compression, base_offset=0),
            theirs(RECORDS[3:5], compression),
            ours(RECORDS[5:], compression, base_offset=5),
        ]
    )
    kp_batches = list(MemoryRecords(data))
    our_batches = list(iter_batches(data))
    assert [b.base_offset for b in our_batches] == [b.base_offset for b in kp_batches] == [0, 0, 5]
    assert all(b.validate_crc() for b in kp_batches) and all(b.is_valid() for b in our_batches)
    assert [kp_fields(r) for b in kp_batches for r in b] == [our_fields(r) for b in our_batches for r in b.records()]


def test_kafka_python_reads_log_append_time_from_max_timestamp():
    data = ours(RECORDS[:3], Compression.NONE, timestamp_type=TimestampType.LOG_APPEND_TIME)
    (kp_batch,) = list(MemoryRecords(data))
    assert kp_batch.timestamp_type == 1 and kp_batch.validate_crc()
    assert {r.timestamp for r in kp_batch} == {TIMESTAMP_MS + 2}


def test_kafka_python_reads_our_control_batch_as_a_commit_marker():
    commit_key = b"\x00\x00\x00\x01"  # version 0, type 1 (COMMIT)
    marker_value = b"\x00\x00\x00\x00\x00\x05"  # version 0, coordinator epoch 5
    data = ours([(commit_key, marker_value, TIMESTAMP_MS, [])], Compression.NONE, is_control=True, is_transactional=True, producer_id=3, producer_epoch=0)
    (kp_batch,) = list(MemoryRecords(data))
    assert kp_batch.is_control_batch and kp_batch.validate_crc()
    (marker,) = list(kp_batch)
    assert isinstance(marker, ControlRecord) and marker.commit and marker.version == 0


def test_kafka_python_sees_a_bad_crc_where_we_do():
    data = bytearray(ours(RECORDS[:2], Compression.NONE))
    data[-3] ^= 0x10
    assert not DefaultRecordBatch(bytes(data)).validate_crc()
    assert not RecordBatch(data).is_valid()


nullable_bytes = st.none() | st.binary(max_size=100)
any_records = st.lists(
    st.tuples(
        nullable_bytes,
        nullable_bytes,
        st.integers(min_value=0, max_value=1 << 50),
        st.lists(st.tuples(st.text(max_size=5), nullable_bytes), max_size=2),
    ),
    min_size=1,
    max_size=15,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=any_records, compression=st.sampled_from(list(Compression)))
def test_any_records_cross_both_ways(records, compression):
    expected = [(offset, ts, key, value, headers) for offset, (key, value, ts, headers) in enumerate(records)]
    (kp_batch,) = list(MemoryRecords(ours(records, compression)))
    assert kp_batch.validate_crc() and [kp_fields(r) for r in kp_batch] == expected
    batch = RecordBatch(theirs(records, compression))
    batch.ensure_valid()
    assert [our_fields(r) for r in batch.records()] == expected
