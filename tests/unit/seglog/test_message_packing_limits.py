"""The ProduceStream messages the producer's sender packs a partition's batches into (the
groups ``Sender._start_placed`` starts, the messages ``Sender._write_group_on`` writes) stay within every request limit known
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
from seglog._sender import Sender
from seglog.errors import ServiceOverloadedError
from seglog.structs import TopicPartition
from seglog.v1 import log_service_pb2 as pb

TP = TopicPartition("t", 0)
CLIENT_MAX = 1 << 20
_NOWHERE = "127.0.0.1:9"  # discard: nothing is ever sent in these tests


def _refused_by_grpc(sender: Sender, refused_max: int) -> None:
    """gRPC refuses a message of one batch above ``refused_max`` on the partition's connection:
    the sender keeps the limit for it, as the refused send does."""
    refusal = ServiceOverloadedError(f"Received message larger than max ({refused_max + 100} vs. {refused_max})")
    sender._note_request_refusal(sender._connection_for(TP), refusal)


_SAME = -1


def _packed(
    sizes: list[int], refused_max: int | None, announced: int | None, announced_at_write: int | None = _SAME,
) -> tuple[list[int], list[tuple[int, int]]]:
    """``sizes`` (batches of the partition, in order) through the sender's own packing on the
    partition's connection with these limits known (None: unknown): the groups ``_start_placed``
    starts (a request each) and the messages ``_write_group_on`` writes for them, each as its
    batch count and its serialized size, on a stream announcing ``announced_at_write`` by then
    (reopened meanwhile; by default the same). Nothing leaves: the requests are not run and the
    writes are taken where they would go on the stream."""

    async def run() -> tuple[list[int], list[tuple[int, int]]]:
        producer = AsyncProducer(_NOWHERE, max_request_bytes=CLIENT_MAX)
        await producer.start()
        try:
            sender = producer._sender
            transport = sender._connection_for(TP)
            stream: Any = transport.produce_stream()
            stream.request_bytes_max = announced  # as the stream's open answer sets them
            stream.batches_max = sender.stream_batches_max = 16
            if refused_max is not None:
                _refused_by_grpc(sender, refused_max)
            groups: list[int] = []

            def started(tp: Any, entries: list[Any], request: Any, turn: Any = None, **_: Any) -> None:
                groups.append(len(entries))
                if turn is not None:
                    turn.release()

            sender._start_request = started  # type: ignore[method-assign]
            window: SendWindow[Any] = SendWindow()
            sender._start_placed(TP, [window.sent((None, b"x" * size, None)) for size in sizes])
            written: list[tuple[int, int]] = []

            async def write_on(transport: Any, stream: Any, message: Any, *, whole: bool = False) -> Any:
                written.append((1 + len(message.more), message.ByteSize()))
                return asyncio.get_running_loop().create_future()

            sender._write_on = write_on  # type: ignore[method-assign]
            if announced_at_write != _SAME:
                stream.request_bytes_max = announced_at_write
            position = 0
            for count in groups:  # each group as its request writes it
                records = [b"x" * size for size in sizes[position:position + count]]
                await sender._write_group_on(transport, stream, TP.topic, TP.partition, records)
                position += count
            return groups, written
        finally:
            await producer.close()

    return asyncio.run(run())


def _limit(refused_max: int | None, announced: int | None) -> int:
    return min(CLIENT_MAX, refused_max or CLIENT_MAX, announced or CLIENT_MAX)


def test_batches_are_packed_within_the_limit_a_grpc_refusal_named():
    sizes = [200_000, 200_000, 200_000]
    # Within the client's 1 MiB and an announced 800,000 the three went in one message.
    for announced in (None, 800_000):
        groups, written = _packed(sizes, 500_000, announced)
        assert groups == [2, 1] and [count for count, _ in written] == [2, 1], announced
        assert all(size <= 500_000 for _, size in written)
    groups, written = _packed(sizes, 500_000, 300_000)  # the least limit known wins
    assert groups == [1, 1, 1] and [count for count, _ in written] == [1, 1, 1]


def test_with_no_limit_known_but_the_clients_messages_are_packed_within_it():
    """No announcement and no refusal (an older service's stream): the client's max_request_bytes
    alone. This raised TypeError in the sender's loop, which stopped it and left flush waiting."""
    groups, written = _packed([400_000] * 3, None, None)
    assert groups == [2, 1] and [count for count, _ in written] == [2, 1]
    assert all(size <= CLIENT_MAX for _, size in written)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=400_000), min_size=1, max_size=12),
    st.one_of(st.none(), st.integers(min_value=1_000, max_value=2 * CLIENT_MAX)),
    st.one_of(st.none(), st.integers(min_value=1_000, max_value=2 * CLIENT_MAX)),
)
def test_every_message_of_several_batches_is_within_every_known_limit(sizes, refused_max, announced):
    """Any of the limits may be unknown, both at once included. Each group the sender starts is
    written as one message (its packing and its write's agree), and a message of several
    batches, as serialized, is within every limit known."""
    groups, written = _packed(sizes, refused_max, announced)
    assert sum(groups) == len(sizes) and all(count >= 1 for count in groups)
    assert [count for count, _ in written] == groups
    for count, size in written:
        if count > 1:  # a batch alone above a limit is the sender's to split or fail
            assert size <= _limit(refused_max, announced)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=400_000), min_size=2, max_size=12),
    st.one_of(st.none(), st.integers(min_value=1_000, max_value=2 * CLIENT_MAX)),
    st.integers(min_value=1_000, max_value=CLIENT_MAX),
)
def test_a_group_written_on_a_stream_announcing_less_is_packed_again_within_it(sizes, announced, at_write):
    """The stream the group is written on announced a smaller limit than the one it was started
    under (reopened meanwhile, another build): the write packs it again, each message of
    several batches within the limit the stream announces now."""
    groups, written = _packed(sizes, None, announced, at_write)
    assert sum(count for count, _ in written) == len(sizes)
    for count, size in written:
        if count > 1:
            assert size <= _limit(None, at_write)


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
            # Another connection of the same sender (partition 1 owned at another address) and
            # another producer's connection to the same address know nothing of it.
            sender._router._routes[TopicPartition("t", 1)] = "127.0.0.1:10"
            second = sender._connection_for(TopicPartition("t", 1))
            assert second is not transport
            elsewhere = sender._request_limits(second) + other._request_limits(other._connection_for(TP))
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


def _one_batch_message_bytes(topic: str, partition: int, records: int) -> int:
    """A ProduceStream message of one batch of ``records`` bytes as serialized, its correlation
    id at its largest (the stream numbers its messages only as it writes them)."""
    message = pb.ProduceStreamRequest(correlation_id=2**63 - 1)
    message.produce.topic = topic
    message.produce.partition = partition
    message.produce.records = b"r" * records
    message.produce.acks = pb.ACKS_FSYNCED
    return message.ByteSize()


class _OneRecord:
    record_count = 1


@settings(max_examples=80, deadline=None)
@given(
    topic=st.text(min_size=1, max_size=40),
    partition=st.one_of(st.integers(0, 2), st.integers(0, 2**31 - 1)),
    limit=st.one_of(st.integers(300, 400), st.integers(16_000, 17_000), st.integers(2_097_000, 2_097_300)),
    offset=st.integers(-3, 3),
)
def test_a_record_alone_is_refused_unsent_exactly_when_its_message_is_above_the_limit(topic, partition, limit, offset):
    """A batch of one record, on a connection whose stream announced ``limit``, is failed unsent
    exactly when its message as serialized would be above it (the correlation id counted at its
    largest): never one the service takes. The envelope was reserved at 64 bytes and the topic's,
    about 40 more than the message has: a record that much under the limit failed unsent."""
    tp = TopicPartition(topic, partition)
    low, high = 0, limit  # the largest batch whose message fits: a bisection
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if _one_batch_message_bytes(topic, partition, middle) <= limit else (low, middle - 1)
    records = max(1, low + offset)

    async def run() -> Any:
        producer = AsyncProducer(_NOWHERE, max_request_bytes=CLIENT_MAX)
        await producer.start()
        try:
            sender = producer._sender
            stream: Any = sender._connection_for(tp).produce_stream()
            stream.request_bytes_max = limit
            return sender._above_request_limit(tp, _OneRecord(), b"r" * records)  # type: ignore[arg-type]
        finally:
            await producer.close()

    refused = asyncio.run(run())
    assert low > 0  # a topic of 40 characters leaves room under 300 bytes
    assert (refused is None) == (_one_batch_message_bytes(topic, partition, records) <= limit)
