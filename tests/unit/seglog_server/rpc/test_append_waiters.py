import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog_server.rpc.append_waiters import AppendWaiters


async def test_ticket_completes_on_the_next_append_of_its_partition():
    waiters = AppendWaiters()
    ticket = waiters.ticket("t", 0)
    other = waiters.ticket("t", 1)
    waiters.notify("t", 0)
    assert await waiters.wait_ticket(ticket, timeout_s=None)
    assert not other.done()


async def test_waiters_of_one_partition_share_a_ticket_until_notify():
    waiters = AppendWaiters()
    assert waiters.ticket("t", 0) is waiters.ticket("t", 0)
    first = waiters.ticket("t", 0)
    waiters.notify("t", 0)
    assert waiters.ticket("t", 0) is not first


async def test_wait_without_append_times_out_false_and_leaves_the_ticket_usable():
    waiters = AppendWaiters()
    ticket = waiters.ticket("t", 0)
    assert not await waiters.wait_ticket(ticket, timeout_s=0.001)
    assert not ticket.cancelled()
    waiters.notify("t", 0)
    assert await waiters.wait_ticket(ticket, timeout_s=0)


async def test_cancelling_one_waiter_does_not_disturb_the_others():
    waiters = AppendWaiters()
    ticket = waiters.ticket("t", 0)
    first = asyncio.create_task(waiters.wait_ticket(ticket, None))
    second = asyncio.create_task(waiters.wait_ticket(ticket, None))
    await asyncio.sleep(0)
    first.cancel()
    waiters.notify("t", 0)
    assert await second
    assert first.cancelled()


async def test_storage_changed_on_the_loop_completes_the_ticket_at_once():
    waiters = AppendWaiters()
    tickets = [waiters.ticket("t", 0), waiters.ticket("t", 5)]
    waiters.storage_changed("t", 0)
    assert [t.done() for t in tickets] == [True, False]


async def test_storage_changed_from_a_pool_thread_wakes_a_parked_waiter():
    waiters = AppendWaiters()
    ticket = waiters.ticket("t", 0)
    parked = asyncio.create_task(waiters.wait_ticket(ticket, None))
    await asyncio.sleep(0)
    await asyncio.get_running_loop().run_in_executor(None, waiters.storage_changed, "t", 0)
    assert await asyncio.wait_for(parked, timeout=10)  # a bound on a hang, not on speed
    assert waiters.statistics().wake_count == 1


def test_storage_changed_after_the_loop_closed_is_dropped_quietly():
    async def take_ticket() -> AppendWaiters:
        waiters = AppendWaiters()
        waiters.ticket("t", 0)
        return waiters

    waiters = asyncio.run(take_ticket())  # asyncio.run closes its loop
    waiters.storage_changed("t", 0)
    assert waiters.statistics().notify_count == 0


async def test_close_wakes_everyone_and_later_tickets_are_already_complete():
    waiters = AppendWaiters()
    ticket = waiters.ticket("t", 0)
    waiters.close()
    assert ticket.done() and waiters.closed
    assert waiters.ticket("t", 0).done()


async def test_statistics_count_notifies_and_wakes():
    waiters = AppendWaiters()
    waiters.notify("t", 0)  # nobody waiting
    waiters.ticket("t", 0)
    waiters.notify("t", 0)
    stats = waiters.statistics()
    assert (stats.notify_count, stats.wake_count, stats.watched_partition_count) == (2, 1, 0)


async def test_a_wait_without_timeout_resumes_one_loop_turn_after_the_notify():
    """The notify completes a parked waiter's own future itself: the waiter runs on the next turn
    (through a callback on the shared ticket it would take two)."""
    waiters = AppendWaiters()
    ticket = waiters.ticket("t", 0)
    woken = []

    async def consume() -> None:
        await waiters.wait_ticket(ticket, None)
        woken.append(True)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)
    waiters.notify("t", 0)
    await asyncio.sleep(0)
    assert woken == [True]
    await task


async def test_cancelled_and_timed_out_waiters_leave_nothing_parked():
    waiters = AppendWaiters()
    ticket = waiters.ticket("t", 0)
    parked = [asyncio.create_task(waiters.wait_ticket(ticket, None)) for _ in range(3)]
    await asyncio.sleep(0)
    assert waiters.statistics().waiting_count == 3
    for task in parked:
        task.cancel()
    await asyncio.gather(*parked, return_exceptions=True)
    assert waiters._parked == {} and waiters.statistics().waiting_count == 0
    assert not await waiters.wait_ticket(ticket, timeout_s=0.001)
    assert not ticket.done()  # cancelling its waiters never touches the shared ticket
    survivor = asyncio.create_task(waiters.wait_ticket(ticket, None))
    await asyncio.sleep(0)
    waiters.discard("t", 0)  # a failed read elsewhere: everyone re-reads
    assert await survivor and waiters._parked == {}


async def test_close_wakes_parked_waiters():
    waiters = AppendWaiters()
    parked = [asyncio.create_task(waiters.wait_ticket(waiters.ticket("t", p), None)) for p in range(2)]
    await asyncio.sleep(0)
    waiters.close()
    assert await asyncio.gather(*parked) == [True, True]
    assert waiters._parked == {}


_OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["wait", "wait", "wait_timeout", "wait_interruptible", "cancel", "interrupt", "notify",
                               "discard"]), st.integers(0, 2)),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(operations=_OPERATIONS, close_at_end=st.booleans())
def test_any_mix_of_waits_cancels_and_wake_ups(operations, close_at_end):
    """Waiters with and without a timeout or an interrupt, cancelled, interrupted or not, on
    three partitions: a waiter wakes exactly when its partition was notified (or discarded, or
    everything closed) after it took its ticket, True, or when interrupted, False; cancelling or
    interrupting waiters never completes a ticket; every waiter is parked until it wakes, and
    nothing stays parked for a ticket that completed or lost its waiters."""

    async def run() -> None:
        waiters = AppendWaiters()
        live: list[tuple[int, int, asyncio.Task]] = []  # (partition, wake-ups seen when it took its ticket, task)
        wake_ups = [0, 0, 0]
        cancelled: set[asyncio.Task] = set()
        interrupts: dict[asyncio.Task, asyncio.Future] = {}
        interrupted: set[asyncio.Task] = set()
        for kind, partition in operations:
            if kind.startswith("wait"):
                ticket = waiters.ticket("t", partition)
                timeout_s = 60.0 if kind == "wait_timeout" else None
                interrupt = asyncio.get_running_loop().create_future() if kind == "wait_interruptible" else None
                task = asyncio.create_task(waiters.wait_ticket(ticket, timeout_s, interrupt))
                live.append((partition, wake_ups[partition], task))
                if interrupt is not None:
                    interrupts[task] = interrupt
            elif kind in ("cancel", "interrupt"):
                for _, _, task in live:
                    if task.done() or task in cancelled or task in interrupted:
                        continue
                    if kind == "cancel":
                        task.cancel()
                        cancelled.add(task)
                        break
                    if task in interrupts:
                        interrupts[task].set_result(None)
                        interrupted.add(task)
                        break
            else:
                getattr(waiters, kind)("t", partition)
                wake_ups[partition] += 1
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            for waited_on, seen, task in live:
                if task in cancelled:
                    continue
                woken = wake_ups[waited_on] > seen
                assert task.done() == (woken or task in interrupted)
                if task.done():  # interrupted before any change of its partition (else done already)
                    assert task.result() is (task not in interrupted)
            parked = waiters._parked
            assert all(not ticket.done() and futures for ticket, futures in parked.items())
            waiting = [task for _, _, task in live if not task.done()]
            assert sum(len(futures) for futures in parked.values()) == len(waiting)
        if close_at_end:
            waiters.close()
        else:
            for partition in range(3):
                waiters.notify("t", partition)
        results = await asyncio.gather(*(task for _, _, task in live), return_exceptions=True)
        for (_, _, task), result in zip(live, results):
            if task in cancelled:
                assert isinstance(result, asyncio.CancelledError)
            else:  # interrupted while its partition had not changed: False
                assert result is (task not in interrupted)
        assert waiters._parked == {} and waiters.statistics().waiting_count == 0

    asyncio.run(run())


async def test_a_wait_with_a_timeout_or_an_interrupt_resumes_one_loop_turn_after_the_notify():
    """A Fetch long poll (a timeout) and a Consume stream of an admitted call (interrupted by a
    policy reload) are woken as a wait without either: the notify completes the waiter's own
    future (through asyncio.wait, or a task around the wait, it took two or three turns)."""
    waiters = AppendWaiters()
    interrupt = asyncio.get_running_loop().create_future()
    woken = []

    async def wait(partition: int, timeout_s: float | None, interrupt: asyncio.Future | None) -> None:
        woken.append((partition, await waiters.wait_ticket(waiters.ticket("t", partition), timeout_s, interrupt)))

    tasks = [asyncio.create_task(wait(0, 60.0, None)), asyncio.create_task(wait(1, None, interrupt)),
             asyncio.create_task(wait(2, 60.0, interrupt))]
    await asyncio.sleep(0)
    for partition in range(3):
        waiters.notify("t", partition)
    await asyncio.sleep(0)
    assert sorted(woken) == [(0, True), (1, True), (2, True)]
    await asyncio.gather(*tasks)
    assert waiters._parked == {} and not interrupt.done()


async def test_an_interrupt_or_a_timeout_ends_the_wait_false_and_leaves_the_ticket():
    waiters = AppendWaiters()
    ticket = waiters.ticket("t", 0)
    interrupt = asyncio.get_running_loop().create_future()
    parked = asyncio.create_task(waiters.wait_ticket(ticket, None, interrupt))
    await asyncio.sleep(0)
    interrupt.set_result(None)
    assert await parked is False
    assert not await waiters.wait_ticket(ticket, None, interrupt)  # interrupted already: at once
    assert not await waiters.wait_ticket(ticket, 0.001)
    assert waiters._parked == {} and not ticket.done() and waiters.statistics().waiting_count == 0
    waiters.notify("t", 0)
    assert await waiters.wait_ticket(ticket, 0.001, interrupt)  # completed wins over the rest
