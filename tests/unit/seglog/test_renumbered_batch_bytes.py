"""A batch numbered afresh on a new producer id keeps its encoded records (``with_producer_fields``:
its header's producer id, epoch and base sequence and its CRC rewritten, nothing else): the bytes
are those a build with the new fields gives, whatever its records, headers, timestamps and
compression, and the batch reads back whole (its CRC checks) with the new fields."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seglog._sender import with_producer_fields
from seglog.records import Compression, RecordBatch, RecordBatchBuilder
from tests.support.codec_support import COMPRESSIONS

_fields = st.tuples(st.integers(-1, 2**63 - 1), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1))
_record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=200)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.integers(min_value=1_700_000_000_000, max_value=1_700_000_000_500),
    st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=20))), max_size=3).map(tuple),
)


def _build(records, compression: Compression, fields: tuple[int, int, int]) -> bytes:
    producer_id, epoch, sequence = fields
    builder = RecordBatchBuilder(
        compression=compression, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
    )
    for key, value, timestamp_ms, headers in records:
        builder.append(value, key=key, timestamp_ms=timestamp_ms, headers=headers)
    return builder.build()


@given(st.lists(_record, min_size=1, max_size=30), st.sampled_from(COMPRESSIONS), _fields, _fields)
def test_a_renumbered_batch_is_the_batch_built_with_its_new_fields(records, compression, old, new):
    renumbered = with_producer_fields(_build(records, compression, old), new)
    assert renumbered == _build(records, compression, new)
    batch = RecordBatch(renumbered)
    batch.ensure_valid()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == new
