"""The room a finished request frees in ``max_in_flight_requests`` wakes the sender's loop, against
a real service. A request task leaves the sender's requests in its done callback, which runs after
the loop was woken by the task's own answer: with every request task ending in one loop turn, the
woken loop once drained with no room, parked, and nothing woke it again (no linger timer is set
for batches ready but held back for room), so ``flush`` waited for ever.

The requests are held, answered, behind a gate (the ``produce_once`` seam) and let go in one
step, so they all end in the same loop turn."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog import AsyncProducer
from seglog._sender import Sender
from tests.support.integration_helpers import partition_values

pytestmark = pytest.mark.integration

# Bounds on waits that must not hang (the bug was a hang): generous, never a speed assertion.
_FLUSH_TIMEOUT_MS = 10_000
_GATE_TIMEOUT_S = 10.0


def _gate_requests(monkeypatch) -> dict:
    """Once armed with a count, that many answered requests wait at the gate until ``go``;
    the requests after them pass."""
    real = Sender.produce_once
    gate: dict = {"count": 0, "arrived": 0, "all_there": None, "go": None}

    async def produce_once(self, topic, partition, records, turn=None):
        outcome = await real(self, topic, partition, records, turn)
        if gate["arrived"] < gate["count"]:
            gate["arrived"] += 1
            if gate["arrived"] == gate["count"]:
                gate["all_there"].set()
            await gate["go"].wait()
        return outcome

    monkeypatch.setattr(Sender, "produce_once", produce_once)
    return gate


async def _held_round(producer: AsyncProducer, gate: dict, topic: str, held: int, behind: list[tuple[int, bytes]]):
    """``held`` requests (a partition each) answered and held at the gate, the ``behind``
    records appended while every request room is taken, then the held ones let go at once."""
    requests = producer._sender.requests
    for _ in range(1000):  # the last round's tasks gone: every request room free for the held ones
        if not requests:
            break
        await asyncio.sleep(0)
    assert not requests
    gate.update(count=held, arrived=0, all_there=asyncio.Event(), go=asyncio.Event())
    futures = [await producer.send(topic, b"held-%d" % p, partition=p) for p in range(held)]
    await asyncio.wait_for(gate["all_there"].wait(), _GATE_TIMEOUT_S)
    futures += [await producer.send(topic, value, partition=p) for p, value in behind]
    gate["go"].set()  # every held request ends in the same loop turn
    await producer.flush(_FLUSH_TIMEOUT_MS)
    return futures


@pytest.mark.parametrize("idempotence", [True, False])
def test_requests_ending_in_one_loop_turn_wake_the_loop_for_the_batches_held_back(
    seglog_service, make_topic, monkeypatch, idempotence
):
    topic = make_topic(partitions=3)
    gate = _gate_requests(monkeypatch)

    async def run() -> list:
        async with AsyncProducer(seglog_service.address, linger_ms=0, max_in_flight_requests=2,
                                 max_in_flight_per_partition=2,
                                 enable_idempotence=idempotence) as producer:
            for p in range(3):
                await producer.send_and_wait(topic, b"warm-up", partition=p)
            futures = await _held_round(producer, gate, topic, 2, [(2, b"behind-2"), (0, b"behind-0")])
            return [(await future).offset for future in futures]

    assert asyncio.run(run()) == [1, 1, 1, 2]
    assert partition_values(seglog_service.address, topic, 0) == [b"warm-up", b"held-0", b"behind-0"]
    assert partition_values(seglog_service.address, topic, 2) == [b"warm-up", b"behind-2"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), partitions=st.integers(2, 5), idempotence=st.booleans(), linger_ms=st.sampled_from([0, 5]))
def test_any_number_of_requests_ending_together_never_stall_flush(
    seglog_service, make_topic, monkeypatch, data, partitions, idempotence, linger_ms
):
    """Rounds of held requests (up to the room, a partition each) let go together, with records
    for any partitions appended behind them: every round's flush ends, every record is written
    in its partition's order."""
    topic = make_topic(partitions=partitions)
    room = data.draw(st.integers(1, partitions), label="max_in_flight_requests")
    rounds = data.draw(st.lists(st.lists(st.integers(0, partitions - 1), max_size=8), min_size=1, max_size=3),
                       label="records behind each round")
    gate = _gate_requests(monkeypatch)

    async def run() -> dict[int, list[int]]:
        offsets: dict[int, list[int]] = {}
        async with AsyncProducer(seglog_service.address, linger_ms=linger_ms, max_in_flight_requests=room,
                                 max_in_flight_per_partition=min(room, 5),
                                 enable_idempotence=idempotence) as producer:
            for p in range(partitions):
                await producer.send_and_wait(topic, b"warm-up", partition=p)
            for n, behind in enumerate(rounds):
                records = [(p, b"r%d-%d" % (n, i)) for i, p in enumerate(behind)]
                futures = await _held_round(producer, gate, topic, room, records)
                for future in futures:
                    metadata = await future
                    offsets.setdefault(metadata.partition, []).append(metadata.offset)
        return offsets

    offsets = asyncio.run(run())
    for p, written in offsets.items():
        assert written == list(range(1, len(written) + 1)), (p, written)
