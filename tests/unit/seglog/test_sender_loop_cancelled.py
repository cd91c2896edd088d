"""The producer's sender loop cancelled by its event loop's shutdown (asyncio.run ending, a loop
thread's cleanup), the producer never closed: the batches it drained and held in hand, waiting
for a producer id, fail with ClientClosedError and are not sent (their futures stayed never done:
a waiter on them hung). An idempotent producer at an address nothing listens at asks for its
producer id on and on (retries), so its first batch stays in hand."""

from __future__ import annotations

import asyncio

from seglog import AsyncProducer
from seglog.errors import ClientClosedError

_NOWHERE = "127.0.0.1:9"  # discard: the producer id is never had


def test_batches_in_hand_fail_when_the_event_loop_shuts_down():
    futures: list = []
    in_hand: list = []

    async def run() -> None:
        producer = AsyncProducer(_NOWHERE, enable_idempotence=True, linger_ms=0, retries=1_000, retry_backoff_ms=20)
        await producer.start()
        sender = producer._sender
        futures.append(await producer.send("t", b"v", partition=0))
        while not sender._in_hand:  # drained, waiting for the producer id
            await asyncio.sleep(0.005)
        in_hand.append(sender)
        # returns with the producer open: asyncio.run cancels the sender's loop

    asyncio.run(run())
    sender = in_hand[0]
    assert sender._in_hand == [] and not sender.requests
    assert futures[0].done()
    assert isinstance(futures[0].exception(0), ClientClosedError)
    assert "event loop" in str(futures[0].exception(0))
