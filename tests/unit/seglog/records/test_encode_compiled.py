"""A run of records encoded in C (``_encode_c.encode_run``, what ``RecordBatchBuilder.extend``
uses where the install built it) equals the Python encoding, byte for byte, for any keys, values,
offsets and timestamp deltas; what it leaves to Python (keys or values neither bytes nor None,
tuples, deltas out of range) it answers None for, and the builder's result is the same either
way."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog.records import Compression, RecordBatchBuilder, builder as builder_module

try:
    from seglog.records import _encode_c as encode_c
except ImportError:  # reported by the test below, not skipped: the install builds it
    encode_c = None

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

_field = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=8_000, max_size=9_000),
                   st.binary(max_size=20).map(bytearray), st.binary(max_size=20).map(memoryview))
_timestamp = st.one_of(st.integers(0, 2_000), st.integers(-1, INT64_MAX), st.sampled_from([-1, 0, INT64_MAX]))


def test_the_c_encoder_is_built():
    """scripts/bootstrap's editable install compiles _encode_c as it does _walk_c; without it
    the builder encodes in Python (a client-only install without a compiler), at 3-5x the CPU."""
    assert encode_c is not None, "seglog.records._encode_c is not built: run scripts/bootstrap (needs a C compiler)"


def _built(runs, base_timestamp, compression, compiled: bool, monkeypatch) -> bytes | type[BaseException]:
    monkeypatch.setattr(builder_module, "_encode_run", encode_c.encode_run if compiled else None)
    builder = RecordBatchBuilder(compression=compression)
    try:
        builder.append(b"first", None, base_timestamp)
        for keys, values, timestamp_ms in runs:
            builder.extend(keys, values, timestamp_ms)
        return builder.build()
    except Exception as error:  # noqa: BLE001 - compared: both ways must refuse alike
        return type(error)


@st.composite
def _runs(draw):
    runs = []
    for _ in range(draw(st.integers(1, 3))):
        count = draw(st.integers(0, 30))
        keys = draw(st.lists(_field, min_size=count, max_size=count))
        values = draw(st.lists(_field, min_size=count, max_size=count))
        if draw(st.booleans()):  # send_many's shape: every key and value of one length
            keys = [bytes(16)] * count
            values = [bytes(draw(st.integers(0, 200)))] * count
        runs.append((keys, values, draw(_timestamp)))
    return runs


@given(_runs(), _timestamp, st.sampled_from([Compression.NONE, Compression.GZIP]))
def test_a_run_encoded_in_c_builds_the_batch_python_builds(runs, base_timestamp, compression):
    with pytest.MonkeyPatch.context() as monkeypatch:
        compiled = _built(runs, base_timestamp, compression, True, monkeypatch)
        reference = _built(runs, base_timestamp, compression, False, monkeypatch)
    assert compiled == reference


@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=300)), st.one_of(st.none(), st.binary(max_size=300))),
                max_size=40),
       st.integers(0, INT32_MAX), st.integers(-(2**63), INT64_MAX))
def test_encode_run_matches_the_python_records_where_it_encodes(pairs, first_delta, timestamp_delta):
    keys = [key for key, _ in pairs]
    values = [value for _, value in pairs]
    encoded = encode_c.encode_run(keys, values, first_delta, timestamp_delta, len(values))
    if first_delta + len(pairs) - 1 > INT32_MAX - 1 or not pairs:
        assert encoded is None
        return
    from seglog.records.record_codec import encode_record

    assert encoded == b"".join(
        encode_record(first_delta + index, timestamp_delta, key, value, ())
        for index, (key, value) in enumerate(pairs)
    )


@pytest.mark.parametrize("keys, values, first_delta, timestamp_delta", [
    ([bytearray(b"k")], [b"v"], 1, 0),  # not bytes: the Python path copies it
    ([b"k"], [memoryview(b"v")], 1, 0),
    ([b"k"], ["v"], 1, 0),  # refused there with the codec's message
    ((b"k",), [b"v"], 1, 0),  # a tuple
    ([b"k", b"k"], [b"v"], 1, 0),  # unequal lengths
    ([b"k"], [b"v"], INT32_MAX, 0),  # past the last offset delta a batch takes
    ([b"k"], [b"v"], -1, 0),
    ([b"k"], [b"v"], 1, 2**63),  # not an int64
])
def test_what_encode_run_leaves_to_python_it_answers_none_for(keys, values, first_delta, timestamp_delta):
    assert encode_c.encode_run(keys, values, first_delta, timestamp_delta, len(values)) is None


@pytest.mark.parametrize("claimed, kept", [(6, 1), (1, 6), (0, 0), (3, 3 - 1)])
def test_lists_not_as_long_as_the_records_claimed_are_left_to_python(claimed, kept):
    """The builder counts a run's records, then calls: lists changed in between (another thread,
    a finalizer) would give bytes of one length under a record count of another."""
    assert encode_c.encode_run([b"k"] * kept, [b"v"] * kept, 1, 0, claimed) is None


@pytest.mark.parametrize("args", [
    ([b"k"], [b"v"], 1, "0", 1),  # a caller's mistake is an error, not "left to Python"
    ([b"k"], [b"v"], 1, 0),
    (),
    ([b"k"], [b"v"], 1, 0, 1, 2),
])
def test_arguments_of_the_wrong_kind_raise(args):
    with pytest.raises(TypeError):
        encode_c.encode_run(*args)


def test_lists_changed_by_a_collection_during_the_copies_are_left_to_python():
    """A smoke test: a finalizer run by collections during the calls empties the caller's values
    list, and every answer is the run as it was or None. The finalizer mostly runs before the
    call or during the copies, where the length checks answer None on their own, so this does
    not prove the copies guard anything; the count check has its own test above."""
    values = [b"v" * 10 for _ in range(50)]
    whole = encode_c.encode_run([b"k"] * 50, list(values), 1, 0, 50)

    class Emptier:
        def __del__(self):
            values.clear()

    keys = [b"k"] * 50
    threshold = gc.get_threshold()
    try:
        gc.set_threshold(1)
        for _ in range(200):
            cycle = [Emptier()]
            cycle.append(cycle)
            del cycle
            encoded = encode_c.encode_run(keys, values, 1, 0, 50)
            assert encoded is None or encoded == whole  # the lists as they were, or left to Python
            if not values:
                break
    finally:
        gc.set_threshold(*threshold)
    assert not values, "the finalizer never ran"
