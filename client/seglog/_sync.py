"""Running the asyncio clients from synchronous code.

The asyncio classes (``AsyncProducer``, ``AsyncConsumer``, ``AsyncAdmin``) are the one
implementation. A synchronous client owns one of them, living on a private event loop that runs in
a daemon thread, and forwards each call with ``LoopThread.run`` (a blocking
``run_coroutine_threadsafe``). One loop thread is shared by every synchronous client of the process
(reference-counted), so an application with a producer, a consumer and an admin has one extra
thread and one more event loop polling gRPC's completion queue, not three.

Calling a synchronous method from inside that loop thread (from a future's done-callback, say)
would wait on itself forever; ``run`` refuses it with a RuntimeError instead.

The loop is uvloop's where it is installed (it is with the service; a client-only install may
lack it), asyncio's otherwise: its loop turns and cross-thread wake-ups run in C, and every
synchronous call crosses to the loop and back. A call of ``Admin.offsets_for_times_many`` (100
targets) cost about 50 us less client CPU on it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, Self, TypeVar

__all__ = ["LoopThread", "acquire_interruptibly", "acquire_loop_thread", "release_loop_thread", "wait_for_future", "wait_for_futures", "wait_interruptibly"]

_T = TypeVar("_T")


class LoopThread:
    """An event loop running forever in a daemon thread (``loop``: one stopped before, to run
    again; see ``_run_forever``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop if loop is not None else _new_event_loop()
        self._started = threading.Event()
        # Guards _ended against run() queueing a call: once set, no call is queued, and those
        # queued before are started and cancelled by the thread's cleanup (see _run_forever).
        self._state = threading.Lock()
        self._ended: str | None = None  # why calls are refused: the thread stopped, died or forked away
        self._stop_requested = False
        self.dead = False  # the loop stopped without stop(): never run again (see _run_forever)
        self._thread = threading.Thread(target=self._run_forever, name="seglog-event-loop", daemon=True)
        self._thread.start()
        self._started.wait()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` on the loop and block until it finishes; its exception propagates.

        An interruption of the waiting thread (KeyboardInterrupt) cancels the coroutine, whether
        it lands as the call is handed over or in the wait (see ``wait_interruptibly``).
        """
        if self.in_loop_thread():
            coroutine.close()
            raise RuntimeError(
                "a synchronous seglog call was made on seglog's own event-loop thread (from a future "
                "callback?); it would wait for itself forever. Use the asyncio client there."
            )
        # A lock released by the task itself as it ends, not run_coroutine_threadsafe's
        # concurrent future: no Condition, no chaining and no loop turn for the task's
        # done-callbacks (a third less of this handoff's CPU, which every synchronous call pays).
        ended = threading.Lock()
        ended.acquire()
        outcome: list[Any] = []  # (True, the result) or (False, the exception)
        started: list[asyncio.Task[None]] = []

        def start() -> None:
            started.append(self._loop.create_task(_run_into(coroutine, outcome, ended)))

        handing_over = False
        try:
            with self._state:
                if self._ended is not None:
                    raise RuntimeError(self._ended)
                handing_over = True
                self._loop.call_soon_threadsafe(start)
            acquire_interruptibly(ended)
        except BaseException:
            # Refused, or interrupted (KeyboardInterrupt) anywhere from handing the call over to
            # waiting for it. Once handed over, the coroutine may be running on the loop: only the
            # loop thread ends it (a close() from here threw GeneratorExit into it in this thread,
            # and the task it ran in waited forever).
            if handing_over:
                self._abandon(coroutine, started)
            else:
                coroutine.close()
            raise
        returned, value = outcome[0]
        if returned:
            return value
        if isinstance(value, asyncio.CancelledError):  # as a concurrent future's result() raises it
            if self.dead:
                raise RuntimeError(self._ended) from value
            raise concurrent.futures.CancelledError() from value
        raise value

    def _abandon(self, coroutine: Coroutine[Any, Any, Any], started: list[asyncio.Task[None]]) -> None:
        """Ends a call its caller stopped waiting for, on the loop: cancels its task, or closes
        the coroutine if no task ran it (``start`` was never queued, or its task never took a
        step). ``start``, queued before this if at all, has run when this does."""

        def abandon() -> None:
            if started:
                started[0].cancel()
            if inspect.getcoroutinestate(coroutine) == inspect.CORO_CREATED:
                coroutine.close()  # never to run: a task cancelled before its first step skips it

        try:
            self._loop.call_soon_threadsafe(abandon)
        except RuntimeError:  # the loop was closed meanwhile: nothing runs there; the interruption stands
            if not started:
                coroutine.close()

    def submit(self, start: Callable[[], asyncio.Future[_T]]) -> concurrent.futures.Future[_T]:
        """Calls ``start()`` on the loop (it must not block: it starts something and returns its
        asyncio future) and returns a concurrent future that ends as that one does."""
        async def started() -> concurrent.futures.Future[_T]:
            outcome: concurrent.futures.Future[_T] = concurrent.futures.Future()
            start().add_done_callback(lambda done: _settle(outcome, done))
            return outcome

        return self.run(started())

    def call_soon(self, callback: Callable[..., object], *args: object) -> None:
        """Schedule ``callback(*args)`` on the loop from any thread."""
        self._loop.call_soon_threadsafe(callback, *args)

    def stop(self) -> None:
        """Stop the loop, cancel what still runs on it, and join the thread. The loop is left
        stopped, not closed (see ``_run_forever``)."""
        assert not self.in_loop_thread()
        self._stop_requested = True
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    def _forget_after_fork(self) -> None:
        """In a forked child: the thread did not follow, and the loop's selector and wake-up fd are
        the parent's; calls are refused rather than queued on a loop that runs in another process."""
        self._state = threading.Lock()  # another thread of the parent may have held it at the fork
        self._ended = (
            "seglog's event-loop thread belongs to the parent of this forked process; "
            "open the synchronous clients again in the child"
        )
        self.dead = True

    def _run_forever(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._started.set)
        try:
            self._loop.run_forever()
        finally:
            # run_forever also ends when an exception such as SystemExit escapes a callback, or a
            # callback stops the loop: then the thread is dead. Either way calls are refused from
            # here on, and those already queued are started and cancelled below.
            with self._state:
                self.dead = not self._stop_requested
                self._ended = (
                    "seglog's event-loop thread died: its loop stopped without being asked to (an "
                    "exception such as SystemExit escaped a callback on it)"
                    if self.dead
                    else "seglog's event-loop thread was stopped (its last synchronous client closed)"
                )
            self._started.set()
            self._cancel_leftovers()
            # Not closed: grpc.aio binds every loop that used it to one process-wide completion
            # poller and keeps it (and a reader on the poller's socket) for the process's life.
            # A completion still owed to this loop's calls (a call cancelled as it closed, which
            # the core finishes later) is then handed to it from whichever loop reads the
            # socket, and a closed loop makes that loop report "Event loop is closed". A
            # stopped loop takes it and runs it, if ever, when it runs again: the shared loop
            # thread's next start runs this loop (``acquire_loop_thread``), so a process keeps
            # one loop however often its synchronous clients come and go.
            asyncio.set_event_loop(None)

    def _cancel_leftovers(self) -> None:
        """Cancels every task left on the loop, in rounds: cancelling one may start another (an
        ask reading its own answer hands the read over to a new task), which would otherwise stay
        pending on the stopped loop and resume in its next user's session. The first turn also
        starts calls queued before the end, to cancel them."""
        self._loop.run_until_complete(asyncio.sleep(0))
        for _ in range(_CANCEL_ROUNDS):
            tasks = [task for task in asyncio.all_tasks(self._loop) if not task.done()]
            if not tasks:
                break
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())


# The main thread waits in the caller's thread in slices of this many seconds (wait_interruptibly).
_WAIT_SLICE = 0.1


def wait_interruptibly(wait: Callable[[float | None], bool], timeout: float | None = None) -> bool:
    """Every blocking wait of the synchronous API in its caller's thread: ``wait(seconds)`` blocks
    up to ``seconds`` (None: until it is satisfied) and says whether it was; so does this, once
    satisfied or ``timeout`` seconds on (None: never). An Event's ``wait`` fits as it is; a lock
    goes through ``acquire_interruptibly``, concurrent futures through ``wait_for_future(s)``.

    CPython runs a signal's handler (KeyboardInterrupt's) in the main thread only, between
    bytecodes, and a signal arriving interrupts a lock or Event wait already entered; one that
    lands after the caller's last check, as it is about to block, is held until the wait ends, and
    a wait on the network (a poll at an idle partition, a send's result) may not end for long. So
    the main thread waits in slices of ``_WAIT_SLICE``, the handler running between them, to the
    same deadline; any other thread, where no handler runs, waits in one piece (slices would only
    wake it, ten times a second each)."""
    if threading.current_thread() is not threading.main_thread():
        return wait(timeout)
    if timeout is None:
        while not wait(_WAIT_SLICE):
            pass  # a signal held just before the wait is handled here, a slice later
        return True
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= _WAIT_SLICE:
            return wait(max(remaining, 0.0))
        if wait(_WAIT_SLICE):
            return True


def wait_for_future(future: concurrent.futures.Future[Any], timeout: float | None = None) -> None:
    """Waits (``wait_interruptibly``) until ``future`` is done or ``timeout`` seconds passed; its
    ``result(0)`` or ``exception(0)`` then answers, raising TimeoutError if it is still running."""
    if not future.done():
        wait_interruptibly(lambda seconds: _done_within(future, seconds), timeout)


def wait_for_futures(futures: list[concurrent.futures.Future[Any]], timeout: float | None = None) -> None:
    """``wait_for_future`` for every one of ``futures`` in turn, to one deadline
    (``concurrent.futures.wait``'s ALL_COMPLETED; a slice waits on one future, not on all)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for future in futures:
        if not future.done():
            wait_for_future(future, None if deadline is None else max(deadline - time.monotonic(), 0.0))


def acquire_interruptibly(lock: threading.Lock) -> None:
    """``wait_interruptibly`` for a lock, without a deadline: written out, as ``LoopThread.run``
    waits so for every synchronous call (no closure, no call a slice)."""
    if threading.current_thread() is not threading.main_thread():
        lock.acquire()
        return
    while not lock.acquire(timeout=_WAIT_SLICE):
        pass  # a signal held just before the wait is handled here, a slice later


def _done_within(future: concurrent.futures.Future[Any], seconds: float | None) -> bool:
    """Whether ``future`` is done (cancelled too) within ``seconds``: a wait on its own condition,
    which ``cancel()`` notifies as a result does (``concurrent.futures.wait`` is not told of a
    cancel: a wait on it ran to its timeout, or for ever)."""
    try:
        future.exception(seconds)  # returns the future's error rather than raising it
    except concurrent.futures.CancelledError:
        return True
    except TimeoutError:
        return False
    return True

_CANCEL_ROUNDS = 20  # tasks started by cancelled ones, in turn: a bound against one that always starts another


async def _run_into(coroutine: Coroutine[Any, Any, Any], outcome: list[Any], ended: threading.Lock) -> None:
    """Awaits ``coroutine``, appends its outcome to ``outcome`` and releases ``ended``."""
    try:
        outcome.append((True, await coroutine))
    except BaseException as error:  # noqa: BLE001 - raised in the caller's thread by run
        outcome.append((False, error))
    finally:
        ended.release()


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where installed, asyncio's otherwise (see the module's docstring)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _settle(outcome: concurrent.futures.Future[_T], done: asyncio.Future[_T]) -> None:
    if done.cancelled():
        outcome.cancel()
    elif done.exception() is not None:
        outcome.set_exception(done.exception())
    else:
        outcome.set_result(done.result())


_lock = threading.Lock()
_stopped = threading.Condition(_lock)  # notified when a stopping shared thread has stopped
_shared: LoopThread | None = None
_users = 0
_stopping: LoopThread | None = None  # the last shared thread, while its last user stops it
_stopped_loop: asyncio.AbstractEventLoop | None = None  # the last shared thread's, run by the next


def acquire_loop_thread() -> LoopThread:
    """The shared loop thread, started on first use (and again if it died); pair every call with
    ``release_loop_thread``."""
    global _shared, _users, _stopped_loop
    with _lock:
        if _shared is not None and _shared.dead:
            _shared, _users = None, 0  # its users' calls fail; their releases find it replaced
        if _shared is None:
            # A thread being stopped: wait for its loop, to run it again rather than start a second
            # (unless this is that thread, finishing its tasks: it cannot wait for itself).
            while _stopping is not None and not _stopping.in_loop_thread():
                _stopped.wait()
            _shared, _stopped_loop = LoopThread(_stopped_loop), None
        _users += 1
        return _shared


def release_loop_thread(loop_thread: LoopThread) -> None:
    """Drop one user of the shared loop thread; the last one stops it."""
    global _shared, _users, _stopping, _stopped_loop
    with _lock:
        if loop_thread is not _shared:  # a dead thread since replaced, or the parent's before a fork
            assert loop_thread.dead, (loop_thread, _shared)
            return
        assert _users > 0, (loop_thread, _users)
        _users -= 1
        if _users > 0:
            return
        _shared, _stopping = None, loop_thread
    try:
        loop_thread.stop()
    finally:
        with _lock:
            if _stopping is loop_thread:
                _stopping = None
            if not loop_thread.dead and _stopped_loop is None:  # the next shared thread runs it
                _stopped_loop = loop_thread.loop
            _stopped.notify_all()


def _forget_in_child() -> None:
    """After fork, in the child: the loop threads did not follow and the kept loop's selector and
    wake-up fd are shared with the parent (running it here would take the parent's wake-ups):
    the child starts its own thread and loop on first use."""
    global _lock, _stopped, _shared, _users, _stopping, _stopped_loop
    for loop_thread in (_shared, _stopping):
        if loop_thread is not None:
            loop_thread._forget_after_fork()
    _lock = threading.Lock()
    _stopped = threading.Condition(_lock)
    _shared, _users, _stopping, _stopped_loop = None, 0, None, None


os.register_at_fork(after_in_child=_forget_in_child)


class SyncFacade:
    """The synchronous side of one asyncio client (Producer, Consumer, Admin): starts it on the
    shared loop thread, runs its calls there, and closes it exactly once.

    ``class Producer(SyncFacade, implementation=AsyncProducer)`` gives the facade a constructor
    that takes exactly the asyncio class's arguments and builds one with them (in the caller's
    thread, so bad options fail there): the options are declared once, on the asyncio class, and
    ``inspect.signature``/``help()`` show them on both (the signature is copied, not retyped)."""

    _async: Any
    _portal: LoopThread

    def __init_subclass__(cls, *, implementation: type | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if implementation is not None:
            cls.__init__ = _forwarding_init(cls, implementation)  # type: ignore[method-assign]

    def _start(self, async_client: Any) -> None:
        self._async = async_client
        self._portal = acquire_loop_thread()
        try:
            self._portal.run(async_client.start())
        except BaseException:
            release_loop_thread(self._portal)
            raise
        self._released = False

    def _close(self, *args: Any) -> None:
        """Awaits ``self._async.close(*args)`` on the loop thread, then releases the thread."""
        if self._released:
            return
        try:
            self._portal.run(self._async.close(*args))
        finally:
            self._released = True
            release_loop_thread(self._portal)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._close()


def _forwarding_init(facade: type, implementation: type) -> Callable[..., None]:
    def __init__(self: SyncFacade, *args: Any, **kwargs: Any) -> None:
        self._start(implementation(*args, **kwargs))

    __init__.__qualname__ = f"{facade.__qualname__}.__init__"
    __init__.__module__ = facade.__module__
    __init__.__doc__ = f"Takes the arguments of ``{implementation.__name__}`` (its signature, copied)."
    __init__.__signature__ = inspect.signature(implementation.__init__)  # type: ignore[attr-defined]
    return __init__
