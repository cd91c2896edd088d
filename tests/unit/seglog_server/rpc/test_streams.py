"""OrderedReplies: a stream's answers leave in request order, ready or late, and no more than the
bound is ever owed (Hypothesis over which answers are ready and when late ones resolve). And one
message's admission: its request slot and its principal's slot come back however it ends."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.servicer_support import one_slot_servicer

from seglog_server.rpc.streams import OrderedReplies


async def _run(in_flight_max: int, late: list[bool], resolve_order: list[int]) -> tuple[list[int], int]:
    written: list[int] = []
    owed_high = 0
    replies = OrderedReplies(_writer(written), in_flight_max, size_of=_one)
    futures: list[asyncio.Future[int]] = []
    choices = iter(resolve_order)
    for number, is_late in enumerate(late):
        waiting = asyncio.ensure_future(replies.wait_for_room())
        for _ in range(3):
            await asyncio.sleep(0)
        while not waiting.done():  # resolve late answers, in any order, until there is room
            open_futures = [f for f in futures if not f.done()]
            pick = open_futures[next(choices, 0) % len(open_futures)]
            pick.set_result(futures.index(pick))
            for _ in range(3):
                await asyncio.sleep(0)
        await waiting
        owed_high = max(owed_high, replies.in_flight + 1)
        if is_late:
            future = asyncio.get_running_loop().create_future()
            futures.append(future)
            await replies.send(future)
        else:
            futures.append(_done(number))
            await replies.send(number)
    for number, future in enumerate(futures):
        if not future.done():
            future.set_result(number)
    await replies.finish()
    return written, max(owed_high, replies.in_flight_high)


def _one(message: object) -> int:
    return 1  # the count bound is what these tests are about


def _writer(written: list[int]):
    async def write(message: int) -> None:
        await asyncio.sleep(0)
        written.append(message)

    return write


def _done(value: int) -> asyncio.Future[int]:
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


@settings(max_examples=200, deadline=None)
@given(
    in_flight_max=st.integers(1, 6),
    late=st.lists(st.booleans(), max_size=40),
    resolve_order=st.lists(st.integers(0, 50), max_size=80),
)
def test_answers_leave_in_request_order_and_the_owed_count_stays_bounded(in_flight_max, late, resolve_order):
    written, owed_high = asyncio.run(_run(in_flight_max, late, resolve_order))
    assert written == list(range(len(late)))
    assert owed_high <= in_flight_max + 1  # the bound, plus the one request being worked on


def test_a_failed_write_reaches_the_reader():
    async def run() -> None:
        async def broken(message: int) -> None:
            raise ConnectionError("client gone")

        replies = OrderedReplies(broken, 2, size_of=_one)
        late = asyncio.get_running_loop().create_future()
        await replies.send(late)
        late.set_result(1)
        await asyncio.sleep(0.01)
        try:
            await replies.wait_for_room()
        except ConnectionError:
            return
        raise AssertionError("the drainer's failure was not raised")

    asyncio.run(run())


async def _sent(replies: OrderedReplies, reply: int) -> None:
    """``replies.send(reply)``, which must return within a few loop turns (not waiting for the
    write's completion: before, it did, and these tests would wait forever)."""
    sending = asyncio.ensure_future(replies.send(reply))
    for _ in range(3):
        await asyncio.sleep(0)
    assert sending.done(), "send waited for its write to complete"
    sending.result()


def _held_writer(written: list[int], started: list[int], gates: dict[int, asyncio.Event]):
    """A write that reaches the transport at once (``started``) and completes when its gate opens."""
    async def write(message: int) -> None:
        started.append(message)
        await gates.setdefault(message, asyncio.Event()).wait()
        written.append(message)

    return write


def test_a_ready_answer_is_not_waited_for_while_its_write_completes():
    """The stream reads its next request while an answer's write completes: ``send`` starts the
    write in its own step and returns; what is sent meanwhile queues behind it, in order, and the
    write under way counts as owed."""
    async def run() -> None:
        written, started, gates = [], [], {}
        replies = OrderedReplies(_held_writer(written, started, gates), 2, size_of=_one)
        await _sent(replies, 0)
        assert (started, written, replies.in_flight) == ([0], [], 1)
        await _sent(replies, 1)
        assert (started, replies.in_flight) == ([0], 2)
        room = asyncio.ensure_future(replies.wait_for_room())
        await asyncio.sleep(0)
        assert not room.done()  # the bound counts the write under way
        gates.setdefault(0, asyncio.Event()).set()
        await room
        assert written == [0]
        gates.setdefault(1, asyncio.Event()).set()
        await replies.finish()
        assert (started, written, replies.in_flight) == ([0, 1], [0, 1], 0)

    asyncio.run(run())


def test_a_write_that_fails_after_it_started_reaches_the_reader():
    async def run() -> None:
        gate = asyncio.Event()

        async def fails_later(message: int) -> None:
            await gate.wait()
            raise ConnectionError("client gone")

        replies = OrderedReplies(fails_later, 2, size_of=_one)
        await _sent(replies, 0)
        gate.set()
        with pytest.raises(ConnectionError):
            for _ in range(10):
                await asyncio.sleep(0)
                await replies.wait_for_room()
        with pytest.raises(ConnectionError):
            await replies.send(1)
        with pytest.raises(ConnectionError):
            await replies.finish()

    asyncio.run(run())


def test_a_write_that_fails_as_it_starts_raises_from_send():
    async def run() -> None:
        async def refused(message: int) -> None:
            raise ValueError("not serialisable")

        replies = OrderedReplies(refused, 2, size_of=_one)
        with pytest.raises(ValueError):
            await replies.send(0)
        assert replies.in_flight == 0

    asyncio.run(run())


def test_cancel_ends_a_write_under_way():
    async def run() -> None:
        written, started, gates = [], [], {}
        replies = OrderedReplies(_held_writer(written, started, gates), 2, size_of=_one)
        await _sent(replies, 0)
        await _sent(replies, 1)
        replies.cancel()
        for _ in range(3):
            await asyncio.sleep(0)
        assert (started, written, replies.in_flight) == ([0], [], 0)

    asyncio.run(run())


# -- one message's admission: a request slot (Admission) and the gate's checks ----------------------


class _Context:
    def invocation_metadata(self):
        return ()

    def peer(self):
        return "ipv4:127.0.0.1:1"


def _servicer(tmp_path):
    """A servicer of one request slot, behind a gate whose ACL allows describing topic "a" only."""
    from seglog_server.rpc.call_gate import CallGate
    from seglog_server.security import PrincipalQuota, SecurityPaths, SecurityPolicy

    (tmp_path / "acl.toml").write_text('[[allow]]\nprincipals = ["*"]\noperations = ["describe"]\ntopics = ["a"]\n')
    policy = SecurityPolicy(SecurityPaths(acl=str(tmp_path / "acl.toml")), PrincipalQuota(), token_cache_max=16,
                            quota_window_ms=1000, quota_delay_ms_max=1000)
    return one_slot_servicer(CallGate(policy))


def _lookup(topic: str, correlation_id: int):
    from seglog.v1 import log_service_pb2 as pb

    request = pb.LookupStreamRequest(correlation_id=correlation_id)
    request.offsets_for_times.partitions.add(topic=topic, partition=0, timestamp_ms=5)
    return request


async def test_a_stream_message_the_gate_refuses_gives_its_request_slot_back(tmp_path):
    from seglog_server.security import ANONYMOUS

    servicer, calls = _servicer(tmp_path)
    try:
        stream = await servicer.gate.admit_stream("LookupStream", _Context())
        denied = await servicer.streams._lookup_message("LookupStream", stream, _lookup("b", 1))
        assert denied.error.error_class == "PermissionDeniedError" and "topic 'b'" in denied.error.message
        assert servicer.admission.statistics().request_count == 0
        assert servicer.gate.quotas.statistics().in_use_by_principal[ANONYMOUS]["requests"] == 0
        # The one request slot is free: the next message is worked on (its topic is unknown).
        answered = await servicer.streams._lookup_message("LookupStream", stream, _lookup("a", 2))
        assert answered.correlation_id == 2 and not answered.HasField("error")
        assert [result.error.error_class for result in answered.offsets_for_times.results] == [
            "UnknownTopicOrPartitionError"]
        assert servicer.admission.statistics().request_count == 0
        stream.release()
    finally:
        calls.shutdown()


async def test_a_stream_message_cancelled_mid_way_gives_its_slots_back(tmp_path, monkeypatch):
    """The stream ends (the client went away, or the drain cut it) while a message is worked on:
    its request slot and its principal's slot come back."""
    from seglog_server.security import ANONYMOUS

    servicer, calls = _servicer(tmp_path)
    started, never = asyncio.Event(), asyncio.Event()

    async def stuck(request, response=None):
        started.set()
        await never.wait()

    monkeypatch.setattr(servicer.lookups, "offsets_for_times", stuck)
    try:
        stream = await servicer.gate.admit_stream("LookupStream", _Context())
        task = asyncio.ensure_future(servicer.streams._lookup_message("LookupStream", stream, _lookup("a", 1)))
        await started.wait()

        def held() -> tuple[int, int]:
            in_use = servicer.gate.quotas.statistics().in_use_by_principal[ANONYMOUS]["requests"]
            return servicer.admission.statistics().request_count, in_use

        assert held() == (1, 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert held() == (0, 0)
        stream.release()
    finally:
        calls.shutdown()


# -- the bytes bound: what a stream holds of answers written and not confirmed, and queued ---------


async def _held_run(held_bytes_max: int, sizes: list[int], opens: list[bool]) -> tuple[list[int], int, int]:
    """A read loop answering requests with ready answers of ``sizes`` bytes; each write reaches
    the transport at once and completes when the test opens it (``opens``: at each step, the
    earliest write not yet opened, or a loop turn). Returns what was written, the most bytes
    held at once (built and not yet written: counted here, not by OrderedReplies) and the
    most answers owed."""
    written: list[int] = []
    started: list[int] = []
    gates = [asyncio.Event() for _ in sizes]
    held = high = 0

    async def write(number: int) -> None:
        nonlocal held
        started.append(number)
        await gates[number].wait()
        held -= sizes[number]
        written.append(number)

    replies = OrderedReplies(write, 8, held_bytes_max, size_of=sizes.__getitem__)

    async def read_loop() -> None:
        nonlocal held, high
        for number, size in enumerate(sizes):
            if not replies.has_room:
                await replies.wait_for_room()
            held += size  # the answer is built: held until its write completes
            high = max(high, held)
            await replies.send(number)
        await replies.finish()

    reader = asyncio.ensure_future(read_loop())
    opened = 0
    for open_one in opens:
        await asyncio.sleep(0)
        assert replies.held_bytes == held  # what it counts is what is held
        if open_one and opened < len(started):
            gates[started[opened]].set()
            opened += 1
    for gate in gates:
        gate.set()
    await reader
    assert replies.held_bytes == 0
    return written, high, replies.in_flight_high


@settings(max_examples=300, deadline=None)
@given(
    held_bytes_max=st.integers(1, 3000),
    sizes=st.lists(st.integers(1, 2000), max_size=30),
    opens=st.lists(st.booleans(), max_size=120),
)
def test_the_bytes_held_never_exceed_the_bound_plus_one_answer(held_bytes_max, sizes, opens):
    written, high, owed_high = asyncio.run(_held_run(held_bytes_max, sizes, opens))
    assert written == list(range(len(sizes)))
    assert high <= held_bytes_max + max(sizes, default=0)
    assert owed_high <= 8


def test_a_small_answer_is_not_waited_for_under_the_bytes_bound():
    """The fast path stays: a small answer's write under way leaves room for the next request;
    one at the bound does not, until its write completes."""
    async def run() -> None:
        written, started, gates = [], [], {}
        replies = OrderedReplies(_held_writer(written, started, gates), 8, 100, size_of=lambda n: n)
        await _sent(replies, 10)
        assert replies.has_room and replies.held_bytes == 10
        await _sent(replies, 95)
        assert not replies.has_room and replies.held_bytes == 105
        room = asyncio.ensure_future(replies.wait_for_room())
        await asyncio.sleep(0)
        assert not room.done()
        gates.setdefault(10, asyncio.Event()).set()
        await room  # 95 held: under the bound
        assert (written, replies.held_bytes, replies.has_room) == ([10], 95, True)
        gates.setdefault(95, asyncio.Event()).set()
        await replies.finish()
        assert (written, replies.held_bytes, replies.held_bytes_high) == ([10, 95], 0, 105)

    asyncio.run(run())
