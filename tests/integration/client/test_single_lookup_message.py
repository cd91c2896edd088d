"""AsyncAdmin.offsets_for_times of one partition builds its LookupStreamRequest once and sets
its target in place for the next lookup (``_single_message``), handing the router the request
inside it. Against a real service: concurrent single lookups each get their own target's
answer; a lookup cancelled at any step, or answered with a target's error, leaves the next
lookups answering their own targets; a service without the LookupStream answers the same
through the unary call. The answers are ``offsets_for_times_many``'s for the same targets."""

from __future__ import annotations

import asyncio
import random

import pytest

from seglog import AsyncAdmin, AsyncProducer, TopicPartition
from seglog.errors import InvalidRequestError, TopicNotFoundError
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration

FIRST_MS = 1_700_000_000_000
RECORDS = 300


async def _filled(address: str, topic: str) -> None:
    async with AsyncProducer(address, linger_ms=0) as producer:
        futures = [await producer.send(topic, b"v", partition=0, timestamp_ms=FIRST_MS + 10 * number)
                   for number in range(RECORDS)]
        await asyncio.gather(*futures)


def _targets(topic: str, seed: int, count: int) -> list[tuple[TopicPartition, int]]:
    draw = random.Random(seed)
    return [(TopicPartition(topic, 0), draw.choice([-1, -2, -3, draw.randrange(FIRST_MS - 50, FIRST_MS + 10 * RECORDS + 50)]))
            for _ in range(count)]


async def _one(admin: AsyncAdmin, tp: TopicPartition, timestamp_ms: int):
    return (await admin.offsets_for_times({tp: timestamp_ms}))[tp]


async def test_concurrent_single_lookups_each_get_their_own_answer(seglog_service, make_topic):
    topic = make_topic(partitions=1)
    await _filled(seglog_service.address, topic)
    async with AsyncAdmin(seglog_service.address) as admin:
        for seed in range(5):
            targets = _targets(topic, seed, 64)
            expected = await admin.offsets_for_times_many(targets)
            found = await asyncio.gather(*(_one(admin, tp, ts) for tp, ts in targets))
            assert found == expected
            found = [await _one(admin, tp, ts) for tp, ts in targets]  # one at a time: the message reused
            assert found == expected


async def test_a_lookup_cancelled_at_any_step_leaves_the_next_answering_its_own_target(seglog_service, make_topic):
    topic = make_topic(partitions=1)
    await _filled(seglog_service.address, topic)
    tp = TopicPartition(topic, 0)
    async with AsyncAdmin(seglog_service.address) as admin:
        targets = _targets(topic, 7, 40)
        expected = await admin.offsets_for_times_many(targets)
        for steps in range(8):  # cancelled after 0..7 loop turns: before, during and after its write
            for (_, timestamp_ms), answer in zip(targets, expected):
                cancelled = asyncio.ensure_future(_one(admin, tp, FIRST_MS + 5))
                for _ in range(steps):
                    await asyncio.sleep(0)
                cancelled.cancel()
                behind = asyncio.ensure_future(_one(admin, tp, timestamp_ms))  # asked at once, and once more after
                assert await behind == answer
                assert await _one(admin, tp, timestamp_ms) == answer
                if not cancelled.cancelled():
                    assert cancelled.result() == (await admin.offsets_for_times_many([(tp, FIRST_MS + 5)]))[0]


async def test_an_error_answer_is_raised_and_the_next_lookup_answers_its_own_target(seglog_service, make_topic):
    topic = make_topic(partitions=1)
    await _filled(seglog_service.address, topic)
    tp = TopicPartition(topic, 0)
    async with AsyncAdmin(seglog_service.address) as admin:
        for number in range(20):
            with pytest.raises(TopicNotFoundError, match="no-such-topic"):
                await _one(admin, TopicPartition("no-such-topic", 0), FIRST_MS)
            with pytest.raises(InvalidRequestError):
                await _one(admin, tp, -7)  # no special target
            found = await _one(admin, tp, FIRST_MS + 10 * number)
            assert (found.offset, found.timestamp_ms) == (number, FIRST_MS + 10 * number)


async def test_a_service_without_the_lookup_stream_answers_single_lookups_by_the_unary_call(
        seglog_service, make_topic, monkeypatch):
    topic = make_topic(partitions=1)
    await _filled(seglog_service.address, topic)
    from seglog.client import Transport

    real = Transport._stream_call

    def missing_method(self, rpc):  # a method the service does not serve: UNIMPLEMENTED
        return real(self, self._channel.stream_stream(
            "/seglog.v1.LogService/NoSuchStream",
            request_serializer=pb.LookupStreamRequest.SerializeToString,
            response_deserializer=pb.LookupStreamResponse.FromString,
        ))

    tp = TopicPartition(topic, 0)
    async with AsyncAdmin(seglog_service.address) as admin:
        targets = _targets(topic, 11, 30)
        expected = await admin.offsets_for_times_many(targets)
    monkeypatch.setattr(Transport, "_stream_call", missing_method)
    async with AsyncAdmin(seglog_service.address) as admin:
        found = [await _one(admin, tp, ts) for _, ts in targets]
        assert admin._transport._lookup_streaming is False  # the unary call answered them
        assert found == expected
