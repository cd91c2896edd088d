"""A batch that ends without being sent (it fails to build at send time, its codec refusing,
say; or built, it is above the service's request limit) fails alone whatever the partition's
window, against a real service: every batch after it is sent, in order, and ``flush`` returns.
At one batch in flight per partition such a batch was all the loop had drained of its
partition: nothing was in flight to answer and wake the loop, so the batches queued behind it
were never drained and ``flush`` ran out of time."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog import Admin, AsyncProducer
from seglog._accumulator import ProducerBatch
from seglog._idempotence import Idempotence
from seglog.errors import RecordTooLargeError, RequestTimeoutError, ServiceUnavailableError
from tests.support.integration_helpers import LIMITED_REQUEST_BYTES_MAX, partition_values

pytestmark = pytest.mark.integration

# A bound on a wait that must not hang (the bug was a hang): generous, never a speed assertion.
_FLUSH_TIMEOUT_MS = 20_000
# One record a batch: each value fills its batch, so the next starts another.
_BATCH_BYTES = 300


def _values(count: int) -> list[bytes]:
    return [b"%03d" % index + b"b" * 197 for index in range(count)]


async def _flushed_outcomes(producer: AsyncProducer, futures: list) -> tuple[list, BaseException | None]:
    """Flushes within _FLUSH_TIMEOUT_MS (when it runs out, the sender is aborted: what stalled fails
    and close returns): each future's offset or failure, and flush's error."""
    flush_error: BaseException | None = None
    try:
        await producer.flush(_FLUSH_TIMEOUT_MS)
    except RequestTimeoutError as error:
        flush_error = error
        producer._sender.abort(error)
    return [future.exception() or (await future).offset for future in futures], flush_error


def _send_with_a_failed_build(
    address: str, topic: str, monkeypatch: pytest.MonkeyPatch, failing: int, window: int, idempotence: bool,
    count: int,
) -> tuple[list, BaseException | None]:
    """``count`` one-record batches sent to partition 0 after a warm-up, the ``failing``-th
    build of them (1 = the first) raising; each record's offset or failure, and flush's error."""
    real = ProducerBatch.build
    state = {"armed": False, "builds": 0}

    def build(self, *fields):
        if state["armed"]:
            state["builds"] += 1
            if state["builds"] == failing:
                raise ValueError(f"injected: build {failing} refused")
        return real(self, *fields)

    monkeypatch.setattr(ProducerBatch, "build", build)

    async def run() -> tuple[list, BaseException | None]:
        async with AsyncProducer(
            address, batch_size=_BATCH_BYTES, linger_ms=60_000, enable_idempotence=idempotence,
            max_in_flight_per_partition=window,
        ) as producer:
            await producer.send_and_wait(topic, b"warm-up", partition=0)  # the stream confirmed, the id written
            state["armed"] = True
            futures = [await producer.send(topic, value, partition=0) for value in _values(count)]
            return await _flushed_outcomes(producer, futures)

    try:
        return asyncio.run(run())
    finally:
        monkeypatch.setattr(ProducerBatch, "build", real)


def _assert_fails_alone(address: str, topic: str, outcomes: list, flush_error, failing: int) -> None:
    assert flush_error is None
    failed = failing - 1
    assert isinstance(outcomes[failed], ValueError) and "injected" in str(outcomes[failed])
    delivered = outcomes[:failed] + outcomes[failed + 1:]
    assert delivered == list(range(1, len(outcomes)))
    values = _values(len(outcomes))
    assert partition_values(address, topic) == [b"warm-up", *values[:failed], *values[failed + 1:]]


@pytest.mark.parametrize("idempotence", [True, False], ids=["idempotent", "plain"])
@pytest.mark.parametrize("window", [1, 5])
def test_a_batch_that_fails_to_build_fails_alone_at_any_window(seglog_service, make_topic, monkeypatch, window, idempotence):
    topic = make_topic(partitions=1)
    outcomes, flush_error = _send_with_a_failed_build(
        seglog_service.address, topic, monkeypatch, failing=2, window=window, idempotence=idempotence, count=12,
    )
    _assert_fails_alone(seglog_service.address, topic, outcomes, flush_error, failing=2)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(failing=st.integers(1, 9), window=st.integers(1, 5), idempotence=st.booleans())
def test_whichever_build_fails_at_whatever_window_only_its_batch_fails(
    seglog_service, make_topic, monkeypatch, failing, window, idempotence,
):
    """Property: whichever of the batches fails to build, at any window of 1 to 5 batches in
    flight, with or without idempotence: it alone fails, the rest land once, in order."""
    topic = make_topic(partitions=1)
    outcomes, flush_error = _send_with_a_failed_build(
        seglog_service.address, topic, monkeypatch, failing=failing, window=window, idempotence=idempotence, count=9,
    )
    _assert_fails_alone(seglog_service.address, topic, outcomes, flush_error, failing=failing)


@pytest.mark.parametrize("idempotence", [True, False], ids=["idempotent", "plain"])
@pytest.mark.parametrize("window", [1, 5])
def test_a_batch_above_the_request_limit_fails_alone_at_any_window(limited_service, request, window, idempotence):
    """A record alone above the service's request limit (announced when the warm-up opened the
    stream) fails unsent with RecordTooLargeError; the small records behind it land in order."""
    topic = f"above-limit-{request.node.callspec.id}"
    with Admin(limited_service.address) as admin:
        admin.create_topic(topic, 1, {})
    values = _values(6)

    async def run() -> tuple[list, BaseException | None]:
        async with AsyncProducer(
            limited_service.address, batch_size=_BATCH_BYTES, linger_ms=60_000, enable_idempotence=idempotence,
            max_in_flight_per_partition=window, max_request_bytes=2 * LIMITED_REQUEST_BYTES_MAX,
        ) as producer:
            await producer.send_and_wait(topic, b"warm-up", partition=0)
            too_large = await producer.send(topic, b"x" * (LIMITED_REQUEST_BYTES_MAX + 50_000), partition=0)
            futures = [too_large] + [await producer.send(topic, value, partition=0) for value in values]
            return await _flushed_outcomes(producer, futures)

    outcomes, flush_error = asyncio.run(run())
    assert flush_error is None
    assert isinstance(outcomes[0], RecordTooLargeError) and "request limit" in str(outcomes[0])
    assert outcomes[1:] == list(range(1, len(values) + 1))
    assert partition_values(limited_service.address, topic) == [b"warm-up", *values]


@pytest.mark.parametrize("window", [1, 5])
def test_batches_failed_for_want_of_a_producer_id_leave_the_rest_to_go(seglog_service, make_topic, monkeypatch, window):
    """The first InitProducerId fails: the batch the loop drained for it fails with that error
    (its partition's first batch goes alone, before the id wrote there); the batches queued
    behind it go out under the id the next ask gets, in order."""
    topic = make_topic(partitions=1)
    real = Idempotence.ensure_producer_id
    asks = [0]

    async def ensure_producer_id(self):
        if self.needs_producer_id:
            asks[0] += 1
            if asks[0] == 1:
                raise ServiceUnavailableError("injected: no producer id this time")
        await real(self)

    monkeypatch.setattr(Idempotence, "ensure_producer_id", ensure_producer_id)
    values = _values(6)

    async def run() -> tuple[list, BaseException | None]:
        async with AsyncProducer(
            seglog_service.address, batch_size=_BATCH_BYTES, linger_ms=60_000, max_in_flight_per_partition=window,
        ) as producer:
            futures = [await producer.send(topic, value, partition=0) for value in values]
            return await _flushed_outcomes(producer, futures)

    outcomes, flush_error = asyncio.run(run())
    assert flush_error is None
    assert isinstance(outcomes[0], ServiceUnavailableError) and "injected" in str(outcomes[0])
    assert outcomes[1:] == list(range(len(values) - 1))
    assert partition_values(seglog_service.address, topic) == values[1:]
