"""The ProduceStream messages the producer's sender packs a partition's batches into
(``message_counts`` with ``Sender._message_bytes_max``) stay within every request limit known
for the connection they go out on: the client's max_request_bytes, the one its current stream
announced at open and the one a refusal of gRPC's named on it ("Received message larger than
max (N vs. M)"). Any of the service's may be unknown, both at once included: the packing then
asked ``min()`` of one argument (TypeError in the sender's loop, which stopped it); and several
batches in a message above M were refused again, ending the connection's stream.

A producer started on an address nothing listens at: nothing is sent, the connection's limits
are put as its stream's open answer and gRPC's refusal would put them."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog import AsyncProducer
from seglog._send_window import SendWindow
from seglog._sender import _BATCH_OVERHEAD_BYTES, _MESSAGE_OVERHEAD_BYTES, Sender, message_counts
from seglog.errors import ServiceOverloadedError
from seglog.structs import TopicPartition

TP = TopicPartition("t", 0)
CLIENT_MAX = 1 << 20
_NOWHERE = "127.0.0.1:9"  # discard: nothing is ever sent in these tests


def _refused_by_grpc(sender: Sender, refused_max: int) -> None:
    """gRPC refuses a message of one batch above ``refused_max``: the sender keeps the limit."""
    entry = SendWindow().sent((None, b"x" * (refused_max + 1), None))
    refusal = ServiceOverloadedError(f"Received message larger than max ({refused_max + 100} vs. {refused_max})")
    assert sender._refused_above_request_limit(TP, entry, refusal)  # type: ignore[arg-type]


def _packed(sizes: list[int], refused_max: int | None, announced: int | None) -> tuple[list[int], int]:
    """``sizes`` packed as the sender packs them on the partition's connection with these
    limits known (None: unknown), and the message bound it packed to."""

    async def run() -> tuple[list[int], int]:
        producer = AsyncProducer(_NOWHERE, max_request_bytes=CLIENT_MAX)
        await producer.start()
        try:
            sender = producer._sender
            stream: Any = sender._connection_for(TP).produce_stream()
            stream.request_bytes_max = announced  # as the stream's open answer sets it
            if refused_max is not None:
                _refused_by_grpc(sender, refused_max)
            bytes_max = sender._message_bytes_max(sender._request_limits(sender._connection_for(TP)))
            return message_counts(sizes, TP.topic, 16, bytes_max), bytes_max
        finally:
            await producer.close()

    return asyncio.run(run())


def _message_sizes(sizes: list[int], counts: list[int]) -> list[tuple[int, int]]:
    """Each message's (batch count, serialized size bound) as ``message_counts`` packed them."""
    messages, position = [], 0
    for count in counts:
        batches = sizes[position:position + count]
        size = _MESSAGE_OVERHEAD_BYTES + sum(_BATCH_OVERHEAD_BYTES + len(TP.topic) + one for one in batches)
        messages.append((count, size))
        position += count
    return messages


def test_batches_are_packed_within_the_limit_a_grpc_refusal_named():
    sizes = [200_000, 200_000, 200_000]
    # Within the client's 1 MiB and an announced 800,000 the three went in one message.
    for announced in (None, 800_000):
        assert _packed(sizes, 500_000, announced) == ([2, 1], 500_000), announced
    assert _packed(sizes, 500_000, 300_000)[1] == 300_000  # the least limit known wins


def test_with_no_limit_known_but_the_clients_messages_are_packed_within_it():
    """No announcement and no refusal (an older service's stream): the client's max_request_bytes
    alone. This raised TypeError in the sender's loop, which stopped it and left flush waiting."""
    assert _packed([400_000] * 3, None, None) == ([2, 1], CLIENT_MAX)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=400_000), min_size=1, max_size=12),
    st.one_of(st.none(), st.integers(min_value=1_000, max_value=2 * CLIENT_MAX)),
    st.one_of(st.none(), st.integers(min_value=1_000, max_value=2 * CLIENT_MAX)),
)
def test_every_message_of_several_batches_is_within_every_known_limit(sizes, refused_max, announced):
    """Any of the limits may be unknown, both at once included."""
    counts, _ = _packed(sizes, refused_max, announced)
    assert sum(counts) == len(sizes) and all(count >= 1 for count in counts)
    for count, size in _message_sizes(sizes, counts):
        if count > 1:  # a batch alone above a limit is the sender's to split or fail
            assert size <= min(CLIENT_MAX, refused_max or CLIENT_MAX, announced or CLIENT_MAX)


def test_a_refused_limit_is_kept_for_its_connection_and_address_and_forgotten_with_age():
    """A refusal's limit holds for the connection it was named on, at the address it was named
    at, and is forgotten after learned_limit_max_age_ms (a service restarted with another limit
    is packed for by its own word again); another producer's connection never sees it."""

    async def run() -> tuple[list[int], list[int], list[int], list[int]]:
        producers = [AsyncProducer(_NOWHERE, max_request_bytes=CLIENT_MAX) for _ in range(2)]
        for producer in producers:
            await producer.start()
        try:
            sender, other = (producer._sender for producer in producers)
            _refused_by_grpc(sender, 500_000)
            transport = sender._connection_for(TP)
            kept = sender._request_limits(transport)
            elsewhere = other._request_limits(other._connection_for(TP))
            server = transport.server
            transport._server = "127.0.0.1:10"  # the connection now at another address
            moved = sender._request_limits(transport)
            transport._server = server
            sender.learned_limit_max_age_ms = 0
            aged = sender._request_limits(transport)
            return kept, elsewhere, moved, aged
        finally:
            for producer in producers:
                await producer.close()

    assert asyncio.run(run()) == ([500_000], [], [], [])
