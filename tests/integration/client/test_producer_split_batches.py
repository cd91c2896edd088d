"""A batch the service refuses as too large is split and sent again, as Kafka's producer does
(``Sender._split``): a producer whose batch_size lies above a topic's max.message.bytes delivers
every record once, in order, each future with its record's real offset; a record that alone is
above the limit fails with RecordTooLargeError and the records around it still land, in order.
On a real service on loopback, with and without idempotence, plain and compressed."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Sequence
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog import Admin, Consumer, Producer
from seglog._sender import Sender
from seglog.errors import RecordTooLargeError
from seglog.records import RecordBatch

LIMIT_BYTES = 64 * 1024
BATCH_SIZE = 256 * 1024
VALUE_BYTES = 100
POLL_TIMEOUT_MS = 2000
SPLIT_PRODUCER = {"batch_size": BATCH_SIZE, "linger_ms": 50}


def _values(count: int, size: int = VALUE_BYTES) -> list[bytes]:
    return [index.to_bytes(4, "big") * (size // 4) for index in range(count)]


def _read(address: str, topic: str, count: int) -> tuple[list[tuple[int, bytes | None]], list[int]]:
    """The partition's first ``count`` records as (offset, value), and its batches' sizes."""
    read: list[tuple[int, bytes | None]] = []
    sizes: list[int] = []
    with Consumer(address, topic, partition=0, start="earliest") as consumer:
        while len(read) < count:
            raws = consumer.poll_raw(timeout_ms=POLL_TIMEOUT_MS)
            assert raws, f"read {len(read)} of {count} records"
            for raw in raws:
                batch = RecordBatch(raw.records)
                sizes.append(batch.size_in_bytes)
                read += [(record.offset, record.value) for record in batch]
    return read, sizes


def _send_and_check(address: str, topic: str, values: Sequence[bytes], **producer_options: object) -> int:
    """Half the values through send_many, half one send each; every record lands once, in order,
    at the offset its future gave, in batches within the topic's limit. Returns the splits."""
    half = len(values) // 2
    with Producer(address, **SPLIT_PRODUCER, **producer_options) as producer:
        group = producer.send_many(topic, values[:half], partition=0)
        futures = [producer.send(topic, value, partition=0) for value in values[half:]]
        producer.flush()
        statistics = producer.statistics()
        offsets = [metadata.offset for metadata in group.result(0)] + [future.result(0).offset for future in futures]
    assert statistics.records_failed == 0
    read, sizes = _read(address, topic, len(values))
    assert [value for _, value in read] == list(values)
    assert [offset for offset, _ in read] == offsets
    assert max(sizes) <= LIMIT_BYTES, sizes
    return statistics.batches_split


def test_full_batches_above_the_topic_limit_are_split_and_land_once_in_order(seglog_service, make_topic):
    topic = make_topic(configs={"max.message.bytes": str(LIMIT_BYTES)})
    splits = _send_and_check(seglog_service.address, topic, _values(8_000))
    assert splits >= 3  # each 256 KiB batch was refused once


def test_a_partition_new_to_a_warm_producer_splits_its_first_batch_before_sending_more(seglog_service, make_topic):
    """On a stream already confirmed, several batches of a partition may be in flight; but the
    service takes a producer id's first batch on a partition whatever its sequence, so until one
    was written the partition sends one batch at a time: a batch after a refused one must not
    land first."""
    warm, topic = make_topic(), make_topic(configs={"max.message.bytes": str(LIMIT_BYTES)})
    values = _values(2_000)  # a full batch the topic refuses, then a small one it would take
    with Producer(seglog_service.address, **SPLIT_PRODUCER) as producer:
        producer.send(warm, b"warm", partition=0).result(30)
        group = producer.send_many(topic, values, partition=0)
        producer.flush()  # both batches ready at once
        offsets = [metadata.offset for metadata in group.result(0)]
        assert producer.statistics().records_failed == 0
    read, _ = _read(seglog_service.address, topic, len(values))
    assert read == list(zip(offsets, values))


def test_later_batches_are_built_within_the_limit_the_first_refusal_named(seglog_service, make_topic, caplog):
    """The service names max.message.bytes in its refusal: the producer splits its topic's later
    batches to it before sending them, so only the first full batch is sent in vain."""
    topic = make_topic(configs={"max.message.bytes": str(LIMIT_BYTES)})
    with caplog.at_level(logging.INFO, logger="seglog.producer"):
        splits = _send_and_check(seglog_service.address, topic, _values(8_000))
    refused = [record for record in caplog.records if "refused as too large" in record.getMessage()]
    assert splits >= 3 and len(refused) == 1, [record.getMessage() for record in refused]


def test_a_producer_without_idempotence_splits_too(seglog_service, make_topic):
    # One batch in flight a partition: without idempotence that is what keeps order under
    # resends (``_send_window.py``).
    topic = make_topic(configs={"max.message.bytes": str(LIMIT_BYTES)})
    splits = _send_and_check(
        seglog_service.address, topic, _values(8_000), enable_idempotence=False, max_in_flight_per_partition=1
    )
    assert splits >= 3


def test_compressed_batches_above_the_topic_limit_are_split(seglog_service, make_topic):
    # Random bytes do not compress: a 256 KiB gzip batch stays above 64 KiB.
    topic = make_topic(configs={"max.message.bytes": str(LIMIT_BYTES)})
    values = [os.urandom(VALUE_BYTES) for _ in range(6_000)]
    splits = _send_and_check(seglog_service.address, topic, values, compression="gzip")
    assert splits >= 2


def test_a_record_alone_above_the_limit_fails_and_the_records_around_it_land(seglog_service, make_topic):
    topic = make_topic(configs={"max.message.bytes": str(LIMIT_BYTES)})
    values = _values(3_000)
    too_large = b"x" * (LIMIT_BYTES + 1024)
    with Producer(seglog_service.address, **SPLIT_PRODUCER) as producer:
        before = [producer.send(topic, value, partition=0) for value in values[:1_500]]
        refused = producer.send(topic, too_large, partition=0)
        after = [producer.send(topic, value, partition=0) for value in values[1_500:]]
        producer.flush()
        statistics = producer.statistics()
        with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
            refused.result(0)
        assert isinstance(refused.exception(0), RecordTooLargeError)
        offsets = [future.result(0).offset for future in before + after]
        producer_ids = producer._async._sender.idempotence.producer_ids_received
    assert statistics.records_failed == 1 and statistics.batches_split >= 1
    assert producer_ids == 1  # nothing was written of the refused record: the id was kept
    read, _ = _read(seglog_service.address, topic, len(values))
    assert [value for _, value in read] == values
    assert [offset for offset, _ in read] == offsets


def test_a_send_many_with_a_record_above_the_limit_reports_it_and_delivers_the_rest(seglog_service, make_topic):
    topic = make_topic(configs={"max.message.bytes": str(LIMIT_BYTES)})
    values = _values(2_000)
    values.insert(700, b"y" * (LIMIT_BYTES + 1))
    with Producer(seglog_service.address, **SPLIT_PRODUCER) as producer:
        group = producer.send_many(topic, values, partition=0)
        producer.flush()
        with pytest.raises(RecordTooLargeError):
            group.wait(0)
        futures = group.futures()
        assert isinstance(futures[700].exception(0), RecordTooLargeError)
        assert all(future.exception(0) is None for index, future in enumerate(futures) if index != 700)
    landed = values[:700] + values[701:]
    read, _ = _read(seglog_service.address, topic, len(landed))
    assert [value for _, value in read] == landed


def test_a_batch_of_more_records_than_the_service_takes_is_halved_until_taken(start_service):
    """A refusal that names no byte limit (RecordCountTooLargeError): the pieces are halves."""
    service = start_service(["--batch-records-max", "500"])
    with Admin(service.address) as admin:
        admin.create_topic("t", 1)
    values = [index.to_bytes(4, "big") for index in range(5_000)]
    with Producer(service.address, batch_size=BATCH_SIZE, linger_ms=50) as producer:
        offsets = [metadata.offset for metadata in producer.send_many("t", values, partition=0).result(30)]
        statistics = producer.statistics()
    assert statistics.records_failed == 0 and statistics.batches_split >= 3
    read, _ = _read(service.address, "t", len(values))
    assert read == list(zip(offsets, values))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    limit=st.integers(min_value=2_048, max_value=32_768),
    batch_size=st.integers(min_value=1_024, max_value=128 * 1024),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    count=st.integers(min_value=1, max_value=300),
    idempotent=st.booleans(),
)
def test_every_record_lands_once_in_order_whatever_the_sizes_and_the_limit(
    seglog_service, limit, batch_size, seed, count, idempotent
):
    """Records of random sizes (some above the topic's limit) through a producer of any
    batch_size: each record either lands, once and in send order, or (only if it is larger than
    the topic takes alone) fails with RecordTooLargeError."""
    generator = random.Random(seed)
    sizes = [generator.choice((generator.randrange(0, 600), generator.randrange(0, limit + limit // 2)))
             for _ in range(count)]
    values = [index.to_bytes(4, "big") + bytes(size) for index, size in enumerate(sizes)]
    topic = f"split-property-{seed}-{limit}-{batch_size}-{count}"
    with Admin(seglog_service.address) as admin:
        admin.create_topic(topic, 1, {"max.message.bytes": str(limit)})
    options = {"enable_idempotence": idempotent}
    if not idempotent:
        options["max_in_flight_per_partition"] = 1
    with Producer(seglog_service.address, batch_size=batch_size, linger_ms=20, **options) as producer:
        group = producer.send_many(topic, values, partition=0)
        producer.flush()
        futures = group.futures()
        errors = [future.exception(0) for future in futures]
    landed = [value for value, error in zip(values, errors) if error is None]
    for value, error in zip(values, errors):
        if error is not None:
            assert isinstance(error, RecordTooLargeError), error
            assert len(value) > limit - 200, (len(value), limit)  # only a record too large alone
        else:
            assert len(value) <= limit, (len(value), limit)
    read, _ = _read(seglog_service.address, topic, len(landed)) if landed else ([], [])
    assert [value for _, value in read] == landed
    with Admin(seglog_service.address) as admin:
        admin.delete_topic(topic)


def _batches(address: str, topic: str, count: int) -> list[list[bytes | None]]:
    """The partition's first ``count`` records' values, a list a batch as written."""
    batches: list[list[bytes | None]] = []
    with Consumer(address, topic, partition=0, start="earliest") as consumer:
        while sum(map(len, batches)) < count:
            raws = consumer.poll_raw(timeout_ms=POLL_TIMEOUT_MS)
            assert raws, f"read {sum(map(len, batches))} of {count} records"
            batches += [[record.value for record in RecordBatch(raw.records)] for raw in raws]
    return batches


@pytest.mark.parametrize("named", ["9" * 5_000, "0", "14", str(2**40)])
def test_a_refusal_naming_a_limit_no_topic_has_is_halved_and_later_batches_stay_whole(
    seglog_service: Any, make_topic: Any, monkeypatch: pytest.MonkeyPatch, named: str
) -> None:
    """A service refuses a batch naming a limit no topic has (a number too long for int(), 0,
    below a batch's header, beyond 32 bits): the refused batch is halved, every record lands
    once in order, and the topic's later batches are not cut to that limit (before: the parse
    raised in the request task and the batches failed, or every later batch went one record
    at a time)."""
    refused = [0]
    produce_once = Sender.produce_once

    async def refuse_first(self: Sender, topic: str, partition: int, records: bytes, turn: Any = None) -> Any:
        if not refused[0] and len(records) > LIMIT_BYTES:  # the first full batch
            refused[0] = 1
            if turn is not None:
                await turn.wait()
                turn.release()
            raise RecordTooLargeError(
                f"{topic}-{partition}: the batch is {len(records)} bytes, above segment.bytes ({named})",
                code=grpc.StatusCode.RESOURCE_EXHAUSTED, service_error="RecordBatchTooLargeError",
            )
        return await produce_once(self, topic, partition, records, turn)

    topic = make_topic()
    first, later = _values(3_000), _values(2_000)
    monkeypatch.setattr(Sender, "produce_once", refuse_first)
    with Producer(seglog_service.address, **SPLIT_PRODUCER) as producer:
        producer.send_many(topic, first, partition=0)
        producer.flush()
        producer.send_many(topic, later, partition=0)
        producer.flush()
        statistics = producer.statistics()
    assert refused[0] == 1 and statistics.records_failed == 0
    batches = _batches(seglog_service.address, topic, len(first) + len(later))
    assert [value for batch in batches for value in batch] == first + later
    assert max(map(len, batches)) > len(later) // 2  # later batches whole, not one record each


def test_a_limit_raised_is_used_again_once_the_learned_one_is_forgotten(seglog_service, make_topic):
    """A topic's refusal teaches the producer its limit; the operator raises the limit
    (AlterTopicConfigs): once the learned limit's age passes (``learned_limit_max_age_ms``,
    Kafka's metadata.max.age.ms by default, zero here) the topic's batches go full-size again
    (before: cut to the first refusal's limit for the producer's life)."""
    topic = make_topic(configs={"max.message.bytes": str(LIMIT_BYTES)})
    first, later = _values(4_000), _values(4_000)
    with Producer(seglog_service.address, **SPLIT_PRODUCER) as producer:
        producer.send_many(topic, first, partition=0)
        producer.flush()
        assert producer.statistics().batches_split >= 1
        with Admin(seglog_service.address) as admin:
            admin.alter_topic_configs(topic, {"max.message.bytes": str(4 * BATCH_SIZE)})
        producer._async._sender.learned_limit_max_age_ms = 0
        producer.send_many(topic, later, partition=0)
        producer.flush()
        assert producer.statistics().records_failed == 0
    read, sizes = _read(seglog_service.address, topic, len(first) + len(later))
    assert [value for _, value in read] == first + later
    assert max(sizes) > LIMIT_BYTES  # the later batches went whole


def test_a_compressed_producer_sends_compressible_batches_whole_after_a_refusal(seglog_service, make_topic):
    """The service applies max.message.bytes to the compressed batch: after an incompressible
    batch is refused and split, the topic's compressible batches go whole (compressed within
    the limit), not cut to the limit by their uncompressed size before they are sent."""
    topic = make_topic(configs={"max.message.bytes": str(LIMIT_BYTES)})
    incompressible = [os.urandom(1_000) for _ in range(300)]
    compressible = _values(4_000)
    with Producer(seglog_service.address, **SPLIT_PRODUCER, compression="gzip") as producer:
        producer.send_many(topic, incompressible, partition=0)
        producer.flush()
        assert producer.statistics().batches_split >= 1
        producer.send_many(topic, compressible, partition=0)
        producer.flush()
        assert producer.statistics().records_failed == 0
    batches = _batches(seglog_service.address, topic, len(incompressible) + len(compressible))
    assert [value for batch in batches for value in batch] == incompressible + compressible
    assert max(map(len, batches)) * VALUE_BYTES > LIMIT_BYTES  # more than the limit, uncompressed
