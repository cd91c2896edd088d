"""The client's side of the service's bidirectional streams (ProduceStream, LookupStream).

A ``RequestStream`` is one open call: ``send(message)`` writes a stream request message
(``ProduceStreamRequest``, ``LookupStreamRequest``) with the next correlation id set in it, and
returns a future of its answer. The caller builds that message with the request inside it
(``message.produce.records = ...``): handing a built request to the message's constructor copies
it, and with upb that costs 590 us for a 512 KiB batch against 12 us for filling the message in
place (``bench/bench_stream_messages.py``). The service answers in request order, so one
reader task matches each answer to the oldest request still owed (and checks its correlation id).
A request the service refused carries a ``StreamError``: its future fails with the same exception
the unary call would have raised (``errors.error_from_status``); the stream goes on. When the
stream itself ends (the service stopping, the connection lost, a timeout), every request still
owed fails with that error and the next ``send`` opens a new stream: whether an owed request took
effect is unknown, as for a unary call that timed out. A ``send`` cancelled before its request
was written withdraws it and leaves the stream alone; one cancelled later still writes it (see
``send``).

Like ``Transport``, this module is a place where gRPC errors leave gRPC.
"""

from __future__ import annotations

import asyncio
import functools
import types
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from typing import Any

import grpc
import grpc.aio

from seglog.errors import (
    ClientClosedError,
    RequestTimeoutError,
    SeglogError,
    ServiceError,
    ServiceUnavailableError,
    error_from_rpc,
    error_from_status,
    with_owner_hint,
)

__all__ = [
    "BATCHES_METADATA_KEY", "IN_FLIGHT_METADATA_KEY", "REQUEST_BYTES_METADATA_KEY", "RequestStream",
    "error_from_stream",
]

# The service's initial metadata entry: how many requests it reads ahead of its answers.
IN_FLIGHT_METADATA_KEY = "seglog-stream-in-flight-max"
# The ProduceStream's: how many batches one message may carry (``produce`` and ``more``).
BATCHES_METADATA_KEY = "seglog-stream-batches-max"
# The ProduceStream's: the largest message the service takes (gRPC's receive limit there).
REQUEST_BYTES_METADATA_KEY = "seglog-stream-request-bytes-max"
_CODES = {code.value[0]: code for code in grpc.StatusCode}
# The details grpc.aio gives a call whose write failed in the core (see _stream_ended).
_FAILED_WRITE_DETAILS = "Internal error from Core"


def error_from_stream(error: Any) -> SeglogError:
    """The exception for a request a stream refused (its ``StreamError``)."""
    code = _CODES.get(error.code, grpc.StatusCode.UNKNOWN)
    translated = error_from_status(code, error.message, error.error_class or None, error.retry_after_ms or None)
    if error.owner_id:  # the owner's hint, as the unary call's trailing metadata carries it
        return with_owner_hint(translated, error.owner_id, error.owner_address, error.owner_epoch)
    return translated


class RequestStream:
    """One bidirectional call at a time, reopened after it ends. Use on one event loop."""

    def __init__(
        self,
        open_call: Callable[[], grpc.aio.StreamStreamCall],
        answer_field: str,
        open_timeout_s: float | None = None,
        *,
        caller_reads: bool = False,
    ) -> None:
        """``open_call()`` starts the RPC; ``answer_field`` names the response's field holding a
        successful answer; ``open_timeout_s`` bounds the wait for the service to answer the
        open (see ``_open``). ``caller_reads``: an ``ask`` whose answer is the next one owed,
        with no read under way, reads that answer in its own task (see ``ask``); the reader
        task reads only while answers are owed and no caller reads."""
        self._open_call = open_call
        self._answer_field = answer_field
        self._call: grpc.aio.StreamStreamCall | None = None
        self._reader: asyncio.Task[None] | None = None
        # (correlation id, the answer's future, whether it gets the whole response message)
        self._owed: deque[tuple[int, asyncio.Future[Any], bool]] = deque()
        self._write_lock = asyncio.Lock()
        self._open_timeout_s = open_timeout_s
        self._open_answered: asyncio.Future[None] | None = None  # the current call's (_open)
        self._next_id = 1
        self._closed = False
        # Set once the service answered the open (initial metadata): it serves this stream.
        self.confirmed = False
        self.in_flight_max: int | None = None  # the service's read-ahead bound, once known
        self.batches_max = 1  # batches a ProduceStream message may carry (the service's word)
        self.request_bytes_max: int | None = None  # the largest message it takes, once known
        self.opened_count = 0
        # Called at once (before any owed answer fails) when a stream ends with requests owed:
        # the producer holds its partitions before anything new is sent on the next stream.
        self.on_break: Callable[[SeglogError], None] | None = None
        # caller_reads: who reads the current call's next answer. grpc.aio reads one at a time,
        # so at most one of them is set; neither while nothing is owed.
        self._caller_reads = caller_reads
        # The requests waited for with a timeout, oldest first: (deadline, answer, call,
        # timeout_s), and the one timer for the earliest (``_watch``).
        self._deadlines: deque[tuple[float, asyncio.Future[Any], Any, float]] = deque()
        self._watchdog: asyncio.TimerHandle | None = None
        self._watchdog_at = 0.0  # when the watchdog is due (its ``when()``, kept: no call a request)
        self._caller_reading = False
        self._reader_reads = False
        self._reader_parked: asyncio.Future[None] | None = None  # the reader waiting for work
        self._tasks: set[asyncio.Future[Any]] = set()  # reads handed over (``_track``)

    @property
    def owed_count(self) -> int:
        return len(self._owed)

    async def request(self, message: Any, timeout_s: float | None = None, *, whole: bool = False) -> Any:
        """Send ``message`` and wait for its answer (``timeout_s``: fail the stream after it).
        ``whole``: the answer is the response message itself, its ``error`` not raised (a
        ProduceStream message of several batches, answered batch by batch)."""
        return await self.wait(await self.send(message, whole=whole), timeout_s)

    async def ask(self, message: Any, timeout_s: float | None = None) -> Any:
        """``request`` without waiting for the write to finish before waiting for the answer
        (which cannot come sooner; a write that fails fails it, through ``_written``): one
        future and one loop turn fewer a request, for a caller that waits for each answer (a
        time lookup). Cancelled after its write began, the message is written all the same and
        its answer dropped, as for ``send``.

        With ``caller_reads``, when this request's answer is the next owed and no read is under
        way, the caller's task reads it from the call itself (the floor's write-then-read), not
        the reader task, which would take a loop turn more to hand it over. That read is never
        cancelled with the caller: cancelled meanwhile, the caller leaves at once and the read
        goes on in a task of its own, its answer matched and dropped as the reader would
        (``_Handover``)."""
        call = self._call
        alone = self._caller_reads and call is not None and not self._owed and not self._write_lock.locked() and (
            self._open_answered.done())  # type: ignore[union-attr]
        if alone:
            # Nothing under way on the stream (no write, no answer owed, the open answered):
            # ``send``'s steps inline, with no future of the write (nobody waits for it;
            # ``_written`` ends the stream if it fails). The free lock is taken at once; it
            # waits only behind a woken writer of an ended stream, and then nothing is owed
            # yet: cancelled there, nothing to withdraw; resumed, the stream is looked at again.
            await self._write_lock.acquire()
            alone = self._call is call and not self._owed
            if not alone:
                self._write_lock.release()
        if alone:
            correlation_id = self._next_id
            self._next_id += 1
            answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._owed.append((correlation_id, answer, False))
            message.correlation_id = correlation_id
            _started(call.write(message), functools.partial(self._written, call), tracked=False)  # type: ignore[union-attr]
        else:
            answer = await self.send(message, written=False, reads=self._caller_reads)
            if not self._caller_reads:
                return await self.wait(answer, timeout_s)
        call = self._call
        if (
            call is None or answer.done() or self._caller_reading or self._reader_reads
            or self._owed[0][1] is not answer
        ):
            self._want_reader()
            return await self.wait(answer, timeout_s)
        self._caller_reading = True
        if timeout_s is not None:
            self._watch(answer, call, timeout_s)
        try:
            handover = _Handover(self, call)
            outcome: tuple[Any, BaseException | None]
            try:
                outcome = (await _read_in_caller(call.read(), handover), None)
            except asyncio.CancelledError:
                if handover.handed_over:
                    # Nobody waits for its answer now: the read's own task drops it (a refusal
                    # set on it would be an exception never retrieved).
                    answer.cancel()
                    raise  # the caller's own cancellation: the read goes on in its task
                outcome = (None, ClientClosedError("the stream was closed before this request was answered"))
            except Exception as error:  # noqa: BLE001 - the call's end, as the reader task sees it
                outcome = (None, error)
            except BaseException as interrupt:  # not the call's end: the stream ends, it goes on
                self._took(call, None, interrupt)
                raise
            if handover.cancel_pending:
                # Cancelled once the read's last step was due (_Handover.cancel): the read ended
                # here, its answer is taken and dropped as a handed-over read's would be.
                answer.cancel()
                self._took(call, *outcome)
                raise asyncio.CancelledError(handover.cancel_message)
            self._took(call, *outcome)
            return await answer
        finally:
            if timeout_s is not None:
                self._unwatch()

    async def send(
        self, message: Any, *, whole: bool = False, written: bool = True, reads: bool = False
    ) -> asyncio.Future[Any]:
        """Writes ``message`` (a stream request; its correlation id is set here, so a retry may
        send the same message again); returns the future of its answer. Messages are written
        (and so answered) in the order ``send`` was called.

        Cancelling a ``send``: before its message is written (while it waits for an earlier
        write or for the service to answer the open) it is withdrawn; nothing is sent and the
        stream, the other sends in flight and later ones go on. Once its write has begun, the
        message is written all the same (the write finishes on its own, later writes waiting
        for it) and its answer, when it comes, is dropped: like a unary call cancelled after
        its request left, it may take effect. (A grpc.aio write interrupted midway would leave
        unknown whether the service got the message, and with it which answer is whose.)"""
        if self._closed:
            raise ClientClosedError("the stream is closed")
        call = self._call or self._open()
        opened = self._open_answered
        assert opened is not None
        correlation_id = self._next_id
        self._next_id += 1
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        owed = (correlation_id, answer, whole)
        self._owed.append(owed)  # before any await: the order of calls
        write = await self._start_write(call, opened, owed, message)
        if write is None:
            return answer  # the stream ended before this request was written: _end failed it
        if self._caller_reads and not reads:
            self._want_reader()
        if not written:
            return answer  # under way (``ask``): _written ends the stream if it fails
        try:
            await asyncio.shield(write)
        except (grpc.RpcError, asyncio.InvalidStateError) as error:
            self._end(call, _stream_ended(error))  # as _written did already
        return answer

    async def _start_write(
        self, call: grpc.aio.StreamStreamCall, opened: asyncio.Future[None], owed: tuple[int, Any, bool], message: Any
    ) -> asyncio.Future[None] | None:
        """The write of ``message`` under way, holding the write lock until it is done (grpc.aio
        allows one write at a time); None when the call ended first. Cancelled before that,
        ``owed`` is withdrawn."""
        try:
            await self._write_lock.acquire()
        except asyncio.CancelledError:
            self._withdraw(owed)
            raise
        try:
            if not opened.done():
                await self._wait_for_open(call, opened)
        except BaseException:
            self._write_lock.release()
            self._withdraw(owed)
            raise
        if self._call is not call:
            self._write_lock.release()
            return None
        message.correlation_id = owed[0]
        return _started(call.write(message), lambda error: self._written(call, error))

    def _written(self, call: grpc.aio.StreamStreamCall, error: BaseException | None) -> None:
        """A write finished (its sender may have been cancelled meanwhile): the next may go."""
        self._write_lock.release()
        if isinstance(error, (grpc.RpcError, asyncio.InvalidStateError)) or (
            error is not None and not isinstance(error, (Exception, asyncio.CancelledError))
        ):
            # The stream ended under us (or the write was interrupted midway: whether the
            # service got the message is unknown); what it owed fails (ours too), and the next
            # send opens a new one.
            self._end(call, _stream_ended(error))

    def _withdraw(self, owed: tuple[int, Any, bool]) -> None:
        """A request that was never written leaves the answers owed (if the stream still owes it)."""
        try:
            self._owed.remove(owed)
        except ValueError:
            pass  # the stream ended meanwhile: _end failed it
        owed[1].cancel()

    async def wait(self, answer: asyncio.Future[Any], timeout_s: float | None) -> Any:
        """The answer; after ``timeout_s`` the whole stream fails (answers are ordered: one
        that never comes holds up every later one) with RequestTimeoutError."""
        if timeout_s is None or answer.done():
            return await answer
        self._watch(answer, self._call, timeout_s)
        try:
            return await answer
        finally:
            self._unwatch()

    def _watch(self, answer: asyncio.Future[Any], call: Any, timeout_s: float) -> None:
        """After ``timeout_s``, unless ``answer`` is done by then, ``_time_out``. Not a timer a
        request (wait_for's task and shield, or a call_later cancelled at each answer, are on
        every request's path): one timer for the stream, at the earliest deadline waited for,
        which checks what is due when it fires and sets itself for the next."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        self._deadlines.append((deadline, answer, call, timeout_s))
        watchdog = self._watchdog
        if watchdog is None or deadline < self._watchdog_at:
            if watchdog is not None:
                watchdog.cancel()
            self._watchdog, self._watchdog_at = loop.call_at(deadline, self._deadlines_due), deadline

    def _unwatch(self) -> None:
        """A wait is over: the answers done at the front leave the deadlines. A caller that
        leaves early has its answer cancelled (its own, or ``ask``'s when it hands its read
        over), so its deadline, wherever it stands, is skipped when due: it resets nothing."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][1].done():
            deadlines.popleft()

    def _deadlines_due(self) -> None:
        self._watchdog = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        due, waiting = [], deque()
        for entry in self._deadlines:
            if not entry[1].done():
                (due if entry[0] <= now else waiting).append(entry)
        self._deadlines = waiting
        for _, answer, call, timeout_s in due:
            self._time_out(answer, call, timeout_s)
        if waiting and not self._closed:
            self._watchdog_at = min(entry[0] for entry in waiting)
            self._watchdog = loop.call_at(self._watchdog_at, self._deadlines_due)

    def _time_out(self, answer: asyncio.Future[Any], call: Any, timeout_s: float) -> None:
        if not answer.done() and call is not None and self._call is call:
            self._end(call, RequestTimeoutError(
                f"no answer on the stream within {timeout_s * 1000:.0f} ms; the stream was reset"
            ))

    async def close(self) -> None:
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._call is not None:
            self._end(self._call, ClientClosedError("the stream was closed before this request was answered"))
        # The reader and the reads handed over end with the call: awaited, so nothing of the
        # stream's is left running on the loop once it is closed.
        if self._reader is not None or self._tasks:
            await asyncio.gather(*filter(None, (self._reader, *self._tasks)), return_exceptions=True)

    # -- helpers ---------------------------------------------------------------------------------

    def _open(self) -> grpc.aio.StreamStreamCall:
        """Starts the call. Nothing is written on it before the service answers the open (its
        initial metadata), once per stream: a write racing the end of a call the service refuses
        (a service without the method answers UNIMPLEMENTED at once) makes grpc.aio end the call
        INTERNAL "Internal error from Core" instead, and the producer could not tell that it
        must fall back to unary calls."""
        call = self._open_call()
        self._call = call
        # What the last service announced may not hold for this one (an older build at the same
        # address announces nothing): until this open is answered, the defaults.
        self.batches_max = 1
        self.request_bytes_max = None
        self._open_answered = asyncio.get_running_loop().create_future()
        self.opened_count += 1
        self._caller_reading = self._reader_reads = False
        self._reader_parked = None
        if self._caller_reads:
            # Nothing may be reading when the call ends (the service stopping, the connection
            # lost): the reader reads then, so the end is seen as the reading reader sees it.
            call.add_done_callback(lambda _: self._call_finished(call))
        self._reader = asyncio.ensure_future(self._read_answers(call))
        return call

    async def _read_answers(self, call: grpc.aio.StreamStreamCall) -> None:
        error: SeglogError
        try:
            metadata = await call.initial_metadata()
            if self._note_metadata(metadata) and self._call is call and not self._open_answered.done():
                self._open_answered.set_result(None)  # seglog's stream handler: writes may go
            while True:
                if self._caller_reads and not self._reader_reads:
                    if self._call is not call:
                        return  # ended by _end: what it owed has failed already
                    if self._caller_reading or not (self._owed or call.done()):
                        parked = self._reader_parked = asyncio.get_running_loop().create_future()
                        await parked  # _want_reader, _call_finished or _end wakes it
                        continue
                    self._reader_reads = True
                response = await call.read()
                if response is grpc.aio.EOF:
                    error = ServiceUnavailableError("the service ended the stream")
                    break
                if self._call is not call:
                    return  # ended by _end: what it owed has failed already
                self._answer(response)
                if self._caller_reads and not self._owed:
                    self._reader_reads = False  # parks: the next ask may read its own answer
        except grpc.RpcError as rpc_error:
            error = _stream_ended(rpc_error)
        except asyncio.CancelledError:
            error = ClientClosedError("the stream was closed before this request was answered")
        except SeglogError as protocol_error:
            error = protocol_error
        self._end(call, error)

    def _track(self, task: asyncio.Future[Any]) -> None:
        """A task the stream started besides its reader: held until it ends (the loop keeps
        only a weak reference), and awaited by ``close``."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _want_reader(self) -> None:
        """caller_reads: answers are owed and nothing reads them: the reader task reads."""
        if self._owed and not self._caller_reading and not self._reader_reads:
            self._wake_reader()

    def _wake_reader(self) -> None:
        parked, self._reader_parked = self._reader_parked, None
        if parked is not None and not parked.done():
            parked.set_result(None)

    def _call_finished(self, call: grpc.aio.StreamStreamCall) -> None:
        """caller_reads: ``call`` is done; unless a read is under way (it will see the end), the
        reader reads, so the end fails what is owed and the next send opens a new stream."""
        if self._call is call and not self._caller_reading and not self._reader_reads:
            self._wake_reader()

    def _took(self, call: grpc.aio.StreamStreamCall, response: Any, error: BaseException | None) -> None:
        """The end of a read made outside the reader task (a caller's, or one it handed over):
        the answer matched as the reader matches it, or the call ended as the reader ends it;
        then the reader reads on if answers are still owed (or the call is done)."""
        if self._call is not call:
            return  # ended by _end: what it owed has failed already
        self._caller_reading = False
        failure: SeglogError | None
        if error is not None:
            failure = (
                _stream_ended(error) if isinstance(error, grpc.RpcError)
                else error if isinstance(error, SeglogError)
                else ServiceUnavailableError(f"the stream's read failed: {error!r}")
            )
        elif response is grpc.aio.EOF:
            failure = ServiceUnavailableError("the service ended the stream")
        else:
            try:
                self._answer(response)
                failure = None
            except SeglogError as protocol_error:
                failure = protocol_error
        if failure is not None:
            self._end(call, failure)
        elif self._owed or call.done():
            self._wake_reader()

    def _note_metadata(self, metadata: Any) -> bool:
        """True when the open was answered by seglog's stream handler."""
        # Only seglog's stream handler sends its read-ahead bound at open; a server without the
        # method may still hand back (empty) initial metadata before its UNIMPLEMENTED status.
        confirmed = False
        for key, value in metadata or ():
            if key == IN_FLIGHT_METADATA_KEY:
                try:
                    self.in_flight_max = int(value)
                except ValueError:
                    pass
                self.confirmed = confirmed = True
            elif key == BATCHES_METADATA_KEY:
                try:
                    self.batches_max = max(1, int(value))
                except ValueError:
                    pass
            elif key == REQUEST_BYTES_METADATA_KEY:
                try:
                    self.request_bytes_max = max(1, int(value))
                except ValueError:
                    pass
        return confirmed

    def _answer(self, response: Any) -> None:
        if not self._owed:
            raise ServiceError(f"the stream answered correlation id {response.correlation_id}, never sent")
        correlation_id, answer, whole = self._owed.popleft()
        if response.correlation_id != correlation_id:
            raise ServiceError(
                f"the stream answered correlation id {response.correlation_id} where "
                f"{correlation_id} was owed (answers must come in request order)"
            )
        if answer.done():
            return  # its caller gave up (timed out, cancelled)
        if whole:
            answer.set_result(response)
        elif response.HasField("error"):
            answer.set_exception(error_from_stream(response.error))
        else:
            answer.set_result(getattr(response, self._answer_field))

    async def _wait_for_open(self, call: grpc.aio.StreamStreamCall, answered: asyncio.Future[None]) -> None:
        await asyncio.wait((answered,), timeout=self._open_timeout_s)
        if not answered.done():
            self._end(call, RequestTimeoutError(
                f"the service did not answer the stream's open within {self._open_timeout_s * 1000:.0f} ms; "
                "the stream was reset"
            ))

    def _end(self, call: grpc.aio.StreamStreamCall, error: SeglogError) -> None:
        """``call`` is over: every request it owes fails with ``error``."""
        if self._call is not call:
            return
        self._call = None
        # An ended stream announces nothing: the service behind the next open (restarted with
        # another limit, another build) says its own; until then the defaults, as at an open
        # (a message packed for the ended stream would be written on the next one).
        self.batches_max = 1
        self.request_bytes_max = None
        call.cancel()
        self._wake_reader()  # a parked reader (caller_reads) sees the call ended and returns
        if self._open_answered is not None and not self._open_answered.done():
            self._open_answered.set_result(None)  # writers waiting on the open see it ended
        owed, self._owed = self._owed, deque()
        try:
            if owed and self.on_break is not None:
                self.on_break(error)
        finally:  # should on_break raise, what was owed still fails (nobody waits forever)
            for _, answer, _ in owed:
                if not answer.done():
                    answer.set_exception(error)
                    answer.exception()  # retrieved: a caller that gave up must not warn


class _Handover:
    """What a caller's task awaits while it reads its own answer (``ask``): the read's own
    future wakes the task directly (no proxy future, no extra loop turn), but a cancellation
    of the caller does not reach the read. grpc.aio cancels the whole call when a read is
    cancelled, and the asyncio task cancels the future it waits on, so the task is handed this
    future-like object (the task protocol: ``_asyncio_future_blocking``, ``get_loop``,
    ``add_done_callback``, ``cancel``) in place of the read's future. Its ``cancel`` takes the
    task's wake-up off the read's future, hands the read, where it stands, to a task of its
    own (``RequestStream._took`` then matches its answer) and wakes the caller cancelled. When
    the wake-up is already queued (the read's future done), the read's step due is run in the
    caller, which then leaves cancelled (``cancel_pending``)."""

    __slots__ = (
        "_asyncio_future_blocking", "_stream", "_call", "_read", "_waiting_on", "_wake", "handed_over",
        "cancel_pending", "cancel_message",
    )

    def __init__(self, stream: RequestStream, call: grpc.aio.StreamStreamCall) -> None:
        self._asyncio_future_blocking = False
        self._stream = stream
        self._call = call
        self._read: Coroutine[Any, Any, Any] | None = None
        self._waiting_on: asyncio.Future[Any] | None = None
        self._wake: tuple[Callable[..., None], Any] | None = None
        self.handed_over = False
        # Cancelled while the task's wake-up from the read's future was already queued.
        self.cancel_pending = False
        self.cancel_message: Any = None

    def waiting(self, read: Coroutine[Any, Any, Any], waiting_on: asyncio.Future[Any]) -> _Handover:
        self._read, self._waiting_on, self._wake = read, waiting_on, None
        self._asyncio_future_blocking = True
        return self

    def get_loop(self) -> asyncio.AbstractEventLoop:
        assert self._waiting_on is not None
        return self._waiting_on.get_loop()

    def add_done_callback(self, wake: Callable[..., None], *, context: Any = None) -> None:
        assert self._waiting_on is not None
        self._wake = (wake, context)
        self._waiting_on.add_done_callback(wake, context=context)

    def done(self) -> bool:
        return self.handed_over or (self._waiting_on is not None and self._waiting_on.done())

    def cancelled(self) -> bool:
        return self.handed_over

    def cancel(self, msg: Any = None) -> bool:
        if self.handed_over:
            return True
        if self._wake is None or self._read is None or self._waiting_on is None:
            return False  # not waited on yet: the task cancels at its next step
        if self.cancel_pending:
            return True
        wake, context = self._wake
        if self._waiting_on.done() or not self._waiting_on.remove_done_callback(wake):
            # The read's future is done and the task's wake-up already queued: it will run the
            # read's next step in the caller (the read cannot be moved from under it), which
            # then leaves cancelled (``ask``) or hands the read over at its next wait
            # (``_read_in_caller``). Returning False would make the task throw CancelledError
            # into grpc's read, which cancels the whole call.
            self.cancel_pending, self.cancel_message = True, msg
            return True
        self._hand_over(self._read, self._waiting_on)
        woken = self._waiting_on.get_loop().create_future()
        woken.cancel(msg)
        woken.get_loop().call_soon(wake, woken, context=context)
        return True

    def _hand_over(self, read: Coroutine[Any, Any, Any], waiting_on: Any) -> None:
        self.handed_over = True
        self._stream._track(asyncio.ensure_future(_read_handed_over(self._stream, self._call, read, waiting_on)))


@types.coroutine
def _read_in_caller(read: Coroutine[Any, Any, Any], handover: _Handover) -> Generator[Any, Any, Any]:
    """Runs ``read`` (a grpc.aio read) in the awaiting task as ``await`` would, but shows the
    task a ``_Handover`` in place of each future the read waits on (see there)."""
    try:
        waiting_on = read.send(None)
    except StopIteration as done:
        return done.value
    while True:
        try:
            if isinstance(waiting_on, asyncio.Future):
                sent = yield handover.waiting(read, waiting_on)
            else:
                sent = yield waiting_on  # not a future (a bare yield): as await passes it on
        except GeneratorExit:
            if not handover.handed_over:
                read.close()
            raise
        except BaseException as error:  # noqa: BLE001 - handed to the read, as await does
            if handover.handed_over:
                raise  # the caller was cancelled: the read is its own task's now
            if isinstance(error, asyncio.CancelledError) and (
                not isinstance(waiting_on, asyncio.Future) or (waiting_on.done() and not waiting_on.cancelled())
            ):
                # The caller's cancellation thrown in by its task at a step no _Handover stood
                # in for (the read's bare yield): never into grpc's read, which would cancel the
                # call. The step goes on as it would have; the caller leaves at the next wait.
                handover.cancel_pending, handover.cancel_message = True, error.args[0] if error.args else None
                step, argument = read.send, None
            else:
                step, argument = read.throw, error
        else:
            step, argument = read.send, sent
        try:
            waiting_on = step(argument)
        except StopIteration as done:
            return done.value
        if handover.cancel_pending:
            # The caller was cancelled while this step was due: the read goes on in its own
            # task from this wait, the caller leaves now.
            handover._hand_over(read, waiting_on)
            raise asyncio.CancelledError(handover.cancel_message)


async def _read_handed_over(
    stream: RequestStream, call: grpc.aio.StreamStreamCall, read: Coroutine[Any, Any, Any], waiting_on: Any
) -> None:
    """The rest of a read whose caller was cancelled: its answer (or end) as the caller's would."""
    try:
        response = await _resumed(read, waiting_on)
    except asyncio.CancelledError:
        stream._took(call, None, ClientClosedError("the stream was closed before this request was answered"))
    except Exception as error:  # noqa: BLE001 - the call's end, as the reader task sees it
        stream._took(call, None, error)
    except BaseException as interrupt:  # not the call's end: the stream ends, it goes on
        stream._took(call, None, interrupt)
        raise
    else:
        stream._took(call, response, None)


def _started(
    write: Coroutine[Any, Any, None], finished: Callable[[BaseException | None], None], *, tracked: bool = True
) -> asyncio.Future[None] | None:
    """``write`` (a grpc.aio write) started in the caller's step, the rest driven by the done
    callbacks of the futures it waits on, with no task: its message reaches gRPC core (and the
    socket) now, not one loop turn later when a task would first run it; its first step has no
    await point at which the caller's cancellation could land, and no step of it can be
    cancelled (nothing but the write's own futures resumes it). When it ends, ``finished(error)``
    is called in that same callback (a task's done callback would take a loop turn more), then
    the future returned is done as a task running the write would have been: None, the write's
    exception, or cancelled. ``tracked`` False: no such future (None returned), for a caller
    that never waits for the write."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] | None = loop.create_future() if tracked else None

    def step(_: Any = None) -> None:
        outcome: BaseException | None
        try:
            waiting_on = write.send(None)  # a future awaited re-raises its own failure
        except StopIteration:
            outcome = None
        except BaseException as error:  # noqa: BLE001 - the write's own end, as its task would end
            outcome = error
        else:
            if isinstance(waiting_on, asyncio.Future):
                waiting_on.add_done_callback(step)
            else:
                loop.call_soon(step)  # a bare yield: resumed on the next turn, as a task would
            return
        try:
            finished(outcome)  # it may raise (the stream's on_break): the write is over all the same
        finally:
            if done is None:
                pass
            elif outcome is None:
                done.set_result(None)
            elif isinstance(outcome, asyncio.CancelledError):
                done.cancel()
            else:
                done.set_exception(outcome)
                done.exception()  # retrieved: an ask does not wait for its write
        if outcome is not None and not isinstance(outcome, (Exception, asyncio.CancelledError)):
            raise outcome  # an interrupt goes on, as from the task that would have run the write

    step()
    return done


@types.coroutine
def _resumed(write: Coroutine[Any, Any, Any], waiting_on: Any) -> Generator[Any, Any, Any]:
    """The rest of a coroutine whose first step yielded ``waiting_on``: as ``await`` would run
    it, each value sent or exception thrown by the task passed on to it."""
    while True:
        try:
            sent = yield waiting_on
        except GeneratorExit:
            write.close()
            raise
        except BaseException as error:  # noqa: BLE001 - handed to the write, as await does
            step, argument = write.throw, error
        else:
            step, argument = write.send, sent
        try:
            waiting_on = step(argument)
        except StopIteration as done:
            return done.value


def _stream_ended(error: BaseException) -> SeglogError:
    """Why a stream ended, from the error its read or a write raised."""
    if isinstance(error, grpc.RpcError):
        if error.code() is grpc.StatusCode.INTERNAL and error.details() == _FAILED_WRITE_DETAILS:
            # Not the service's status (its INTERNAL answers carry their own message): grpc.aio
            # sets this one on a call whose write failed in the core, the call having ended on
            # the wire (a service stopping, a connection lost), and the real status is lost. A
            # request that was not written is safe to send again; those owed are as for any
            # broken stream: retried (idempotence keeps them from landing twice).
            return ServiceUnavailableError(
                "the stream ended while a request was being written (gRPC's 'Internal error from "
                "Core'; the service's own status was not received)"
            )
        return error_from_rpc(error)
    return ServiceUnavailableError(f"the stream ended: {error}")
