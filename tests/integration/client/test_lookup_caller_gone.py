"""A single lookup whose caller stops reading: ``AsyncAdmin.offsets_for_times`` reads its own
answer on the connection's LookupStream (``RequestStream(caller_reads=True)``), and a task
cancelled while it reads, its answer still owed, must leave the stream usable: the answer is
read and dropped, the lookups behind it and the next ones on the same AsyncAdmin answer their
own targets, on the same stream. On a real service on loopback, paused with SIGSTOP while the
answers are owed (so the cancellation lands in the caller's read, not after its answer came)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from seglog import AsyncAdmin, AsyncProducer, TopicPartition

pytestmark = pytest.mark.integration

FIRST_MS = 1_700_000_000_000
RECORDS = 100
WAIT_S = 15  # bounds a hang, not speed


@contextlib.contextmanager
def _paused(process: Any) -> Iterator[None]:
    """The service process stopped (SIGSTOP) until the block ends (SIGCONT, whatever happens)."""
    process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        process.send_signal(signal.SIGCONT)


async def _until(condition: Callable[[], bool]) -> None:
    async def turns() -> None:
        while not condition():
            await asyncio.sleep(0.001)

    await asyncio.wait_for(turns(), WAIT_S)


async def _offset(admin: AsyncAdmin, tp: TopicPartition, timestamp_ms: int) -> int:
    found = (await asyncio.wait_for(admin.offsets_for_times({tp: timestamp_ms}), WAIT_S))[tp]
    assert found is not None
    return found.offset


@pytest.mark.parametrize(("behind", "cancel_behind"), [(0, False), (3, False), (3, True)],
                         ids=["alone", "asks_behind", "asks_behind_cancelled_too"])
async def test_a_lookup_cancelled_while_its_caller_reads_leaves_the_stream_answering(
    seglog_service, make_topic, behind, cancel_behind
):
    """Five rounds: the service paused, a lookup asked (its caller reading), ``behind`` lookups
    asked behind it, then the caller cancelled (and those behind too, when ``cancel_behind``)
    and the service resumed. The lookups behind answer their own targets, and so do the next
    ones, on the stream opened first (no reopen)."""
    topic = make_topic(partitions=1)
    async with AsyncProducer(seglog_service.address, linger_ms=0) as producer:
        futures = [await producer.send(topic, b"v", partition=0, timestamp_ms=FIRST_MS + 10 * number)
                   for number in range(RECORDS)]
        await asyncio.gather(*futures)
    tp = TopicPartition(topic, 0)
    async with AsyncAdmin(seglog_service.address) as admin:
        assert await _offset(admin, tp, FIRST_MS) == 0  # the stream open, its first answer read
        assert admin._transport is not None
        stream = admin._transport.lookup_stream()
        opened = stream.opened_count
        for round_ in range(5):
            with _paused(seglog_service.process):
                gone = asyncio.ensure_future(admin.offsets_for_times({tp: FIRST_MS + 10 * round_}))
                await _until(lambda: stream._caller_reading)
                later = [asyncio.ensure_future(_offset(admin, tp, FIRST_MS + 10 * (20 + 3 * round_ + n) - 5))
                         for n in range(behind)]
                await _until(lambda: stream.owed_count == 1 + behind)
                gone.cancel()
                if cancel_behind:
                    for ask in later:
                        ask.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await gone
            if cancel_behind:
                for ask in later:
                    with pytest.raises(asyncio.CancelledError):
                        await ask
            else:
                assert [await ask for ask in later] == [20 + 3 * round_ + n for n in range(behind)]
            assert await _offset(admin, tp, FIRST_MS + 10 * (60 + round_)) == 60 + round_
            await _until(lambda: stream.owed_count == 0)
        assert stream.opened_count == opened  # none of the callers gone broke the stream
