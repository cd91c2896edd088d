"""A LookupStream ask reads its own answer in the caller's task (``RequestStream(caller_reads=True)``),
against a real gRPC server on loopback whose stream handler answers, holds or ends on command:
the caller reads when its answer is next and nothing reads; cancelled mid-read, the read goes on
and its answer is dropped without breaking the stream; a stream ending or timing out under the
caller's read fails it and the next ask reopens; concurrent asks each get their own answer; a
stream the service ended while nothing read is reopened by the next ask."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog._streams import IN_FLIGHT_METADATA_KEY, RequestStream, _Handover
from seglog.errors import ClientClosedError, RequestTimeoutError, ServiceUnavailableError, TopicNotFoundError
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration

HOLD = -1  # a target the service holds its answer for until released
END = -2  # a target at which the service ends the stream (UNAVAILABLE)
CLOSE = -3  # a target the service answers, then ends the stream with OK
HELD_ERROR = -4  # held as HOLD, then refused (a StreamError: TopicNotFound)


class Service:
    """A LookupStream-shaped stream: each request answered with its own target as the offset,
    in order; a HOLD target waits for ``release``; END aborts; CLOSE answers and returns."""

    def __init__(self) -> None:
        self.released = asyncio.Event()
        self.held = asyncio.Event()
        self.opens = 0

    async def handle(self, requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        self.opens += 1
        await context.send_initial_metadata(((IN_FLIGHT_METADATA_KEY, "64"),))
        async for request in requests:
            target = request.offsets_for_times.partitions[0].timestamp_ms
            if target in (HOLD, HELD_ERROR):
                self.held.set()
                await self.released.wait()
            if target == END:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "the service is stopping")
            answer = pb.LookupStreamResponse(correlation_id=request.correlation_id)
            if target == HELD_ERROR:
                answer.error.code = grpc.StatusCode.NOT_FOUND.value[0]
                answer.error.message = "topic 't' does not exist"
                answer.error.error_class = "TopicNotFound"
                yield answer
                continue
            answer.offsets_for_times.results.add(topic="t", partition=0, offset=target)
            yield answer
            if target == CLOSE:
                return


@contextlib.asynccontextmanager
async def served() -> AsyncIterator[tuple[Service, RequestStream, list[str]]]:
    """The service, a caller_reads RequestStream on it, and who did each read ("caller" or
    "reader", in order)."""
    service = Service()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "test.Lookups", {"Stream": grpc.stream_stream_rpc_method_handler(
            service.handle, request_deserializer=pb.LookupStreamRequest.FromString,
            response_serializer=pb.LookupStreamResponse.SerializeToString,
        )},
    ),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    readers: list[str] = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            method = channel.stream_stream(
                "/test.Lookups/Stream", request_serializer=pb.LookupStreamRequest.SerializeToString,
                response_deserializer=pb.LookupStreamResponse.FromString,
            )
            stream: RequestStream

            def open_call() -> Any:
                call = method()
                read = call.read

                async def noted_read() -> Any:
                    reader = stream._reader
                    readers.append("reader" if asyncio.current_task() is reader else "caller")
                    return await read()

                call.read = noted_read  # who reads: the stream's code path is unchanged
                return call

            stream = RequestStream(open_call, "offsets_for_times", open_timeout_s=30, caller_reads=True)
            try:
                yield service, stream, readers
            finally:
                await stream.close()
    finally:
        await server.stop(0)


def _ask(target: int) -> pb.LookupStreamRequest:
    message = pb.LookupStreamRequest()
    message.offsets_for_times.partitions.add(topic="t", partition=0, timestamp_ms=target)
    return message


async def _offset(stream: RequestStream, target: int, timeout_s: float | None = 30) -> int:
    answer = await stream.ask(_ask(target), timeout_s)
    return answer.results[0].offset


async def _until(condition: Any) -> None:
    """Loop turns until ``condition()`` (bounded: a hang fails, not a slow machine)."""
    for _ in range(100_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("never happened")


@contextlib.contextmanager
def _loop_reports() -> Iterator[list[dict[str, Any]]]:
    """What the running loop's exception handler is given meanwhile (its contexts, in order)."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        yield reported
    finally:
        loop.set_exception_handler(None)


def _wrap_calls(stream: RequestStream, wrap: Any) -> None:
    """From the next open, each call of ``stream`` goes through ``wrap(call)`` (which replaces
    its read or write with one of its own) before the stream uses it."""
    opened = stream._open_call

    def open_call() -> Any:
        call = opened()
        wrap(call)
        return call

    stream._open_call = open_call


def _wrap_reads(stream: RequestStream, wrap_read: Any) -> None:
    """As ``_wrap_calls``, for the read: each call's read is ``wrap_read(call.read)``."""

    def wrap(call: Any) -> None:
        call.read = wrap_read(call.read)

    _wrap_calls(stream, wrap)


async def _held_in_callers_read(
    service: Service, stream: RequestStream, readers: list[str], target: int = HOLD, timeout_s: float | None = 30
) -> asyncio.Future[int]:
    """An ask of ``target`` (HOLD or HELD_ERROR) on an open stream, once the service holds its
    answer and its caller reads: its future."""
    held = asyncio.ensure_future(_offset(stream, target, timeout_s))
    await service.held.wait()
    await _until(lambda: readers[-1:] == ["caller"] and stream._caller_reading)
    return held


async def test_an_ask_reads_its_own_answer_once_the_stream_is_open():
    async with served() as (_, stream, readers):
        assert [await _offset(stream, n) for n in range(1, 6)] == [1, 2, 3, 4, 5]
        # The first ask's answer is read by the reader (it reads once the open is answered, the
        # ask waiting for it); every later one by its caller, the reader parked.
        assert readers == ["reader"] + ["caller"] * 4
        assert stream.opened_count == 1


async def test_asks_on_an_open_stream_start_no_task():
    """An ask's write is driven by its futures' callbacks and its answer read by its caller:
    no task (a loop turn each) for either, on every ask once the stream is open."""
    async with served() as (_, stream, readers):
        assert await _offset(stream, 1) == 1
        loop = asyncio.get_running_loop()
        started: list[Any] = []

        def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
            started.append(coro)
            return asyncio.Task(coro, loop=loop, **kwargs)

        loop.set_task_factory(counting)
        try:
            assert [await _offset(stream, n) for n in range(2, 52)] == list(range(2, 52))
        finally:
            loop.set_task_factory(None)
        assert started == []
        assert readers[1:] == ["caller"] * 50


async def test_an_ask_cancelled_while_it_reads_leaves_the_read_going_and_the_stream_open():
    async with served() as (service, stream, readers):
        assert await _offset(stream, 1) == 1
        held = await _held_in_callers_read(service, stream, readers)
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        later = asyncio.ensure_future(_offset(stream, 7))  # owed behind the dropped answer
        await asyncio.sleep(0.01)
        assert not later.done()
        service.released.set()
        assert await later == 7
        assert await _offset(stream, 8) == 8
        assert stream.opened_count == 1 and stream.owed_count == 0
        # The handed-over read ended in its own task; the next ask read its own answer again.
        assert readers[-1] == "caller"


def _cancel_once_its_read_is_done(task: asyncio.Task[Any]) -> None:
    """Cancels ``task`` in the loop turn its read's future completes, before the task's queued
    wake-up runs (a callback polling each turn: it runs after the future's callbacks queued)."""
    loop = asyncio.get_running_loop()

    def poll() -> None:
        waiter = getattr(task, "_fut_waiter", None)
        waiting_on = getattr(waiter, "_waiting_on", None)
        if isinstance(waiter, _Handover) and waiting_on is not None and waiting_on.done():
            task.cancel()
        elif not task.done():
            loop.call_soon(poll)

    loop.call_soon(poll)


async def _cancelled_as_its_read_completes(service: Service, stream: RequestStream, readers: list[str]) -> Any:
    """A HOLD ask whose caller reads, an ask behind it, the HOLD ask cancelled in the turn its
    read completes (the service releasing it): once it is cancelled, the ask behind's future."""
    assert await _offset(stream, 1) == 1
    held = await _held_in_callers_read(service, stream, readers)
    behind = asyncio.ensure_future(_offset(stream, 9))
    await _until(lambda: stream.owed_count == 2)
    _cancel_once_its_read_is_done(held)
    service.released.set()
    with pytest.raises(asyncio.CancelledError):
        await held
    return behind


async def test_an_ask_cancelled_as_its_read_completes_leaves_the_stream_open():
    """The caller's wake-up from its read is already queued when it is cancelled: the read's
    step is run in the caller (it cannot be handed over from under the queued wake-up), the
    answer taken and dropped, the caller cancelled; the requests behind it and the stream go on."""
    async with served() as (service, stream, readers):
        behind = await _cancelled_as_its_read_completes(service, stream, readers)
        assert await behind == 9
        assert await _offset(stream, 10) == 10
        assert stream.opened_count == 1 and stream.owed_count == 0


async def test_an_ask_cancelled_as_a_read_step_completes_hands_the_read_over_at_its_next_wait():
    """As above, with a read that waits once more after the call's answer came (a read of two
    waits): the step due runs in the caller, which hands the read over at its next wait and
    leaves; the read's own task takes and drops the answer."""
    async with served() as (service, stream, readers):
        second_waits: list[asyncio.Future[None]] = []

        def wrap_read(read: Any) -> Any:
            async def read_then_wait() -> Any:
                response = await read()
                after = asyncio.get_running_loop().create_future()
                second_waits.append(after)
                asyncio.get_running_loop().call_soon(after.set_result, None)
                await after
                return response

            return read_then_wait

        _wrap_reads(stream, wrap_read)
        behind = await _cancelled_as_its_read_completes(service, stream, readers)
        assert len(second_waits) == 2  # the caller left at the read's second wait
        assert await behind == 9
        assert await _offset(stream, 10) == 10
        assert stream.opened_count == 1 and stream.owed_count == 0


async def test_an_ask_cancelled_at_a_bare_yield_of_its_read_leaves_the_stream_open():
    """The read yields bare (no future: the task resumes it next turn, so no _Handover stands in)
    and the caller is cancelled then: its task throws the cancellation in at the next step, which
    must not reach grpc's read (cancelling the call); the read goes on in its own task."""
    async with served() as (service, stream, readers):

        def wrap_read(read: Any) -> Any:
            async def yielding_read() -> Any:
                await asyncio.sleep(0)  # a bare yield
                return await read()

            return yielding_read

        _wrap_reads(stream, wrap_read)
        assert await _offset(stream, 1) == 1
        loop = asyncio.get_running_loop()
        held = asyncio.ensure_future(_offset(stream, HOLD))
        behind: list[asyncio.Future[int]] = []

        def poll() -> None:
            if stream._caller_reading and held._fut_waiter is None:  # between its read's steps
                behind.append(asyncio.ensure_future(_offset(stream, 9)))
                held.cancel()
            elif not held.done():
                loop.call_soon(poll)

        loop.call_soon(poll)
        with pytest.raises(asyncio.CancelledError):
            await held
        assert len(behind) == 1
        await service.held.wait()
        service.released.set()
        assert await behind[0] == 9
        assert await _offset(stream, 10) == 10
        assert stream.opened_count == 1 and stream.owed_count == 0


async def test_an_ask_cancelled_while_it_reads_an_answer_that_is_an_error_leaves_nothing_unretrieved():
    """The handed-over read brings a refusal for a caller gone: it is dropped, not set on a
    future nobody reads ("Future exception was never retrieved", once a lookup)."""
    with _loop_reports() as reported:
        async with served() as (service, stream, readers):
            assert await _offset(stream, 1) == 1
            for round_ in range(3):
                service.released.clear()
                service.held.clear()
                held = await _held_in_callers_read(service, stream, readers, HELD_ERROR)
                held.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await held
                service.released.set()
                assert await _offset(stream, 10 + round_) == 10 + round_
            assert stream.opened_count == 1
            with pytest.raises(TopicNotFoundError):  # the refusal itself, for a caller that waits
                await stream.ask(_ask(HELD_ERROR), 30)
        del held
        gc.collect()
    assert [context["message"] for context in reported] == []


async def test_an_ask_cancelled_while_it_reads_then_the_stream_ending_fails_what_is_owed():
    async with served() as (service, stream, _):
        assert await _offset(stream, 1) == 1
        held = asyncio.ensure_future(_offset(stream, HOLD))
        await service.held.wait()
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        owed = asyncio.ensure_future(_offset(stream, 2))
        await _until(lambda: stream.owed_count == 2)
        stream._end(stream._call, ServiceUnavailableError("the connection was lost"))
        with pytest.raises(ServiceUnavailableError, match="connection was lost"):
            await owed
        assert await _offset(stream, 3) == 3
        assert stream.opened_count == 2


async def _callers_read_fails_then_the_next_ask_reopens(
    target: int, timeout_s: float, error: type[Exception], match: str
) -> None:
    """An ask of ``target`` whose caller reads fails with ``error``; the next ask opens a new stream."""
    async with served() as (service, stream, readers):
        assert await _offset(stream, 1) == 1
        with pytest.raises(error, match=match):
            await _offset(stream, target, timeout_s)
        assert readers[-1] == "caller"
        service.released.set()  # a HOLD answered now, on the stream already given up
        assert await _offset(stream, 2) == 2
        assert stream.opened_count == 2 and service.opens == 2


async def test_the_stream_ending_while_the_caller_reads_fails_it_and_the_next_ask_reopens():
    await _callers_read_fails_then_the_next_ask_reopens(END, 30, ServiceUnavailableError, "the service is stopping")


async def test_the_service_ending_the_stream_after_an_answer_read_by_the_caller_is_seen():
    async with served() as (service, stream, _):
        assert await _offset(stream, CLOSE) == CLOSE
        # Nothing reads now: the call's end wakes the reader, which ends the stream.
        await _until(lambda: stream._call is None)
        assert await _offset(stream, 2) == 2
        assert stream.opened_count == 2


async def test_a_timeout_while_the_caller_reads_resets_the_stream():
    await _callers_read_fails_then_the_next_ask_reopens(HOLD, 0.2, RequestTimeoutError, "no answer on the stream")


async def test_each_request_times_out_at_its_own_deadline_with_one_timer_for_the_stream():
    """Timeouts share the stream's one timer (``_watch``): a short one after long ones fires
    at its own deadline, whether its caller reads (the first) or waits behind a caller's read
    (the second: it ends the stream, so the read it waited behind fails with it), and answered
    requests leave no deadline behind. Each short timeout fires before the 30 s deadline of
    the asks before it (a bound far from the short one: not a speed assertion, but a timer left
    at an earlier request's deadline fires only at 30 s)."""
    loop = asyncio.get_running_loop()
    async with served() as (service, stream, _):
        assert [await _offset(stream, n) for n in range(1, 101)] == list(range(1, 101))  # 30 s each
        assert len(stream._deadlines) == 0
        began = loop.time()
        with pytest.raises(RequestTimeoutError, match="within 200 ms"):
            await _offset(stream, HOLD, timeout_s=0.2)
        assert loop.time() - began < 30
        service.released.clear()
        service.held.clear()
        held = asyncio.ensure_future(_offset(stream, HOLD, timeout_s=30))
        await service.held.wait()
        began = loop.time()
        with pytest.raises(RequestTimeoutError, match="within 300 ms"):
            await _offset(stream, 5, timeout_s=0.3)
        assert loop.time() - began < 30
        with pytest.raises(RequestTimeoutError, match="within 300 ms"):
            await held
        service.released.set()
        assert await _offset(stream, 6) == 6
        assert stream.opened_count == 3 and len(stream._deadlines) == 0


async def test_the_deadline_of_a_caller_gone_resets_nothing():
    """A caller cancelled while it reads (its read handed over) or while it waits behind one
    leaves its deadline: past it, the requests still waited for and the stream go on."""
    async with served() as (service, stream, readers):
        assert await _offset(stream, 1) == 1
        held = await _held_in_callers_read(service, stream, readers, timeout_s=0.05)
        waiting = asyncio.ensure_future(_offset(stream, 2, timeout_s=0.05))  # behind the read
        behind = asyncio.ensure_future(_offset(stream, 3, timeout_s=30))
        await _until(lambda: stream.owed_count == 3)
        held.cancel()
        waiting.cancel()
        for gone in (held, waiting):
            with pytest.raises(asyncio.CancelledError):
                await gone
        await asyncio.sleep(0.2)  # past the deadlines of the callers gone
        assert not behind.done()
        service.released.set()
        assert await behind == 3
        assert stream.opened_count == 1 and not stream._deadlines


async def test_asks_during_a_callers_read_are_read_by_the_reader_each_its_own():
    async with served() as (service, stream, readers):
        assert await _offset(stream, 1) == 1
        first = asyncio.ensure_future(_offset(stream, HOLD))
        await service.held.wait()
        others = [asyncio.ensure_future(_offset(stream, n)) for n in (10, 11, 12)]
        await _until(lambda: stream.owed_count == 4)
        service.released.set()
        assert await first == HOLD
        assert [await other for other in others] == [10, 11, 12]
        assert "reader" in readers[2:]  # the later answers went through the reader
        assert await _offset(stream, 13) == 13
        assert readers[-1] == "caller"  # and once nothing is owed, the caller reads again
        assert stream.opened_count == 1


async def test_closing_the_stream_awaits_the_reads_it_handed_over():
    """A read handed over that takes some loop turns to end after the call's (as grpc.aio's
    own cleanup of a call may) is still awaited by ``close``."""
    async with served() as (service, stream, readers):

        def wrap_read(read: Any) -> Any:
            async def slow_to_end() -> Any:
                try:
                    return await read()
                finally:
                    for _ in range(5):
                        await asyncio.sleep(0)

            return slow_to_end

        _wrap_reads(stream, wrap_read)
        assert await _offset(stream, 1) == 1
        before = asyncio.all_tasks()
        held = await _held_in_callers_read(service, stream, readers)
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        handed_over = asyncio.all_tasks() - before - {held}
        assert len(handed_over) == 1  # the read, in its own task
        await stream.close()
        assert all(task.done() for task in handed_over)  # nothing of the stream's left running
        service.released.set()


async def test_closing_the_stream_while_the_caller_reads_fails_its_ask():
    async with served() as (service, stream, _):
        assert await _offset(stream, 1) == 1
        held = asyncio.ensure_future(_offset(stream, HOLD))
        await service.held.wait()
        await stream.close()
        with pytest.raises(ClientClosedError):
            await held
        service.released.set()


class Interrupt(BaseException):
    """Not an Exception, as KeyboardInterrupt; the loop reports it from a callback rather than
    stopping (as it would for KeyboardInterrupt itself, which would stop the test run)."""


def _faulty(stream: RequestStream) -> tuple[list[BaseException], list[BaseException]]:
    """Fault injection on the stream's calls from the next open: (write faults, read faults);
    a fault put in the list is raised by the next write (read) at its second step, after one
    bare yield, in place of the call's own."""
    write_faults: list[BaseException] = []
    read_faults: list[BaseException] = []

    def wrap(call: Any) -> None:
        write, read = call.write, call.read

        async def faulty_write(message: Any) -> None:
            if write_faults:
                await asyncio.sleep(0)
                raise write_faults.pop()
            await write(message)

        async def faulty_read() -> Any:
            if read_faults:
                await asyncio.sleep(0)
                raise read_faults.pop()
            return await read()

        call.write, call.read = faulty_write, faulty_read

    _wrap_calls(stream, wrap)
    return write_faults, read_faults


async def test_a_write_failing_in_a_later_step_with_on_break_raising_fails_its_request_and_frees_the_stream():
    """The stream's end raising (a broken on_break) in a write's callback: the write is over
    all the same, the send returns, what was owed fails, the write lock is free."""
    with _loop_reports() as reported:
        async with served() as (_, stream, _):
            write_faults, _ = _faulty(stream)

            def on_break(error: Exception) -> None:
                raise RuntimeError("on_break failed")

            stream.on_break = on_break
            assert await _offset(stream, 1) == 1
            write_faults.append(asyncio.InvalidStateError("RPC already finished"))
            answer = await asyncio.wait_for(stream.send(_ask(2)), 10)  # a hang fails, not a slow machine
            with pytest.raises(ServiceUnavailableError):
                await answer
            assert await asyncio.wait_for(_offset(stream, 3), 10) == 3
            assert stream.opened_count == 2
    assert [str(context.get("exception")) for context in reported] == ["on_break failed"]


async def test_an_interrupt_in_a_later_write_step_goes_on_and_frees_the_stream():
    with _loop_reports() as reported:
        async with served() as (_, stream, _):
            write_faults, _ = _faulty(stream)
            assert await _offset(stream, 1) == 1
            write_faults.append(Interrupt())
            with pytest.raises(Interrupt):
                await asyncio.wait_for(stream.send(_ask(2)), 10)
            # The write was interrupted midway: the stream was reset, the write lock is free.
            assert await asyncio.wait_for(_offset(stream, 3), 10) == 3
            assert stream.opened_count == 2
    assert [type(context.get("exception")) for context in reported] == [Interrupt]  # from the callback


async def test_an_interrupt_in_a_callers_read_goes_on_and_the_next_ask_is_answered():
    async with served() as (_, stream, readers):
        _, read_faults = _faulty(stream)
        assert await _offset(stream, 1) == 1
        read_faults.append(Interrupt())
        with pytest.raises(Interrupt):
            await asyncio.wait_for(_offset(stream, 2), 10)
        assert readers == ["reader"]  # the interrupted read was the caller's (noted_read not reached)
        assert not stream._caller_reading
        assert await asyncio.wait_for(_offset(stream, 3), 10) == 3
        assert stream.opened_count == 2


async def _schedule(plan: list[tuple[int, str, int]], opened: bool = False) -> tuple[list[int | None], int]:
    """Asks ``plan``'s targets concurrently, each started after its own number of loop turns
    and cancelled after its own ("turn"), or from then on in the turn its own read's future
    completes ("read done": its wake-up already queued); (each ask's answer, None if it was
    cancelled; opens). ``opened``: one ask answered first, so the plan's first ask reads its own
    answer (on a new stream the reader reads it)."""
    async with served() as (_, stream, _):
        if opened:
            assert await _offset(stream, 99) == 99
        async def one(index: int, start_turns: int) -> int:
            for _ in range(start_turns):
                await asyncio.sleep(0)
            return await _offset(stream, 100 + index)

        tasks = []
        for index, (start_turns, cancel, cancel_turns) in enumerate(plan):
            task = asyncio.ensure_future(one(index, start_turns))
            tasks.append((task, cancel, cancel_turns))
        for turn in range(12):
            for task, cancel, cancel_turns in tasks:
                if cancel == "turn" and cancel_turns == turn:
                    task.cancel()
                elif cancel == "read done" and cancel_turns == turn:
                    _cancel_once_its_read_is_done(task)
            await asyncio.sleep(0)
        answers: list[int | None] = []
        for task, _, _ in tasks:
            try:
                answers.append(await task)
            except asyncio.CancelledError:
                answers.append(None)
        answers.append(await _offset(stream, 999))
        return answers, stream.opened_count


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.lists(
    st.tuples(st.integers(0, 6), st.sampled_from(("no", "turn", "read done")), st.integers(0, 11)),
    min_size=1, max_size=8,
), opened=st.booleans())
def test_any_mix_of_asks_and_cancellations_each_gets_its_own_answer(plan, opened):
    answers, opens = asyncio.run(_schedule(plan, opened))
    for index, answer in enumerate(answers[:-1]):
        assert answer in (None, 100 + index)
        if plan[index][1] == "no":
            assert answer == 100 + index
    assert answers[-1] == 999
    assert opens == 1  # no cancellation, at any point, broke the stream


async def _lone_asks(plan: list[tuple[str, int]]) -> tuple[list[int | None], int, int]:
    """Each of ``plan``'s asks alone on the open stream once it is idle (no write under way, no
    answer owed), cancelled after its own loop turns ("turn") or in the turn its read's future
    completes ("read done"), or not; (each ask's answer, None if cancelled; ``send`` calls; opens)."""
    async with served() as (_, stream, _):
        assert await _offset(stream, 99) == 99
        sends: list[int] = []
        send = stream.send

        def counted(*arguments: Any, **keywords: Any) -> Any:
            sends.append(1)
            return send(*arguments, **keywords)

        stream.send = counted  # type: ignore[method-assign]
        answers: list[int | None] = []
        for index, (cancel, turns) in enumerate(plan):
            await _until(lambda: not stream.owed_count and not stream._write_lock.locked())
            task = asyncio.ensure_future(_offset(stream, 100 + index))
            if cancel == "turn":
                for _ in range(turns):
                    await asyncio.sleep(0)
                task.cancel()
            elif cancel == "read done":
                _cancel_once_its_read_is_done(task)
            try:
                answers.append(await task)
            except asyncio.CancelledError:
                answers.append(None)
        await _until(lambda: not stream.owed_count and not stream._write_lock.locked())
        answers.append(await _offset(stream, 999))
        return answers, len(sends), stream.opened_count


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.lists(st.tuples(st.sampled_from(("no", "turn", "read done")), st.integers(0, 8)),
                     min_size=1, max_size=6))
def test_a_lone_ask_cancelled_at_any_point_leaves_the_idle_stream_answering(plan):
    """An ask with nothing under way on its stream writes without ``send`` (no lock to wait
    for, no future of the write): cancelled at any loop turn of it, or as its read completes, it
    gets its own answer or leaves cancelled, and the stream answers the next ask unbroken."""
    answers, sends, opens = asyncio.run(_lone_asks(plan))
    for index, answer in enumerate(answers[:-1]):
        assert answer in (None, 100 + index)
        if plan[index][0] == "no":
            assert answer == 100 + index
    assert answers[-1] == 999
    assert sends == 0  # every ask took the path of an idle stream
    assert opens == 1


@pytest.mark.parametrize("then", ["stream ends", "cancelled"])
async def test_a_lone_ask_waiting_behind_a_woken_writer_owes_nothing_until_it_writes(then):
    """The lock free but a writer woken for it not yet run (a writer of a stream that ended):
    the lone ask's take of the lock waits, owing nothing. Cancelled there it leaves nothing
    behind; resumed on a stream that ended meanwhile it goes the long way, on a new stream."""
    async with served() as (_, stream, _):
        assert await _offset(stream, 1) == 1
        lock = stream._write_lock
        call = stream._call
        await lock.acquire()  # the ended stream's write under way

        async def woken_writer() -> None:
            await lock.acquire()
            if then == "stream ends":
                stream._end(call, ServiceUnavailableError("ended under the writer"))
            lock.release()

        writer = asyncio.ensure_future(woken_writer())
        await asyncio.sleep(0)  # the writer waits for the lock
        asyncio.get_running_loop().call_soon(lock.release)  # it is woken just before the ask runs
        asking = asyncio.ensure_future(_offset(stream, 2))
        await asyncio.sleep(0)
        assert not asking.done() and stream.owed_count == 0  # waiting for the lock, owing nothing
        if then == "cancelled":
            asking.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asking
        else:
            assert await asyncio.wait_for(asking, 10) == 2
        await writer
        assert stream.owed_count == 0 and not lock.locked()
        assert await asyncio.wait_for(_offset(stream, 3), 10) == 3
        assert stream.opened_count == (2 if then == "stream ends" else 1)
