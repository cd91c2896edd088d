"""A batch encoded ahead (``ProducerBatch.encode_ahead``: its records encoded, and compressed,
while its partition's window is full; the producer's fields given when it is sent) builds the
same bytes as one built at once, whatever its records, compression and producer fields, and
refuses what the codec refuses the same way; ``RecordAccumulator.drain`` encodes ahead the
closed batches of a partition that cannot send, never an open one."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog._accumulator import (
    ENCODE_AHEAD_BATCHES,
    ENCODE_AHEAD_BYTES_PER_DRAIN,
    ENCODED_AHEAD_BUFFER_SHARE,
    BufferFullError,
    ProducerBatch,
    RecordAccumulator,
)
from seglog.records import RECORD_BATCH_OVERHEAD, Compression, RecordBatchBuilder
from seglog.structs import TopicPartition
from tests.support.codec_support import COMPRESSIONS

TP = TopicPartition("t", 0)

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
    copies fit a quarter of the buffer (a batch's size bound must fit, its encoded bytes are
    counted); a batch drained keeps its share until it is built, and the next drain encodes
    where it stopped."""
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
    share = buffer_bytes // ENCODED_AHEAD_BUFFER_SHARE

    def encoded() -> list[ProducerBatch]:
        return [batch for tp in partitions for batch in queued[tp] if batch.encoded_ahead]

    def held() -> int:
        return sum(_records_held(batch) for tp in partitions for batch in queued[tp])

    accumulator.drain(0.0, lambda _: False, 4)
    assert encoded() == queued[partitions[0]][:3] + queued[partitions[1]][:1]
    assert accumulator._encoded_bytes == held() and held() + bound > share
    # Partition 0 sends its three: drained, they hold their copies until built.
    ready, _ = accumulator.drain(0.0, lambda tp: tp == partitions[0], 4, lambda _: 3)
    assert ready == queued[partitions[0]][:3]
    assert encoded() == queued[partitions[0]][:3] + queued[partitions[1]][:1]
    for batch in ready:
        accumulator.build(batch, 1, 0, 0)
    assert accumulator._encoded_bytes == held()
    accumulator.drain(0.0, lambda _: False, 4)
    assert encoded() == queued[partitions[1]][:3] + queued[partitions[2]][:1]
    for batch in ready:
        accumulator.complete(batch)
    accumulator.abort_queued(RuntimeError("closed"))
    assert accumulator._encoded_bytes == 0


def _records_held(batch: ProducerBatch) -> int:
    """The bytes of the buffers held for ``batch`` beyond its records' own keys, values and
    delivery: what encoding ahead keeps (every bytes object reachable from the batch)."""
    own = {id(batch.keys), id(batch.values), id(batch.timestamps_ms), id(batch.headers), id(batch.delivery),
           id(batch.topic_partition)}
    seen: set[int] = set()
    held = 0
    stack = [referent for referent in gc.get_referents(batch) if id(referent) not in own]
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, type) or callable(item):
            continue
        seen.add(id(item))
        if isinstance(item, bytes):
            held += len(item)
        elif not isinstance(item, (int, str, bool, float, type(None))):
            stack.extend(gc.get_referents(item))
    return held


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_a_batch_encoded_ahead_holds_its_records_once_until_built(compression):
    """What a batch encoded ahead holds, measured: one buffer, the records as the batch
    carries them (compressed, if so), counted by the accumulator, from its encoding through
    its drain until it is built; the message built carries them then, and the batch holds
    nothing more while in flight, retried or rebuilt with other fields (renumbered)."""
    accumulator = RecordAccumulator(
        batch_bytes=4_000, linger_ms=5, compression=compression,
        buffer_bytes=1 << 20, request_bytes_max=1 << 20, wall_clock_ms=lambda: 1_000,
    )
    values = [bytes([n]) * 20 + bytes(range(n, n + 60)) for n in range(120)]
    for value in values:
        accumulator.append(TP, b"key", value, None, (), 0.0)
    batches = list(accumulator._queues[TP])
    closed = [batch for batch in batches if batch.closed]
    assert len(closed) >= 2
    assert all(_records_held(batch) == 0 for batch in batches)
    accumulator.drain(0.0, lambda _: False, 1)
    assert all(batch.encoded_ahead for batch in closed)
    fresh = [_batch(batch.keys, batch.values, batch.timestamps_ms, None, compression) for batch in closed]
    areas = [len(clone.build(-1, -1, -1)) - RECORD_BATCH_OVERHEAD for clone in fresh]
    assert [_records_held(batch) for batch in closed] == areas
    assert accumulator._encoded_bytes == sum(areas)
    ready, _ = accumulator.drain(0.0, lambda _: True, 1, lambda _: len(closed))
    assert ready == closed
    assert [_records_held(batch) for batch in ready] == areas  # drained, not built: still counted
    assert accumulator._encoded_bytes == sum(areas)
    first, *rest = ready
    message = accumulator.build(first, 5, 0, 0)
    assert message == fresh[0].build(5, 0, 0)
    assert _records_held(first) == 0
    assert accumulator._encoded_bytes == sum(areas[1:])
    # Built again with other fields (the sender renumbers by rewriting the header instead): the
    # same bytes as a fresh batch, nothing kept.
    assert accumulator.build(first, 6, 0, 0) == fresh[0].build(6, 0, 0)
    assert _records_held(first) == 0
    accumulator.complete(first)  # answered (or retried with ``message``, held by the sender)
    assert accumulator._encoded_bytes == sum(areas[1:])
    # A drained batch that fails before it is built (in hand) gives its share back completed.
    for batch in rest:
        accumulator.complete(batch)
        assert _records_held(batch) == 0
    assert accumulator._encoded_bytes == 0


def _closed_batches_waiting(accumulator: RecordAccumulator, partitions: int, batches: int, record_bytes: int) -> dict:
    """``batches + 1`` batches of one record of ``record_bytes`` (each alone in its batch:
    ``record_bytes`` is above half the batch) on each partition; the partitions' queues."""
    tps = [TopicPartition("t", number) for number in range(partitions)]
    for tp in tps:
        for _ in range(batches + 1):
            accumulator.append(tp, None, bytes(record_bytes), None, (), 0.0)
    return {tp: list(accumulator._queues[tp]) for tp in tps}


@pytest.mark.parametrize("record_bytes", [3_000, 15_000, ENCODE_AHEAD_BYTES_PER_DRAIN])
def test_one_drain_encodes_ahead_at_most_its_bound_and_the_next_goes_on_at_once(record_bytes):
    """A drain encodes ahead batches of at most ENCODE_AHEAD_BYTES_PER_DRAIN by their size
    bounds (one batch when a batch alone is larger), under the lock that appends wait for;
    with more to encode, its due time is now, and drains one after another encode every batch
    the share takes, then the due time is the linger's again."""
    accumulator = _accumulator(batch_bytes=record_bytes, buffer_bytes=64 << 20)
    queued = _closed_batches_waiting(accumulator, partitions=6, batches=ENCODE_AHEAD_BATCHES, record_bytes=record_bytes)
    batches = [batch for queue in queued.values() for batch in queue]
    bound = batches[0].size_bytes_bound
    per_drain = max(1, ENCODE_AHEAD_BYTES_PER_DRAIN // bound)
    heads = [batch for queue in queued.values() for batch in queue[:ENCODE_AHEAD_BATCHES]]
    drains = 0
    while True:
        before = sum(batch.encoded_ahead for batch in batches)
        _, due_ms = accumulator.drain(1.0, lambda _: False, 6)
        drains += 1
        encoded_now = sum(batch.encoded_ahead for batch in batches) - before
        assert encoded_now <= per_drain
        assert encoded_now * bound <= max(ENCODE_AHEAD_BYTES_PER_DRAIN, bound)
        if due_ms != 1.0:
            break
        assert encoded_now == per_drain
    assert due_ms is None  # nothing due: the partitions wait for room in their windows
    share = (64 << 20) // ENCODED_AHEAD_BUFFER_SHARE
    assert [batch for batch in batches if batch.encoded_ahead] == heads
    assert sum(map(_records_held, heads)) == accumulator._encoded_bytes < share
    assert drains == -(-len(heads) // per_drain)


def test_records_the_codec_refuses_are_encoded_once_across_drains(monkeypatch):
    """A closed batch whose records the codec refuses is encoded ahead once, however many
    drains find its partition unable to send; it takes no share, the batches behind it are
    encoded, and its build, when it is sent, raises what a batch built at once raises."""
    encodings: list[ProducerBatch] = []
    encode_into = ProducerBatch._encode_into

    def counted(batch: ProducerBatch, builder: RecordBatchBuilder) -> None:
        encodings.append(batch)
        encode_into(batch, builder)

    monkeypatch.setattr(ProducerBatch, "_encode_into", counted)
    accumulator = _accumulator(batch_bytes=1_000)
    queued = _closed_batches_waiting(accumulator, partitions=1, batches=3, record_bytes=900)[TP]
    refused = queued[0]
    refused.values[0] = "not bytes"  # the codec's refusal (a caller's type slipped past send)
    for _ in range(5):
        accumulator.drain(1.0, lambda _: False, 1)
    assert encodings.count(refused) == 1
    assert refused.encode_refused and not refused.encoded_ahead
    assert all(batch.encoded_ahead for batch in queued[1:3])
    assert accumulator._encoded_bytes == sum(map(_records_held, queued[1:3]))
    (ready, _) = accumulator.drain(1.0, lambda _: True, 1)
    assert ready == [refused]
    with pytest.raises(TypeError) as raised:
        refused.build(1, 0, 0)
    with pytest.raises(TypeError) as at_once:
        _batch(refused.keys, refused.values, refused.timestamps_ms, None, Compression.NONE).build(1, 0, 0)
    assert str(raised.value) == str(at_once.value)
    assert encodings.count(refused) == 1


def test_a_batch_split_before_it_is_built_gives_its_encoded_share_back():
    """A drained batch split before it was built (above a request limit known for its
    connection) is never built nor completed itself: its encoded records go with the split."""
    accumulator = _accumulator(batch_bytes=1_000)
    for _ in range(6):
        accumulator.append(TP, None, bytes(250), None, (), 0.0)
    batch = accumulator._queues[TP][0]
    accumulator.drain(1.0, lambda _: False, 1)
    assert batch.encoded_ahead and accumulator._encoded_bytes == _records_held(batch) > 0
    (ready, _) = accumulator.drain(1.0, lambda _: True, 1)
    assert ready == [batch]
    pieces = accumulator.split(batch, 400)
    assert len(pieces) == 3 and _records_held(batch) == 0
    assert accumulator._encoded_bytes == 0


def _out_of_memory(builder: RecordBatchBuilder) -> None:
    raise MemoryError


def test_a_memory_error_encoding_ahead_is_not_kept_as_the_records_refusal(monkeypatch):
    """Encoding ahead that runs out of memory (or fails in any way but the codec refusing the
    records) says nothing of the records: the batch is neither refused nor counted, the
    drain goes on, and the batch is not encoded ahead again (memory back or not): built, it
    gives the bytes of a batch built at once (kept as its refusal, it failed with MemoryError
    when sent)."""
    accumulator = _accumulator(batch_bytes=1_000)
    queued = _closed_batches_waiting(accumulator, partitions=1, batches=2, record_bytes=900)[TP]
    seal = RecordBatchBuilder.seal
    monkeypatch.setattr(RecordBatchBuilder, "seal", _out_of_memory)
    accumulator.drain(1.0, lambda _: False, 1)
    assert not any(batch.encode_refused or batch.encoded_ahead for batch in queued)
    assert accumulator._encoded_bytes == 0
    monkeypatch.setattr(RecordBatchBuilder, "seal", seal)
    accumulator.drain(1.0, lambda _: False, 1)
    assert not any(batch.encoded_ahead for batch in queued[:2])
    (ready, _) = accumulator.drain(1.0, lambda _: True, 1)
    first = ready[0]
    assert accumulator.build(first, 1, 0, 0) == _batch(first.keys, first.values, first.timestamps_ms, None,
                                                       Compression.NONE).build(1, 0, 0)


def test_drains_while_encoding_ahead_fails_encode_each_batch_once_and_ask_no_drain_at_once(monkeypatch):
    """A failure that lasts (memory short, a compressor's own error) must not have every drain
    encode the same batches again: with more than a drain's budget of them at a partition's
    head, each drain asked for the next at once, and the sender drained and encoded them
    without end while the window stayed full."""
    accumulator = _accumulator(batch_bytes=20_000, buffer_bytes=32 << 20)
    queued = _closed_batches_waiting(accumulator, partitions=1, batches=8, record_bytes=16_000)[TP]
    seals = []

    def failing_seal(builder):
        seals.append(builder)
        raise MemoryError

    monkeypatch.setattr(RecordBatchBuilder, "seal", failing_seal)
    dues = [accumulator.drain(1.0, lambda _: False, 1)[1] for _ in range(20)]
    closed = [batch for batch in queued if batch.closed]
    assert len(seals) <= len(closed)
    assert dues[-1] is None or dues[-1] > 1.0
    assert not any(batch.encoded_ahead or batch.encode_refused for batch in queued)


def test_a_batch_whose_encoding_ahead_ran_out_of_memory_is_encoded_when_built(monkeypatch):
    """The memory back only by the batch's send: its build encodes the records then, as a
    batch never encoded ahead does, and nothing was counted for it meanwhile."""
    accumulator = _accumulator(batch_bytes=1_000)
    batch = _closed_batches_waiting(accumulator, partitions=1, batches=1, record_bytes=900)[TP][0]
    seal = RecordBatchBuilder.seal
    monkeypatch.setattr(RecordBatchBuilder, "seal", _out_of_memory)
    accumulator.drain(1.0, lambda _: False, 1)
    monkeypatch.setattr(RecordBatchBuilder, "seal", seal)
    (ready, _) = accumulator.drain(1.0, lambda _: True, 1)
    assert ready == [batch] and not batch.encoded_ahead and not batch.encode_refused
    assert accumulator._encoded_bytes == 0
    fresh = _batch(batch.keys, batch.values, batch.timestamps_ms, None, Compression.NONE)
    assert accumulator.build(batch, 1, 0, 0) == fresh.build(1, 0, 0)


_steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 2), st.integers(0, 900), st.integers(1, 40)),
        st.tuples(st.just("drain"), st.sets(st.integers(0, 2), max_size=2), st.integers(1, 3)),
        st.tuples(st.just("build"), st.integers(0, 50), st.integers(-1, 5)),
        st.tuples(st.just("complete"), st.integers(0, 50)),
        st.tuples(st.just("split"), st.integers(0, 50)),
        st.tuples(st.just("abort")),
    ),
    max_size=40,
)


@given(_steps, st.sampled_from(COMPRESSIONS), st.integers(1_500, 6_000))
def test_the_encoded_count_is_what_the_batches_hold_whatever_the_sender_does(steps, compression, batch_bytes):
    """Any sequence of appends, drains (partitions able to send or not), builds (again: a
    renumbered batch), completions, splits before a build and aborts: the accumulator counts
    exactly the bytes its batches hold encoded ahead, within the share, each drain encodes
    within its bound, and every build is the bytes of a batch built at once."""
    buffer_bytes = 40_000
    share = buffer_bytes // ENCODED_AHEAD_BUFFER_SHARE
    accumulator = RecordAccumulator(
        batch_bytes=batch_bytes, linger_ms=5, compression=compression,
        buffer_bytes=buffer_bytes, request_bytes_max=1 << 20, wall_clock_ms=lambda: 1_000,
    )
    tps = [TopicPartition("t", number) for number in range(3)]
    every: dict[int, ProducerBatch] = {}
    drained: list[ProducerBatch] = []  # in the sender's hands: built or not, not completed
    # Closed batches on every partition first, encoded ahead while none can send, then a few
    # of partition 0's drained.
    opening = [("append", partition, 300, 20) for partition in range(3)] + [("drain", set(), 1), ("drain", {0}, 3)]
    for step in opening + steps:
        kind = step[0]
        if kind == "append":
            _, partition, size, count = step
            for _ in range(count):
                try:
                    accumulator.append(tps[partition], None, bytes(size), None, (), 0.0)
                except BufferFullError:
                    break
            for queue in accumulator._queues.values():
                every.update((id(batch), batch) for batch in queue)
        elif kind == "drain":
            _, able, count = step
            before = {id(batch): batch.encoded_ahead for batch in every.values()}
            ready, _ = accumulator.drain(1.0, lambda tp, able=able: tp.partition in able, 3, lambda _, c=count: c)
            drained += ready
            encoded = [batch for batch in every.values() if batch.encoded_ahead and not before[id(batch)]]
            assert len(encoded) <= 1 or sum(batch.size_bytes_bound for batch in encoded) <= ENCODE_AHEAD_BYTES_PER_DRAIN
        elif kind in ("build", "complete", "split") and drained:
            batch = drained[step[1] % len(drained)]
            if kind == "build":
                fields = (7, 0, step[2]) if step[2] >= 0 else (-1, -1, -1)
                fresh = _batch(batch.keys, batch.values, batch.timestamps_ms, None, compression)
                assert accumulator.build(batch, *fields) == fresh.build(*fields)
            elif kind == "complete":
                drained.remove(batch)
                accumulator.complete(batch)
            elif batch.record_count > 1:
                drained.remove(batch)
                pieces = accumulator.split(batch, batch.size_bytes_bound // 2)
                drained += pieces
                every.update((id(piece), piece) for piece in pieces)
        elif kind == "abort":
            accumulator.abort_queued(RuntimeError("closed"))
        assert accumulator._encoded_bytes == sum(map(_records_held, every.values())) <= share
    for batch in drained:
        accumulator.complete(batch)
    accumulator.abort_queued(RuntimeError("closed"))
    assert accumulator._encoded_bytes == 0 == sum(map(_records_held, every.values()))
