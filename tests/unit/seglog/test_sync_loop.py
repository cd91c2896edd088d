"""The private event-loop thread behind the synchronous clients."""

from __future__ import annotations

import asyncio
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
    assert first.loop.is_closed()
    third = _sync.acquire_loop_thread()
    try:
        assert third is not first
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
