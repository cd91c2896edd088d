"""A stream-mode consumer's push hands the synchronous Consumer's polling thread the CPU and the
GIL at once (``os.sched_yield`` after setting its event), but only when a polling thread cleared
that event since the last push: an asyncio consumer, whose event nobody clears, yields once at
most, whatever it receives; a platform without ``os.sched_yield`` (Windows) does not yield and
keeps its stream. Real service, real streams; the yields counted."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from seglog import AsyncConsumer, Consumer, Producer
from seglog import consumer as consumer_module
from tests.support.in_process_service import HANG_S

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


def _cleared(consumer: Consumer) -> bool:
    """Whether a polling thread cleared the consumer's event since the last push set it; waits
    for it (bounds a hang, not speed)."""
    ready = consumer._async._thread_ready
    for _ in range(HANG_S * 100):
        if not ready.is_set():
            return True
        time.sleep(0.01)
    return False


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
            # Pushed once the new thread's poll cleared the event the last push set (a push
            # landing before it finds the event set: nobody polls then, nothing to yield to).
            assert _cleared(consumer)
            yields = counted.yields
            _produce(seglog_service.address, topic, [value])
            waiting.join()
            assert counted.yields > yields  # this push yielded to the polling thread
        assert seen == values


def test_a_platform_without_sched_yield_delivers_every_push(seglog_service, make_topic, monkeypatch):
    # Windows has no os.sched_yield: the push sets the polling thread's event and goes on.
    monkeypatch.delattr(consumer_module.os, "sched_yield", raising=False)
    topic = make_topic()
    values = [b"w%d" % index for index in range(3)]
    with Consumer(seglog_service.address, topic, 0, start="earliest", mode="stream") as consumer:
        assert consumer.poll(timeout_ms=200) == []
        opened = consumer.statistics().streams_opened
        seen: list[bytes] = []
        for value in values:
            waiting = threading.Thread(target=lambda: seen.extend(r.value for r in consumer.poll(timeout_ms=5000)))
            waiting.start()
            assert _cleared(consumer)
            _produce(seglog_service.address, topic, [value])
            waiting.join()
        assert seen == values
        assert consumer.poll(timeout_ms=0) == []
        assert consumer.statistics().streams_opened == opened  # one stream served every push


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
