"""The producer putting several of a partition's batches in one ProduceStream message (as many as
its window has room for and the service announces), against a real service: every batch once and
in order, each future with its own batch's answer (a refusal in the middle of a message fails
that batch alone), and a stream broken under messages of several batches retried in order with
nothing written twice."""

from __future__ import annotations

import asyncio

import pytest

from seglog import Admin, AsyncProducer, Producer
from seglog._streams import RequestStream
from seglog.errors import RecordTooLargeError, ServiceUnavailableError
from tests.support.integration_helpers import partition_values

pytestmark = pytest.mark.integration


def _count_messages(monkeypatch) -> list[int]:
    """The batches of each ProduceStream message sent (the real send does the work)."""
    carried: list[int] = []
    real_send = RequestStream.send

    async def counting_send(self, message, **options):
        if self._answer_field == "produce":
            carried.append(1 + len(message.more))
        return await real_send(self, message, **options)

    monkeypatch.setattr(RequestStream, "send", counting_send)
    return carried


def test_send_many_with_small_batches_sends_several_a_message_in_order(seglog_service, make_topic, monkeypatch):
    topic = make_topic()
    carried = _count_messages(monkeypatch)
    values = [b"%05d" % i + b"x" * 95 for i in range(4000)]
    with Producer(seglog_service.address, batch_size=2000) as producer:  # about 14 records a batch
        group = producer.send_many(topic, values, partition=0)
        producer.flush()
        metadata = group.result(timeout=30)
        batches = producer.statistics().batches_sent
    assert [meta.offset for meta in metadata] == list(range(len(values)))
    assert partition_values(seglog_service.address, topic) == values
    assert sum(carried) == batches
    assert max(carried) > 1 and len(carried) < batches


def test_a_batch_refused_inside_a_message_fails_alone(seglog_service, make_topic, monkeypatch):
    topic = make_topic(configs={"max.message.bytes": "1200"})
    carried = _count_messages(monkeypatch)
    small = [b"s%02d" % i + b"." * 97 for i in range(12)]
    big = b"B" * 1150  # alone in its batch: above the topic's max.message.bytes

    async def run() -> tuple[list, BaseException | None]:
        async with AsyncProducer(
            seglog_service.address, batch_size=1000, linger_ms=60_000, enable_idempotence=False,
        ) as producer:
            await producer.send_and_wait(topic, b"warm-up", partition=0)  # the stream confirmed
            carried.clear()
            before = [await producer.send(topic, value, partition=0) for value in small[:6]]
            refused = await producer.send(topic, big, partition=0)
            after = [await producer.send(topic, value, partition=0) for value in small[6:]]
            await producer.flush()
            error = refused.exception()
            return [await future for future in before + after], error

    metadata, error = asyncio.run(run())
    assert carried == [3]  # the three batches went in one message
    assert isinstance(error, RecordTooLargeError)
    assert [meta.offset for meta in metadata] == list(range(1, 13))
    assert partition_values(seglog_service.address, topic) == [b"warm-up", *small]


def test_a_stream_broken_under_messages_of_several_batches_is_retried_in_order_once_each(
    seglog_service, make_topic, monkeypatch
):
    """Every third message of several batches ends the stream right after its write (as a lost
    connection would): its batches and every one owed fail retriably whether or not the service
    appended them; the windows send them again in order and idempotence keeps each record once."""
    topic = make_topic()
    real_send = RequestStream.send
    breaks = 0
    grouped = 0

    async def flaky_send(self, message, **options):
        nonlocal breaks, grouped
        answer = await real_send(self, message, **options)
        if self._answer_field != "produce" or not message.more:
            return answer
        grouped += 1
        if grouped % 3 == 0 and breaks < 6:
            breaks += 1
            broke = ServiceUnavailableError("injected: the stream broke")
            if self._call is not None:
                self._end(self._call, broke)
            if answer.done():
                answer = asyncio.get_running_loop().create_future()
                answer.set_exception(broke)
        return answer

    monkeypatch.setattr(RequestStream, "send", flaky_send)
    values = [b"%05d" % i + b"y" * 95 for i in range(3000)]
    with Producer(seglog_service.address, batch_size=1500, retries=50, retry_backoff_ms=1) as producer:
        group = producer.send_many(topic, values, partition=0)
        producer.flush()
        metadata = group.result(timeout=60)
        assert producer.statistics().retries > 0
    assert breaks >= 2, f"only {breaks} breaks in {grouped} messages of several batches"
    assert partition_values(seglog_service.address, topic) == values
    assert [meta.offset for meta in metadata] == list(range(len(values)))


def test_messages_of_several_batches_stay_under_the_service_request_limit(start_service, monkeypatch):
    """Batches that fit the client's request limit together (1 MiB) but not the service's
    (announced at open) go in messages the service takes, envelope counted: nothing ends the
    stream and every batch is written once, in order."""
    # Requests of at most 600,000 bytes at the service, topics' batches up to 500,000.
    service = start_service(args=["--request-bytes-max", "600000", "--topic-default", "max.message.bytes=500000"])
    address = service.address
    with Admin(address) as admin:
        admin.create_topic("big-batches", 1, {})
    real_send = RequestStream.send
    sizes: list[tuple[int, int]] = []
    ended: list[BaseException] = []
    real_end = RequestStream._end

    async def measuring_send(self, message, **options):
        if self._answer_field == "produce":
            sizes.append((1 + len(message.more), message.ByteSize()))
        return await real_send(self, message, **options)

    def noting_end(self, call, error):
        if self._call is call and not self._closed:
            ended.append(error)
        return real_end(self, call, error)

    monkeypatch.setattr(RequestStream, "send", measuring_send)
    monkeypatch.setattr(RequestStream, "_end", noting_end)
    values = [b"%d" % i + b"x" * 199_999 for i in range(6)]

    async def run() -> list[int]:
        async with AsyncProducer(address, batch_size=250_000, linger_ms=60_000, retries=0) as producer:
            await producer.send_and_wait("big-batches", b"warm-up", partition=0)  # the stream confirmed
            futures = [await producer.send("big-batches", value, partition=0) for value in values]
            await producer.flush()
            return [(await future).offset for future in futures]

    offsets = asyncio.run(run())
    assert offsets == list(range(1, 7))
    assert ended == []
    assert max(count for count, _ in sizes) > 1  # still several batches a message
    assert all(size <= 600_000 for count, size in sizes if count > 1)
    assert partition_values(address, "big-batches") == [b"warm-up", *values]


def test_a_window_of_large_batches_settles_each_message_on_its_own_answer(seglog_service, make_topic, monkeypatch):
    """Batches drained together that go one a message (each above half the request limit) are
    requests of their own: the first batch completes on its own message's answer while a later
    message's answer is still held, as with one batch a request (the window stays pipelined)."""
    topic = make_topic()
    real_send = RequestStream.send
    gate: asyncio.Event | None = None
    carried: list[int] = []

    async def holding_send(self, message, **options):
        answer = await real_send(self, message, **options)
        if self._answer_field != "produce" or gate is None:
            return answer
        carried.append(1 + len(message.more))
        if len(carried) != 2:
            return answer
        held = asyncio.get_running_loop().create_future()  # the second message's answer, held

        async def release() -> None:
            await gate.wait()
            try:
                held.set_result(await answer)
            except Exception as error:  # noqa: BLE001 - handed on as the answer
                held.set_exception(error)

        asyncio.get_running_loop().create_task(release())
        return held

    monkeypatch.setattr(RequestStream, "send", holding_send)
    values = [bytes([65 + i]) * 600_000 for i in range(3)]  # one a batch, one batch a message

    async def run() -> list[int]:
        nonlocal gate
        async with AsyncProducer(
            seglog_service.address, batch_size=700_000, linger_ms=60_000, max_in_flight_per_partition=5,
        ) as producer:
            await producer.send_and_wait(topic, b"warm-up", partition=0)  # the stream confirmed
            gate = asyncio.Event()
            loop = asyncio.get_running_loop()
            futures = [await producer.send(topic, value, partition=0) for value in values]
            flushing = asyncio.create_task(producer.flush())
            first = asyncio.Event()
            futures[0].add_done_callback(lambda _: loop.call_soon_threadsafe(first.set))
            try:
                # A deadlock guard only: before each message settled on its own, the first
                # batch waited for the held second answer and never completed here.
                await asyncio.wait_for(first.wait(), 30)
                first_done_while_held = not futures[1].done()
            except TimeoutError:
                first_done_while_held = False
            finally:
                gate.set()
            await flushing
            assert first_done_while_held
            return [(await future).offset for future in futures]

    offsets = asyncio.run(run())
    assert carried == [1, 1, 1]
    assert offsets == [1, 2, 3]
    assert partition_values(seglog_service.address, topic) == [b"warm-up", *values]
