"""A partition's send turns (``seglog._send_turns``): whatever each task waits for before its
send, and whether it sends, gives up or is cancelled before it runs, the sends are made in the
order the turns were taken."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog._send_turns import SendTurn, SendTurns

# One task: how many loop turns it waits before its send, whether it gives up instead of
# sending, whether it is cancelled before it first runs, and how many requests it makes in its
# turn (split, as a request a batch on a stream not confirmed yet).
_task = st.tuples(st.integers(0, 4), st.booleans(), st.booleans(), st.integers(1, 3))


async def _run(plans: list[tuple[int, bool, bool, int]]) -> tuple[list[tuple[int, int]], int]:
    turns = SendTurns()
    sent: list[tuple[int, int]] = []

    async def request(index: int, part: int, delay: int, turn: SendTurn) -> None:
        for _ in range(delay):
            await asyncio.sleep(0)
        try:
            await turn.wait()
            sent.append((index, part))
        finally:
            turn.release()

    async def task(index: int, delay: int, gives_up: bool, parts: int, turn: SendTurn) -> None:
        if gives_up:
            return  # ended before its send: the done callback hands the turn on
        if parts == 1:
            await request(index, 0, delay, turn)
            return
        pieces = turn.split(parts)
        await asyncio.gather(*(request(index, part, delay - part, piece) for part, piece in enumerate(pieces)))

    tasks = []
    for index, (delay, gives_up, cancelled, parts) in enumerate(plans):
        turn = turns.take("partition")
        started = asyncio.create_task(task(index, delay, gives_up, parts, turn))
        started.add_done_callback(lambda _, turn=turn: turn.release())
        if cancelled:
            started.cancel()
        tasks.append(started)
    await asyncio.gather(*tasks, return_exceptions=True)
    for _ in range(len(plans) + 1):  # a turn handed on early hands on a loop turn after the one before it
        await asyncio.sleep(0)
    return sent, len(turns)


@settings(max_examples=300)
@given(st.lists(_task, max_size=12))
def test_sends_are_made_in_the_order_the_turns_were_taken(plans):
    sent, left = asyncio.run(_run(plans))
    expected = [
        (index, part)
        for index, (_, gives_up, cancelled, parts) in enumerate(plans)
        if not gives_up and not cancelled
        for part in range(parts)
    ]
    assert sent == expected
    assert left == 0  # every turn handed on and forgotten


def test_a_turn_handed_on_early_still_waits_for_the_one_before_it():
    async def run() -> list[str]:
        turns = SendTurns()
        first, second, third = turns.take("p"), turns.take("p"), turns.take("p")
        order: list[str] = []
        second.release()  # gave up before the first sent

        async def send(name: str, turn: SendTurn) -> None:
            await turn.wait()
            order.append(name)
            turn.release()

        waiting = asyncio.create_task(send("third", third))
        await asyncio.sleep(0)
        order.append("first")
        first.release()
        await waiting
        return order

    assert asyncio.run(run()) == ["first", "third"]
