"""Decoding fetched bytes and the consumer's per-partition state (no I/O)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog._fetch_state import PartitionState, StartPosition, decode_fetched, fetched_batches, parse_start
from seglog.errors import CorruptRecordError
from seglog.records import BASE_OFFSET_OFFSET, RecordBatch, RecordBatchBuilder, iter_batches
from seglog.structs import ConsumerRecord

BASE_OFFSET_FIELD = BASE_OFFSET_OFFSET


def batch(base_offset: int, values: list[bytes], *, is_control: bool = False, timestamp_ms: int = 1000) -> bytes:
    builder = RecordBatchBuilder(is_control=is_control)
    for i, value in enumerate(values):
        builder.append(value, key=b"k" if not is_control else b"\x00\x00\x00\x00", timestamp_ms=timestamp_ms + i)
    data = bytearray(builder.build())
    data[BASE_OFFSET_FIELD : BASE_OFFSET_FIELD + 8] = base_offset.to_bytes(8, "big", signed=True)
    return bytes(data)


def test_records_below_the_requested_offset_inside_the_first_batch_are_skipped():
    fetched = decode_fetched("t", 0, batch(10, [b"a", b"b", b"c"]) + batch(13, [b"d"]), 12, check_crcs=True)
    assert [(r.offset, r.value) for r in fetched.records] == [(12, b"c"), (13, b"d")]
    assert fetched.next_offset == 14 and fetched.batch_count == 2


def test_decoded_records_carry_topic_partition_timestamp_key_and_headers():
    builder = RecordBatchBuilder()
    builder.append(b"v", key=b"k", timestamp_ms=77, headers=[("h", b"1"), ("h", None)])
    [record] = decode_fetched("orders", 3, builder.build(), 0, check_crcs=True).records
    assert record == ConsumerRecord("orders", 3, 0, 77, b"k", b"v", (("h", b"1"), ("h", None)))


def test_whole_batches_below_the_requested_offset_are_skipped_without_a_crc_check():
    corrupt_old = bytearray(batch(0, [b"old"]))
    corrupt_old[-1] ^= 0xFF
    fetched = decode_fetched("t", 0, bytes(corrupt_old) + batch(1, [b"new"]), 1, check_crcs=True)
    assert [r.value for r in fetched.records] == [b"new"]


def test_control_batches_are_skipped_but_advance_the_next_offset():
    data = batch(0, [b"a"]) + batch(1, [b"\x00\x00\x00\x00"], is_control=True)
    fetched = decode_fetched("t", 0, data, 0, check_crcs=True)
    assert [r.value for r in fetched.records] == [b"a"] and fetched.next_offset == 2


def test_a_crc_mismatch_raises_corrupt_record_error_when_crcs_are_checked():
    data = bytearray(batch(0, [b"hello"]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode_fetched("t", 0, bytes(data), 0, check_crcs=True)


def test_a_partial_trailing_batch_is_left_for_the_next_fetch():
    whole, partial = batch(0, [b"a"]), batch(1, [b"b"])
    fetched = decode_fetched("t", 0, whole + partial[:-3], 0, check_crcs=True)
    assert [r.value for r in fetched.records] == [b"a"] and fetched.next_offset == 1


def test_bytes_without_one_whole_batch_are_corrupt():
    with pytest.raises(CorruptRecordError, match="without one whole record batch"):
        decode_fetched("t", 0, batch(0, [b"a"])[:-1], 0, check_crcs=True)


def test_empty_bytes_decode_to_nothing():
    fetched = decode_fetched("t", 0, b"", 5, check_crcs=True)
    assert fetched.records == [] and fetched.next_offset is None


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        ("earliest", StartPosition("earliest")),
        ("latest", StartPosition("latest")),
        (42, StartPosition("offset", 42)),
        (datetime(2026, 1, 1, tzinfo=timezone.utc), StartPosition("timestamp", 1767225600000)),
        (datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))), StartPosition("timestamp", 1767225600000)),
    ],
)
def test_parse_start_accepts_names_offsets_and_aware_datetimes(start, expected):
    assert parse_start(start) == expected


@pytest.mark.parametrize("start", ["beginning", -1, True, datetime(2026, 1, 1)])
def test_parse_start_refuses_anything_else(start):
    with pytest.raises((ValueError, TypeError)):
        parse_start(start)


def _batch_at(base_offset: int, *deltas: int) -> RecordBatch:
    """A batch holding records at base_offset + each delta (gaps as after compaction)."""
    builder = RecordBatchBuilder(base_offset=base_offset)
    for delta in deltas:
        builder.append_at(delta, b"", None, 0)
    return RecordBatch(builder.build())


def test_position_is_the_next_buffered_record_else_the_fetch_offset():
    state = PartitionState(0, StartPosition("offset", 5))
    assert state.position == 5 and state.start is None  # an offset start needs no look-up
    state.buffer.add(_batch_at(5, 0, 2), 5)
    state.fetch_offset = 8
    assert state.take(1)[0].offset == 5 and state.position == 7
    state.take(10)
    assert state.position == 8 and state.drained.is_set()


def test_seek_drops_the_buffer_and_bumps_the_epoch():
    state = PartitionState(0, StartPosition("earliest"))
    assert state.position is None and state.start == StartPosition("earliest")
    state.buffer.add(_batch_at(1, 0), 1)
    epoch = state.epoch
    state.seek(StartPosition("offset", 100))
    assert state.epoch == epoch + 1 and not state.buffer and state.position == 100 and state.start is None
    state.seek(StartPosition("latest"))
    assert state.position is None and state.start == StartPosition("latest")


@st.composite
def fetched(draw):
    """Fetched bytes: consecutive batches (some control, some with headers, gaps inside some)."""
    parts, offset = [], draw(st.integers(0, 1000))
    first = offset
    for _ in range(draw(st.integers(1, 5))):
        builder = RecordBatchBuilder(base_offset=offset, is_control=draw(st.booleans()) and draw(st.booleans()))
        delta = -1
        for _ in range(draw(st.integers(1, 40))):
            delta += draw(st.sampled_from([1, 1, 1, 2]))
            value = draw(st.one_of(st.none(), st.binary(max_size=3), st.just(b"v" * 20)))
            headers = draw(st.sampled_from([(), (), (("h", b"1"),)]))
            builder.append_at(delta, value, draw(st.sampled_from([None, b"key"])), 5000 + delta, headers)
        parts.append(builder.build())
        offset += delta + 1
    return b"".join(parts), draw(st.integers(first, offset))


@settings(max_examples=200, deadline=None)
@given(fetched(), st.lists(st.tuples(st.sampled_from(["records", "views", "raw"]), st.integers(1, 50)), min_size=1))
def test_the_buffer_returns_each_record_at_or_after_the_start_once_in_order(data_and_start, takes):
    """Whatever mix of take / take_views / take_raw and sizes: every non-control record at or
    after the start offset, once, in order (raw batches counted from their position), and the
    position is always the next record's offset."""
    data, start = data_and_start
    expected = [
        ConsumerRecord("t", 2, r.offset, r.timestamp_ms, r.key, r.value, tuple(r.headers))
        for b in iter_batches(data) if not b.is_control for r in b.records() if r.offset >= start
    ]
    state = PartitionState(2, StartPosition("offset", start), "t")
    batches, next_offset, _ = fetched_batches(data, start, check_crcs=True)
    for batch in batches:
        state.buffer.add(batch, start)
    state.fetch_offset = next_offset
    got: list[ConsumerRecord] = []
    # Cycle through the takes until the buffer is empty; each take returns at least one record,
    # so this ends within len(expected) takes.
    for kind, size in itertools.islice(itertools.cycle(takes), len(expected) + 1):
        if not state.buffer:
            break
        position = state.position
        assert position == expected[len(got)].offset
        before = len(state.buffer)
        if kind == "records":
            taken = state.take(size)
        elif kind == "views":
            taken = [record for view in state.take_views(size) for record in view]
        else:
            taken = [
                ConsumerRecord("t", 2, r.offset, r.timestamp_ms, r.key, r.value, tuple(r.headers))
                for raw in state.take_raw(size) for r in RecordBatch(raw.records).records() if r.offset >= raw.position
            ]
        assert taken and len(taken) == before - len(state.buffer)
        got += taken
    assert got == expected
    assert state.position == next_offset
    assert state.drained.is_set() or not expected  # set by the take that emptied the buffer
