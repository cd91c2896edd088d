"""The asyncio clients end to end (the implementation the synchronous ones run on)."""

from __future__ import annotations

import asyncio

import pytest

from seglog import AsyncAdmin, AsyncConsumer, AsyncProducer, ClientClosedError, TopicPartition

pytestmark = pytest.mark.integration


async def test_async_round_trip_with_send_and_send_and_wait(seglog_service, make_topic):
    topic = make_topic(partitions=2)
    async with AsyncProducer(seglog_service.address, compression="zstd", linger_ms=2) as producer:
        futures = [await producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 2) for i in range(50)]
        last = await producer.send_and_wait(topic, b"last", partition=0)
        metadata = await asyncio.gather(*futures)
    assert [m.offset for m in metadata if m.partition == 1] == list(range(25))
    assert last.offset == 25 and last.partition == 0
    async with AsyncConsumer(seglog_service.address, topic, start="earliest") as consumer:
        records = []
        while len(records) < 51:
            records.extend(await consumer.poll(timeout_ms=2000))
    assert sorted(r.value for r in records) == sorted([f"v{i}".encode() for i in range(50)] + [b"last"])


@pytest.mark.parametrize("mode", ["fetch", "stream"])
async def test_async_iteration_yields_records_in_offset_order(seglog_service, make_topic, mode):
    topic = make_topic()
    async with AsyncProducer(seglog_service.address) as producer:
        for i in range(20):
            await producer.send(topic, str(i).encode(), partition=0)
    async with AsyncConsumer(seglog_service.address, topic, 0, start="earliest", mode=mode,
                             consumer_timeout_ms=500) as consumer:
        offsets = [record.offset async for record in consumer]
    assert offsets == list(range(20))


@pytest.mark.parametrize("mode", ["fetch", "stream"])
async def test_a_waiting_poll_returns_as_soon_as_a_record_is_appended(seglog_service, make_topic, mode):
    topic = make_topic()
    async with AsyncConsumer(seglog_service.address, topic, 0, start="latest", mode=mode,
                             fetch_max_wait_ms=5000) as consumer:
        assert await consumer.position() == 0  # "latest" resolved before anything is appended
        waiting = asyncio.create_task(consumer.poll(timeout_ms=20_000))
        async with AsyncProducer(seglog_service.address) as producer:
            await producer.send_and_wait(topic, b"wake up", partition=0)
        records = await waiting
        stats = consumer.statistics()
    assert [r.value for r in records] == [b"wake up"]
    # The wait happened at the service (one long poll or one stream), not in a client loop.
    assert stats.fetch_requests + stats.streams_opened <= 2


@pytest.mark.parametrize("mode", ["fetch", "stream"])
async def test_a_waiting_poll_cancelled_ends_cancelled_and_the_consumer_polls_on(seglog_service, make_topic, mode):
    topic = make_topic()
    async with AsyncConsumer(seglog_service.address, topic, 0, start="latest", mode=mode) as consumer:
        assert await consumer.position() == 0
        waiting = asyncio.create_task(consumer.poll(timeout_ms=20_000))
        while not consumer._data_ready._waiters:  # parked on the wait for data, at the tail
            await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        async with AsyncProducer(seglog_service.address) as producer:
            await producer.send_and_wait(topic, b"after", partition=0)
        assert [r.value for r in await consumer.poll(timeout_ms=20_000)] == [b"after"]


async def test_async_consumer_seek_and_position(seglog_service, make_topic):
    topic = make_topic()
    async with AsyncProducer(seglog_service.address) as producer:
        for ts in (100, 200, 300):
            await producer.send(topic, str(ts).encode(), partition=0, timestamp_ms=ts)
    async with AsyncConsumer(seglog_service.address, topic, [0]) as consumer:
        assert await consumer.position(0) == 3  # start="latest" by default
        await consumer.seek_to_timestamp(150)
        assert await consumer.position(0) == 1
        await consumer.seek(0, 0)
        assert [r.value for r in await consumer.poll(timeout_ms=3000, max_records=2)] == [b"100", b"200"]
        assert await consumer.position(0) == 2
        assert await consumer.beginning_offsets() == {0: 0} and await consumer.end_offsets() == {0: 3}
        assert consumer.assignment() == [TopicPartition(topic, 0)]


async def test_async_admin_round_trip(seglog_service):
    async with AsyncAdmin(seglog_service.address) as admin:
        info = await admin.create_topic("async-admin-topic", 2, {"retention.ms": "3600000"})
        assert info.configs["retention.ms"] == "3600000"
        assert ("async-admin-topic", 2) in [(t.topic, t.partitions) for t in await admin.list_topics()]
        assert await admin.latest_offsets("async-admin-topic") == {0: 0, 1: 0}
        await admin.delete_topic("async-admin-topic")
        assert "async-admin-topic" not in [t.topic for t in await admin.list_topics()]


async def test_closed_async_clients_refuse_work(seglog_service, make_topic):
    topic = make_topic()
    producer = AsyncProducer(seglog_service.address)
    await producer.start()
    await producer.close()
    with pytest.raises(ClientClosedError):
        await producer.send(topic, b"late", partition=0)
    consumer = AsyncConsumer(seglog_service.address, topic, 0)
    await consumer.close()
    with pytest.raises(ClientClosedError):
        await consumer.poll()


async def test_close_with_records_queued_sends_them_first(seglog_service, make_topic):
    topic = make_topic()
    producer = AsyncProducer(seglog_service.address, linger_ms=60_000)
    futures = [await producer.send(topic, str(i).encode(), partition=0) for i in range(10)]
    assert not any(f.done() for f in futures)  # lingering
    await producer.close()
    assert [f.result().offset for f in futures] == list(range(10))
