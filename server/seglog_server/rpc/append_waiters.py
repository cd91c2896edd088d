"""Per-partition wake-ups for long polls: Fetch and Consume wait here at the tail of a log.

Every append goes through the service, so the service knows when a partition grows: after each
successful Produce it calls ``notify``. A waiter takes a *ticket* (a future for the partition's
next append) BEFORE it reads the log, then waits on the ticket only if the read came back short.
That order closes the race: an append that the read missed completes after the ticket was taken,
so its ``notify`` completes the ticket. No polling loop, no timer per partition.

One future per partition is shared by all its waiters and replaced at each notify; waiting never
cancels it, so one waiter's timeout or cancellation does not disturb the others. A wait with a
timeout (Fetch's long poll) goes through ``asyncio.wait``; a wait without one (a Consume stream at
the tail, once per record it delivers) parks a future of its own, which the notify completes
directly: the waiter runs one turn of the loop after the append, not two (a callback on the
shared future, then the wake-up), and without ``asyncio.wait``'s set and callbacks. ``close``
completes every ticket, present and future, so waiters wake up and see that the service is
stopping. Everything here runs on the event loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

__all__ = ["AppendWaiters", "AppendWaitersStatistics"]

_Key = tuple[str, int]


@dataclass(frozen=True)
class AppendWaitersStatistics:
    watched_partition_count: int
    notify_count: int
    wake_count: int  # notifies that completed a ticket somebody held
    closed: bool
    waiting_count: int = 0  # long polls and streams waiting in wait_ticket now


class AppendWaiters:
    def __init__(self) -> None:
        self._tickets: dict[_Key, asyncio.Future[None]] = {}
        # Waiters without a timeout, by the ticket they wait on (see the module docstring).
        self._parked: dict[asyncio.Future[None], list[asyncio.Future[None]]] = {}
        self._closed = False
        self._notify_count = 0
        self._wake_count = 0
        self._waiting_count = 0

    @property
    def closed(self) -> bool:
        return self._closed

    def ticket(self, topic: str, partition: int) -> asyncio.Future[None]:
        """A future completed by the partition's next append (or by ``close``)."""
        key = (topic, partition)
        future = self._tickets.get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            if self._closed:
                future.set_result(None)
            else:
                self._tickets[key] = future
        return future

    def notify(self, topic: str, partition: int) -> None:
        """The partition changed (append, records deleted): wake everyone waiting on it."""
        self._notify_count += 1
        future = self._tickets.pop((topic, partition), None)
        if future is not None:
            self._wake_count += 1
            self._complete(future)

    def discard(self, topic: str, partition: int) -> None:
        """Drops the partition's ticket after a read that failed (unknown topic, offline dir).

        A failing long poll must leave nothing behind, or polls on unknown topics would grow the
        map without bound. Anyone else holding the ticket is woken: waiters re-read after any
        wake-up, so they see the same error or take a fresh ticket. Not counted as a notify.
        """
        future = self._tickets.pop((topic, partition), None)
        if future is not None:
            self._complete(future)

    def notify_topic(self, topic: str) -> None:
        """The whole topic changed (deleted): wake the waiters of each of its partitions."""
        for key in [key for key in self._tickets if key[0] == topic]:
            self.notify(*key)

    def close(self) -> None:
        """Wake every waiter now and make every later ticket complete at once."""
        self._closed = True
        tickets, self._tickets = self._tickets, {}
        for future in tickets.values():
            self._complete(future)

    async def wait_ticket(self, ticket: asyncio.Future[None], timeout_s: float | None) -> bool:
        """Waits until the ticket completes or ``timeout_s`` passes; True if it completed."""
        if ticket.done():
            return True
        if timeout_s is not None and timeout_s <= 0:
            return False
        self._waiting_count += 1
        try:
            if timeout_s is None:
                await self._park(ticket)
                return True
            done, _ = await asyncio.wait((ticket,), timeout=timeout_s)
        finally:
            self._waiting_count -= 1
        return bool(done)

    async def _park(self, ticket: asyncio.Future[None]) -> None:
        """Waits for ``ticket`` on a future of this waiter's own; cancelling the waiter cancels
        only that future and takes it off the ticket's list."""
        mine = ticket.get_loop().create_future()
        parked = self._parked.get(ticket)
        if parked is None:
            self._parked[ticket] = [mine]
        else:
            parked.append(mine)
        try:
            await mine
        finally:
            if not mine.done() or mine.cancelled():  # not woken by _complete: still listed
                parked = self._parked.get(ticket)
                if parked is not None:
                    parked.remove(mine)
                    if not parked:
                        del self._parked[ticket]

    def _complete(self, ticket: asyncio.Future[None]) -> None:
        """Completes ``ticket`` and, at once, every waiter parked on it."""
        ticket.set_result(None)
        for mine in self._parked.pop(ticket, ()):
            if not mine.done():
                mine.set_result(None)

    def statistics(self) -> AppendWaitersStatistics:
        return AppendWaitersStatistics(
            watched_partition_count=len(self._tickets),
            notify_count=self._notify_count,
            wake_count=self._wake_count,
            closed=self._closed,
            waiting_count=self._waiting_count,
        )
