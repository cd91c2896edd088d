"""The private event-loop thread behind the synchronous clients."""

from __future__ import annotations

import _thread
import asyncio
import concurrent.futures
import inspect
import signal
import sys
import threading
import types
from collections.abc import Callable
from time import monotonic as _monotonic

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


class _Interrupted(Exception):
    """What a signal handler (KeyboardInterrupt's) raises in the calling thread."""


class _InterruptedAfterHandOver(asyncio.SelectorEventLoop):
    """A loop whose next hand-over from another thread, once queued and ``settle()`` has returned,
    raises _Interrupted: a signal handled as ``call_soon_threadsafe`` returns, before the caller
    waits."""

    def __init__(self) -> None:
        super().__init__()
        self.settle: Callable[[], object] | None = None

    def call_soon_threadsafe(self, callback, *args, context=None):
        handle = super().call_soon_threadsafe(callback, *args, context=context)
        settle, self.settle = self.settle, None
        if settle is not None:
            settle()
            raise _Interrupted
        return handle


class _ThreadingWithWaitsInterrupted:
    """The threading module as _sync sees it, but a wait on one of its new locks (a blocking
    acquire while held) raises _Interrupted once ``settle()`` has returned: a signal handled in
    the caller's wait for its call."""

    def __init__(self, settle: Callable[[], object]) -> None:
        self._settle = settle

    def __getattr__(self, name: str) -> object:
        return getattr(threading, name)

    def Lock(self) -> object:  # noqa: N802 - threading's name
        settle, lock = self._settle, threading.Lock()

        class WaitInterrupted:
            def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
                if blocking and lock.locked():
                    settle()
                    raise _Interrupted
                return lock.acquire(blocking, timeout)

            def release(self) -> None:
                lock.release()

        return WaitInterrupted()


@pytest.mark.parametrize("call_on_the_loop", ["waiting there", "not started yet"])
@pytest.mark.parametrize("interrupted", ["after the hand-over", "in the wait"])
def test_an_interrupted_call_is_ended_on_the_loop_wherever_the_interruption_lands(
    monkeypatch, interrupted, call_on_the_loop
):
    """An interruption of the caller (KeyboardInterrupt) between handing its call over and waiting
    for it, or in the wait, ends the call on the loop thread: a call running there is cancelled
    there (handed over but not yet waited for, it was closed from the caller's thread, GeneratorExit
    thrown into it there, and its task waited forever), and one not started yet is closed there,
    never run (interrupted in the wait, its task was cancelled before its first step, leaving the
    coroutine never awaited). Each interleaving is forced: the loop held by a callback, or the call
    seen suspended on it, before the interruption lands."""
    loop = _InterruptedAfterHandOver()
    loop_thread = _sync.LoopThread(loop)
    suspended, holding, release = threading.Event(), threading.Event(), threading.Event()
    ran: list[str] = []
    ended_by: list[tuple[str, str]] = []  # (what ended the call's coroutine, in which thread)

    async def forever() -> None:
        ran.append(threading.current_thread().name)
        asyncio.get_running_loop().call_soon(suspended.set)  # runs once this has suspended
        try:
            await asyncio.Event().wait()
        except BaseException as error:
            ended_by.append((type(error).__name__, threading.current_thread().name))
            raise

    async def pending_tasks() -> list[asyncio.Task[object]]:
        return [task for task in asyncio.all_tasks() if not task.done() and task is not asyncio.current_task()]

    def hold() -> None:
        holding.set()
        release.wait()

    try:
        if call_on_the_loop == "not started yet":
            loop_thread.call_soon(hold)
            assert holding.wait(60)  # a bound against a hang: the loop runs the callback
            settle: Callable[[], object] = lambda: None  # noqa: E731
        else:
            settle = lambda: suspended.wait(60)  # noqa: E731 - a bound against a hang, not a speed
        coroutine = forever()
        with monkeypatch.context() as patch:
            if interrupted == "after the hand-over":
                loop.settle = settle
            else:
                patch.setattr(_sync, "threading", _ThreadingWithWaitsInterrupted(settle))
            with pytest.raises(_Interrupted):
                loop_thread.run(coroutine)
        release.set()
        # Queued after whatever the interruption queued: the interrupted call has ended when it is served.
        assert loop_thread.run(asyncio.sleep(0, "next")) == "next"
        assert loop_thread.run(pending_tasks()) == []
        if call_on_the_loop == "waiting there":
            assert ran == ["seglog-event-loop"]
            assert ended_by == [("CancelledError", "seglog-event-loop")]
        else:
            assert ran == [] and ended_by == []
            assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED
    finally:
        release.set()
        loop_thread.stop()
        loop.close()


def test_a_signal_held_as_the_caller_blocks_is_handled_in_its_wait():
    """CPython runs a signal's handler between bytecodes, and a signal arriving interrupts a lock
    wait already entered; one that lands as the caller is about to block (after its last check)
    is held, and the plain wait left a held KeyboardInterrupt unhandled until the call ended, on a
    call waiting on the network perhaps never. ``_thread.interrupt_main`` holds the handler that
    way, without interrupting the wait, once the call sees its caller at the wait's line."""
    wait_line = _line_of_the_wait()
    loop_thread = _sync.LoopThread()
    ended_by: list[str] = []

    async def interrupt_the_waiting_caller() -> None:
        main = threading.main_thread().ident
        try:
            while not _at_line(sys._current_frames()[main], _sync.LoopThread.run.__code__, wait_line):
                await asyncio.sleep(0.001)  # until the caller is in its wait (it must get there)
            _thread.interrupt_main(signal.SIGUSR1)
            await asyncio.sleep(60)  # a call that would not end for long: a bound, not a speed
        except BaseException as error:
            ended_by.append(type(error).__name__)
            raise

    def interrupt(signum, frame):
        raise _Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        with pytest.raises(_Interrupted):
            loop_thread.run(interrupt_the_waiting_caller())
        assert loop_thread.run(asyncio.sleep(0, "next")) == "next"
        assert ended_by == ["CancelledError"]  # interrupted in the wait, not once the call ended
    finally:
        signal.signal(signal.SIGUSR1, previous)
        loop_thread.stop()


def _line_of_the_wait() -> int:
    """The line of ``LoopThread.run`` where the caller waits for its call (its last ``acquire_interruptibly(``)."""
    lines, first = inspect.getsourcelines(_sync.LoopThread.run)
    return first + max(index for index, line in enumerate(lines) if "acquire_interruptibly(" in line)


def test_a_thread_other_than_the_main_one_waits_for_its_call_in_one_piece():
    """Signal handlers run in the main thread only: slicing another thread's wait would only wake
    it ten times a second (each of 100 threads blocked in a call), so it blocks once. Counted: the
    lock acquires the waiting thread makes while its call sleeps on the loop for several slices."""
    loop_thread = _sync.LoopThread()
    acquires: list[str] = []

    def count_acquires(frame, event, arg):
        if event == "c_call" and getattr(arg, "__name__", None) == "acquire":
            acquires.append(frame.f_code.co_name)

    def call() -> None:
        sys.setprofile(count_acquires)
        try:
            outcome.append(loop_thread.run(asyncio.sleep(5 * _sync._WAIT_SLICE, "slept")))
        finally:
            sys.setprofile(None)

    outcome: list[str] = []
    try:
        caller = threading.Thread(target=call)
        caller.start()
        caller.join()
        assert outcome == ["slept"]
        # The first takes the fresh lock the call releases as it ends; then one blocking wait, not
        # one a slice.
        assert len(acquires) == 2, acquires
    finally:
        loop_thread.stop()


@pytest.mark.parametrize("timeout", [None, 0.0, 0.25])
def test_the_main_threads_waits_are_sliced_to_the_same_deadline_and_others_are_not(timeout):
    """``wait_interruptibly`` in the main thread asks for slices of at most ``_WAIT_SLICE`` (the
    last one what is left, never past the deadline) and never returns before its deadline
    unsatisfied; in another thread it hands the whole timeout over at once."""
    def never(asked: list[float | None]) -> Callable[[float | None], bool]:
        def wait(seconds: float | None) -> bool:
            asked.append(seconds)
            if seconds is None or (timeout is None and len(asked) == 3):
                return True  # satisfied at the third slice: an unbounded wait ends only so
            if seconds:
                threading.Event().wait(seconds)
            return False

        return wait

    in_main: list[float | None] = []
    deadline = None if timeout is None else _monotonic() + timeout
    assert _sync.wait_interruptibly(never(in_main), timeout) is (timeout is None)
    if deadline is not None:
        assert _monotonic() >= deadline  # not before its deadline
    assert in_main and all(seconds is not None and 0 <= seconds <= _sync._WAIT_SLICE for seconds in in_main)
    if timeout is None:
        assert len(in_main) == 3

    in_other: list[float | None] = []
    other = threading.Thread(target=_sync.wait_interruptibly, args=(never(in_other), timeout))
    other.start()
    other.join()
    assert in_other == [timeout]


def _at_line(frame: types.FrameType | None, code: types.CodeType, line: int) -> bool:
    while frame is not None:
        if frame.f_code is code:
            return frame.f_lineno == line
        frame = frame.f_back
    return False


def _calls_in_a_forked_child(inherited: _sync.LoopThread | None) -> None:
    """A forked child's work: the parent's loop thread (if given) refuses calls; a thread of the
    child's own serves 200 calls, each woken through its wake-up fd."""
    if inherited is not None:
        with pytest.raises(RuntimeError, match="parent of this forked process"):
            inherited.run(asyncio.sleep(0))
        _sync.release_loop_thread(inherited)  # the parent's client closed in the child: nothing to stop here
    loop_thread = _sync.acquire_loop_thread()
    try:
        for _ in range(200):
            assert loop_thread.run(asyncio.sleep(0, "answered")) == "answered"
    finally:
        _sync.release_loop_thread(loop_thread)


@pytest.mark.parametrize("parent_thread", ["stopped", "running"])
def test_forked_children_and_their_parent_each_run_their_own_loop(parent_thread):
    """A loop kept stopped (or a thread running) in the parent is not run by forked children: the
    loop's selector and wake-up fd are shared across fork, and a process running another's loop
    took its wake-ups, leaving calls waiting forever."""
    import multiprocessing

    first = _sync.acquire_loop_thread()
    first.run(asyncio.sleep(0))
    if parent_thread == "stopped":
        _sync.release_loop_thread(first)
    inherited = first if parent_thread == "running" else None
    children = [
        multiprocessing.get_context("fork").Process(target=_calls_in_a_forked_child, args=(inherited,))
        for _ in range(3)
    ]
    try:
        for child in children:
            child.start()
        _calls_in_a_forked_child(None)
        for child in children:
            child.join(60)  # a bound against a hang, not a speed: each child's calls take well under 1 s
        assert [child.exitcode for child in children] == [0, 0, 0]
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
                child.join()
        if parent_thread == "running":
            _sync.release_loop_thread(first)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the SystemExit, on purpose
def test_a_loop_thread_that_died_refuses_calls_and_the_next_acquire_starts_another():
    """An exception such as SystemExit escaping a callback ends the loop thread with its loop
    stopped but not closed: calls are refused with a clear error (they waited forever on a loop
    nobody ran), the loop is not kept for reuse, and the next acquire starts a new thread."""
    dead = _sync.acquire_loop_thread()

    def exit_from_a_callback() -> None:
        raise SystemExit("from a callback on the loop thread")

    dead.call_soon(exit_from_a_callback)
    dead._thread.join()
    answers: list[object] = []

    def call() -> None:
        try:
            answers.append(dead.run(asyncio.sleep(0, "answered")))
        except RuntimeError as error:
            answers.append(error)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(30)  # a bound against the hang this guards against
    assert len(answers) == 1 and isinstance(answers[0], RuntimeError), answers
    assert "died" in str(answers[0])
    assert dead.dead
    again = _sync.acquire_loop_thread()
    try:
        assert again is not dead and again.loop is not dead.loop
        assert again.run(asyncio.sleep(0, "again")) == "again"
        _sync.release_loop_thread(dead)  # its user closes late: the new thread serves on
        assert again.run(asyncio.sleep(0, "still")) == "still"
    finally:
        _sync.release_loop_thread(again)
    assert _sync._stopped_loop is again.loop


def test_a_task_started_by_a_cancelled_one_is_cancelled_too_when_the_loop_stops():
    """Cancelling a task may start another (an ask reading its own answer hands the read over
    to a new task): it is cancelled as well, not left pending on the stopped loop to resume in
    the next user's session."""
    loop_thread = _sync.acquire_loop_thread()
    started = threading.Event()
    handed_over: list[asyncio.Task[None]] = []

    async def forever() -> None:
        await asyncio.Event().wait()

    async def hands_over_when_cancelled() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            handed_over.append(asyncio.get_running_loop().create_task(forever()))

    asyncio.run_coroutine_threadsafe(hands_over_when_cancelled(), loop_thread.loop)
    started.wait()
    _sync.release_loop_thread(loop_thread)
    assert handed_over and handed_over[0].cancelled()
    assert not [task for task in asyncio.all_tasks(loop_thread.loop) if not task.done()]


def test_an_acquire_while_the_last_release_stops_the_thread_runs_the_same_loop(monkeypatch):
    """Another thread acquiring while the last user's release waits for the thread to stop waits
    for it and runs its loop again: it started a second loop, and when that one was released in
    turn it was dropped unclosed (the first was already kept), leaking its fds."""
    first = _sync.acquire_loop_thread()
    cancelling, go_on, waiting = threading.Event(), threading.Event(), threading.Event()

    class SignallingCondition(threading.Condition):
        def wait(self, timeout=None):
            waiting.set()
            return super().wait(timeout)

    monkeypatch.setattr(_sync, "_stopped", SignallingCondition(_sync._lock), raising=False)

    async def slow_to_cancel() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelling.set()
            go_on.wait()  # holds the loop thread, so the release's stop() is joining it
            raise

    started = threading.Event()

    async def slow_started() -> None:
        started.set()
        await slow_to_cancel()

    asyncio.run_coroutine_threadsafe(slow_started(), first.loop)
    started.wait()
    releaser = threading.Thread(target=_sync.release_loop_thread, args=(first,), daemon=True)
    releaser.start()
    cancelling.wait()
    acquired: list[_sync.LoopThread] = []

    def acquire() -> None:
        acquired.append(_sync.acquire_loop_thread())
        waiting.set()

    acquirer = threading.Thread(target=acquire, daemon=True)
    acquirer.start()
    waiting.wait()  # the acquirer waits for the stop (or, as before, already made a thread of its own)
    go_on.set()
    releaser.join()
    acquirer.join()
    second = acquired[0]
    try:
        assert second is not first and second.loop is first.loop
        assert second.run(asyncio.sleep(0, "served")) == "served"
    finally:
        _sync.release_loop_thread(second)
    assert _sync._stopped_loop is first.loop


class _Rescued(Exception):
    pass


@pytest.mark.parametrize("waits", ["one future", "futures"])
@pytest.mark.parametrize("in_main", [True, False], ids=["main thread", "other thread"])
def test_a_future_cancelled_while_waited_for_ends_the_wait(waits, in_main):
    """``cancel()`` notifies a future's own condition, not ``concurrent.futures.wait``'s
    waiters: a wait built on that ran to its timeout (for ever without one) after a cancel. The
    rescue (an interruption, or the join's bound) only ends a wait the cancel did not."""
    future: concurrent.futures.Future[int] = concurrent.futures.Future()
    ended = threading.Event()
    rescued: list[bool] = []

    def wait() -> None:
        if waits == "one future":
            _sync.wait_for_future(future, None)
        else:
            _sync.wait_for_futures([future], None)
        ended.set()

    def cancel_then_rescue(main: int | None) -> None:
        ended.wait(0.2)  # the waiter blocked by now, most often (either way the wait must end)
        future.cancel()
        if main is not None and not ended.wait(10):
            rescued.append(True)
            _thread.interrupt_main(signal.SIGUSR1)

    if in_main:
        def interrupt(signum, frame):
            raise _Rescued

        previous = signal.signal(signal.SIGUSR1, interrupt)
        canceller = threading.Thread(target=cancel_then_rescue, args=(threading.main_thread().ident,))
        canceller.start()
        try:
            wait()
        except _Rescued:
            pass
        finally:
            canceller.join()
            signal.signal(signal.SIGUSR1, previous)
        assert not rescued, "the wait went on after its future was cancelled"
    else:
        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        cancel_then_rescue(None)
        waiter.join(10)
        assert not waiter.is_alive(), "the wait went on after its future was cancelled"
    assert ended.is_set() and future.cancelled()
