"""The accumulator's parts for several batches a request and for a send_many that waits for
buffer space: ``drain`` with ``batches_for`` and ``append_many`` resumed from a position with the
records sized once; and the sender's reading of a several-batch answer (``_answers``)."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog import _accumulator
from seglog._accumulator import BufferFullError, RecordAccumulator
from seglog._sender import _answers, _by_partition, message_counts
from seglog.errors import RecordTooLargeError, ServiceError, ServiceUnavailableError, TopicNotFoundError
from seglog.records import Compression
from seglog.structs import TopicPartition
from seglog.v1 import log_service_pb2 as pb

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def make(batch_bytes=200, linger_ms=10, buffer_bytes=100_000):
    return RecordAccumulator(
        batch_bytes=batch_bytes, linger_ms=linger_ms, compression=Compression.NONE,
        buffer_bytes=buffer_bytes, request_bytes_max=1_000_000, wall_clock_ms=lambda: 1_700_000_000_000,
    )


def always(_tp) -> bool:
    return True


def fill(acc, tp, batches, now_ms=0.0):
    """``batches`` full batches of ``tp`` (two records each at 200 bytes) and one open one."""
    for _ in range(batches * 2 + 1):
        acc.append(tp, None, b"v" * 20, 7, (), now_ms)


def drain_all(acc) -> list:
    """Every batch, as a sender would take them (one a partition a drain)."""
    out = []
    while ready := acc.drain(0.0, always, 100)[0]:
        out += ready
    return out


def test_drain_gives_a_partition_up_to_batches_for_of_its_ready_batches_oldest_first():
    acc = make()
    fill(acc, TP0, 4)
    fill(acc, TP1, 1)
    ready, _ = acc.drain(0.0, always, 10, batches_for=lambda tp: 3)
    assert [b.topic_partition for b in ready] == [TP0, TP0, TP0, TP1]
    assert [b.batch_id for b in ready[:3]] == sorted(b.batch_id for b in ready[:3])
    # The partition's fourth full batch is left for the next request; its open one is not ready
    # (linger): its deadline is reported.
    ready, due = acc.drain(0.0, always, 10, batches_for=lambda tp: 3)
    assert [b.topic_partition for b in ready] == [TP0]
    assert due == 10


def test_drain_counts_partitions_against_its_bound_and_takes_one_each_without_batches_for():
    acc = make()
    fill(acc, TP0, 3)
    fill(acc, TP1, 3)
    ready, _ = acc.drain(0.0, always, 1, batches_for=lambda tp: 5)
    assert [b.topic_partition for b in ready] == [TP0] * 3  # one request's room: one partition
    ready, _ = acc.drain(0.0, always, 10)
    assert [b.topic_partition for b in ready] == [TP1]


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from([TP0, TP1]), st.integers(1, 150)), min_size=1, max_size=80),
       st.integers(1, 6), st.integers(1, 4))
def test_grouped_drains_send_each_partitions_batches_once_in_order(records, per_request, room):
    """Whatever the grouping, every batch comes out exactly once and a partition's batches in
    the order they were made, as with one batch a drain."""
    grouped, single = make(), make()
    for acc in (grouped, single):
        for tp, size in records:
            acc.append(tp, None, b"v" * size, 7, (), 0.0)
        acc.begin_flush()
    out_grouped, out_single = [], []
    while True:
        ready, _ = grouped.drain(0.0, always, room, batches_for=lambda tp: per_request)
        if not ready:
            break
        for group in _by_partition(ready):
            assert len(group) <= per_request
            assert len({b.topic_partition for b in group}) == 1
        assert len({b.topic_partition for b in ready}) <= room
        out_grouped += ready
    while True:
        ready, _ = single.drain(0.0, always, room)
        if not ready:
            break
        out_single += ready
    for tp in (TP0, TP1):
        assert [b.values for b in out_grouped if b.topic_partition == tp] == \
            [b.values for b in out_single if b.topic_partition == tp]


@settings(deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=60), st.integers(300, 3000))
def test_append_many_resumed_from_where_it_stopped_queues_what_one_call_with_room_would(sizes, buffer_bytes):
    """A send_many that waits for space goes on from the position the full buffer stopped it
    at, with the totals taken once: the batches hold every record once, in order."""
    values = [b"v" * size for size in sizes]
    keys = [None] * len(values)
    acc = make(batch_bytes=300, buffer_bytes=max(buffer_bytes, 400))
    roomy = make(batch_bytes=300, buffer_bytes=10**7)
    totals = acc.record_totals(TP0, keys, values)
    queued = []
    start = 0
    while True:
        try:
            acc.append_many(TP0, keys, values, 7, 0.0, start=start, totals=totals)
            break
        except BufferFullError as full:
            assert full.args[0] >= start
            start = full.args[0]
            acc.begin_flush()  # frees space as the sender would: drain and complete
            for batch in drain_all(acc):
                queued += batch.values
                acc.complete(batch)
    acc.begin_flush()
    queued += [v for batch in drain_all(acc) for v in batch.values]
    roomy.append_many(TP0, keys, values, 7, 0.0)
    roomy.begin_flush()
    assert queued == values == [v for batch in drain_all(roomy) for v in batch.values]


def test_a_send_many_sizes_its_records_once_however_often_it_waits(monkeypatch):
    calls = []
    real = _accumulator._record_sizes
    monkeypatch.setattr(_accumulator, "_record_sizes", lambda k, v: calls.append(len(v)) or real(k, v))
    acc = make(batch_bytes=500, buffer_bytes=1000)
    values = [b"v" * 100] * 200
    keys = [None] * 200
    totals = acc.record_totals(TP0, keys, values)
    start, waits = 0, 0
    while True:
        try:
            acc.append_many(TP0, keys, values, 7, 0.0, start=start, totals=totals)
            break
        except BufferFullError as full:
            start, waits = full.args[0], waits + 1
            acc.begin_flush()
            for batch in drain_all(acc):
                acc.complete(batch)
    assert waits > 10
    assert calls == [200]


def test_record_totals_refuses_a_record_that_can_never_be_sent():
    acc = make(batch_bytes=200, buffer_bytes=400)
    with pytest.raises(RecordTooLargeError):
        acc.record_totals(TP0, [None, None], [b"ok", b"x" * 500])
    assert acc.statistics().records_queued == 0


def _error(code: grpc.StatusCode, error_class: str = "") -> pb.StreamError:
    return pb.StreamError(code=code.value[0], message="refused", error_class=error_class)


def test_answers_reads_each_batch_in_its_slot():
    response = pb.ProduceStreamResponse(correlation_id=1, produce=pb.ProduceResponse(base_offset=4))
    response.more.add().error.CopyFrom(_error(grpc.StatusCode.NOT_FOUND, "UnknownTopicOrPartitionError"))
    response.more.add().produce.base_offset = 9
    first, second, third = _answers(response, 3)
    assert first.base_offset == 4 and third.base_offset == 9
    assert isinstance(second, TopicNotFoundError)


def test_a_message_refused_whole_gives_the_first_batch_the_refusal_and_the_rest_a_retry():
    """Refused whole (one slot), none of the batches was appended: the first carries the
    refusal, the others, never looked at, are sent again."""
    response = pb.ProduceStreamResponse(correlation_id=1, error=_error(grpc.StatusCode.INVALID_ARGUMENT))
    outcomes = _answers(response, 3)
    assert outcomes[0].code is grpc.StatusCode.INVALID_ARGUMENT
    assert all(isinstance(o, ServiceUnavailableError) and o.retriable for o in outcomes[1:])


@pytest.mark.parametrize("count", [2, 3, 16])
def test_batches_an_answer_has_no_slot_for_were_not_appended_and_are_retried(count):
    """An older service appends only ``produce`` and answers one slot: the first batch gets its
    real answer (it was written: failing it would make an application write it twice), the
    ones it ignored a retriable error saying they were not appended."""
    response = pb.ProduceStreamResponse(correlation_id=1, produce=pb.ProduceResponse(base_offset=4))
    outcomes = _answers(response, count)
    assert isinstance(outcomes[0], pb.ProduceResponse) and outcomes[0].base_offset == 4
    assert len(outcomes) == count
    assert all(
        isinstance(o, ServiceUnavailableError) and o.retriable and f"answered 1 of the {count}" in str(o)
        for o in outcomes[1:]
    )


def test_an_answer_with_more_slots_than_batches_fails_every_batch():
    response = pb.ProduceStreamResponse(correlation_id=1, produce=pb.ProduceResponse(base_offset=4))
    response.more.add().produce.base_offset = 5
    response.more.add().produce.base_offset = 6
    outcomes = _answers(response, 2)
    assert len(outcomes) == 2
    assert all(isinstance(o, ServiceError) and not o.retriable and "3 slots for the 2" in str(o) for o in outcomes)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=20),
    topic=st.text(min_size=1, max_size=40),
    partition=st.integers(0, 2**31 - 1),
    batches_max=st.integers(1, 16),
    bytes_max=st.integers(1, 12_000),
)
def test_each_message_of_several_batches_fits_the_request_limit_as_serialized(
    sizes, topic, partition, batches_max, bytes_max
):
    """The packing counts the envelope exactly: a message of several batches, built as the
    sender builds it (the correlation id at its largest), is never above the limit, and a
    message closed before the next batch by size alone could not have taken it (the envelope
    was reserved at 64 bytes and more a batch); a batch alone above it goes alone; none is
    left out."""
    counts = message_counts(sizes, topic, batches_max, bytes_max, partition)
    assert sum(counts) == len(sizes) and all(1 <= count <= batches_max for count in counts)
    position = 0
    for count in counts:
        assert count == 1 or _message(topic, partition, sizes[position:position + count]).ByteSize() <= bytes_max
        end = position + count
        if end < len(sizes) and count < batches_max:  # closed by size: the next did not fit
            assert _message(topic, partition, sizes[position:end + 1]).ByteSize() > bytes_max
        position = end


def _message(topic: str, partition: int, sizes: list[int]) -> pb.ProduceStreamRequest:
    """A ProduceStream message of batches of ``sizes`` bytes, as the sender builds it."""
    message = pb.ProduceStreamRequest(correlation_id=2**63 - 1)
    request = message.produce
    for index, size in enumerate(sizes):
        if index:
            request = message.more.add()
        request.topic = topic
        request.partition = partition
        request.records = b"r" * size
        request.acks = pb.ACKS_FSYNCED
    return message
