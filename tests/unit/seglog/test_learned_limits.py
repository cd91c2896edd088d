"""The limit a topic's size refusal names, as the producer's sender reads and keeps it
(``_refused_limit``, ``Sender._size_refusal``, ``Sender._batch_bytes_max``): a refusal naming a
number no topic could have (too long for int(), 0, below a batch header, above 2**31 - 1) names
no limit and never raises; the last refusal's limit is kept, not the least ever named, and is
forgotten after ``learned_limit_max_age_ms``; a compressed producer does not cut its batches to
it before sending (the service applies it to the compressed batch)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog import AsyncProducer
from seglog._accumulator import RecordAccumulator
from seglog._producer_config import ProducerConfig
from seglog._send_window import SendWindow
from seglog._sender import LEARNED_LIMIT_MAX_AGE_MS, Sender, _refused_limit
from seglog.errors import RecordTooLargeError, ServiceOverloadedError
from seglog.records import RECORD_BATCH_OVERHEAD, Compression
from seglog.structs import Acks, TopicPartition

TP = TopicPartition("t", 0)


def _refusal(limit_text: str, config: str = "max.message.bytes") -> RecordTooLargeError:
    return RecordTooLargeError(
        f"t-0: the batch is 70000 bytes, above {config} ({limit_text})",
        code=grpc.StatusCode.RESOURCE_EXHAUSTED, service_error="RecordTooLargeError",
    )


def _sender(compression: Compression = Compression.NONE) -> Sender:
    config = ProducerConfig(
        acks=Acks.WRITTEN, compression=compression, batch_size=256 * 1024, linger_ms=0,
        buffer_bytes=1 << 20, max_request_bytes=1 << 20, max_in_flight_requests=5,
        max_in_flight_per_partition=5, max_block_ms=1_000, retries=0, retry_backoff_ms=0,
        request_timeout_ms=1_000,
    )
    accumulator = RecordAccumulator(
        batch_bytes=config.batch_size, linger_ms=0, compression=compression,
        buffer_bytes=config.buffer_bytes, request_bytes_max=config.max_request_bytes, wall_clock_ms=lambda: 1_000,
    )
    return Sender(config, accumulator, enable_idempotence=True, partition_counts={}, stats={"batches_split": 0})


@given(st.integers(min_value=1, max_value=6_000), st.sampled_from("0123456789"), st.sampled_from(
    ["max.message.bytes", "segment.bytes"]))
def test_a_limit_of_any_length_is_read_without_raising_and_only_within_a_topics_range(digits, lead, config):
    text = lead + "7" * (digits - 1)
    limit = _refused_limit(_refusal(text, config))
    expected = int(text) if digits <= 10 and RECORD_BATCH_OVERHEAD < int(text) <= 2**31 - 1 else None
    assert limit == expected


def test_limits_no_batch_could_be_within_are_none_named():
    for text in ("0", "14", str(RECORD_BATCH_OVERHEAD), str(2**31), "9" * 5_000):
        assert _refused_limit(_refusal(text)) is None, text
    assert _refused_limit(_refusal(str(RECORD_BATCH_OVERHEAD + 1))) == RECORD_BATCH_OVERHEAD + 1


def test_a_grpc_size_refusal_naming_a_limit_too_long_for_int_is_not_taken_for_one():
    refusal = ServiceOverloadedError(f"Received message larger than max (300000 vs. {'9' * 5_000})")
    assert not _sender()._refused_above_request_limit(TP, None, refusal)  # type: ignore[arg-type]


def test_the_last_refusals_limit_is_kept_not_the_least_ever_named():
    sender = _sender()
    sender._size_refusal(TP, None, _refusal("4000"))  # type: ignore[arg-type]
    assert sender._batch_bytes_max(TopicPartition("t", 0)) == 4000
    sender._size_refusal(TP, None, _refusal("65536"))  # type: ignore[arg-type]
    assert sender._batch_bytes_max(TopicPartition("t", 0)) == 65536


def test_a_refusal_naming_no_usable_limit_leaves_none_kept():
    sender = _sender()
    sender._size_refusal(TP, None, _refusal("4000"))  # type: ignore[arg-type]
    refusal, limit = sender._size_refusal(TP, None, _refusal("9" * 5_000))  # type: ignore[arg-type,misc]
    assert limit is None and sender._batch_bytes_max(TopicPartition("t", 0)) is None


def test_a_learned_limit_is_forgotten_after_its_age():
    sender = _sender()
    assert sender.learned_limit_max_age_ms == LEARNED_LIMIT_MAX_AGE_MS == 300_000
    sender._size_refusal(TP, None, _refusal("4000"))  # type: ignore[arg-type]
    assert sender._batch_bytes_max(TopicPartition("t", 0)) == 4000
    sender.learned_limit_max_age_ms = 0
    assert sender._batch_bytes_max(TopicPartition("t", 0)) is None
    sender.learned_limit_max_age_ms = LEARNED_LIMIT_MAX_AGE_MS
    assert sender._batch_bytes_max(TopicPartition("t", 0)) is None  # forgotten, not only hidden


def test_a_compressed_producer_does_not_cut_its_batches_to_a_learned_limit():
    sender = _sender(Compression.GZIP)
    sender._size_refusal(TP, None, _refusal("4000"))  # type: ignore[arg-type]
    assert sender._batch_bytes_max(TopicPartition("t", 0)) is None



_NOWHERE = "127.0.0.1:9"  # discard: nothing is sent, the refusals are put as gRPC's would come


class _TwoRecords:
    """A batch a refusal splits (more than one record)."""

    record_count = 2


def _grpc_refusal(refused_max: int) -> ServiceOverloadedError:
    return ServiceOverloadedError(f"Received message larger than max ({refused_max + 100} vs. {refused_max})")


def _on_started_sender(check: Callable[[Sender], Awaitable[Any]]) -> Any:
    """``check(sender)`` on the sender of a producer started at an address nothing listens at."""

    async def run() -> Any:
        producer = AsyncProducer(_NOWHERE, max_request_bytes=1 << 20)
        await producer.start()
        try:
            return await check(producer._sender)
        finally:
            await producer.close()

    return asyncio.run(run())


async def _refused_send(sender: Sender, records: bytes) -> Any:
    """``records`` sent and refused by gRPC's own size limit (the service's), then answered as
    the partition's window answers it (``_size_refusal``)."""
    entry = SendWindow().sent((_TwoRecords(), records, None))
    try:
        await sender.produce_once(TP.topic, TP.partition, records)
    except ServiceOverloadedError as refusal:
        return sender._size_refusal(TP, entry, refusal)  # type: ignore[arg-type]
    raise AssertionError("the send was not refused")


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=1_000, max_value=1 << 20), st.sampled_from([0, 1, LEARNED_LIMIT_MAX_AGE_MS]))
def test_a_grpc_size_refusal_is_answered_by_its_own_limit_whatever_the_age_kept(refused_max, max_age_ms):
    """The batch a refusal of gRPC's refused, above the limit it names, is split within that limit
    (or fails, a record alone), however long limits are kept: at learned_limit_max_age_ms = 0
    the limit aged out the instant it was kept and an AssertionError failed the whole window."""

    async def refused(self: Sender, transport: Any, *args: Any) -> Any:
        raise _grpc_refusal(refused_max)

    async def check(sender: Sender) -> Any:
        sender.learned_limit_max_age_ms = max_age_ms
        return await _refused_send(sender, b"x" * (refused_max + 1))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Sender, "_produce_in_turn", refused)
        refusal, limit = _on_started_sender(check)
    assert isinstance(refusal, RecordTooLargeError) and "request limit" in str(refusal)
    assert limit is not None and limit < refused_max


def test_a_grpc_size_refusal_is_kept_for_the_connection_it_came_on_not_where_its_partition_routes_since(
    monkeypatch: pytest.MonkeyPatch,
):
    """The partition is routed to another owner while its message is refused: the limit is kept
    for the connection the message went out on, not for the new owner's (it was, when the
    answer was read: a limit one service named applied to another that never said it)."""

    async def refused_after_a_reroute(self: Sender, transport: Any, *args: Any) -> Any:
        self._router._routes[TP] = "127.0.0.1:10"  # the partition's owner moved meanwhile
        raise _grpc_refusal(500_000)

    monkeypatch.setattr(Sender, "_produce_in_turn", refused_after_a_reroute)

    async def check(sender: Sender) -> tuple[list[int], list[int]]:
        used = sender._connection_for(TP)
        await _refused_send(sender, b"x" * 600_000)
        moved = sender._connection_for(TP)
        assert moved is not used
        return sender._request_limits(used), sender._request_limits(moved)

    assert _on_started_sender(check) == ([500_000], [])
