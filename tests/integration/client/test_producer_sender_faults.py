"""The producer's sender under faults of its own, against a real service: a batch that fails to
build in the middle of a partition's group fails alone (with idempotence its producer id is
retired, and the rest of the group goes out after a new one, in order), and a sender loop that
dies of an unexpected error fails what waits instead of hanging ``flush`` and ``close``."""

from __future__ import annotations

import asyncio

import pytest

from seglog import AsyncProducer
from seglog._accumulator import ProducerBatch
from seglog._send_window import SendWindow
from seglog._sender import Sender
from seglog.errors import SeglogError
from seglog.structs import TopicPartition
from tests.support.integration_helpers import partition_values

pytestmark = pytest.mark.integration

# Bounds on waits that must not hang (the bug was a hang): generous, never a speed assertion.
_FLUSH_TIMEOUT_MS = 20_000


def _fail_build_of(monkeypatch, failing: set[int]) -> dict[str, int]:
    """Once armed, the builds numbered in ``failing`` (1 = the first armed build) raise."""
    real = ProducerBatch.build
    state = {"armed": 0, "builds": 0}

    def build(self, *fields):
        if state["armed"]:
            state["builds"] += 1
            if state["builds"] in failing:
                raise ValueError(f"injected: build {state['builds']} failed")
        return real(self, *fields)

    monkeypatch.setattr(ProducerBatch, "build", build)
    return state


@pytest.mark.parametrize("idempotence", [True, False])
def test_a_batch_that_fails_to_build_inside_a_group_fails_alone(seglog_service, make_topic, monkeypatch, idempotence):
    topic = make_topic()
    state = _fail_build_of(monkeypatch, {2})
    values = [b"%02d" % i + b"x" * 198 for i in range(5)]

    async def run() -> tuple[list, int]:
        async with AsyncProducer(
            seglog_service.address, batch_size=300, linger_ms=60_000, enable_idempotence=idempotence,
        ) as producer:
            await producer.send_and_wait(topic, b"warm-up", partition=0)  # the stream confirmed
            state["armed"] = 1
            futures = [await producer.send(topic, value, partition=0) for value in values]
            await producer.flush(_FLUSH_TIMEOUT_MS)
            outcomes = [future.exception() or (await future).offset for future in futures]
            return outcomes, producer._sender.idempotence.producer_ids_received

    outcomes, producer_ids = asyncio.run(run())
    assert isinstance(outcomes[1], ValueError) and "injected" in str(outcomes[1])
    assert outcomes[:1] + outcomes[2:] == [1, 2, 3, 4]
    assert partition_values(seglog_service.address, topic) == [b"warm-up", values[0], *values[2:]]
    if idempotence:
        assert producer_ids == 2  # retired by the failed build; the rest went out under a new one


def test_builds_failing_at_linger_zero_never_reach_send(seglog_service, make_topic, monkeypatch):
    """At linger 0 the append starts what is ready itself: a failed build there retires the
    producer id too, and the batches behind it wait for the loop (and a new id), in order."""
    topic = make_topic()
    state = _fail_build_of(monkeypatch, {3, 10, 11, 40})
    values = [b"%03d" % i + b"z" * 97 for i in range(120)]

    async def run() -> list:
        async with AsyncProducer(seglog_service.address, batch_size=150, linger_ms=0) as producer:
            await producer.send_and_wait(topic, b"warm-up", partition=0)
            state["armed"] = 1
            futures = [await producer.send(topic, value, partition=0) for value in values]
            await producer.flush(_FLUSH_TIMEOUT_MS)
            return [future.exception() or (await future).offset for future in futures]

    outcomes = asyncio.run(run())
    failed = [i for i, outcome in enumerate(outcomes) if isinstance(outcome, BaseException)]
    assert len(failed) == 4 and all(isinstance(outcomes[i], ValueError) for i in failed)
    written = [value for i, value in enumerate(values) if i not in failed]
    assert partition_values(seglog_service.address, topic) == [b"warm-up", *written]
    assert [o for o in outcomes if not isinstance(o, BaseException)] == list(range(1, len(written) + 1))


def test_a_sender_loop_that_dies_fails_what_waits_and_refuses_more(seglog_service, make_topic, monkeypatch):
    topic = make_topic()
    real_drain = Sender._drain
    armed = False

    def drain(self, now_ms):
        if armed:
            raise RuntimeError("injected: the sender loop broke")
        return real_drain(self, now_ms)

    monkeypatch.setattr(Sender, "_drain", drain)

    async def run() -> tuple[list, BaseException | None]:
        nonlocal armed
        async with AsyncProducer(seglog_service.address, linger_ms=60_000) as producer:
            await producer.send_and_wait(topic, b"warm-up", partition=0)
            armed = True
            futures = [await producer.send(topic, b"v%d" % i, partition=0) for i in range(3)]
            await producer.flush(_FLUSH_TIMEOUT_MS)  # returns: the queued batches failed
            outcomes = [future.exception() for future in futures]
            try:
                await producer.send(topic, b"after", partition=0)
            except SeglogError as error:
                refused: BaseException | None = error
            else:
                refused = None
            return outcomes, refused

    outcomes, refused = asyncio.run(run())
    assert all(isinstance(error, SeglogError) and "injected" in str(error) for error in outcomes)
    assert isinstance(refused, SeglogError) and "sender stopped" in str(refused)
    assert partition_values(seglog_service.address, topic) == [b"warm-up"]


def _arm_request_fault(monkeypatch, seam: str) -> dict[str, bool]:
    """Once armed, the sender's request step ``seam`` fails on an unexpected error: it raises, or
    (``wrong-arguments``) it cannot even be called, as a wrapper with the wrong signature."""
    state = {"armed": False}
    name = "_send_batch_request" if seam == "wrong-arguments" else seam
    real = getattr(Sender, name)

    if seam == "wrong-arguments":
        def step(self, *args):
            if state["armed"]:
                return real(self, *args[:-1])  # the send turn left out: a TypeError
            return real(self, *args)
    else:
        async def step(self, *args):
            if state["armed"]:
                raise RuntimeError(f"injected: {seam} failed")
            return await real(self, *args)

    monkeypatch.setattr(Sender, name, step)
    return state


@pytest.mark.parametrize("seam", ["_send_batch_request", "wrong-arguments", "_send_group_request", "_resend"])
def test_a_request_step_that_fails_unexpectedly_fails_its_batches(seglog_service, make_topic, monkeypatch, seam):
    """A request task of the sender that fails on an unexpected error (a bug: it raises, or its
    step cannot be called) fails its partition's batches with that error: flush and close return
    (they waited forever), each future holds the error, and the producer goes on sending."""
    topic = make_topic(configs={"max.message.bytes": str(64 * 1024)})
    state = _arm_request_fault(monkeypatch, seam)
    # _resend: a batch above the topic's limit is split and its pieces resent; _send_group_request:
    # several small batches drained together go in one request; else one batch a request.
    count = {"_resend": 3000, "_send_group_request": 5}.get(seam, 1)
    values = [b"%05d" % i + b"x" * 95 for i in range(count)]
    batch_size = 256 * 1024 if seam == "_resend" else 300

    async def run() -> tuple[list, list]:
        async with AsyncProducer(seglog_service.address, batch_size=batch_size, linger_ms=60_000) as producer:
            await producer.send_and_wait(topic, b"warm-up", partition=0)  # the stream confirmed
            state["armed"] = True
            futures = [await producer.send(topic, value, partition=0) for value in values]
            await producer.flush(_FLUSH_TIMEOUT_MS)
            outcomes = [future.exception() for future in futures]
            state["armed"] = False
            after = await producer.send(topic, b"after", partition=0)
            await producer.flush(_FLUSH_TIMEOUT_MS)
            await after
            return outcomes, [error for error in outcomes if error is None]

    outcomes, landed = asyncio.run(run())
    if seam == "wrong-arguments":
        assert all(isinstance(error, TypeError) for error in outcomes)
    else:
        assert all(isinstance(error, RuntimeError) and seam in str(error) for error in outcomes)
    assert partition_values(seglog_service.address, topic) == [b"warm-up", b"after"]


def test_after_a_failed_build_the_new_producer_id_sends_one_batch_until_it_wrote(seglog_service, make_topic, monkeypatch):
    """A failed build retires the producer id; the rest of the group goes out under a new one,
    which has not written to the partition: one batch in flight until it has (the service takes
    an unknown id's first batch whatever its sequence), as for any id new to a partition. Went
    as three at once."""
    topic = make_topic()
    state = _fail_build_of(monkeypatch, {2})
    values = [b"%02d" % i + b"x" * 198 for i in range(5)]
    peaks: list[int] = []
    sender: list[Sender] = []
    real_sent = SendWindow.sent

    def sent(self, item):
        entry = real_sent(self, item)
        if state["armed"] and not sender[0].idempotence.written_to(TopicPartition(topic, 0)):
            peaks.append(self.in_flight_count)
        return entry

    monkeypatch.setattr(SendWindow, "sent", sent)

    async def run() -> list:
        async with AsyncProducer(seglog_service.address, batch_size=300, linger_ms=60_000) as producer:
            sender.append(producer._sender)
            await producer.send_and_wait(topic, b"warm-up", partition=0)
            state["armed"] = 1
            futures = [await producer.send(topic, value, partition=0) for value in values]
            await producer.flush(_FLUSH_TIMEOUT_MS)
            return [future.exception() for future in futures]

    outcomes = asyncio.run(run())
    assert isinstance(outcomes[1], ValueError) and [outcomes[0], *outcomes[2:]] == [None] * 4
    assert peaks and max(peaks) == 1
    assert partition_values(seglog_service.address, topic) == [b"warm-up", values[0], *values[2:]]
