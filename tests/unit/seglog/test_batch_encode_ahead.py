"""A batch encoded ahead (``ProducerBatch.encode_ahead``: its records encoded, and compressed,
while its partition's window is full; the producer's fields given when it is sent) builds the
same bytes as one built at once, whatever its records, compression and producer fields, and
refuses what the codec refuses the same way; ``RecordAccumulator.drain`` encodes ahead the
closed batches of a partition that cannot send, never an open one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog._accumulator import (
    ENCODE_AHEAD_BATCHES,
    ENCODED_AHEAD_BUFFER_SHARE,
    ProducerBatch,
    RecordAccumulator,
)
from seglog.records import Compression, RecordBatchBuilder
from seglog.records.compression import compress
from seglog.records.errors import CodecError
from seglog.structs import TopicPartition

TP = TopicPartition("t", 0)


def _available(compression: Compression) -> bool:
    try:
        compress(compression, b"probe")
    except CodecError:
        return False
    return True


COMPRESSIONS = [compression for compression in Compression if _available(compression)]

_bytes_or_none = st.one_of(st.none(), st.binary(max_size=300))
_header = st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=20)))
# Timestamps around a base, earlier ones included (a negative delta), and Kafka's refused ones
# (below -1) now and then: the codec's refusal must come out of build either way.
_timestamp = st.one_of(st.integers(min_value=1_700_000_000_000, max_value=1_700_000_000_200), st.integers(-5, 5))


@st.composite
def _batches(draw):
    count = draw(st.integers(min_value=1, max_value=40))
    keys = draw(st.lists(_bytes_or_none, min_size=count, max_size=count))
    values = draw(st.lists(_bytes_or_none, min_size=count, max_size=count))
    shared = draw(st.booleans())  # send_many's records: one timestamp for the whole run
    if shared:
        timestamps = [draw(_timestamp)] * count
    else:
        timestamps = draw(st.lists(_timestamp, min_size=count, max_size=count))
    headers = draw(st.one_of(st.none(), st.lists(st.lists(_header, max_size=3).map(tuple), min_size=count, max_size=count)))
    compression = draw(st.sampled_from(COMPRESSIONS))
    return keys, values, timestamps, headers, compression


def _batch(keys, values, timestamps, headers, compression) -> ProducerBatch:
    batch = ProducerBatch(1, TP, compression, 0.0)
    batch.keys += keys
    batch.values += values
    batch.timestamps_ms += timestamps
    batch.headers = None if headers is None else list(headers)
    batch.closed = True
    return batch


def _built(batch: ProducerBatch, fields: tuple[int, int, int]) -> bytes | type[BaseException]:
    try:
        return batch.build(*fields)
    except Exception as error:  # noqa: BLE001 - compared: both ways must refuse alike
        return type(error)


_fields = st.tuples(st.integers(-1, 2**63 - 1), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1))


@given(_batches(), st.lists(_fields, min_size=1, max_size=3))
def test_a_batch_encoded_ahead_builds_the_bytes_of_one_built_at_once(records, fields_each_time):
    ahead = _batch(*records)
    ahead.encode_ahead()
    # Built again with other fields: a batch renumbered after one before it failed unwritten.
    for fields in fields_each_time:
        assert _built(ahead, fields) == _built(_batch(*records), fields)


@given(_batches())
def test_records_the_codec_refuses_are_not_encoded_ahead_and_build_refuses_them(records):
    batch = _batch(*records)
    refused = not isinstance(_built(_batch(*records), (-1, -1, -1)), bytes)
    batch.encode_ahead()
    assert batch.encoded_ahead is not refused


def test_producer_fields_out_of_range_are_refused_after_encoding_ahead():
    batch = _batch([b"k"], [b"v"], [1_000], None, Compression.NONE)
    batch.encode_ahead()
    for fields in ((2**63, 0, 0), (1, 2**15, 0), (1, 0, 2**31)):
        with pytest.raises(ValueError, match="must be in"):
            batch.build(*fields)
    assert batch.build(1, 0, 0) == _batch([b"k"], [b"v"], [1_000], None, Compression.NONE).build(1, 0, 0)


@given(st.lists(st.binary(max_size=50), min_size=1, max_size=20), st.lists(st.binary(max_size=50), max_size=20),
       st.sampled_from(COMPRESSIONS))
def test_a_builder_sealed_then_appended_to_builds_what_an_unsealed_one_does(first, later, compression):
    sealed, plain = RecordBatchBuilder(compression=compression), RecordBatchBuilder(compression=compression)
    for builder in (sealed, plain):
        for value in first:
            builder.append(value, None, 1_000)
    sealed.seal()
    assert sealed.build() == plain.build()
    for builder in (sealed, plain):
        for value in later:
            builder.append(value, b"k", 1_001)
    assert sealed.build() == plain.build()


def _accumulator(batch_bytes: int, buffer_bytes: int = 1 << 20) -> RecordAccumulator:
    return RecordAccumulator(
        batch_bytes=batch_bytes, linger_ms=5, compression=Compression.NONE,
        buffer_bytes=buffer_bytes, request_bytes_max=1 << 20, wall_clock_ms=lambda: 1_000,
    )


def test_drain_encodes_ahead_the_closed_batches_of_a_partition_that_cannot_send():
    accumulator = _accumulator(batch_bytes=1_000)
    for _ in range(ENCODE_AHEAD_BATCHES + 3):  # a 300-byte record after three: a batch each three
        for _ in range(3):
            accumulator.append(TP, None, bytes(250), None, (), 0.0)
    accumulator.append(TP, None, bytes(10), None, (), 0.0)  # the open tail batch
    queued = list(accumulator._queues[TP])
    ready, _ = accumulator.drain(0.0, lambda _: False, 1)
    assert ready == []
    assert [batch.encoded_ahead for batch in queued] == (
        [True] * ENCODE_AHEAD_BATCHES + [False] * (len(queued) - ENCODE_AHEAD_BATCHES)
    )
    # Sent later, they build what they would have built unencoded.
    ready, _ = accumulator.drain(0.0, lambda _: True, 1, lambda _: len(queued))
    assert ready == queued[:-1]  # the open tail is not ready before its linger
    for batch in ready:
        clone = _batch(batch.keys, batch.values, batch.timestamps_ms, None, Compression.NONE)
        assert batch.build(7, 1, 40) == clone.build(7, 1, 40)


def test_drain_never_encodes_an_open_batch_ahead():
    accumulator = _accumulator(batch_bytes=10_000)
    accumulator.append(TP, None, bytes(10), None, (), 0.0)
    (batch,) = accumulator._queues[TP]
    accumulator.drain(10.0, lambda _: False, 1)  # ready by linger, but the partition cannot send
    assert not batch.closed and not batch.encoded_ahead


def test_the_batches_encoded_ahead_stay_within_a_share_of_the_buffer_across_partitions():
    """Each partition waiting on the service gets its head batches encoded while the encoded
    copies, counted by the batches' size bounds, fit a quarter of the buffer; a batch drained
    gives its share back, and the next drain encodes where it stopped."""
    buffer_bytes = 16_000
    accumulator = _accumulator(batch_bytes=1_000, buffer_bytes=buffer_bytes)
    partitions = [TopicPartition("t", number) for number in range(4)]
    for tp in partitions:
        for _ in range(9):  # three closed batches of three 250-byte records, and an open one
            accumulator.append(tp, None, bytes(250), None, (), 0.0)
        accumulator.append(tp, None, bytes(300), None, (), 0.0)
    queued = {tp: list(accumulator._queues[tp]) for tp in partitions}
    assert [len(queued[tp]) for tp in partitions] == [4] * 4
    bound = queued[partitions[0]][0].size_bytes_bound
    fits = buffer_bytes // ENCODED_AHEAD_BUFFER_SHARE // bound  # 4 of the 12 closed batches

    def encoded() -> list[ProducerBatch]:
        return [batch for tp in partitions for batch in queued[tp] if batch.encoded_ahead]

    accumulator.drain(0.0, lambda _: False, 4)
    assert len(encoded()) == fits == 4
    assert encoded() == queued[partitions[0]][:3] + queued[partitions[1]][:1]
    # Partition 0 sends its three: their share is given back, and the others get theirs.
    ready, _ = accumulator.drain(0.0, lambda tp: tp == partitions[0], 4, lambda _: 3)
    assert ready == queued[partitions[0]][:3]
    assert [batch for batch in encoded() if batch not in ready] == (
        queued[partitions[1]][:3] + queued[partitions[2]][:1]
    )
    for batch in ready:
        accumulator.complete(batch)
    accumulator.abort_queued(RuntimeError("closed"))
    assert accumulator._encoded_bytes == 0
