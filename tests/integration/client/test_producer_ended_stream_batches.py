"""An ended ProduceStream says nothing of batches a message: the next open reaches a service
that says its own (restarted, another build, another limit) only once it answers. Until then a
partition's group goes one batch a message, as on a stream whose open is not answered yet.

The stream kept the ended one's word (16 batches a message) with no request limit known: a
group drained while it was down was packed to the client's 1 MiB and written as one message on
the reopened stream, above the 900,000 bytes this service takes (gRPC refuses it before the
service reads it). On a real service on loopback; the stream ended as a lost connection ends it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.support.integration_helpers import (
    LIMITED_REQUEST_BYTES_MAX,
    ServiceProcess,
    count_size_refusals,
    partition_values,
)

from seglog import Admin, AsyncProducer
from seglog._streams import RequestStream
from seglog.errors import ServiceUnavailableError
from seglog.structs import TopicPartition
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration

# A batch of one record each (two do not fit at BATCH_SIZE); two batches in one message are
# within the client's 1 MiB and above the service's request limit.
VALUES = [bytes([65 + index]) * 480_000 for index in range(3)]
BATCH_SIZE = 500_000


def _record_messages(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, int]]:
    """Every ProduceStream message as it is handed to its stream: whether the stream's current
    call had its open answered then, and how many batches the message carries."""
    sent: list[tuple[bool, int]] = []
    send = RequestStream.send

    async def recorded(self: RequestStream, message: Any, **options: Any) -> Any:
        if isinstance(message, pb.ProduceStreamRequest):
            answered = self._call is not None and self._open_answered is not None and self._open_answered.done()
            sent.append((answered, 1 + len(message.more)))
        return await send(self, message, **options)

    monkeypatch.setattr(RequestStream, "send", recorded)
    return sent



async def _send_after_an_end(
    address: str, topic: str, sent: list[tuple[bool, int]], idempotence: bool,
) -> tuple[list[Any], int, int]:
    """A stream that announced several batches a message, ended; then VALUES to partition 0,
    queued before the sender runs (one drain) and flushed. Each future's offset or error, the
    opens since the end, and the batches split."""
    async with AsyncProducer(
        address, batch_size=BATCH_SIZE, linger_ms=60_000, retries=0, enable_idempotence=idempotence,
    ) as producer:
        await producer.send_and_wait(topic, b"warm", partition=0)
        sender = producer._sender
        stream = sender._connection_for(TopicPartition(topic, 0)).produce_stream()
        assert stream.batches_max > 1 and sender.stream_batches_max > 1  # several a message, said and cached
        assert stream.request_bytes_max == LIMITED_REQUEST_BYTES_MAX
        opened = stream.opened_count
        stream._end(stream._call, ServiceUnavailableError("injected: the connection was lost"))
        sent.clear()
        futures = [await producer.send(topic, value, partition=0) for value in VALUES]
        await producer.flush()
        outcomes = [future.exception(0) or (await future).offset for future in futures]
        return outcomes, stream.opened_count - opened, producer.statistics().batches_split


@pytest.mark.parametrize("idempotence", [True, False], ids=["idempotent", "not-idempotent"])
def test_a_group_after_an_ended_stream_goes_one_batch_a_message_until_the_open_is_answered(
    limited_service: ServiceProcess, monkeypatch: pytest.MonkeyPatch, idempotence: bool,
) -> None:
    """Three batches drained while the stream was down (packed as a group of two and one, the
    sender's cached word): the first message, handed over before the reopened stream's open is
    answered, carries one batch, and so does each after it; every record lands once, in order,
    with no size refusal and nothing split. Before, the group of two went as one message of
    960,000 bytes on the reopened stream, refused by gRPC as above the request limit."""
    sent = _record_messages(monkeypatch)
    refusals = count_size_refusals(monkeypatch)
    topic = f"ended-{'idempotent' if idempotence else 'plain'}"
    with Admin(limited_service.address) as admin:
        admin.create_topic(topic, 1, {})
    outcomes, opens, split = asyncio.run(_send_after_an_end(limited_service.address, topic, sent, idempotence))
    assert sent == [(False, 1), (True, 1), (True, 1)]
    assert outcomes == [1, 2, 3]
    assert opens == 1 and refusals == [] and split == 0
    assert partition_values(limited_service.address, topic) == [b"warm", *VALUES]
