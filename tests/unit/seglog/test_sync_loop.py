"""The private event-loop thread behind the synchronous clients."""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import sys
import threading

import pytest

from seglog import _sync


def test_run_returns_the_coroutine_result_from_the_loop_thread():
    loop_thread = _sync.acquire_loop_thread()
    try:
        async def where() -> str:
            await asyncio.sleep(0)
            return threading.current_thread().name

        assert loop_thread.run(where()) == "seglog-event-loop"
    finally:
        _sync.release_loop_thread(loop_thread)


def test_run_propagates_the_coroutine_exception():
    loop_thread = _sync.acquire_loop_thread()
    try:
        async def fail() -> None:
            raise KeyError("x")

        with pytest.raises(KeyError):
            loop_thread.run(fail())
    finally:
        _sync.release_loop_thread(loop_thread)


def test_run_from_the_loop_thread_itself_raises_instead_of_deadlocking():
    loop_thread = _sync.acquire_loop_thread()
    try:
        async def nested() -> None:
            async def inner() -> None:
                return None

            loop_thread.run(inner())

        with pytest.raises(RuntimeError, match="own event-loop thread"):
            loop_thread.run(nested())
    finally:
        _sync.release_loop_thread(loop_thread)


def test_one_loop_thread_is_shared_and_stops_with_its_last_user():
    first = _sync.acquire_loop_thread()
    second = _sync.acquire_loop_thread()
    assert first is second
    _sync.release_loop_thread(first)
    assert first.loop.is_running()
    _sync.release_loop_thread(second)
    assert not first.loop.is_running() and not first.loop.is_closed()  # stopped, kept for the next
    third = _sync.acquire_loop_thread()
    try:
        assert third is not first
        assert third.loop is first.loop  # one loop a process, however often the thread restarts
        assert third.run(asyncio.sleep(0, "again")) == "again"
    finally:
        _sync.release_loop_thread(third)


def test_tasks_left_on_the_loop_are_cancelled_when_it_stops():
    loop_thread = _sync.acquire_loop_thread()
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    future = asyncio.run_coroutine_threadsafe(forever(), loop_thread.loop)
    started.wait()
    _sync.release_loop_thread(loop_thread)
    assert future.cancelled()


def test_the_loop_is_uvloops_where_installed_and_asyncios_without_it(monkeypatch):
    import uvloop

    loop_thread = _sync.LoopThread()
    try:
        assert isinstance(loop_thread.loop, uvloop.Loop)
    finally:
        loop_thread.stop()
    monkeypatch.setitem(sys.modules, "uvloop", None)  # a client-only install: the import fails
    loop_thread = _sync.LoopThread()
    try:
        assert type(loop_thread.loop) is type(asyncio.new_event_loop())  # noqa: E721 - asyncio's own
        assert loop_thread.run(asyncio.sleep(0, "answered")) == "answered"
    finally:
        loop_thread.stop()


def test_an_interrupted_wait_cancels_the_coroutine_on_the_loop():
    class Interrupted(Exception):
        pass

    def interrupt(signum, frame):
        raise Interrupted

    loop_thread = _sync.LoopThread()
    started, cancelled = threading.Event(), threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    def interrupt_once_started() -> None:
        started.wait()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        threading.Thread(target=interrupt_once_started, daemon=True).start()
        with pytest.raises(Interrupted):
            loop_thread.run(forever())
        assert cancelled.wait(10)
        # The loop goes on serving calls.
        assert loop_thread.run(asyncio.sleep(0, "next")) == "next"
    finally:
        signal.signal(signal.SIGUSR1, previous)
        loop_thread.stop()


def test_a_coroutine_cancelled_on_the_loop_raises_a_concurrent_cancelled_error():
    loop_thread = _sync.LoopThread()
    try:
        async def cancelled() -> None:
            asyncio.current_task().cancel()
            await asyncio.sleep(0)

        with pytest.raises(concurrent.futures.CancelledError):
            loop_thread.run(cancelled())
        with pytest.raises(KeyboardInterrupt):  # a BaseException reaches the caller, the loop serves on

            async def interrupted() -> None:
                raise KeyboardInterrupt

            loop_thread.run(interrupted())
        assert loop_thread.run(asyncio.sleep(0, "served")) == "served"
    finally:
        loop_thread.stop()


def test_an_interrupted_wait_on_a_loop_closed_meanwhile_raises_the_interruption():
    """The loop stopped and closed under a waiting call (its task left unfinished): the
    interruption is what the caller sees, not the closed loop's RuntimeError from cancelling."""
    class Interrupted(Exception):
        pass

    def interrupt(signum, frame):
        raise Interrupted

    class LeavingTasks(_sync.LoopThread):
        def _cancel_leftovers(self) -> None:
            pass  # the waiting call's task outlives the loop

    loop_thread = LeavingTasks()
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    def close_then_interrupt() -> None:
        started.wait()
        loop_thread.stop()
        if not loop_thread.loop.is_closed():
            loop_thread.loop.close()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        threading.Thread(target=close_then_interrupt, daemon=True).start()
        with pytest.raises(Interrupted):
            loop_thread.run(forever())
    finally:
        signal.signal(signal.SIGUSR1, previous)
