from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog_server.rpc import conversions
from seglog_server.rpc.log_dir_names import LogDirNames
from seglog_server.rpc.errors import (
    InvalidRequestError,
    ResponseTooLargeError,
    StoredBatchCorruptError,
)
from seglog_server.storage.base.log_config import LogConfig


@dataclass(frozen=True)
class FetchData:  # the storage's FetchData shape (contract C)
    records: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


def _batch(base_offset, values, timestamp_ms=1_700_000_000_000):
    builder = codec.RecordBatchBuilder(base_offset=base_offset)
    for index, value in enumerate(values):
        builder.append(value, key=b"k%d" % index, timestamp_ms=timestamp_ms + index)
    return builder.build()


def test_plain_records_build_one_batch_with_nulls_headers_and_timestamps():
    plain = [
        pb.PlainRecord(key=b"a", value=b"1", timestamp_ms=1000,
                       headers=[pb.RecordHeader(key="h", value=b"x"), pb.RecordHeader(key="n")]),
        pb.PlainRecord(value=b"2", timestamp_ms=1001),  # null key
        pb.PlainRecord(key=b"c", timestamp_ms=1002),  # null value: a tombstone
    ]
    batch_bytes = conversions.batch_from_plain_records(plain, codec.Compression.NONE)
    batches = list(codec.iter_batches(batch_bytes))
    assert len(batches) == 1 and batches[0].base_offset == 0
    batches[0].ensure_valid()
    records = list(batches[0].records())
    assert [(r.offset, r.timestamp_ms, r.key, r.value) for r in records] == [
        (0, 1000, b"a", b"1"), (1, 1001, None, b"2"), (2, 1002, b"c", None)]
    assert records[0].headers == (("h", b"x"), ("n", None))


def test_plain_record_timestamp_zero_means_now():
    batch_bytes = conversions.batch_from_plain_records(
        [pb.PlainRecord(value=b"v")], codec.Compression.NONE)
    (record,) = next(codec.iter_batches(batch_bytes)).records()
    assert record.timestamp_ms > 1_600_000_000_000


def test_no_plain_records_is_an_invalid_request():
    with pytest.raises(InvalidRequestError, match="no records"):
        conversions.batch_from_plain_records([], codec.Compression.NONE)


def test_unknown_compression_is_an_invalid_request():
    assert conversions.compression_from_proto(pb.COMPRESSION_ZSTD) is codec.Compression.ZSTD
    with pytest.raises(InvalidRequestError, match="compression 9"):
        conversions.compression_from_proto(9)


def test_next_offset_is_one_past_the_last_whole_batch():
    records = _batch(10, [b"a", b"b"]) + _batch(12, [b"c", b"d", b"e"])
    assert conversions.next_offset_after(records, default=10) == 15


def test_next_offset_ignores_a_partial_trailing_batch():
    first = _batch(10, [b"a", b"b"])
    records = first + _batch(12, [b"c"])[:-3]
    assert conversions.next_offset_after(records, default=10) == 12


def test_next_offset_of_no_records_is_the_default():
    assert conversions.next_offset_after(b"", default=42) == 42


def test_fetch_response_wire_parses_as_the_message_protobuf_would_build():
    records = _batch(5, [b"x", b"y"])
    data = FetchData(records, high_watermark=7, log_start_offset=0, log_end_offset=7)
    wire, next_offset = conversions.fetch_response_wire("t", 3, 6, data)
    expected = pb.FetchResponse(records=records, high_watermark=7, log_start_offset=0,
                                log_end_offset=7, next_offset=7, topic="t", partition=3)
    assert pb.FetchResponse.FromString(wire) == expected
    assert next_offset == 7


@pytest.mark.parametrize("size", [0, 1, 127, 128, 300, 16_384, 3_000_000])
def test_fetch_response_wire_length_prefix_is_right_at_every_varint_width(size):
    data = FetchData(b"r" * size, high_watermark=1, log_start_offset=0, log_end_offset=1)
    wire, _ = conversions.fetch_response_wire("t", 0, 0, data)
    assert pb.FetchResponse.FromString(wire).records == b"r" * size


def test_fetch_response_wire_of_no_records_keeps_the_requested_offset():
    data = FetchData(b"", high_watermark=4, log_start_offset=0, log_end_offset=4)
    wire, next_offset = conversions.fetch_response_wire("t", 0, 4, data)
    response = pb.FetchResponse.FromString(wire)
    assert (response.records, response.next_offset, next_offset) == (b"", 4, 4)


def test_fetch_response_wire_carries_decoded_records_and_trimmed_records():
    records = _batch(0, [b"a"]) + _batch(1, [b"b"])
    data = FetchData(records, high_watermark=2, log_start_offset=0, log_end_offset=2)
    kept = len(_batch(0, [b"a"]))
    decoded = [pb.DecodedRecord(offset=0, value=b"a")]
    wire, next_offset = conversions.fetch_response_wire(
        "t", 0, 0, data, memoryview(records)[:kept], decoded)
    response = pb.FetchResponse.FromString(wire)
    assert response.records == records[:kept]
    assert list(response.decoded_records) == decoded
    assert next_offset == response.next_offset == 1


def test_decode_skips_records_before_the_requested_offset():
    records = _batch(5, [b"x", b"y", b"z"])
    decoded, kept = conversions.decode_batches(records, from_offset=6, budget_bytes=1 << 20)
    assert [(d.offset, d.value, d.key) for d in decoded] == [(6, b"y", b"k1"), (7, b"z", b"k2")]
    assert kept == len(records)


def test_decode_keeps_whole_batches_within_the_budget():
    first = _batch(0, [b"a" * 100])
    records = first + _batch(1, [b"b" * 100])
    budget = 2 * len(first) + 100 + conversions.DECODED_RECORD_OVERHEAD_BYTES + 10
    decoded, kept = conversions.decode_batches(records, from_offset=0, budget_bytes=budget)
    assert [d.offset for d in decoded] == [0]
    assert kept == len(first)


def test_decode_of_a_first_batch_above_the_budget_is_refused():
    with pytest.raises(ResponseTooLargeError, match="without decode"):
        conversions.decode_batches(_batch(0, [b"a" * 1000]), from_offset=0, budget_bytes=500)


def test_decode_of_a_stored_batch_with_a_bad_crc_is_data_loss():
    records = bytearray(_batch(0, [b"hello"]))
    records[-1] ^= 0xFF
    with pytest.raises(StoredBatchCorruptError, match="decode"):
        conversions.decode_batches(bytes(records), from_offset=0, budget_bytes=1 << 20)


def test_decoded_null_key_and_value_stay_unset():
    builder = codec.RecordBatchBuilder()
    builder.append(None, key=None, timestamp_ms=5)
    decoded, _ = conversions.decode_batches(builder.build(), from_offset=0, budget_bytes=1 << 20)
    assert not decoded[0].HasField("key") and not decoded[0].HasField("value")


@dataclass(frozen=True)
class TimestampAndOffset:
    timestamp_ms: int
    offset: int


def test_partition_offset_found_and_not_found():
    results = pb.OffsetsForTimesResponse().results
    conversions.add_partition_offset(results, "t", 0, TimestampAndOffset(1234, 17))
    conversions.add_partition_offset(results, "t", 1, None)
    found, none = results
    assert (found.offset, found.timestamp_ms) == (17, 1234)
    assert (none.topic, none.partition, none.offset, none.timestamp_ms) == ("t", 1, -1, -1)


def test_admin_responses_carry_every_config_by_kafkas_names():
    config = LogConfig(retention_ms=5)
    created = conversions.create_topic_response("t", 2, config)
    assert created.configs["retention.ms"] == "5"
    assert set(created.configs) == set(LogConfig.known_names())
    listed = conversions.list_topics_response([("a", 1), ("b", 3)])
    assert [(t.topic, t.partitions) for t in listed.topics] == [("a", 1), ("b", 3)]


def test_describe_repeats_the_topic_configs_per_partition():
    @dataclass(frozen=True)
    class Partition:
        partition: int
        log_start_offset: int
        log_end_offset: int
        high_watermark: int
        size_bytes: int
        segment_count: int
        log_dir: str
        local_log_start_offset: int
        remote_segment_count: int
        remote_size_bytes: int

    @dataclass(frozen=True)
    class Description:
        topic: str
        config: LogConfig
        partitions: list
        offline_partitions: dict

    description = Description(
        "t", LogConfig(), [Partition(0, 1, 9, 9, 500, 2, "/srv/d", 5, 3, 700)], {1: "log dir /e is offline"}
    )
    response = conversions.describe_topic_response(description, LogDirNames(["/srv/d"]).label)
    # The offline partition is absent from partitions but counted in partition_count.
    assert response.partition_count == 2
    (partition,) = response.partitions
    assert (partition.log_start_offset, partition.log_end_offset, partition.size_bytes) == (1, 9, 500)
    assert partition.log_dir == "log dir #0 (d)" and partition.segment_count == 2
    # Tiered storage's extents: the local ones are segment_count and size_bytes again.
    assert (partition.local_log_start_offset, partition.local_segment_count, partition.local_size_bytes,
            partition.remote_segment_count, partition.remote_size_bytes) == (5, 2, 500, 3, 700)
    assert dict(partition.configs) == dict(response.configs) == LogConfig().to_properties()


@given(counts=st.lists(st.integers(min_value=1, max_value=5), max_size=8),
       cut=st.integers(min_value=0, max_value=400))
def test_next_offset_agrees_with_the_codecs_batch_walk(counts, cut):
    records, base = b"", 0
    for count in counts:
        records += _batch(base, [b"v"] * count)
        base += count
    truncated = records[: max(0, len(records) - cut)]
    whole = list(codec.iter_batches(truncated))
    expected = whole[-1].next_offset if whole else -7
    assert conversions.next_offset_after(truncated, default=-7) == expected


_INT64 = st.one_of(st.sampled_from([0, -1, -2, -5, 2**63 - 1, -(2**63)]),
                   st.integers(-(2**63), 2**63 - 1))


@given(st.lists(st.builds(
    pb.PlainRecord,
    key=st.one_of(st.none(), st.binary(max_size=20)),
    value=st.one_of(st.none(), st.binary(max_size=20)),
    timestamp_ms=_INT64,
    headers=st.lists(st.builds(pb.RecordHeader, key=st.text(max_size=10),
                               value=st.one_of(st.none(), st.binary(max_size=10))), max_size=2),
), max_size=5), st.sampled_from(list(codec.Compression)))
def test_plain_records_become_a_batch_or_an_invalid_request_never_anything_else(plain, compression):
    try:
        batch = conversions.batch_from_plain_records(plain, compression)
    except InvalidRequestError as exc:
        assert "plain_records" in str(exc) or "no records" in str(exc)
        return
    [decoded] = list(codec.iter_batches(batch))
    decoded.ensure_valid()
    assert [r.value for r in decoded.records()] == [
        p.value if p.HasField("value") else None for p in plain]
