"""A partition's batches reach the log in the order they were sent, whatever the state of the
stream they go out on, against a real service on loopback.

The sender starts each ProduceStream message of a partition as a task of its own (each settled
on its own answer). A task may wait before its send: a stream reopened after a lost connection
is not confirmed until the service answers its open (its batches then go one a request), and
a stream whose limits are not the ones the sender last saw splits a message again. Whatever
waited, no message started after it may be sent before it: with idempotence that one would be
refused as out of sequence (and not retried), without it the log would hold the batches out of
order."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog import Admin, AsyncProducer
from seglog.errors import ServiceUnavailableError
from tests.support.integration_helpers import partition_values

pytestmark = pytest.mark.integration

_topics = itertools.count()


def _end_stream(producer: AsyncProducer, topic: str) -> None:
    """End the connection's ProduceStream as a lost connection would: the next send reopens it,
    and the new stream is not confirmed until the service answers its open."""
    sender = producer._sender
    stream = sender._router.transport_for(topic, 0).produce_stream()
    stream._end(stream._call, ServiceUnavailableError("injected: the connection was lost"))


async def _send_in_order(
    address: str, topic: str, values: list[bytes], *, idempotence: bool, batch_size: int,
    end_stream: bool, other_first: bool, cached: int | None = None,
) -> list[int]:
    """Warm the stream up, put it in the drawn state, send ``values`` to partition 0 (after one
    record to partition 1 if ``other_first``) and flush: every value's offset, in send order."""
    async with AsyncProducer(
        address, batch_size=batch_size, linger_ms=60_000, enable_idempotence=idempotence, retries=0,
    ) as producer:
        await producer.send_and_wait(topic, b"warm-0", partition=0)  # the stream confirmed
        await producer.send_and_wait(topic, b"warm-1", partition=1)
        if cached is not None:  # batches a message as another service said (another owner, another build)
            producer._sender.stream_batches_max = cached
        if end_stream:
            _end_stream(producer, topic)
        if other_first:  # its request reopens the stream before partition 0's go out
            await producer.send(topic, b"other", partition=1)
        futures = [await producer.send(topic, value, partition=0) for value in values]
        await producer.flush()
        return [(await future).offset for future in futures]


@pytest.mark.parametrize("idempotence", [True, False], ids=["idempotent", "not-idempotent"])
def test_a_group_and_a_single_batch_after_a_reopen_land_in_order(seglog_service, make_topic, idempotence):
    """Partition 0's three batches drain as a message of two and a message of one; partition
    1's send reopens the stream first, so the message of two finds it unconfirmed and goes one
    a request. Before, the lone third batch was sent first: refused as out of sequence (and the
    producer id retired) with idempotence, written before the other two without."""
    topic = make_topic(partitions=2)
    values = [b"A" * 400_000, b"B" * 400_000, b"C" * 600_000]
    offsets = asyncio.run(_send_in_order(
        seglog_service.address, topic, values, idempotence=idempotence, batch_size=700_000,
        end_stream=True, other_first=True,
    ))
    assert offsets == [1, 2, 3]
    assert partition_values(seglog_service.address, topic) == [b"warm-0", *values]


# Small records share a batch (at batch_size=100_000), large ones go alone; messages of several
# large batches land on both sides of the limited service's request limit.
_sizes = st.lists(
    st.one_of(st.integers(150_000, 600_000), st.integers(300_000, 600_000), st.integers(3, 3_000)),
    min_size=2, max_size=6,
)
# The stream partition 0's batches find: confirmed; ended (a lost connection) and reopened by
# their own send; ended and reopened by a send to partition 1 drained before them.
_STREAM_STATES = {"confirmed": (False, False), "reopened": (True, False), "reopened-by-another": (True, True)}
# What the sender may have cached of batches a message (the request limit is never cached: it
# is the live stream's word).
_cached = st.one_of(st.none(), st.sampled_from([1, 2, 16]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=_sizes, cached=_cached, limited=st.booleans(), idempotence=st.booleans(),
    stream_state=st.sampled_from(sorted(_STREAM_STATES)), batch_size=st.sampled_from([1_000, 100_000]),
)
def test_any_batches_any_limits_any_stream_state_land_in_send_order(
    seglog_service, limited_service, sizes, cached, limited, idempotence, stream_state, batch_size,
):
    """Records of any sizes (alone in their batches or several a batch), on a service with the
    default or a smaller request limit, with the sender's cached batches a message the stream's or not, on
    a confirmed stream or one reopened (by this partition's send or another's): the log holds
    them in send order, each once, each future answered with its own offset."""
    address = limited_service.address if limited else seglog_service.address
    topic = f"order-{next(_topics)}"
    with Admin(address) as admin:
        admin.create_topic(topic, 2, {})
    values = [b"%03d" % index + bytes([65 + index]) * max(0, size - 3) for index, size in enumerate(sizes)]
    end_stream, other_first = _STREAM_STATES[stream_state]
    offsets = asyncio.run(_send_in_order(
        address, topic, values, idempotence=idempotence, batch_size=batch_size,
        end_stream=end_stream, other_first=other_first, cached=cached,
    ))
    assert offsets == list(range(1, len(values) + 1))
    assert partition_values(address, topic) == [b"warm-0", *values]
