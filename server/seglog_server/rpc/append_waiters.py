"""Per-partition wake-ups for long polls: Fetch and Consume wait here at the tail of a log.

The storage announces every change of a partition itself (an append, a truncation, DeleteRecords,
the topic's deletion: ``storage.log.unified_log.ChangeListener``), on whatever thread made it, and
``storage_changed`` turns that into a ``notify`` on the event loop. The storage, not the RPC that
asked for the append, announces it: a Produce cancelled while its append runs on a pool thread
still lands its batch, and the announcement with it. A waiter takes a *ticket* (a future for the
partition's next change) BEFORE it reads the log, then waits on the ticket only if the read came
back short. That order closes the race: a change the read missed is announced after the ticket
was taken, so its ``notify`` completes the ticket. No polling loop, no timer per partition.

One future per partition is shared by all its waiters and replaced at each notify; waiting never
cancels it, so one waiter's timeout or cancellation does not disturb the others. Every wait (a
Consume stream at the tail, once per record it delivers; Fetch's long poll) parks a future of its
own, which the notify completes directly, as do its timeout (a timer handle) and its interrupt (a
future, such as a policy reload a parked stream must recheck its rights on): the waiter runs one
turn of the loop after the append, not two or three (a callback on the shared future, or
``asyncio.wait``'s callback, then the wake-up; a task around the wait, one more), and without
``asyncio.wait``'s set and callbacks. An append's ticket completes with the batch it wrote
(``AppendedBatch``: a parked Consume stream pushes it without reading the log again, when the
log says it still may); any other change's, ``close``'s and ``discard``'s with None. ``close``
completes every ticket, present and future, so waiters wake up and see that the service is
stopping. Everything here runs on the event loop, except ``storage_changed``, which may be called
from any thread.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

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
        # The loop the tickets belong to: known at construction in the service (built on it),
        # else from the first ticket; before any ticket there is nobody to wake.
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._tickets: dict[_Key, asyncio.Future[Any]] = {}
        # Waiters without a timeout, by the ticket they wait on (see the module docstring).
        self._parked: dict[asyncio.Future[Any], list[asyncio.Future[None]]] = {}
        self._closed = False
        # Parked waiters woken so far: an append that moved it woke somebody (streams.py lets
        # them push before it acknowledges).
        self.woken_count = 0
        self._notify_count = 0
        self._wake_count = 0
        self._waiting_count = 0

    @property
    def closed(self) -> bool:
        return self._closed

    def ticket(self, topic: str, partition: int) -> asyncio.Future[Any]:
        """A future completed by the partition's next change (or by ``close``): with the
        ``AppendedBatch`` of an append that told it, else None."""
        key = (topic, partition)
        future = self._tickets.get(key)
        if future is None:
            loop = asyncio.get_running_loop()
            if self._loop is None:
                self._loop = loop
            future = loop.create_future()
            if self._closed:
                future.set_result(None)
            else:
                self._tickets[key] = future
        return future

    def notify(self, topic: str, partition: int, appended: Any = None) -> None:
        """The partition changed (append, records deleted): wake everyone waiting on it."""
        self._notify_count += 1
        future = self._tickets.pop((topic, partition), None)
        if future is not None:
            self._wake_count += 1
            self._complete(future, appended)

    def storage_changed(self, topic: str, partition: int, appended: Any = None) -> None:
        """The storage's change listener (``storage.log.unified_log.ChangeListener``), callable from any
        thread: ``notify`` at once on the waiters' loop, else handed to that loop."""
        loop = self._loop
        if loop is None:
            return  # no ticket was ever taken: nobody to wake
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.notify(topic, partition, appended)
            return
        try:
            loop.call_soon_threadsafe(self.notify, topic, partition, appended)
        except RuntimeError:
            pass  # the loop is closed: the service has stopped, nobody waits any more

    def discard(self, topic: str, partition: int) -> None:
        """Drops the partition's ticket after a read that failed (unknown topic, offline dir).

        A failing long poll must leave nothing behind, or polls on unknown topics would grow the
        map without bound. Anyone else holding the ticket is woken: waiters re-read after any
        wake-up, so they see the same error or take a fresh ticket. Not counted as a notify.
        """
        future = self._tickets.pop((topic, partition), None)
        if future is not None:
            self._complete(future)

    def close(self) -> None:
        """Wake every waiter now and make every later ticket complete at once."""
        self._closed = True
        tickets, self._tickets = self._tickets, {}
        for future in tickets.values():
            self._complete(future)

    async def wait_ticket(
        self, ticket: asyncio.Future[Any], timeout_s: float | None,
        interrupt: asyncio.Future[Any] | None = None,
    ) -> bool:
        """Waits until the ticket completes, ``timeout_s`` passes (None: no timeout) or
        ``interrupt`` completes; True if the ticket completed."""
        if ticket.done():
            return True
        if (timeout_s is not None and timeout_s <= 0) or (interrupt is not None and interrupt.done()):
            return False
        loop = ticket.get_loop()
        mine = loop.create_future()
        parked = self._parked.get(ticket)
        if parked is None:
            self._parked[ticket] = [mine]
        else:
            parked.append(mine)
        timer = None if timeout_s is None else loop.call_later(timeout_s, _wake, mine)
        on_interrupt = None
        if interrupt is not None:
            def on_interrupt(_done: asyncio.Future[Any]) -> None:
                _wake(mine)

            interrupt.add_done_callback(on_interrupt)
        self._waiting_count += 1
        try:
            await mine
        finally:
            self._waiting_count -= 1
            if timer is not None:
                timer.cancel()
            if on_interrupt is not None:
                interrupt.remove_done_callback(on_interrupt)  # type: ignore[union-attr]
            if not ticket.done():  # not woken by _complete (which unlists): still listed
                parked = self._parked.get(ticket)
                if parked is not None:
                    parked.remove(mine)
                    if not parked:
                        del self._parked[ticket]
        return ticket.done()

    def _complete(self, ticket: asyncio.Future[Any], appended: Any = None) -> None:
        """Completes ``ticket`` (with ``appended``) and, at once, every waiter parked on it."""
        ticket.set_result(appended)
        for mine in self._parked.pop(ticket, ()):
            if not mine.done():
                mine.set_result(None)
                self.woken_count += 1

    def statistics(self) -> AppendWaitersStatistics:
        return AppendWaitersStatistics(
            watched_partition_count=len(self._tickets),
            notify_count=self._notify_count,
            wake_count=self._wake_count,
            closed=self._closed,
            waiting_count=self._waiting_count,
        )


def _wake(mine: asyncio.Future[None]) -> None:
    if not mine.done():
        mine.set_result(None)
