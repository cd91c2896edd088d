"""Every client error class, raised by a situation that calls for it.

Most come from the real service. The service has no authentication and never answers
UNAUTHENTICATED, PERMISSION_DENIED, FAILED_PRECONDITION (a relative-offset overflow needs a 2 GiB
segment) or UNIMPLEMENTED on the calls the client makes; those come from a small gRPC server
standing where an auth gateway or an older service would, answering every call with one status.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import grpc
import pytest

from seglog import (
    Admin,
    AuthenticationError,
    AuthorizationError,
    ClientClosedError,
    Consumer,
    CorruptRecordError,
    FailedPreconditionError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    Producer,
    RecordTooLargeError,
    RequestTimeoutError,
    SeglogError,
    ServiceError,
    ServiceUnavailableError,
    TopicExistsError,
    TopicNotFoundError,
)
from seglog.records import CRC_OFFSET, RecordBatchBuilder

pytestmark = pytest.mark.integration


def test_unknown_topic_is_topic_not_found(seglog_service):
    with Admin(seglog_service.address) as admin, pytest.raises(TopicNotFoundError) as caught:
        admin.describe_topic("no-such-topic")
    assert caught.value.code is grpc.StatusCode.NOT_FOUND and "no-such-topic" in caught.value.message
    assert isinstance(caught.value.__cause__, grpc.RpcError)


def test_sending_to_an_unknown_topic_fails_the_send(seglog_service):
    with Producer(seglog_service.address) as producer:
        with pytest.raises(TopicNotFoundError):
            producer.send("no-such-topic", b"x")  # needs the partition count
        future = producer.send("no-such-topic", b"x", partition=0)
        with pytest.raises(TopicNotFoundError):
            future.result()


def test_unknown_partition_is_topic_not_found(seglog_service, make_topic):
    topic = make_topic(partitions=1)
    with Producer(seglog_service.address) as producer, pytest.raises(TopicNotFoundError):
        producer.send(topic, b"x", partition=5).result()


def test_creating_an_existing_topic_is_topic_exists(seglog_service, make_topic):
    topic = make_topic()
    with Admin(seglog_service.address) as admin, pytest.raises(TopicExistsError):
        admin.create_topic(topic)


@pytest.mark.parametrize(
    ("name", "partitions", "configs"),
    [("bad/name", 1, {}), ("ok-name", 0, {}), ("ok-name", 1, {"no.such.config": "1"}), ("ok-name", 1, {"retention.ms": "x"})],
    ids=["bad-name", "zero-partitions", "unknown-config", "bad-config-value"],
)
def test_invalid_create_requests_are_invalid_request(seglog_service, name, partitions, configs):
    with Admin(seglog_service.address) as admin, pytest.raises(InvalidRequestError) as caught:
        admin.create_topic(name, partitions, configs)
    assert caught.value.code is grpc.StatusCode.INVALID_ARGUMENT


def test_reading_past_the_log_end_is_offset_out_of_range(seglog_service, make_topic):
    topic = make_topic()
    with Consumer(seglog_service.address, topic, 0, start=10) as consumer:
        with pytest.raises(OffsetOutOfRangeError):
            consumer.poll(timeout_ms=5000)


@pytest.mark.parametrize("mode", ["fetch", "stream"])
def test_a_position_below_the_log_start_is_offset_out_of_range(seglog_service, make_topic, mode):
    from seglog import TopicPartition

    topic = make_topic()
    with Producer(seglog_service.address) as producer:
        for _ in range(3):
            producer.send(topic, b"r", partition=0).result()
    with Admin(seglog_service.address) as admin:
        admin.delete_records({TopicPartition(topic, 0): 2})
    with Consumer(seglog_service.address, topic, 0, start=0, mode=mode) as consumer:
        with pytest.raises(OffsetOutOfRangeError):
            consumer.poll(timeout_ms=5000)


def test_deleting_records_past_the_high_watermark_is_offset_out_of_range(seglog_service, make_topic):
    from seglog import TopicPartition

    topic = make_topic()
    with Admin(seglog_service.address) as admin, pytest.raises(OffsetOutOfRangeError):
        admin.delete_records({TopicPartition(topic, 0): 10})


def test_a_batch_with_a_bad_crc_is_corrupt_record(seglog_service, make_topic):
    topic = make_topic()
    builder = RecordBatchBuilder()
    builder.append(b"payload", timestamp_ms=1)
    batch = bytearray(builder.build())
    batch[CRC_OFFSET] ^= 0xFF
    with Producer(seglog_service.address) as producer, pytest.raises(CorruptRecordError) as caught:
        producer.send_batch(topic, 0, bytes(batch))
    assert caught.value.code is grpc.StatusCode.DATA_LOSS


def test_a_record_above_max_message_bytes_is_record_too_large(seglog_service, make_topic):
    topic = make_topic(configs={"max.message.bytes": "1000"})
    with Producer(seglog_service.address) as producer, pytest.raises(RecordTooLargeError) as caught:
        producer.send(topic, b"x" * 5000, partition=0).result()
    assert caught.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert caught.value.service_error == "RecordTooLargeError"


def test_a_record_above_the_producers_request_limit_fails_before_sending(seglog_service, make_topic):
    topic = make_topic()
    with Producer(seglog_service.address, max_request_bytes=10_000) as producer:
        with pytest.raises(RecordTooLargeError) as caught:
            producer.send(topic, b"x" * 20_000, partition=0)
        assert caught.value.code is None
        assert producer.statistics().batches_sent == 0


def test_nothing_listening_is_service_unavailable():
    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        address = "127.0.0.1:%d" % probe.getsockname()[1]
    with Admin(address) as admin, pytest.raises(ServiceUnavailableError) as caught:
        admin.list_topics()
    assert caught.value.retriable


@pytest.fixture
def silent_address() -> Iterator[str]:
    """A port that accepts TCP connections (the kernel does) but never speaks HTTP/2."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield "127.0.0.1:%d" % listener.getsockname()[1]


def test_a_service_that_never_answers_is_request_timeout(silent_address):
    with Admin(silent_address, request_timeout_ms=300) as admin, pytest.raises(RequestTimeoutError) as caught:
        admin.list_topics()
    assert caught.value.code is grpc.StatusCode.DEADLINE_EXCEEDED
    assert isinstance(caught.value, TimeoutError) and caught.value.retriable


def test_flush_that_cannot_finish_in_time_is_request_timeout(silent_address):
    with Producer(silent_address, request_timeout_ms=5_000) as producer:
        producer.send("t", b"x", partition=0)
        with pytest.raises(RequestTimeoutError):
            producer.flush(timeout_ms=200)
        producer.close(timeout_ms=0)


def test_using_a_closed_client_is_client_closed(seglog_service, make_topic):
    topic = make_topic()
    producer = Producer(seglog_service.address)
    producer.close()
    with pytest.raises(ClientClosedError):
        producer.send(topic, b"x", partition=0)


# -- statuses the service itself never sends on these calls ---------------------------------------


@pytest.fixture
def answering_with():
    """Start a gRPC server that answers every call with one status: answering_with(code) -> address."""
    servers: list[grpc.Server] = []

    def start(code: grpc.StatusCode) -> str:
        def deny(request: bytes, context: grpc.ServicerContext) -> bytes:
            context.abort(code, f"gateway says {code.name}")

        class Handler(grpc.GenericRpcHandler):
            def service(self, details):
                return grpc.unary_unary_rpc_method_handler(deny)

        from concurrent.futures import ThreadPoolExecutor

        server = grpc.server(ThreadPoolExecutor(max_workers=2), handlers=[Handler()])
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(grace=None)


@pytest.mark.parametrize(
    ("code", "error_class"),
    [
        (grpc.StatusCode.UNAUTHENTICATED, AuthenticationError),
        (grpc.StatusCode.PERMISSION_DENIED, AuthorizationError),
        (grpc.StatusCode.FAILED_PRECONDITION, FailedPreconditionError),
        (grpc.StatusCode.UNIMPLEMENTED, ServiceError),
        (grpc.StatusCode.INTERNAL, ServiceError),
    ],
    ids=lambda v: getattr(v, "name", getattr(v, "__name__", str(v))),
)
def test_gateway_statuses_become_their_error_classes(answering_with, code, error_class):
    with Admin(answering_with(code)) as admin, pytest.raises(error_class) as caught:
        admin.list_topics()
    assert type(caught.value) is error_class and isinstance(caught.value, SeglogError)
    assert caught.value.code is code and caught.value.message == f"gateway says {code.name}"
