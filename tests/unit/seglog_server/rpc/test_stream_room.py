"""OrderedReplies.has_room, the read loop's check before it waits for room: true exactly when
``wait_for_room`` would return at once, over any mix of ready and late answers of any size
(the bytes bound), writes that complete at once or a turn later, and a write that fails
(Hypothesis)."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog_server.rpc.streams import OrderedReplies


class _WriteFailed(Exception):
    pass


def _returns_at_once(replies: OrderedReplies) -> bool:
    """Whether ``wait_for_room`` returns (or raises) in its first step, without waiting."""
    waiting = replies.wait_for_room()
    try:
        waiting.send(None)
    except StopIteration:
        return True
    except _WriteFailed:
        return False  # it raises at once: no room, the stream ends
    waiting.close()
    return False


def _size(message: object) -> int:
    return message if isinstance(message, int) else 1


async def _check(in_flight_max: int, held_bytes_max: int, steps: list[tuple[str, int]]) -> None:
    written: list[object] = []
    late: list[asyncio.Future[object]] = []

    async def write(message: object) -> None:
        if message == "fail":
            raise _WriteFailed()
        if isinstance(message, int) and message % 2:
            await asyncio.sleep(0)  # this write completes a loop turn later
        written.append(message)

    replies = OrderedReplies(write, in_flight_max, held_bytes_max, _size)
    number = 0
    for action, pick in steps:
        assert replies.has_room == _returns_at_once(replies)
        if action == "ready" and replies.has_room:
            number += 1
            await replies.send(number)
        elif action == "late" and replies.has_room:
            future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
            late.append(future)
            await replies.send(future)
        elif action == "resolve" and late:
            open_futures = [f for f in late if not f.done()]
            if open_futures:
                number += 1
                open_futures[pick % len(open_futures)].set_result(number)
        elif action == "fail" and replies.has_room:
            try:
                await replies.send("fail")
            except _WriteFailed:
                pass  # failed as it started: raised here, remembered for what follows
        elif action == "turn":
            await asyncio.sleep(0)
        assert replies.has_room == _returns_at_once(replies)
    replies.cancel()


@settings(max_examples=200, deadline=None)
@given(
    in_flight_max=st.integers(min_value=1, max_value=4),
    held_bytes_max=st.integers(min_value=1, max_value=40),
    steps=st.lists(
        st.tuples(st.sampled_from(["ready", "late", "resolve", "turn", "fail"]), st.integers(0, 7)), max_size=40,
    ),
)
def test_has_room_is_wait_for_room_returning_at_once(in_flight_max, held_bytes_max, steps):
    asyncio.run(_check(in_flight_max, held_bytes_max, steps))


def test_no_room_after_a_failed_write():
    async def scenario() -> None:
        async def write(message: object) -> None:
            await asyncio.sleep(0)
            raise _WriteFailed()

        replies = OrderedReplies(write, 4, size_of=_size)
        assert replies.has_room
        late: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        await replies.send(late)  # owed: the drainer writes it once it is ready
        late.set_result("answer")
        for _ in range(3):
            await asyncio.sleep(0)
        assert not replies.has_room
        try:
            await replies.wait_for_room()
        except _WriteFailed:
            return
        raise AssertionError("wait_for_room returned after a failed write")

    asyncio.run(scenario())
