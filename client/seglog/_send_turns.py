"""A partition's send turns: its messages reach the stream in the order they were started.

A ProduceStream writes messages in the order ``send`` is called. The sender starts each of a
partition's messages as a task of its own, so that each is settled on its own answer; but a task
may wait before its send (a connection still choosing its address, a stream being reopened, a
message of several batches split again to the limits the stream announces, one request a batch
on a stream not confirmed yet). Without an order of their own, a message started later could be
sent first and land before an earlier one (refused as out of sequence with idempotence, written
out of order without).

So each task takes its partition's next turn when it is created, in start order; it waits for
the turn before it just before its first send and hands its own on once its sends are made (or
once it gave up). A turn handed on early still waits for the one before it: the order holds
through any task that ends without sending.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

__all__ = ["SendTurn", "SendTurns"]


class SendTurn:
    """One task's place in its partition's order of sends."""

    __slots__ = ("_before", "_mine")

    def __init__(self, before: asyncio.Future[None] | None, mine: asyncio.Future[None]) -> None:
        self._before = before  # done once every turn taken before this one has sent
        self._mine = mine  # done once this one and every one before it have sent

    async def wait(self) -> None:
        """Until every turn taken before this one has made its sends (or given up)."""
        before = self._before
        if before is not None and not before.done():
            # asyncio.wait, not await: cancelling this task must not cancel the chain.
            await asyncio.wait((before,))

    def release(self) -> None:
        """This turn's sends are made (or it gave up): the next may send once the ones before
        this have. Idempotent."""
        if self._mine.done():
            return
        before = self._before
        if before is None or before.done():
            self._mine.set_result(None)
        else:
            before.add_done_callback(lambda _: self.release())

    def split(self, count: int) -> list[SendTurn]:
        """This turn as ``count`` turns in a row: several requests made in its place, in order.
        The last of them hands this one on."""
        assert count >= 1
        loop = self._mine.get_loop()
        links = [loop.create_future() for _ in range(count - 1)] + [self._mine]
        return [SendTurn(self._before if index == 0 else links[index - 1], link) for index, link in enumerate(links)]


class SendTurns:
    """The last turn taken, by partition (forgotten once it is handed on)."""

    def __init__(self) -> None:
        self._last: dict[Hashable, asyncio.Future[None]] = {}

    def take(self, key: Hashable) -> SendTurn:
        """The next turn of ``key``: after every turn taken for it before."""
        mine = asyncio.get_running_loop().create_future()
        turn = SendTurn(self._last.get(key), mine)
        self._last[key] = mine
        mine.add_done_callback(lambda done: self._forget(key, done))
        return turn

    def _forget(self, key: Hashable, done: asyncio.Future[None]) -> None:
        if self._last.get(key) is done:
            del self._last[key]

    def __len__(self) -> int:
        return len(self._last)
