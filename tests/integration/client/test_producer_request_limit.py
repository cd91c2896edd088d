"""A batch above the service's request limit (``--request-bytes-max``, announced when a
ProduceStream opens) is split, as one above a topic's limit is: gRPC refuses its message before
the service reads it ("Received message larger than max", RESOURCE_EXHAUSTED), which the sender
treats as a size refusal for a batch alone above the limit, and later batches are split within
the limit before they are sent. A record alone above it fails with RecordTooLargeError, not
retried. On a real service on loopback with a 2 MiB request limit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.integration_helpers import ServiceProcess, count_size_refusals, numbered_values, values_to_end

from seglog import Producer
from seglog.errors import RecordTooLargeError
from seglog.v1 import log_service_pb2 as pb

REQUEST_BYTES_MAX = 2 * 1024 * 1024
# A topic may take the largest batch a request carries (the service keeps 1 KiB for the rest).
TOPIC_CONFIGS = {"max.message.bytes": str(REQUEST_BYTES_MAX - 1024)}


@pytest.fixture(scope="module")
def seglog_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """The module's service (``make_topic`` makes its topics here), with a 2 MiB request limit."""
    workdir = tmp_path_factory.mktemp("request-limit")
    service = ServiceProcess(workdir, [workdir / "data"], ["--request-bytes-max", str(REQUEST_BYTES_MAX)]).start()
    yield service
    assert service.stop() == 0, service.log()


def _largest_batch_alone(topic: str, partition: int, limit: int) -> int:
    """The largest batch whose ProduceStream message of its own is within ``limit`` as
    serialized (its correlation id at its largest): a bisection over real messages."""
    low, high = 0, limit
    while low < high:
        middle = (low + high + 1) // 2
        message = pb.ProduceStreamRequest(correlation_id=2**63 - 1)
        message.produce.topic, message.produce.partition = topic, partition
        message.produce.records, message.produce.acks = b"r" * middle, pb.ACKS_WRITTEN
        low, high = (middle, high) if message.ByteSize() <= limit else (low, middle - 1)
    return low



@pytest.mark.parametrize("enable_idempotence", [True, False])
def test_batches_above_the_request_limit_are_split(
    seglog_service: ServiceProcess, make_topic: Any, monkeypatch: pytest.MonkeyPatch, enable_idempotence: bool
) -> None:
    """60,000 records in 4 MiB batches under a 2 MiB request limit: every record lands once, in
    order, with no retry spent; gRPC refuses at most the first batch, sent before the stream
    announced the limit (every batch was refused and sent again identically until the retries
    ran out: records failed)."""
    refusals = count_size_refusals(monkeypatch)
    topic = make_topic(configs=TOPIC_CONFIGS)
    values = numbered_values(60_000)
    with Producer(
        seglog_service.address, batch_size=4 * 1024 * 1024, linger_ms=50, retries=3, retry_backoff_ms=10,
        enable_idempotence=enable_idempotence,
    ) as producer:
        group = producer.send_many(topic, values, partition=0)
        producer.flush()
        errors = [future.exception(0) for future in group.futures()]
        statistics = producer.statistics()
    assert [error for error in errors if error is not None] == []
    assert statistics.batches_split >= 1 and statistics.retries == 0
    assert len(refusals) <= 1 and all("request limit" in refusal for refusal in refusals)
    assert values_to_end(seglog_service.address, topic, len(values)) == values


def test_a_record_alone_above_the_request_limit_fails_unretried(
    seglog_service: ServiceProcess, make_topic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client takes a record up to its own max_request_bytes (8 MiB here); one of 3 MiB is
    above the service's 2 MiB, which the stream announced when the record before it opened it:
    it fails with RecordTooLargeError without being sent, and the records around it land in
    order, none retried (it was sent, gRPC ended the stream refusing it and the record after it
    was retried as after any break; before that, it was retried as ServiceOverloadedError until
    the retries ran out)."""
    refusals = count_size_refusals(monkeypatch)
    topic = make_topic(configs=TOPIC_CONFIGS)
    with Producer(
        seglog_service.address, max_request_bytes=8 * 1024 * 1024, buffer_bytes=32 * 1024 * 1024, linger_ms=0, retries=3, retry_backoff_ms=10,
    ) as producer:
        before = producer.send(topic, b"before", partition=0)
        before.result()
        too_large = producer.send(topic, b"x" * (3 * 1024 * 1024), partition=0)
        after = producer.send(topic, b"after", partition=0)
        producer.flush()
        error = too_large.exception(0)
        assert after.exception(0) is None
        statistics = producer.statistics()
    assert isinstance(error, RecordTooLargeError) and "request limit" in str(error)
    assert refusals == [] and statistics.retries == 0
    assert values_to_end(seglog_service.address, topic, 2) == [b"before", b"after"]


@pytest.mark.parametrize("enable_idempotence", [True, False])
def test_records_alone_above_the_request_limit_break_no_stream(
    seglog_service: ServiceProcess, make_topic: Any, monkeypatch: pytest.MonkeyPatch, enable_idempotence: bool
) -> None:
    """Five times, 400 small records to partition 1 and then a 3 MiB record to partition 0 on
    the same connection: each large record fails with RecordTooLargeError naming the limit the
    connection's current stream announced, unsent (no size refusal, no retry counted), and
    every small record lands once, in order. Each large record was sent and gRPC's refusal
    ended the shared ProduceStream: the small batches in flight on it failed and were retried
    (without idempotence, one written whose answer was lost is written twice)."""
    from tests.support.integration_helpers import partition_values

    refusals = count_size_refusals(monkeypatch)
    topic = make_topic(partitions=2, configs=TOPIC_CONFIGS)
    rounds = 5
    small = [index.to_bytes(4, "big") * 25 for index in range(400 * rounds)]
    with Producer(
        seglog_service.address, max_request_bytes=8 * 1024 * 1024, buffer_bytes=32 * 1024 * 1024, linger_ms=0,
        retries=3, retry_backoff_ms=10, enable_idempotence=enable_idempotence,
    ) as producer:
        producer.send(topic, b"open", partition=0).result()  # the stream announces the limit
        groups, large = [], []
        for round_ in range(rounds):
            groups.append(producer.send_many(topic, small[400 * round_:400 * (round_ + 1)], partition=1))
            large.append(producer.send(topic, b"x" * (3 * 1024 * 1024), partition=0))
        producer.flush()
        small_errors = [future.exception(0) for group in groups for future in group.futures()]
        large_errors = [future.exception(0) for future in large]
        statistics = producer.statistics()
        producer_ids = producer._async._sender.idempotence.producer_ids_received
    assert [error for error in small_errors if error is not None] == []
    assert all(isinstance(error, RecordTooLargeError) and "request limit" in str(error) for error in large_errors)
    named = _largest_batch_alone(topic, 0, REQUEST_BYTES_MAX)
    assert all(f"at most {named} bytes" in str(error) for error in large_errors)
    assert refusals == [] and statistics.retries == 0 and statistics.records_failed == rounds
    assert producer_ids == (1 if enable_idempotence else 0)  # the producer id kept
    assert partition_values(seglog_service.address, topic, 1) == small
    assert partition_values(seglog_service.address, topic, 0) == [b"open"]
