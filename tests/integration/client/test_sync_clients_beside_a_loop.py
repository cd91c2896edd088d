"""Synchronous clients opened and closed again and again beside a live grpc.aio event loop of the
same process, against a real service. grpc.aio binds every loop that used it to one process-wide
completion poller: a completion owed to a closed loop made whichever loop read the poller report
"Event loop is closed". The clients' loop is stopped, not closed, and run again by the next."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from seglog import Admin, AsyncAdmin, Producer, TopicPartition, _sync
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration


@pytest.fixture
def live_loop(seglog_service, make_topic) -> Iterator[tuple[TopicPartition, list[str], list[int]]]:
    """Another thread's asyncio loop (asyncio's own, as an application's) asking the service for
    lookups all along: (the partition asked, what that loop reported, its lookups)."""
    partition = TopicPartition(make_topic(), 0)
    reported: list[str] = []
    lookups: list[int] = []
    stop = threading.Event()
    started = threading.Event()

    async def live() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _, context: reported.append(f"{context.get('message')} {context.get('exception')!r}")
        )
        async with AsyncAdmin(seglog_service.address) as admin:
            while not stop.is_set():
                await admin.offsets_for_times({partition: 0})
                lookups.append(1)
                started.set()
                await asyncio.sleep(0.001)

    thread = threading.Thread(target=lambda: asyncio.run(live()), daemon=True)
    thread.start()
    assert started.wait(30)
    try:
        yield partition, reported, lookups
    finally:
        stop.set()
        thread.join(30)
        assert not thread.is_alive()


def _no_leftovers() -> None:
    assert _sync._shared is None  # every client released the loop thread
    stopped = _sync._stopped_loop
    assert stopped is not None and not [task for task in asyncio.all_tasks(stopped) if not task.done()]


def test_sync_clients_opened_and_closed_40_times_beside_a_live_loop_leave_it_no_closed_loop_errors(
    seglog_service, live_loop
):
    partition, reported, lookups = live_loop
    for _ in range(40):
        with Producer(seglog_service.address, linger_ms=0) as producer:
            producer.send(partition.topic, b"x")
            producer.flush()
        with Admin(seglog_service.address) as admin:
            admin.offsets_for_times({partition: 0})
    assert reported == []
    assert lookups
    _no_leftovers()


@pytest.mark.parametrize("left", ["lookup stream", "long poll"])
def test_a_loop_thread_stopped_under_a_client_left_open_leaves_no_closed_loop_errors(
    seglog_service, live_loop, left
):
    """The last synchronous user goes with calls still open on the loop (an asyncio client never
    closed, a long poll in flight): they are cancelled, and their completions, owed later, find
    the loop stopped rather than closed."""
    partition, reported, _ = live_loop
    for _ in range(5):
        loop_thread = _sync.acquire_loop_thread()
        admin = AsyncAdmin(seglog_service.address)
        loop_thread.run(admin.start())
        loop_thread.run(admin.offsets_for_times({partition: 0}))  # the lookup stream, open
        if left == "long poll":  # at the tail of the empty topic: the service holds it 5 s
            request = pb.FetchRequest(topic=partition.topic, partition=partition.partition, offset=0, max_wait_ms=5000)
            loop_thread.call_soon(lambda: asyncio.ensure_future(admin._transport.fetch(request)))
        _sync.release_loop_thread(loop_thread)
    with Admin(seglog_service.address) as admin:  # the clients' loop, run again, still serves
        admin.offsets_for_times({partition: 0})
    assert reported == []
    _no_leftovers()
