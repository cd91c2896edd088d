"""decode_columns decodes exactly what the record-by-record decoder does, errors included."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.records import CorruptRecordError, RecordBatch, RecordBatchBuilder
from seglog.records import columns as columns_module
from seglog.records.columns import decode_columns
from seglog.records.header import RECORDS_OFFSET
from seglog.records.record_codec import decode_records

BASE_TIMESTAMP = 1_700_000_000_000

# Few distinct sizes, so that batches hold runs of one shape (the case decode_columns cuts
# with strided slices) as well as shape changes in the middle of a run.
sizes = st.sampled_from([0, 1, 7, 16, 60, 100, 200])
payloads = st.one_of(st.none(), sizes.flatmap(lambda n: st.binary(min_size=n, max_size=n)))
headers = st.one_of(
    st.just(()),
    st.lists(st.tuples(st.text(max_size=3), st.one_of(st.none(), st.binary(max_size=3))), max_size=2).map(tuple),
)


@st.composite
def batches(draw):
    """A built batch: runs of records sharing a key and a value shape, varied timestamps,
    sometimes headers, sometimes offset gaps (as in a compacted batch)."""
    builder_records = []
    for _ in range(draw(st.integers(1, 6))):
        key, value = draw(payloads), draw(payloads)
        run = draw(st.integers(1, 150))
        step_ms = draw(st.sampled_from([0, 0, 1, 3, 700]))
        with_headers = draw(st.sampled_from([False, False, False, True]))
        for index in range(run):
            builder_records.append((key, value, index * step_ms, draw(headers) if with_headers else ()))
    gaps = draw(st.sampled_from([False, False, True]))
    builder = RecordBatchBuilder(base_offset=draw(st.integers(0, 1 << 40)))
    timestamp_ms = BASE_TIMESTAMP + draw(st.integers(0, 10_000))
    delta = 0
    for key, value, step_ms, record_headers in builder_records:
        if gaps:
            delta += draw(st.integers(1, 3))
            builder.append_at(delta, value, key, timestamp_ms + step_ms, record_headers)
        else:
            builder.append(value, key, timestamp_ms + step_ms, record_headers)
    return builder.build()


def _area(batch: bytes) -> tuple:
    view = RecordBatch(batch)
    return batch, RECORDS_OFFSET, len(batch), view.records_count, view.base_offset, view.base_timestamp


def _as_rows(columns) -> list[tuple]:
    return list(zip(columns.offsets, columns.timestamps_ms, columns.keys, columns.values, columns.headers, strict=True))


@settings(max_examples=300, deadline=None)
@given(batches(), st.one_of(st.none(), st.integers(0, 1 << 41)))
def test_columns_equal_the_records_of_the_reference_decoder(batch, log_append_time_ms):
    area = _area(batch)
    expected = [tuple(record) for record in decode_records(*area, log_append_time_ms)]
    assert _as_rows(decode_columns(*area, log_append_time_ms)) == expected


def _decode_either(decoder, area):
    try:
        return "ok", [tuple(row) for row in decoder(*area)]
    except CorruptRecordError as error:
        return "error", str(error)


def _columns_rows(*area):
    return _as_rows(decode_columns(*area))


@settings(max_examples=300, deadline=None)
@given(batches(), st.data())
def test_damaged_bytes_decode_or_fail_exactly_as_the_reference_does(batch, data):
    """Any byte of the records area changed (and the declared count moved): the same records
    or the same error as the reference decoder."""
    damaged = bytearray(batch)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(RECORDS_OFFSET, len(batch) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    damaged = bytes(damaged)
    area = list(_area(damaged))
    area[3] += data.draw(st.sampled_from([0, 0, 0, -1, 1]))
    area[2] -= data.draw(st.sampled_from([0, 0, 0, 1]))
    assert _decode_either(_columns_rows, area) == _decode_either(decode_records, area)


def test_a_long_uniform_batch_crosses_the_offset_delta_widths(monkeypatch):
    builder = RecordBatchBuilder(base_offset=5)
    for index in range(9000):  # deltas of one, two and three varint bytes
        builder.append(b"v" * 100, b"k" * 16, BASE_TIMESTAMP + index // 1000)
    area = _area(builder.build())
    one_by_one = []
    reference_decode_record = columns_module._decode_record
    monkeypatch.setattr(
        columns_module, "_decode_record", lambda *args: one_by_one.append(1) or reference_decode_record(*args)
    )
    assert _as_rows(decode_columns(*area)) == [tuple(r) for r in decode_records(*area)]
    # Cut in runs: the first record and the first of two-byte deltas start runs; three-byte
    # deltas (8192 and up) start none, and after _MISSES_MAX of them the rest goes to the
    # per-record decoder's own loop.
    assert len(one_by_one) == 2 + columns_module._MISSES_MAX


def test_records_of_varied_shapes_give_up_runs_and_decode_alike(monkeypatch):
    builder = RecordBatchBuilder()
    for index in range(500):
        builder.append(b"v" * (index % 13), b"k" * (index % 5), BASE_TIMESTAMP)
    area = _area(builder.build())
    templates = []
    reference_decode_record = columns_module._decode_record
    monkeypatch.setattr(
        columns_module, "_decode_record", lambda *args: templates.append(1) or reference_decode_record(*args)
    )
    assert _as_rows(decode_columns(*area)) == [tuple(r) for r in decode_records(*area)]
    assert len(templates) == columns_module._MISSES_MAX


@pytest.mark.parametrize("count", [0, 1, 3])
def test_short_batches_decode_record_by_record(count):
    builder = RecordBatchBuilder()
    for index in range(count):
        builder.append(b"v", None, BASE_TIMESTAMP + index)
    batch = builder.build() if count else None
    if batch is None:
        assert len(decode_columns(b"", 0, 0, 0, 0, 0)) == 0
        return
    area = _area(batch)
    assert _as_rows(decode_columns(*area)) == [tuple(r) for r in decode_records(*area)]
