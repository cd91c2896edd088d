import grpc
import pytest
from tests.support.integration_helpers import assert_serving, error_class, make_batch, records_of, rpc_error

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration
Code = grpc.StatusCode


def test_produce_a_batch_then_fetch_it_back_byte_for_byte(stub, topic):
    batch = make_batch([b"a", b"b", b"c"], keys=[b"1", b"2", b"3"])
    first = stub.Produce(pb.ProduceRequest(topic=topic, records=batch))
    assert (first.base_offset, first.last_offset, first.log_append_time_ms) == (0, 2, -1)
    second = stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"d"])))
    assert (second.base_offset, second.last_offset) == (3, 3)

    fetched = stub.Fetch(pb.FetchRequest(topic=topic, offset=0))
    assert fetched.records[codec.LOG_OVERHEAD:len(batch)] == batch[codec.LOG_OVERHEAD:]
    assert [(r.offset, r.key, r.value) for r in records_of(fetched)] == [
        (0, b"1", b"a"), (1, b"2", b"b"), (2, b"3", b"c"), (3, None, b"d")]
    assert (fetched.next_offset, fetched.high_watermark, fetched.log_end_offset) == (4, 4, 4)
    assert (fetched.topic, fetched.partition, fetched.log_start_offset) == (topic, 0, 0)


def test_fetch_from_the_middle_of_a_batch_starts_with_the_whole_batch(stub, topic):
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"a", b"b", b"c"])))
    fetched = stub.Fetch(pb.FetchRequest(topic=topic, offset=1, decode=True))
    assert [r.offset for r in records_of(fetched)] == [0, 1, 2]
    assert [r.offset for r in fetched.decoded_records] == [1, 2]  # decoded: from the offset on
    assert fetched.next_offset == 3


def test_fetch_max_bytes_bounds_the_response_but_returns_at_least_one_batch(stub, topic):
    for index in range(5):
        stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"x" * 1000] * 2)))
    one = stub.Fetch(pb.FetchRequest(topic=topic, offset=0, max_bytes=10))
    assert [r.offset for r in records_of(one)] == [0, 1]
    assert one.next_offset == 2
    three = stub.Fetch(pb.FetchRequest(topic=topic, offset=2, max_bytes=3 * 2100))
    assert len(records_of(three)) in (4, 6)  # whole batches only, within 6300 bytes
    assert three.next_offset == 2 + len(records_of(three))


def test_fetch_reads_one_segment_at_a_time_and_next_offset_crosses_to_the_next(stub, topic):
    # Timestamps 7+ days apart roll a segment (segment.ms); like Kafka, one read stays in one
    # segment, and next_offset leads the reader into the next one.
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"old"], timestamps=[10])))
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"new"])))
    first = stub.Fetch(pb.FetchRequest(topic=topic, offset=0))
    assert [r.value for r in records_of(first)] == [b"old"]
    second = stub.Fetch(pb.FetchRequest(topic=topic, offset=first.next_offset))
    assert [r.value for r in records_of(second)] == [b"new"]
    assert second.next_offset == second.log_end_offset == 2


def test_fetch_at_the_log_end_is_empty_with_the_same_next_offset(stub, topic):
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"a"])))
    fetched = stub.Fetch(pb.FetchRequest(topic=topic, offset=1))
    assert fetched.records == b""
    assert fetched.next_offset == 1


def test_plain_records_with_nulls_headers_and_compression_decode_back(stub, topic):
    produced = stub.Produce(pb.ProduceRequest(
        topic=topic,
        plain_records=[
            pb.PlainRecord(key=b"k", value=b"v", timestamp_ms=1_700_000_000_000,
                           headers=[pb.RecordHeader(key="trace", value=b"7")]),
            pb.PlainRecord(key=b"gone"),  # a tombstone
        ],
        compression=pb.COMPRESSION_ZSTD,
    ))
    assert (produced.base_offset, produced.last_offset) == (0, 1)
    fetched = stub.Fetch(pb.FetchRequest(topic=topic, offset=0, decode=True))
    (batch,) = codec.iter_batches(fetched.records)
    assert batch.compression == codec.Compression.ZSTD
    first, second = fetched.decoded_records
    assert (first.key, first.value, first.timestamp_ms) == (b"k", b"v", 1_700_000_000_000)
    assert [(h.key, h.value) for h in first.headers] == [("trace", b"7")]
    assert second.key == b"gone" and not second.HasField("value")


def test_acks_fsynced_acknowledges_after_the_write(stub, topic):
    response = stub.Produce(pb.ProduceRequest(
        topic=topic, records=make_batch([b"durable"]), acks=pb.ACKS_FSYNCED))
    assert response.base_offset == 0
    assert [r.value for r in records_of(stub.Fetch(pb.FetchRequest(topic=topic)))] == [b"durable"]


def test_flipped_crc_byte_is_data_loss_and_nothing_is_appended(stub, topic):
    batch = bytearray(make_batch([b"payload"]))
    batch[codec.CRC_OFFSET] ^= 0x01
    error = rpc_error(stub.Produce, pb.ProduceRequest(topic=topic, records=bytes(batch)),
                      Code.DATA_LOSS)
    assert "crc" in error.details().lower()
    assert stub.Fetch(pb.FetchRequest(topic=topic)).log_end_offset == 0
    assert_serving(stub)


def test_batch_above_max_message_bytes_is_resource_exhausted(stub):
    stub.CreateTopic(pb.CreateTopicRequest(topic="small-messages", partitions=1,
                                           configs={"max.message.bytes": "1000"}))
    error = rpc_error(stub.Produce, pb.ProduceRequest(
        topic="small-messages", records=make_batch([b"x" * 2000])), Code.RESOURCE_EXHAUSTED)
    assert error_class(error) == "RecordTooLargeError"
    assert_serving(stub)


def test_request_above_the_grpc_limit_is_resource_exhausted(stub, topic):
    huge = make_batch([b"x" * (9 * 1024 * 1024)])  # above request_bytes_max (8 MiB)
    rpc_error(stub.Produce, pb.ProduceRequest(topic=topic, records=huge), Code.RESOURCE_EXHAUSTED)
    assert_serving(stub)


def test_more_than_one_batch_is_invalid_argument(stub, topic):
    two = make_batch([b"a"]) + make_batch([b"b"])
    rpc_error(stub.Produce, pb.ProduceRequest(topic=topic, records=two), Code.INVALID_ARGUMENT)
    assert stub.Fetch(pb.FetchRequest(topic=topic)).log_end_offset == 0
    assert_serving(stub)


def test_garbage_bytes_are_invalid_argument(stub, topic):
    rpc_error(stub.Produce, pb.ProduceRequest(topic=topic, records=b"\x00" * 70),
              Code.INVALID_ARGUMENT)
    assert_serving(stub)


@pytest.mark.parametrize(
    ("request_", "match"),
    [
        (pb.ProduceRequest(topic="", records=b"x"), "topic is empty"),
        (pb.ProduceRequest(topic="t", partition=-1, records=b"x"), "partition"),
        (pb.ProduceRequest(topic="t"), "no records"),
        (pb.ProduceRequest(topic="t", records=b"x", plain_records=[pb.PlainRecord()]), "not both"),
        (pb.ProduceRequest(topic="t", records=b"x", acks=7), "acks"),
    ],
    ids=["empty-topic", "negative-partition", "no-records", "both-forms", "unknown-acks"],
)
def test_bad_produce_request_is_invalid_argument(stub, request_, match):
    rpc_error(stub.Produce, request_, Code.INVALID_ARGUMENT, match)
    assert_serving(stub)


@pytest.mark.parametrize(
    ("fields", "match"),
    [({"max_bytes": -1}, "max_bytes"), ({"max_wait_ms": -5}, "max_wait_ms"),
     ({"min_bytes": -1}, "min_bytes"), ({"partition": -2}, "partition")],
)
def test_bad_fetch_request_is_invalid_argument(stub, topic, fields, match):
    rpc_error(stub.Fetch, pb.FetchRequest(topic=topic, **fields), Code.INVALID_ARGUMENT, match)
    assert_serving(stub)


def test_fetch_outside_the_log_is_out_of_range(stub, topic):
    stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch([b"a", b"b"])))
    error = rpc_error(stub.Fetch, pb.FetchRequest(topic=topic, offset=3), Code.OUT_OF_RANGE)
    assert error_class(error) == "OffsetOutOfRangeError"
    rpc_error(stub.Fetch, pb.FetchRequest(topic=topic, offset=-1), Code.OUT_OF_RANGE)
    assert_serving(stub)
