import asyncio

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


async def test_notify_topic_wakes_every_partition_of_that_topic_only():
    waiters = AppendWaiters()
    tickets = [waiters.ticket("t", 0), waiters.ticket("t", 5), waiters.ticket("u", 0)]
    waiters.notify_topic("t")
    assert [t.done() for t in tickets] == [True, True, False]


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
