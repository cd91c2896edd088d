"""``send_many`` (the bulk path) and the lazy per-record results, against a real service."""

from __future__ import annotations

import asyncio

import pytest

from seglog import AsyncProducer, Consumer, Producer
from seglog._partitioner import partition_for_key
from seglog.errors import RecordTooLargeError

pytestmark = pytest.mark.integration


def read_all(address: str, topic: str, partition: int, count: int) -> list:
    with Consumer(address, topic, partition=partition, start="earliest") as consumer:
        records = []
        while len(records) < count:
            records.extend(consumer.poll(timeout_ms=2000))
    return records


def test_send_many_to_one_partition_keeps_order_and_offsets(seglog_service, make_topic):
    topic = make_topic()
    values = [f"v{i}".encode() for i in range(5000)]
    keys = [f"k{i % 7}".encode() for i in range(5000)]
    with Producer(seglog_service.address, linger_ms=1, batch_size=16 * 1024) as producer:
        first = producer.send(topic, b"before", partition=0)
        group = producer.send_many(topic, values, keys, partition=0, timestamp_ms=1_700_000_000_000)
        metadata = group.result(timeout=30)
    assert first.result().offset == 0
    assert [m.offset for m in metadata] == list(range(1, 5001))
    assert {m.timestamp_ms for m in metadata} == {1_700_000_000_000}
    records = read_all(seglog_service.address, topic, 0, 5001)
    assert [(r.key, r.value) for r in records[1:]] == list(zip(keys, values, strict=True))
    assert all(r.timestamp_ms == 1_700_000_000_000 for r in records[1:])


def test_send_many_without_a_partition_places_keys_like_send_and_answers_in_given_order(seglog_service, make_topic):
    topic = make_topic(partitions=3)
    keys = [f"user-{i}".encode() for i in range(300)]
    values = [f"{i}".encode() for i in range(300)]
    with Producer(seglog_service.address, linger_ms=1) as producer:
        metadata = producer.send_many(topic, values, keys).result(timeout=30)
    assert [m.partition for m in metadata] == [partition_for_key(key, 3) for key in keys]
    for partition in range(3):
        mine = [m for m in metadata if m.partition == partition]
        assert [m.offset for m in mine] == list(range(len(mine)))  # in the order given
        stored = read_all(seglog_service.address, topic, partition, len(mine))
        assert [r.value for r in stored] == [values[i] for i, m in enumerate(metadata) if m.partition == partition]


def test_send_many_waits_for_buffer_space_and_sends_everything(seglog_service, make_topic):
    topic = make_topic()
    values = [bytes([i % 251]) * 200 for i in range(3000)]  # ~700 KB through a 64 KiB buffer
    with Producer(seglog_service.address, linger_ms=0, batch_size=16 * 1024, buffer_bytes=64 * 1024) as producer:
        group = producer.send_many(topic, values, partition=0)
        group.wait(timeout=60)
        assert producer.statistics().records_sent == 3000
    assert [r.value for r in read_all(seglog_service.address, topic, 0, 3000)] == values


def test_send_many_checks_its_arguments(seglog_service, make_topic):
    topic = make_topic()
    with Producer(seglog_service.address) as producer:
        with pytest.raises(ValueError, match="one key per value"):
            producer.send_many(topic, [b"a", b"b"], [b"k"], partition=0)
        with pytest.raises(ValueError, match="partition must be >= 0"):
            producer.send_many(topic, [b"a"], partition=-1)
        with pytest.raises(RecordTooLargeError):
            producer.send_many(topic, [b"x" * (2 * 1024 * 1024)], partition=0)
        assert producer.send_many(topic, ["text values", None], partition=0).result(timeout=30)[1].offset == 1


async def test_async_send_many_and_awaitable_results(seglog_service, make_topic):
    topic = make_topic(partitions=2)
    async with AsyncProducer(seglog_service.address, linger_ms=1) as producer:
        group = await producer.send_many(topic, [b"a", b"b", b"c"], partition=1)
        single = await producer.send(topic, b"d", partition=1)
        metadata = await group
        assert [m.offset for m in metadata] == [0, 1, 2]
        assert (await single).offset == 3
        assert [m.offset for m in await asyncio.gather(*group.futures())] == [0, 1, 2]
