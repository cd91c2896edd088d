"""segment_check.whole_valid_batches: the walk that decides whether a trusted segment's tail is
whole. Checked against batches built by the codec, cut and damaged anywhere (Hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.records import RecordBatchBuilder
from seglog_server.storage.segment.segment_check import whole_valid_batches


def _batches(sizes: list[int], base: int = 100) -> tuple[bytes, list[int]]:
    """Consecutive batches of ``sizes`` records from offset ``base``; returns (bytes, ends)."""
    data, ends, offset = b"", [], base
    for count in sizes:
        builder = RecordBatchBuilder(base_offset=offset)
        for i in range(count):
            builder.append(b"v%d" % (offset + i), key=None, timestamp_ms=1_700_000_000_000 + offset + i)
        data += builder.build()
        ends.append(len(data))
        offset += count
    return data, ends


batch_sizes = st.lists(st.integers(1, 5), min_size=1, max_size=8)


@settings(max_examples=100, deadline=None)
@given(batch_sizes, st.data())
def test_a_cut_anywhere_covers_exactly_the_whole_batches_before_it(sizes, data):
    encoded, ends = _batches(sizes)
    cut = data.draw(st.integers(0, len(encoded)))
    covered, next_offset, _, rotten = whole_valid_batches(memoryview(encoded[:cut]), 100, 100)
    whole = [end for end in ends if end <= cut]
    assert covered == (whole[-1] if whole else 0)
    assert next_offset == 100 + sum(sizes[: len(whole)])
    assert rotten == []


@settings(max_examples=100, deadline=None)
@given(batch_sizes, st.data())
def test_garbage_never_extends_the_walk_past_the_batches(sizes, data):
    encoded, ends = _batches(sizes)
    garbage = data.draw(st.binary(min_size=1, max_size=200))
    covered, _, _, _ = whole_valid_batches(memoryview(encoded + garbage), 100, 100)
    assert covered == ends[-1]


def test_a_rotten_batch_followed_by_good_ones_is_stepped_over_and_named():
    encoded, ends = _batches([2, 3, 2])
    damaged = bytearray(encoded)
    damaged[ends[0] + 70] ^= 0x01  # a record byte of the second batch (CRC-covered)
    covered, next_offset, first_last, rotten = whole_valid_batches(memoryview(bytes(damaged)), 100, 100)
    assert (covered, next_offset, first_last, rotten) == (ends[-1], 107, 101, [ends[0]])


def test_a_rotten_last_batch_ends_the_walk_as_a_torn_write():
    encoded, ends = _batches([2, 3])
    damaged = bytearray(encoded)
    damaged[-1] ^= 0x80
    covered, next_offset, _, rotten = whole_valid_batches(memoryview(bytes(damaged)), 100, 100)
    assert (covered, next_offset, rotten) == (ends[0], 102, [])


def test_offsets_below_the_expected_next_offset_end_the_walk():
    encoded, _ = _batches([2])
    assert whole_valid_batches(memoryview(encoded), 100, 101)[0] == 0
