"""A Ctrl-C reaches a synchronous client's caller waiting in its own thread, not only in a call
handed to the loop thread: a stream-mode poll at an idle partition (a wait on the consumer's
threading event) and a send's ``result()`` (a wait on its batch's concurrent future).

CPython runs a signal's handler in the main thread between bytecodes; a signal that lands as the
caller is about to block is held until the wait ends, which for these waits may be never (no
record comes; the batch lingers). ``_thread.interrupt_main`` holds the handler exactly that way,
sent once the caller is seen blocked. The bound below only ends a test that would otherwise hang:
the record (or the flush) that it sends must not have been needed."""

from __future__ import annotations

import _thread
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator

import pytest

from seglog import Consumer, Producer
from seglog._delivery import BatchDelivery, DeliveryGroup
from seglog.consumer import AsyncConsumer

pytestmark = pytest.mark.integration

_BOUND_S = 30.0  # a wait the interruption did not end is ended this much later (the test fails)


class _Interrupted(Exception):
    pass


@pytest.fixture
def interruptible() -> Iterator[None]:
    def interrupt(signum, frame):
        raise _Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


def _blocked_in(frame, code) -> bool:
    """The thread whose innermost frame is ``frame`` is blocked in a threading wait (a
    Condition's, under an Event's or a future's) called from ``code``."""
    if frame is None or frame.f_code is not threading.Condition.wait.__code__:
        return False
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _interrupt_main_when_blocked_in(code, rescue: Callable[[], object]) -> tuple[threading.Thread, list[str]]:
    """A thread that holds SIGUSR1's handler for the main thread once it is blocked in ``code``,
    and calls ``rescue`` (ending the wait the other way) if the main thread is still there
    ``_BOUND_S`` later; the list says whether it had to."""
    rescued: list[str] = []
    main = threading.main_thread().ident
    done = threading.Event()

    def watch() -> None:
        while not _blocked_in(sys._current_frames().get(main), code):
            if done.wait(0.001):
                return
        _thread.interrupt_main(signal.SIGUSR1)
        if not done.wait(_BOUND_S):
            stack = "".join(traceback.format_stack(sys._current_frames().get(main)))
            rescued.append(f"the interruption waited for the wait to end; the main thread is at:\n{stack}")
            rescue()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.done = done  # type: ignore[attr-defined]
    watcher.start()
    return watcher, rescued


def _stop(watcher: threading.Thread) -> None:
    watcher.done.set()  # type: ignore[attr-defined]
    watcher.join()


@pytest.mark.parametrize("method", ["poll", "poll_batches", "poll_raw"])
def test_a_stream_poll_without_timeout_at_an_idle_partition_is_interrupted(
    seglog_service, make_topic, interruptible, method
):
    topic = make_topic()
    with Producer(seglog_service.address, linger_ms=0) as producer:
        producer.send(topic, b"first", partition=0).result()
        with Consumer(seglog_service.address, topic, 0, start="earliest", mode="stream") as consumer:
            assert [r.value for r in consumer.poll(timeout_ms=5000)] == [b"first"]  # the stream runs
            watcher, rescued = _interrupt_main_when_blocked_in(
                AsyncConsumer._poll_now.__code__, lambda: producer.send(topic, b"rescue", partition=0)
            )
            try:
                with pytest.raises(_Interrupted):
                    getattr(consumer, method)(timeout_ms=None)
            finally:
                _stop(watcher)
            assert rescued == []
            # Still usable: the next record reaches the next poll.
            producer.send(topic, b"next", partition=0).result()
            assert [r.value for r in consumer.poll(timeout_ms=5000)] == [b"next"]


@pytest.mark.parametrize("wait", ["result", "exception", "send_many"])
def test_a_sends_result_without_timeout_is_interrupted_and_the_record_still_lands(
    seglog_service, make_topic, interruptible, wait
):
    topic = make_topic()
    with Producer(seglog_service.address, linger_ms=600_000) as producer:  # the batch waits for a flush
        if wait == "send_many":
            group = producer.send_many(topic, [b"lingering"], partition=0)
            waiting, where, done = group.result, DeliveryGroup.wait, group.done
        else:
            future = producer.send(topic, b"lingering", partition=0)
            waiting = getattr(future, wait)
            where = BatchDelivery.metadata if wait == "result" else BatchDelivery.error
            done = future.done
        watcher, rescued = _interrupt_main_when_blocked_in(where.__code__, producer.flush)
        try:
            with pytest.raises(_Interrupted):
                waiting()
        finally:
            _stop(watcher)
        assert rescued == []
        assert not done()
        producer.flush()
        landed = group.result(5) if wait == "send_many" else [future.result(timeout=5)]
        assert [metadata.offset for metadata in landed] == [0]
