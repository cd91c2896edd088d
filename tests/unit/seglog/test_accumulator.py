"""The producer's batching core, driven by hand with explicit times (no I/O, no sleeping)."""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog._accumulator import (
    RECORD_OVERHEAD_BYTES_MAX,
    BufferFullError,
    RecordAccumulator,
    record_bytes_upper_bound,
)
from seglog.errors import ClientClosedError, RecordTooLargeError
from seglog.records import RECORD_BATCH_OVERHEAD, Compression, RecordBatch, RecordBatchBuilder
from seglog.structs import RecordMetadata, TopicPartition

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
WALL_CLOCK_MS = 1_700_000_000_000


def make(batch_bytes=1000, linger_ms=10, buffer_bytes=100_000, request_bytes_max=1_000_000, compression=Compression.NONE):
    return RecordAccumulator(
        batch_bytes=batch_bytes,
        linger_ms=linger_ms,
        compression=compression,
        buffer_bytes=buffer_bytes,
        request_bytes_max=request_bytes_max,
        wall_clock_ms=lambda: WALL_CLOCK_MS,
    )


def append(acc, tp=TP0, value=b"v" * 10, key=None, now_ms=0.0, timestamp_ms=None, headers=()):
    return acc.append(tp, key, value, timestamp_ms, headers, now_ms)


def always(_tp):
    return True


def test_first_record_opens_a_batch_that_waits_for_linger():
    acc = make(linger_ms=10)
    _, result = append(acc, now_ms=100)
    assert result.new_batch and not result.batch_full
    ready, due = acc.drain(105, always, 10)
    assert ready == [] and due == 110


def test_batch_is_ready_once_linger_has_passed():
    acc = make(linger_ms=10)
    append(acc, now_ms=100)
    ready, due = acc.drain(110, always, 10)
    assert [b.record_count for b in ready] == [1] and due is None


def test_records_share_the_open_batch_until_it_is_full():
    record = record_bytes_upper_bound(None, b"v" * 10, ())
    acc = make(batch_bytes=RECORD_BATCH_OVERHEAD + 3 * record)
    results = [append(acc)[1] for _ in range(4)]
    assert [r.new_batch for r in results] == [True, False, False, True]
    assert [r.batch_full for r in results] == [False, False, True, False]
    ready, _ = acc.drain(0, always, 10)  # full: ready without lingering
    assert [b.record_count for b in ready] == [3]


def test_a_record_larger_than_batch_bytes_gets_a_batch_of_its_own():
    acc = make(batch_bytes=200)
    append(acc, value=b"x" * 10)
    _, result = append(acc, value=b"x" * 500)
    assert result.new_batch and result.batch_full
    ready, _ = acc.drain(0, always, 10)
    assert [b.record_count for b in ready] == [1]  # one per partition per drain
    ready, _ = acc.drain(0, always, 10)
    assert [b.record_count for b in ready] == [1]


def test_drain_skips_partitions_that_cannot_send_and_respects_the_batch_count_max():
    acc = make(linger_ms=0)
    append(acc, tp=TP0)
    append(acc, tp=TP1)
    ready, _ = acc.drain(0, lambda tp: tp != TP0, 10)
    assert [b.topic_partition for b in ready] == [TP1]
    append(acc, tp=TP1)
    ready, _ = acc.drain(0, always, 1)
    assert len(ready) == 1


def test_flush_makes_every_existing_batch_ready_and_tracks_completion():
    acc = make(linger_ms=1_000_000)
    append(acc, tp=TP0)
    append(acc, tp=TP1)
    target = acc.begin_flush()
    ready, _ = acc.drain(0, always, 10)
    assert len(ready) == 2
    assert not acc.flushed_through(target)
    acc.complete(ready[0])
    assert not acc.flushed_through(target)
    acc.complete(ready[1])
    assert acc.flushed_through(target) and acc.is_empty()


def test_batches_opened_after_a_flush_still_linger():
    acc = make(linger_ms=50)
    acc.begin_flush()
    append(acc, now_ms=0)
    ready, due = acc.drain(10, always, 10)
    assert ready == [] and due == 50


def test_append_raises_buffer_full_until_a_completed_batch_frees_space():
    record = record_bytes_upper_bound(None, b"v" * 10, ())
    acc = make(batch_bytes=RECORD_BATCH_OVERHEAD + record, buffer_bytes=RECORD_BATCH_OVERHEAD + 2 * record)
    append(acc)
    with pytest.raises(BufferFullError):
        append(acc)
    ready, _ = acc.drain(0, always, 10)
    acc.complete(ready[0])
    append(acc)
    assert acc.statistics().buffered_bytes == RECORD_BATCH_OVERHEAD + record


def test_everything_is_ready_while_an_append_waits_for_space():
    acc = make(linger_ms=1_000_000)
    append(acc)
    acc.add_space_waiter(+1)
    ready, _ = acc.drain(0, always, 10)
    assert len(ready) == 1


def test_record_above_the_request_limit_is_refused_at_once():
    acc = make(request_bytes_max=100)
    with pytest.raises(RecordTooLargeError, match="t-0"):
        append(acc, value=b"x" * 100)
    assert acc.is_empty()


def test_a_failed_append_leaves_no_empty_batch_behind():
    acc = make()
    with pytest.raises(Exception):
        append(acc, value=12345)  # not bytes: the codec refuses it
    assert acc.is_empty()
    assert acc.drain(10**9, always, 10)[0] == []


def test_succeed_resolves_each_future_with_its_offset_and_timestamp():
    acc = make(linger_ms=0)
    first, _ = append(acc, timestamp_ms=111)
    second, _ = append(acc)  # no timestamp: the injected wall clock
    [batch] = acc.drain(0, always, 10)[0]
    batch.succeed(base_offset=40, log_append_time_ms=-1)
    assert first.result() == RecordMetadata("t", 0, 40, 111)
    assert second.result() == RecordMetadata("t", 0, 41, WALL_CLOCK_MS)


def test_log_append_time_replaces_the_record_timestamps():
    acc = make(linger_ms=0)
    future, _ = append(acc, timestamp_ms=111)
    [batch] = acc.drain(0, always, 10)[0]
    batch.succeed(base_offset=0, log_append_time_ms=999)
    assert future.result().timestamp_ms == 999


def test_fail_sets_the_error_on_every_record_of_the_batch():
    acc = make(linger_ms=0)
    futures = [append(acc)[0] for _ in range(3)]
    assert not futures[1].cancel()  # a record cannot leave its batch
    [batch] = acc.drain(0, always, 10)[0]
    error = ClientClosedError("closed")
    batch.fail(error)
    assert all(f.exception() is error and f.done() and not f.cancelled() for f in futures)
    with pytest.raises(ClientClosedError):
        futures[0].result()


def test_record_futures_share_one_future_per_batch():
    acc = make(linger_ms=0)
    first, _ = append(acc)
    second, _ = append(acc)
    assert first._delivery is second._delivery
    assert not first.done()
    with pytest.raises(concurrent.futures.TimeoutError):
        first.result(timeout=0)
    called = []
    first.add_done_callback(called.append)
    [batch] = acc.drain(0, always, 10)[0]
    batch.succeed(base_offset=7, log_append_time_ms=-1)
    assert called == [first]
    assert second.result().offset == 8


def test_record_future_is_awaitable_from_another_thread_completion():
    acc = make(linger_ms=0)
    future, _ = append(acc, timestamp_ms=5)
    [batch] = acc.drain(0, always, 10)[0]

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, lambda: concurrent.futures.ThreadPoolExecutor(1).submit(batch.succeed, 3, -1))
        return await future

    assert asyncio.run(main()) == RecordMetadata("t", 0, 3, 5)


def test_built_batch_decodes_to_the_appended_records():
    acc = make(linger_ms=0, compression=Compression.GZIP)
    append(acc, key=b"k1", value=b"a", timestamp_ms=5, headers=(("h", b"x"),))
    append(acc, key=None, value=None, timestamp_ms=6)
    [batch] = acc.drain(0, always, 10)[0]
    decoded = RecordBatch(batch.build())
    assert decoded.is_valid() and decoded.compression == Compression.GZIP
    records = list(decoded.records())
    assert [(r.offset, r.key, r.value, r.timestamp_ms) for r in records] == [(0, b"k1", b"a", 5), (1, None, None, 6)]
    assert records[0].headers == (("h", b"x"),)


def test_abort_queued_fails_unsent_records_and_frees_their_space():
    acc = make(linger_ms=1_000_000)
    futures = [append(acc, tp=tp)[0] for tp in (TP0, TP1)]
    error = ClientClosedError("closed")
    assert acc.abort_queued(error) == 2
    assert all(f.exception() is error for f in futures)
    assert acc.statistics().buffered_bytes == 0 and acc.is_empty()


def test_upper_bound_counts_key_value_headers_and_framing():
    bound = record_bytes_upper_bound(b"key", b"value", (("h1", b"12"), ("h2", None)))
    assert bound == RECORD_OVERHEAD_BYTES_MAX + 3 + 5 + (10 + 2 + 2) + (10 + 2)


def test_upper_bound_is_never_below_the_encoded_size():
    acc = make(linger_ms=0, batch_bytes=100_000)
    values = [b"", b"x", b"y" * 300, b"z" * 70_000]
    for value in values:
        append(acc, key=b"k" * 200, value=value, headers=(("header", b"v" * 129),), timestamp_ms=2**40)
    [batch] = acc.drain(0, always, 10)[0]
    assert len(batch.build()) <= batch.size_bytes_bound


def spans_metadata(spans):
    return [(delivery, first, count) for delivery, first, count in spans]


def test_append_many_fills_batches_in_order_and_reports_spans():
    record = record_bytes_upper_bound(b"k", b"v" * 10, ())
    acc = make(batch_bytes=RECORD_BATCH_OVERHEAD + 3 * record, linger_ms=1_000)
    append(acc, key=b"k", timestamp_ms=1)  # an open batch with room for two more
    spans, wake = acc.append_many(TP0, [b"k"] * 5, [b"v" * 10] * 5, 2, now_ms=0)
    assert [(first, count) for _, first, count in spans] == [(1, 2), (0, 3)]
    assert wake  # a batch filled (and another opened)
    ready, _ = acc.drain(0, always, 10)
    assert [b.record_count for b in ready] == [3]
    ready[0].succeed(100, -1)
    assert [spans[0][0].metadata(i).offset for i in (1, 2)] == [101, 102]
    assert spans[0][0].metadata(1).timestamp_ms == 2 and spans[0][0].metadata(0).timestamp_ms == 1


def test_append_many_stops_at_a_full_buffer_and_says_how_far_it_got():
    record = record_bytes_upper_bound(None, b"v" * 10, ())
    acc = make(batch_bytes=RECORD_BATCH_OVERHEAD + 2 * record, buffer_bytes=2 * (RECORD_BATCH_OVERHEAD + 2 * record))
    with pytest.raises(BufferFullError) as full:
        acc.append_many(TP0, [None] * 9, [b"v" * 10] * 9, None, now_ms=0)
    appended, spans, _ = full.value.args
    assert appended == 4 and sum(count for _, _, count in spans) == 4
    assert acc.statistics().records_queued == 4


def test_append_many_refuses_a_record_above_the_request_limit():
    acc = make(request_bytes_max=100)
    with pytest.raises(RecordTooLargeError, match="t-0"):
        acc.append_many(TP0, [None], [b"x" * 100], None, now_ms=0)


def test_append_many_queues_nothing_when_one_record_is_too_large():
    acc = make(request_bytes_max=200)
    with pytest.raises(RecordTooLargeError, match="t-0"):
        acc.append_many(TP0, [None] * 3, [b"ok", b"fine", b"x" * 300], None, now_ms=0)
    assert acc.is_empty() and acc.statistics().records_queued == 0


def test_a_bad_timestamp_is_refused_at_append_not_when_the_batch_is_sent():
    acc = make()
    with pytest.raises(ValueError, match="timestamp_ms"):
        append(acc, timestamp_ms=-5)
    with pytest.raises(ValueError, match="timestamp_ms"):
        acc.append_many(TP0, [None], [b"v"], -5, now_ms=0)
    assert acc.is_empty()


record_values = st.one_of(st.none(), st.binary(max_size=300))
# Also keys and values beyond the builder's 8 KiB varint tables (a 256 KiB batch holds many).
sized_values = st.one_of(record_values, st.integers(8_000, 20_000).map(lambda size: b"v" * size))


@settings(deadline=None)  # encodes up to 60 records with zstd: slow only on a loaded machine
@given(
    st.lists(
        st.tuples(record_values, record_values, st.integers(0, 3), st.booleans()),
        min_size=1,
        max_size=60,
    ),
    st.sampled_from([Compression.NONE, Compression.ZSTD]),
)
def test_built_batch_equals_the_codec_appending_record_by_record(records, compression):
    """Whatever mix of single sends and same-millisecond runs, build() writes exactly the bytes a
    RecordBatchBuilder writes when the records are appended one by one."""
    acc = make(linger_ms=0, batch_bytes=10**7, buffer_bytes=10**8, compression=compression)
    expected = RecordBatchBuilder(compression=compression)
    for key, value, timestamp_ms, with_header in records:
        headers = (("h", b"x"),) if with_header else ()
        append(acc, key=key, value=value, timestamp_ms=timestamp_ms, headers=headers)
        expected.append(value, key=key, timestamp_ms=timestamp_ms, headers=headers)
    [batch] = acc.drain(0, always, 10)[0]
    assert batch.build() == expected.build()


@pytest.mark.parametrize("already", [0, 1, 8190], ids=["empty", "one", "at-the-table-bound"])
@settings(deadline=None)  # 8,190 records before the examples: slow only on a loaded machine
@given(pairs=st.lists(st.tuples(sized_values, sized_values), min_size=1, max_size=40), timestamp_ms=st.integers(0, 9000))
def test_extend_equals_append_one_by_one(already, pairs, timestamp_ms):
    """The bulk encoder writes the same bytes as append, also where offset deltas, timestamp
    deltas, or a key's or value's size leave the varint tables (then it goes record by record)."""
    keys = [key for key, _ in pairs]
    values = [value for _, value in pairs]
    by_one, in_bulk = RecordBatchBuilder(), RecordBatchBuilder()
    for builder in (by_one, in_bulk):
        builder.extend([None] * already, [b"x"] * already, 0)
    for key, value in pairs:
        by_one.append(value, key=key, timestamp_ms=timestamp_ms)
    in_bulk.extend(keys, values, timestamp_ms)
    assert in_bulk.build() == by_one.build()


def test_extend_refuses_keys_and_values_of_different_lengths():
    with pytest.raises(ValueError, match="one key per value"):
        RecordBatchBuilder().extend([None], [b"a", b"b"], 0)


def make_wall_clock(**options):
    """An accumulator on the real wall clock: the one append_plain serves."""
    from seglog._producer_config import wall_clock_ms

    defaults = dict(batch_bytes=1000, linger_ms=10, buffer_bytes=100_000, request_bytes_max=1_000_000,
                    compression=Compression.NONE)
    defaults.update(options)
    return RecordAccumulator(wall_clock_ms=wall_clock_ms, **defaults)


@settings(deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([TP0, TP1]), record_values, record_values, st.booleans()), min_size=1, max_size=80),
    st.integers(200, 3000),
    st.integers(3000, 20_000),
)
def test_append_plain_fills_batches_as_append_does(records, batch_bytes, buffer_bytes):
    """Records sent through append_plain (falling back to append where it declines, as send does)
    land in the same batches, in the same order, with the same buffer accounting and encoding as
    records sent through append alone; only the timestamps are the clock's."""
    plain = make_wall_clock(batch_bytes=batch_bytes, buffer_bytes=buffer_bytes)
    general = make_wall_clock(batch_bytes=batch_bytes, buffer_bytes=buffer_bytes)
    for tp, key, value, with_header in records:
        headers = (("h", b"x"),) if with_header else ()
        outcomes = []
        for acc, use_plain in ((plain, True), (general, False)):
            try:
                future = acc.append_plain(tp, key, value) if use_plain and not headers else None
                if future is None:
                    future = acc.append(tp, key, value, None, headers, 0)[0]
                outcomes.append(("ok", future._index))
            except BufferFullError:
                outcomes.append(("full", None))
        assert outcomes[0] == outcomes[1]
        assert plain.statistics() == general.statistics()
    drained = [acc.drain(1e9, always, 1000)[0] for acc in (plain, general)]
    while drained[0] or drained[1]:
        for ours, theirs in zip(*drained, strict=True):
            assert (ours.topic_partition, ours.keys, ours.values, ours.headers) == (
                theirs.topic_partition, theirs.keys, theirs.values, theirs.headers)
            expected = RecordBatchBuilder()
            for index, (key, value) in enumerate(zip(ours.keys, ours.values)):
                expected.append(value, key, ours.timestamps_ms[index], ours.headers[index] if ours.headers else ())
            assert ours.build() == expected.build()
        drained = [acc.drain(1e9, always, 1000)[0] for acc in (plain, general)]


def test_append_plain_declines_with_an_injected_clock_and_after_a_full_batch_wakes_the_sender():
    assert make().append_plain(TP0, None, b"v") is None  # the test clock: append handles it
    acc = make_wall_clock(batch_bytes=RECORD_BATCH_OVERHEAD + 2 * (RECORD_OVERHEAD_BYTES_MAX + 10))
    woken = []
    acc.on_batch_full = lambda: woken.append(True)
    assert acc.append_plain(TP0, None, b"v" * 10) is None  # no open batch yet
    acc.append(TP0, None, b"v" * 10, None, (), 0)
    assert acc.append_plain(TP0, None, b"v" * 10) is not None and woken == [True]
    assert acc.append_plain(TP0, None, b"v" * 10) is None  # the batch is closed


@settings(deadline=None)
@given(
    st.lists(st.tuples(record_values, record_values), min_size=1, max_size=120),
    st.integers(0, 4),
    st.integers(150, 3000),
    st.integers(3000, 30_000),
)
def test_append_many_fills_batches_as_appending_one_by_one_does(pairs, sent_before, batch_bytes, buffer_bytes):
    """The bulk append (bisecting running totals) stops, fills and closes batches exactly where
    one append per record would, buffer-full point included."""
    keys = [key for key, _ in pairs]
    values = [value for _, value in pairs]
    bulk = make(batch_bytes=batch_bytes, buffer_bytes=buffer_bytes, request_bytes_max=10**6)
    single = make(batch_bytes=batch_bytes, buffer_bytes=buffer_bytes, request_bytes_max=10**6)
    for acc in (bulk, single):
        for _ in range(sent_before):
            append(acc, value=b"x" * 50, timestamp_ms=7)
    try:
        spans, _ = bulk.append_many(TP0, keys, values, 7, now_ms=0)
        appended = len(values)
    except BufferFullError as full:
        appended, spans, _ = full.args
    except RecordTooLargeError:
        return  # refused before anything is queued (its own test above)
    for key, value in zip(keys[:appended], values[:appended]):
        append(single, key=key, value=value, timestamp_ms=7)
    if appended < len(values):
        with pytest.raises(BufferFullError):
            append(single, key=keys[appended], value=values[appended], timestamp_ms=7)
    assert bulk.statistics() == single.statistics()
    assert sum(count for _, _, count in spans) == appended
    drained = [acc.drain(1e9, always, 1000)[0] for acc in (bulk, single)]
    for ours, theirs in zip(*drained, strict=True):
        assert (ours.keys, ours.values, ours.timestamps_ms, ours.size_bytes_bound, ours.closed) == (
            theirs.keys, theirs.values, theirs.timestamps_ms, theirs.size_bytes_bound, theirs.closed)


@pytest.mark.parametrize("already", [0, 1, 50, 8150], ids=["empty", "one", "below-the-width-step", "near-the-table-bound"])
@settings(deadline=None)
@given(
    key_size=st.sampled_from([None, 0, 1, 16, 200]),
    value_size=st.sampled_from([None, 0, 5, 100, 8000]),
    count=st.integers(1, 120),
    odd_one=st.one_of(st.none(), st.integers(0, 119)),
    timestamp_ms=st.integers(0, 9000),
    data=st.data(),
)
def test_extend_of_uniform_records_equals_append_one_by_one(already, key_size, value_size, count, odd_one, timestamp_ms, data):
    """extend's uniform path (keys of one size, values of one size, interleaved by zip/chain)
    writes the same bytes as append; one record of another shape sends the run the other way."""
    def payload(size):
        return None if size is None else data.draw(st.binary(min_size=size, max_size=size))

    keys = [payload(key_size) for _ in range(count)]
    values = [payload(value_size) for _ in range(count)]
    if odd_one is not None and odd_one < count:
        values[odd_one] = b"odd"
    by_one, in_bulk = RecordBatchBuilder(), RecordBatchBuilder()
    for builder in (by_one, in_bulk):
        builder.extend([None] * already, [b"x"] * already, 0)
    for key, value in zip(keys, values):
        by_one.append(value, key=key, timestamp_ms=timestamp_ms)
    in_bulk.extend(keys, values, timestamp_ms)
    assert in_bulk.build() == by_one.build()
    assert in_bulk.estimated_size_in_bytes == by_one.estimated_size_in_bytes
