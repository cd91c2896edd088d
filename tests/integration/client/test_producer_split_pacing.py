"""A split batch's pieces, and what is sent again behind them, go out no faster than the
partition's in-flight limit (``SendWindow.queued``, ``Sender._resend``): the idempotent service
keeps the last 5 batches of a producer to answer a batch sent again, and without idempotence
``max_in_flight_per_partition=1`` is what keeps order under retries. On a real service on
loopback: 256 KiB batches into a 64 KiB topic, the pieces and the batches behind them."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from tests.support.integration_helpers import numbered_values, values_to_end

from seglog import Producer, _sender
from seglog._send_window import SendWindow
from seglog._sender import Sender
from seglog.errors import QuotaExceededError, ServiceUnavailableError

LIMIT_BYTES = 64 * 1024
SPLIT_PRODUCER: dict[str, Any] = {"batch_size": 256 * 1024, "linger_ms": 50, "retry_backoff_ms": 10}


def _watch_in_flight(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The most batches any partition's window had in flight, after each send and resend."""
    peak = [0]
    sent, resending = SendWindow.sent, SendWindow.resending

    def watched_sent(self: SendWindow[Any], item: Any) -> Any:
        entry = sent(self, item)
        peak[0] = max(peak[0], self.in_flight_count)
        return entry

    def watched_resending(self: SendWindow[Any], entries: Any, *, held: int = 0) -> None:
        resending(self, entries, held=held)
        peak[0] = max(peak[0], self.in_flight_count)

    monkeypatch.setattr(SendWindow, "sent", watched_sent)
    monkeypatch.setattr(SendWindow, "resending", watched_resending)
    return peak


@pytest.mark.parametrize("in_flight_max", [5, 2])
def test_split_pieces_stay_within_the_partitions_in_flight_limit(
    seglog_service: Any, make_topic: Any, monkeypatch: pytest.MonkeyPatch, in_flight_max: int
) -> None:
    """The first batch's refusal splits it and the batches behind it; later batches are split
    within the limit the refusal named before they are sent. Neither the pieces nor the batches
    split early are ever more in flight on the partition than its limit (were 25 and 20)."""
    peak = _watch_in_flight(monkeypatch)
    topic = make_topic(configs={"max.message.bytes": str(LIMIT_BYTES)})
    values = numbered_values(20_000)
    with Producer(seglog_service.address, **SPLIT_PRODUCER, max_in_flight_per_partition=in_flight_max) as producer:
        producer.send(topic, b"first", partition=0).result()  # the producer id wrote there
        producer.send_many(topic, values, partition=0)
        producer.flush()
        statistics = producer.statistics()
    assert statistics.batches_split >= 2 and statistics.records_failed == 0
    assert 1 <= peak[0] <= in_flight_max
    assert values_to_end(seglog_service.address, topic, len(values) + 1) == [b"first", *values]


def test_answers_lost_after_a_split_land_every_record_once(
    seglog_service: Any, make_topic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With idempotence, the answers of 25 batches written after a split are lost (a connection
    break after the write): each is sent again and the service answers it from the last 5 batches
    it keeps. Every record is in the log once and no future fails (7,708 records failed with
    OutOfOrderSequenceError before, with every record in the log: a caller's resend duplicated
    them)."""
    lost = [0]
    produce_once = Sender.produce_once

    async def losing_answers(self: Sender, topic: str, partition: int, records: bytes, turn: Any = None) -> Any:
        response = await produce_once(self, topic, partition, records, turn)
        if self._stats["batches_split"] and lost[0] < 25:
            lost[0] += 1
            raise ServiceUnavailableError("written, but the answer was lost")
        return response

    monkeypatch.setattr(Sender, "produce_once", losing_answers)
    topic = make_topic(configs={"max.message.bytes": str(LIMIT_BYTES)})
    values = numbered_values(20_000)
    with Producer(seglog_service.address, **SPLIT_PRODUCER) as producer:
        producer.send(topic, b"first", partition=0).result()
        group = producer.send_many(topic, values, partition=0)
        producer.flush()
        errors = [future.exception(0) for future in group.futures()]
    assert lost[0] == 25
    assert [error for error in errors if error is not None] == []
    assert values_to_end(seglog_service.address, topic, len(values) + 1) == [b"first", *values]


def test_one_in_flight_keeps_order_when_a_piece_fails_retriably(
    seglog_service: Any, make_topic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without idempotence and with ``max_in_flight_per_partition=1``, the first piece of a split
    batch is refused retriably, unwritten: it is sent again before the pieces after it, which
    waited for it, so the log keeps the send order (the pieces went five at once and landed
    before it)."""
    failed = [0]
    produce_once = Sender.produce_once

    async def first_piece_refused(self: Sender, topic: str, partition: int, records: bytes, turn: Any = None) -> Any:
        if self._stats["batches_split"] and not failed[0]:
            failed[0] = 1
            if turn is not None:
                await turn.wait()
                turn.release()
            await asyncio.sleep(0.05)  # the refusal comes a round trip later
            raise ServiceUnavailableError("unavailable, nothing written")
        return await produce_once(self, topic, partition, records, turn)

    monkeypatch.setattr(Sender, "produce_once", first_piece_refused)
    topic = make_topic(configs={"max.message.bytes": str(LIMIT_BYTES)})
    values = numbered_values(6_000)
    with Producer(
        seglog_service.address, **SPLIT_PRODUCER, enable_idempotence=False, max_in_flight_per_partition=1
    ) as producer:
        producer.send_many(topic, values, partition=0)
        producer.flush()
        statistics = producer.statistics()
    assert failed[0] == 1 and statistics.batches_split >= 1 and statistics.records_failed == 0
    assert values_to_end(seglog_service.address, topic, len(values)) == values


class _WatchedSleeps:
    """The sender module's ``asyncio`` with its sleeps noted in ``events``."""

    def __init__(self, events: list[tuple[str, float]]) -> None:
        self._events = events

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, delay: float) -> None:
        self._events.append(("sleep", delay))
        await asyncio.sleep(delay)


def test_a_quota_refusal_behind_a_split_batch_waits_its_retry_after(
    seglog_service: Any, make_topic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch behind one refused as too large is refused by a quota (retry after 300 ms), both
    answered while in flight: the split's pieces head the resend, which waits for the quota's
    hint before sending them and the batch again (it skipped every wait when a piece headed
    it, and the quota-refused batch went again at once)."""
    retry_after_ms = 300
    events: list[tuple[str, float]] = []
    behind_started = asyncio.Event()
    refused_started = threading.Event()  # the large batch is on its way: what follows is a batch of its own
    produce_once = Sender.produce_once

    async def quota_behind_the_split(self: Sender, topic: str, partition: int, records: bytes, turn: Any = None) -> Any:
        if b"behind" in records:
            events.append(("behind sent", 0))
            if events.count(("behind sent", 0)) == 1:  # its first send: refused by a quota
                behind_started.set()
                if turn is not None:
                    await turn.wait()
                    turn.release()
                await asyncio.sleep(0.05)  # the refusal comes a round trip later
                raise QuotaExceededError("over the byte-rate quota", retry_after_ms=retry_after_ms)
        elif len(records) > LIMIT_BYTES and not self._stats["batches_split"]:
            refused_started.set()
            await behind_started.wait()  # refused as too large with the small batch in flight
        return await produce_once(self, topic, partition, records, turn)

    monkeypatch.setattr(Sender, "produce_once", quota_behind_the_split)
    monkeypatch.setattr(_sender, "asyncio", _WatchedSleeps(events))
    topic = make_topic(configs={"max.message.bytes": str(LIMIT_BYTES)})
    values = numbered_values(1_500)  # about 165 KB: one batch, refused, and three pieces
    with Producer(seglog_service.address, **SPLIT_PRODUCER) as producer:
        producer.send(topic, b"first", partition=0).result()  # the stream confirmed, the id written
        group = producer.send_many(topic, values, partition=0)
        assert refused_started.wait(timeout=30)
        behind = producer.send(topic, b"behind", partition=0)
        producer.flush()
        assert group.result(0) and behind.result(0)
        statistics = producer.statistics()
    assert statistics.batches_split == 1
    sent_again = events.index(("behind sent", 0), events.index(("behind sent", 0)) + 1)
    waits = [delay for event, delay in events[:sent_again] if event == "sleep"]
    assert max(waits, default=0) >= retry_after_ms / 1000
    assert values_to_end(seglog_service.address, topic, len(values) + 2) == [b"first", *values, b"behind"]
