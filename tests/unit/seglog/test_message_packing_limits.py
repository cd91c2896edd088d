"""The ProduceStream messages the producer's sender packs a partition's batches into
(``message_counts`` with ``Sender._message_bytes_max``) stay within the limit a refusal of
gRPC's named ("Received message larger than max (N vs. M)"), as well as within the client's
max_request_bytes and the limit the stream announced: several batches in one message above M
would be refused again, ending the connection's stream (the refused limit was used only to
split a batch alone, never to pack several)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seglog._accumulator import RecordAccumulator
from seglog._producer_config import ProducerConfig
from seglog._send_window import SendWindow
from seglog._sender import _BATCH_OVERHEAD_BYTES, _MESSAGE_OVERHEAD_BYTES, Sender, message_counts
from seglog.errors import ServiceOverloadedError
from seglog.records import Compression
from seglog.structs import Acks, TopicPartition

TP = TopicPartition("t", 0)
CLIENT_MAX = 1 << 20


def _sender() -> Sender:
    config = ProducerConfig(
        acks=Acks.WRITTEN, compression=Compression.NONE, batch_size=256 * 1024, linger_ms=0, buffer_bytes=4 << 20, max_request_bytes=CLIENT_MAX,
        max_in_flight_requests=5, max_in_flight_per_partition=5, max_block_ms=1_000, retries=0,
        retry_backoff_ms=0, request_timeout_ms=1_000,
    )
    accumulator = RecordAccumulator(
        batch_bytes=config.batch_size, linger_ms=0, compression=Compression.NONE, buffer_bytes=config.buffer_bytes,
        request_bytes_max=config.max_request_bytes, wall_clock_ms=lambda: 1_000,
    )
    return Sender(config, accumulator, enable_idempotence=True, partition_counts={}, stats={"batches_split": 0})


def _refused_by_grpc(sender: Sender, refused_max: int) -> None:
    """gRPC refuses a message of one batch above ``refused_max``: the sender keeps the limit."""
    entry = SendWindow().sent((None, b"x" * (refused_max + 1), None))
    refusal = ServiceOverloadedError(f"Received message larger than max ({refused_max + 100} vs. {refused_max})")
    assert sender._refused_above_request_limit(TP, entry, refusal)  # type: ignore[arg-type]


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
    sender = _sender()
    _refused_by_grpc(sender, 500_000)
    sizes = [200_000, 200_000, 200_000]
    # Within the client's 1 MiB and an announced 800,000 the three went in one message.
    for announced in (None, 800_000):
        counts = message_counts(sizes, TP.topic, 16, sender._message_bytes_max(announced))
        assert counts == [2, 1], announced
    assert sender._message_bytes_max(300_000) == 300_000  # the least limit known wins


@given(
    st.lists(st.integers(min_value=1, max_value=400_000), min_size=1, max_size=12),
    st.integers(min_value=1_000, max_value=2 * CLIENT_MAX),
    st.one_of(st.none(), st.integers(min_value=1_000, max_value=2 * CLIENT_MAX)),
)
def test_every_message_of_several_batches_is_within_every_known_limit(sizes, refused_max, announced):
    sender = _sender()
    _refused_by_grpc(sender, refused_max)
    counts = message_counts(sizes, TP.topic, 16, sender._message_bytes_max(announced))
    assert sum(counts) == len(sizes)
    for count, size in _message_sizes(sizes, counts):
        if count > 1:  # a batch alone above a limit is the sender's to split or fail
            assert size <= min(CLIENT_MAX, refused_max, announced or CLIENT_MAX)
