"""A stream-mode consumer's push hands the synchronous Consumer's polling thread the CPU and the
GIL at once (``os.sched_yield`` after setting its event), but only when a polling thread cleared
that event since the last push: an asyncio consumer, whose event nobody clears, yields once at
most, whatever it receives. Real service, real streams; the yields counted."""

from __future__ import annotations

import asyncio
import threading

import pytest

from seglog import AsyncConsumer, Consumer, Producer
from seglog import consumer as consumer_module

pytestmark = pytest.mark.integration


class _CountedOs:
    def __init__(self) -> None:
        self.yields = 0

    def sched_yield(self) -> None:
        self.yields += 1


def _produce(address: str, topic: str, values: list[bytes]) -> None:
    with Producer(address, linger_ms=0) as producer:
        for value in values:
            producer.send(topic, value, partition=0).result()


def test_a_push_to_a_waiting_polling_thread_yields_to_it(seglog_service, make_topic, monkeypatch):
    topic = make_topic()
    counted = _CountedOs()
    monkeypatch.setattr(consumer_module, "os", counted)
    values = [b"v%d" % index for index in range(5)]
    with Consumer(seglog_service.address, topic, 0, start="earliest", mode="stream") as consumer:
        assert consumer.poll(timeout_ms=200) == []  # the stream is open, parked at the tail
        seen: list[bytes] = []
        for value in values:
            waiting = threading.Thread(target=lambda: seen.extend(r.value for r in consumer.poll(timeout_ms=5000)))
            waiting.start()
            _produce(seglog_service.address, topic, [value])
            waiting.join()
        assert seen == values
    assert counted.yields >= len(values)  # each push found the polling thread's event cleared


async def test_an_asyncio_consumer_yields_once_at_most(seglog_service, make_topic, monkeypatch):
    topic = make_topic()
    counted = _CountedOs()
    monkeypatch.setattr(consumer_module, "os", counted)
    values = [b"v%d" % index for index in range(20)]
    async with AsyncConsumer(seglog_service.address, topic, 0, start="earliest", mode="stream") as consumer:
        seen: list[bytes] = []
        for value in values:
            await asyncio.to_thread(_produce, seglog_service.address, topic, [value])
            while len(seen) < len(values[: values.index(value) + 1]):
                seen += [r.value for r in await consumer.poll(timeout_ms=5000)]
        assert seen == values
    assert counted.yields <= 1
