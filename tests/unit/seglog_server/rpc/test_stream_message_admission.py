"""A LookupStream or ProduceStream message's admission when nothing binds it: the check that
replaces taking and giving back its slots (``Admission.request_slot_free``,
``CallGate.admits_message_at_once``) admits exactly when the full path (``take_request_slot`` +
``begin_message``) would admit at once and leave nothing behind (Hypothesis over gates, ACLs,
reloads, produce byte rates, caps and slots held); a lookup or append that finishes in its first
step holds no slot, one that waits holds both while it waits and gives them back however it
ends (answered, failed, cancelled); a produce byte rate, an ACL, a full service or a capped
principal still take the full path."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.servicer_support import one_slot_servicer

from seglog.v1 import log_service_pb2 as pb
from seglog_server.rpc.admission import Admission, AdmissionLimits
from seglog_server.rpc.call_gate import CallGate
from seglog_server.rpc.errors import OverloadedError
from seglog_server.security import ANONYMOUS, PrincipalLimitError, PrincipalQuota, SecurityPaths, SecurityPolicy


class _Context:
    def invocation_metadata(self):
        return ()

    def peer(self):
        return "ipv4:127.0.0.1:1"


def _policy(tmp_path, acl: str | None, quota: PrincipalQuota) -> SecurityPolicy:
    paths = SecurityPaths()
    if acl is not None:
        (tmp_path / "acl.toml").write_text(acl)
        paths = SecurityPaths(acl=str(tmp_path / "acl.toml"))
    return SecurityPolicy(paths, quota, token_cache_max=16, quota_window_ms=1000, quota_delay_ms_max=1000)


_ACLS = {
    "none": None,
    "all": '[[allow]]\nprincipals = ["*"]\noperations = ["describe", "write"]\ntopics = ["*"]\n',
    "other": '[[allow]]\nprincipals = ["*"]\noperations = ["describe", "write"]\ntopics = ["b"]\n',
}


def _message(method: str):
    if method == "LookupStream":
        request = pb.OffsetsForTimesRequest()
        request.partitions.add(topic="a", partition=0, timestamp_ms=5)
        return request
    return pb.ProduceRequest(topic="a", partition=0, records=b"x" * 100)


def _state(admission: Admission, gate: CallGate):
    return admission.statistics(), gate.statistics()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    gated=st.booleans(),
    acl=st.sampled_from(sorted(_ACLS)),
    reloaded=st.booleans(),
    method=st.sampled_from(["LookupStream", "ProduceStream"]),
    produce_rate=st.sampled_from([0, 1_000_000]),
    requests_max=st.integers(0, 3),
    requests_held=st.integers(0, 3),
    slots_max=st.integers(1, 3),
    slots_held=st.integers(0, 3),
)
def test_the_check_admits_exactly_when_the_full_path_admits_at_once_leaving_nothing(
    tmp_path, gated, acl, reloaded, method, produce_rate, requests_max, requests_held, slots_max, slots_held
):
    async def run() -> None:
        quota = PrincipalQuota(produce_bytes_per_s=produce_rate, requests_max=requests_max)
        policy = _policy(tmp_path, _ACLS[acl], quota) if gated else None
        gate = CallGate(policy) if gated else CallGate(
            quotas=_policy(tmp_path, None, quota).quotas)
        admission = Admission(AdmissionLimits(request_max=slots_max, waiter_max=1, waiter_per_client_max=1,
                                              stream_max=4, stream_per_client_max=4))
        call = await gate.admit_stream(method, _Context())
        for _ in range(min(requests_held, requests_max) if requests_max else requests_held):
            gate.quotas.acquire(ANONYMOUS, call.kind.REQUEST)
        for _ in range(min(slots_held, slots_max)):
            admission.take_request_slot()
        if reloaded and policy is not None:
            policy.reload()
        message = _message(method)
        before = _state(admission, gate)
        at_once = admission.request_slot_free() and gate.admits_message_at_once(call)
        assert _state(admission, gate) == before  # the check takes nothing
        outcome: object
        try:
            admission.take_request_slot()
            try:
                delay_s = gate.begin_message(call, message)
            except BaseException:
                admission.give_back_request_slot()
                raise
        except Exception as refusal:  # noqa: BLE001 - what the full path said
            outcome = refusal.__class__
        else:
            outcome = delay_s
            gate.end_message(call)
            admission.give_back_request_slot()
        # What binds a message beyond the slots: a reload since the stream's check, an ACL (over
        # either row), a produce byte rate (a produce message's).
        binds = (gated and (_ACLS[acl] is not None or reloaded)) or (method == "ProduceStream" and produce_rate > 0)
        if at_once:
            # Nothing binds; the full path admits, owes no delay, leaves every count as it found it.
            assert not binds
            assert outcome == 0.0
            assert _state(admission, gate) == before
        elif not binds:  # only a slot or a cap can say no here: the full path refuses
            assert outcome in (OverloadedError, PrincipalLimitError), outcome

    asyncio.run(run())


# -- the LookupStream handler, both ways -------------------------------------------------------

def _servicer(tmp_path, acl: str | None = None, quota: PrincipalQuota = PrincipalQuota()):
    return one_slot_servicer(CallGate(_policy(tmp_path, acl, quota)))


def _lookup(correlation_id: int):
    request = pb.LookupStreamRequest(correlation_id=correlation_id)
    request.offsets_for_times.partitions.add(topic="a", partition=0, timestamp_ms=5)
    return request


def _held(servicer) -> tuple[int, int]:
    in_use = servicer.gate.quotas.statistics().in_use_by_principal[ANONYMOUS]["requests"]
    return servicer.admission.statistics().request_count, in_use


async def _cancelled_while_waiting(servicer, answer: Awaitable) -> None:
    """``answer``, a message whose work waits, holds both slots while it waits; cancelled, it
    gives them back."""
    task = asyncio.ensure_future(answer)
    for _ in range(3):
        await asyncio.sleep(0)
    assert _held(servicer) == (1, 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _held(servicer) == (0, 0)


@pytest.mark.parametrize("acl", [None, _ACLS["all"]], ids=["unbound", "acl"])
async def test_a_lookup_holds_its_slots_exactly_while_it_waits(tmp_path, monkeypatch, acl):
    """Unbound, a lookup answered in its first step sees no slot taken; one that waits holds
    both while it waits, as the full path (an ACL) holds them throughout."""
    servicer, calls = _servicer(tmp_path, acl)
    seen: list[tuple[str, tuple[int, int]]] = []
    resume = asyncio.Event()

    async def lookup(request, response=None):
        seen.append(("first step", _held(servicer)))
        if request.partitions[0].timestamp_ms == 7:
            await resume.wait()
            seen.append(("after the wait", _held(servicer)))
        response.results.add(topic="a", partition=0, offset=3, timestamp_ms=9)
        return response

    monkeypatch.setattr(servicer.lookups, "offsets_for_times", lookup)
    try:
        stream = await servicer.gate.admit_stream("LookupStream", _Context())
        answer = await servicer.streams._lookup_message("LookupStream", stream, _lookup(1))
        assert answer.offsets_for_times.results[0].offset == 3 and _held(servicer) == (0, 0)
        waiting = _lookup(2)
        waiting.offsets_for_times.partitions[0].timestamp_ms = 7
        task = asyncio.ensure_future(servicer.streams._lookup_message("LookupStream", stream, waiting))
        for _ in range(3):
            await asyncio.sleep(0)
        assert _held(servicer) == (1, 1)  # waiting: held, as its unary twin's would be
        resume.set()
        answer = await task
        assert answer.correlation_id == 2 and answer.offsets_for_times.results[0].offset == 3
        assert _held(servicer) == (0, 0)
        held_in_first_step = (0, 0) if acl is None else (1, 1)
        assert seen == [("first step", held_in_first_step), ("first step", held_in_first_step),
                        ("after the wait", (1, 1))]
        stream.release()
    finally:
        calls.shutdown()


async def test_a_waiting_lookup_cancelled_or_failing_gives_its_slots_back(tmp_path, monkeypatch):
    servicer, calls = _servicer(tmp_path)
    resume = asyncio.Event()
    cleaned: list[str] = []

    async def lookup(request, response=None):
        timestamp_ms = request.partitions[0].timestamp_ms
        if timestamp_ms == 1:
            raise OverloadedError("failed in its first step")
        try:
            await resume.wait()
        finally:
            cleaned.append(f"lookup {timestamp_ms}")
        raise OverloadedError("failed after its wait")

    monkeypatch.setattr(servicer.lookups, "offsets_for_times", lookup)
    try:
        stream = await servicer.gate.admit_stream("LookupStream", _Context())
        for timestamp_ms, message in ((1, "failed in its first step"), (2, "failed after its wait")):
            request = _lookup(timestamp_ms)
            request.offsets_for_times.partitions[0].timestamp_ms = timestamp_ms
            task = asyncio.ensure_future(servicer.streams._lookup_message("LookupStream", stream, request))
            await asyncio.sleep(0)
            resume.set()
            refused = await task
            resume.clear()
            assert refused.error.error_class == "OverloadedError" and refused.error.message == message
            assert _held(servicer) == (0, 0)
        request = _lookup(3)
        request.offsets_for_times.partitions[0].timestamp_ms = 3
        await _cancelled_while_waiting(servicer, servicer.streams._lookup_message("LookupStream", stream, request))
        assert cleaned == ["lookup 2", "lookup 3"]
        stream.release()
    finally:
        calls.shutdown()


# -- the ProduceStream handler, both ways ------------------------------------------------------

def _produce(correlation_id: int):
    request = pb.ProduceStreamRequest(correlation_id=correlation_id)
    request.produce.topic, request.produce.partition, request.produce.records = "a", 0, b"x" * correlation_id
    return request


class _Appended:
    base_offset = last_offset = 3
    log_append_time_ms = log_start_offset = 0


def _patched_append(servicer, monkeypatch, seen, resume, fail=None):
    """``append`` of the servicer's produce family: notes the slots held in its first step (and
    after its wait); a batch of 7 bytes waits for ``resume``; ``fail`` raises instead."""

    async def append(request):
        seen.append(("first step", _held(servicer)))
        if len(request.records) == 7:
            try:
                await resume.wait()
            finally:
                seen.append(("after the wait", _held(servicer)))
        if fail is not None and len(request.records) in fail:
            raise OverloadedError(f"failed: {len(request.records)}")
        return None, _Appended(), pb.ACKS_WRITTEN

    monkeypatch.setattr(servicer.produce, "append", append)
    monkeypatch.setattr(servicer.produce, "check_may_acknowledge", lambda log: None)


@pytest.mark.parametrize(
    ("acl", "quota"),
    [(None, PrincipalQuota()), (_ACLS["all"], PrincipalQuota()),
     (None, PrincipalQuota(produce_bytes_per_s=1_000_000))],
    ids=["unbound", "acl", "produce-rate"],
)
async def test_a_produce_holds_its_slots_exactly_while_its_append_waits(tmp_path, monkeypatch, acl, quota):
    """Unbound, an append done in its first step sees no slot taken; one that waits holds both
    while it waits; an ACL or a produce byte rate takes the full path, which holds them throughout
    (and charges the rate: its bytes are counted)."""
    servicer, calls = _servicer(tmp_path, acl, quota)
    seen: list[tuple[str, tuple[int, int]]] = []
    resume = asyncio.Event()
    _patched_append(servicer, monkeypatch, seen, resume)
    quotas, charged = servicer.gate.quotas, []
    charge_bytes = quotas.charge_bytes

    def counted_charge(principal: str, direction: str, byte_count: int) -> float:
        charged.append((direction, byte_count))
        return charge_bytes(principal, direction, byte_count)

    monkeypatch.setattr(quotas, "charge_bytes", counted_charge)
    try:
        stream = await servicer.gate.admit_stream("ProduceStream", _Context())
        answer = await servicer.streams._produce_message("ProduceStream", stream, _produce(1))
        assert not answer.HasField("error") and answer.produce.base_offset == 3 and _held(servicer) == (0, 0)
        task = asyncio.ensure_future(servicer.streams._produce_message("ProduceStream", stream, _produce(7)))
        for _ in range(3):
            await asyncio.sleep(0)
        assert _held(servicer) == (1, 1)  # waiting: held, as its unary twin's would be
        resume.set()
        answer = await task
        if isinstance(answer, asyncio.Future):  # a produce rate's delay (none is owed here)
            answer = await answer
        assert answer.correlation_id == 7 and answer.produce.last_offset == 3 and _held(servicer) == (0, 0)
        held_in_first_step = (0, 0) if acl is None and not quota.produce_bytes_per_s else (1, 1)
        assert seen == [("first step", held_in_first_step), ("first step", held_in_first_step),
                        ("after the wait", (1, 1))]
        if quota.produce_bytes_per_s:  # the full path charged each batch's bytes to the rate
            assert charged == [("produce", 1), ("produce", 7)]
        stream.release()
    finally:
        calls.shutdown()


async def test_a_waiting_produce_cancelled_or_failing_gives_its_slots_back(tmp_path, monkeypatch):
    servicer, calls = _servicer(tmp_path)
    seen: list[tuple[str, tuple[int, int]]] = []
    resume = asyncio.Event()
    _patched_append(servicer, monkeypatch, seen, resume, fail={1, 7})
    try:
        stream = await servicer.gate.admit_stream("ProduceStream", _Context())
        refused = await servicer.streams._produce_message("ProduceStream", stream, _produce(1))
        assert refused.error.error_class == "OverloadedError" and refused.error.message == "failed: 1"
        assert _held(servicer) == (0, 0)
        task = asyncio.ensure_future(servicer.streams._produce_message("ProduceStream", stream, _produce(7)))
        await asyncio.sleep(0)
        resume.set()
        refused = await task
        assert refused.error.message == "failed: 7" and _held(servicer) == (0, 0)
        resume.clear()
        await _cancelled_while_waiting(servicer, servicer.streams._produce_message("ProduceStream", stream, _produce(7)))
        assert seen[-1] == ("after the wait", (1, 1))  # the append's own cleanup ran, slots still held
        stream.release()
    finally:
        calls.shutdown()


@pytest.mark.parametrize("method", ["LookupStream", "ProduceStream"])
async def test_a_full_service_or_a_capped_principal_still_refuses_the_message(tmp_path, monkeypatch, method):
    """The check says no where a slot binds, and the full path refuses a lookup or a produce
    as before."""
    servicer, calls = _servicer(tmp_path, quota=PrincipalQuota(requests_max=1))
    if method == "ProduceStream":
        _patched_append(servicer, monkeypatch, [], asyncio.Event())
        handle, request = servicer.streams._produce_message, _produce
    else:
        handle, request = servicer.streams._lookup_message, _lookup
    try:
        stream = await servicer.gate.admit_stream(method, _Context())
        servicer.admission.take_request_slot()  # the service's one request slot is in use
        refused = await handle(method, stream, request(1))
        assert refused.error.error_class == "OverloadedError" and "rpc_concurrency_max" in refused.error.message
        servicer.admission.give_back_request_slot()
        servicer.gate.quotas.acquire(ANONYMOUS, stream.kind.REQUEST)  # the principal's one, too
        refused = await handle(method, stream, request(2))
        assert refused.error.error_class == "PrincipalLimitError"
        servicer.gate.quotas.release(ANONYMOUS, stream.kind.REQUEST)
        answered = await handle(method, stream, request(3))
        assert not answered.HasField("error") and _held(servicer) == (0, 0)
        stream.release()
    finally:
        calls.shutdown()


async def test_a_produce_over_an_acl_that_denies_it_is_refused_as_before(tmp_path, monkeypatch):
    servicer, calls = _servicer(tmp_path, _ACLS["other"])
    _patched_append(servicer, monkeypatch, [], asyncio.Event())
    try:
        stream = await servicer.gate.admit_stream("ProduceStream", _Context())
        refused = await servicer.streams._produce_message("ProduceStream", stream, _produce(1))
        assert refused.error.error_class == "PermissionDeniedError" and _held(servicer) == (0, 0)
        stream.release()
    finally:
        calls.shutdown()
