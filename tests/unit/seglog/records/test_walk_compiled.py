"""The compiled lookup walk (_walk_c.c) against the reference walker, differentially.

For valid records areas of up to a few thousand records (keys, values and headers of random
sizes, timestamps in any order, offset deltas with gaps) and for hostile bytes (overwritten
bytes near record boundaries and anywhere, cuts, extensions, inserted over-long varints, lying
counts and areas, random bytes), the compiled walk and the reference give the same verdict:
the same (offsetDelta, timestampDelta), the same None, or both a CorruptRecordError. The
public ``seek_record`` also gives the reference's exact message, and the Python fallback (the
walk of installs without a compiler) the same verdict.

The committed settings run a few hundred examples; ``SEGLOG_WALK_EXAMPLES=20000`` runs more.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.records import CodecError, CorruptRecordError
from seglog.records import walk_compiled
from seglog.records.varint import encode_varint, encode_varlong
from seglog.records.walk_compiled import seek_record, seek_record_reference
from tests.support.walk_support import CHANGING_TARGETS, WITHOUT_COMPILED_WALK, run_alone

EXAMPLES = int(os.environ.get("SEGLOG_WALK_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
compiled = walk_compiled._compiled_first_reaching


def test_the_install_built_the_compiled_walk():
    """scripts/bootstrap's editable install compiles _walk_c (gcc and Python.h are part of
    the development machine); without it every other test here would test the fallback only."""
    assert walk_compiled.COMPILED, "seglog.records._walk_c is not built: run scripts/bootstrap (needs a C compiler)"


def verdict(walk, *args):
    """What a walk concludes: its answer, or "refused" for a CorruptRecordError (any other
    exception fails the test)."""
    try:
        return walk(*args)
    except CorruptRecordError:
        return "refused"


def reference_and_message(*args):
    try:
        return seek_record_reference(*args), None
    except CodecError as exc:
        return "refused", (type(exc), str(exc))


# -- valid areas -------------------------------------------------------------------------------


def _field(size: int | None, fill: int) -> bytes:
    return encode_varint(-1) if size is None else encode_varint(size) + bytes([fill]) * size


def _record(timestamp_delta: int, offset_delta: int, key, value, headers) -> bytes:
    body = b"\x00" + encode_varlong(timestamp_delta) + encode_varint(offset_delta) + key + value
    body += encode_varint(len(headers)) + b"".join(headers)
    return encode_varint(len(body)) + body


def area_from_seed(seed: int, count: int, shape: dict) -> tuple[bytes, list[tuple[int, int]]]:
    """A valid records area of ``count`` records drawn from ``seed`` (big areas cost Hypothesis
    a few draws, not thousands), and each record's (timestampDelta, offsetDelta)."""
    rng = random.Random(seed)
    records, deltas, offset_delta = [], [], -1
    for _ in range(count):
        offset_delta += 1 if rng.random() > shape["gaps"] else rng.randrange(2, 300)
        timestamp_delta = rng.randrange(-shape["spread"], shape["spread"] + 1) if shape["disorder"] else len(deltas)
        sizes = (None, 0, 1, rng.randrange(60, 70), rng.randrange(0, shape["value_max"] + 1))
        key, value = _field(rng.choice(sizes), 0x6B), _field(rng.choice(sizes), 0x76)
        headers = []
        if rng.random() < shape["headers"]:
            for _ in range(rng.randrange(1, 4)):
                name = rng.choice([b"", b"h", "é".encode(), b"trace-id"])
                headers.append(encode_varint(len(name)) + name + _field(rng.choice(sizes[:4]), 0x68))
        records.append(_record(timestamp_delta, offset_delta, key, value, headers))
        deltas.append((timestamp_delta, offset_delta))
    return b"".join(records), deltas


shapes = st.fixed_dictionaries({
    "gaps": st.sampled_from([0.0, 0.0, 0.1]),
    "disorder": st.booleans(),
    "spread": st.sampled_from([50, 9000, 2**40, 2**62]),
    "value_max": st.sampled_from([0, 10, 200, 20_000]),
    "headers": st.sampled_from([0.0, 0.0, 0.05, 1.0]),
})
counts = st.one_of(st.integers(0, 40), st.integers(0, 40), st.integers(40, 3500))
valid_areas = st.builds(area_from_seed, st.integers(0, 2**32), counts, shapes)


@st.composite
def targets(draw, deltas):
    """A timestamp target and an offset floor: often a record's own, sometimes outside int64."""
    if deltas and draw(st.booleans()):
        timestamp_delta, offset_delta = draw(st.sampled_from(deltas))
        return timestamp_delta + draw(st.integers(-1, 1)), offset_delta + draw(st.integers(-1, 1))
    huge = st.sampled_from([-(2**64), -(2**63), 2**63 - 1, 2**63, 2**64])
    return draw(st.one_of(st.integers(-100, 4000), huge)), draw(st.one_of(st.integers(-2, 4000), huge))


# -- hostile areas -----------------------------------------------------------------------------


def _starts(records: bytes, deltas) -> list[int]:
    """Where each record of a valid area starts (and the area's end)."""
    from seglog.records.varint import decode_varint

    starts, position = [], 0
    while position < len(records):
        starts.append(position)
        length, body = decode_varint(records, position)
        position = body + length
    return starts + [position]


damage = st.fixed_dictionaries({
    # (which record, where from its start (>= 0) or end (< 0), the byte written)
    "edits": st.lists(st.tuples(st.integers(0, 10**6), st.integers(-4, 9),
                                st.one_of(st.integers(0, 255), st.sampled_from([0, 1, 2, 3, 0x7F, 0x80, 0x81, 0xFF]))),
                      max_size=3),
    "anywhere": st.lists(st.tuples(st.integers(0, 10**7), st.integers(0, 255)), max_size=2),
    # an over-long varint inserted where a field starts: the walk must not read it as a shorter one
    "insert": st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 9), st.sampled_from(
        [b"\x80", b"\x80\x00", b"\x80" * 4 + b"\x00", b"\x80" * 5 + b"\x00", b"\x80" * 9 + b"\x01",
         b"\xff" * 10 + b"\x7f", b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x0f"]))),
    "cut": st.one_of(st.just(0), st.just(0), st.integers(1, 60)),
    "extra": st.one_of(st.just(b""), st.just(b""), st.binary(min_size=1, max_size=8)),
    "count": st.one_of(st.just(0), st.just(0), st.integers(-3, 3)),
    "shrink": st.one_of(st.just(0), st.just(0), st.integers(1, 40)),  # area's end inside the bytes
    "prefix": st.binary(max_size=4),
})


def mutated(records: bytes, deltas, harm: dict) -> tuple[bytes, int, int, int]:
    starts = _starts(records, deltas)
    data = bytearray(records)
    if data:
        for record, where, byte in harm["edits"]:
            index = record % max(len(starts) - 1, 1)
            position = starts[index] + where if where >= 0 else starts[min(index + 1, len(starts) - 1)] + where
            data[position % len(data)] = byte
        for position, byte in harm["anywhere"]:
            data[position % len(data)] = byte
    if harm["insert"] is not None:
        record, where, varint = harm["insert"]
        position = starts[record % len(starts)] + where
        data[position:position] = varint
    if harm["cut"] and data:
        del data[len(data) - harm["cut"] % len(data) :]
    data = harm["prefix"] + bytes(data) + harm["extra"]
    end = max(len(harm["prefix"]), len(data) - harm["shrink"])
    return data, len(harm["prefix"]), end, max(len(deltas) + harm["count"], -1)


@FUZZ
@given(data=st.binary(max_size=300), position=st.integers(-1, 6), shrink=st.integers(-2, 6),
       count=st.integers(-2, 60), target_delta=st.integers(-5, 5), offset_delta_min=st.integers(-2, 5))
def test_the_compiled_walk_over_random_bytes_agrees_with_the_reference(data, position, shrink, count, target_delta,
                                                                       offset_delta_min):
    args = (data, position, len(data) - shrink, count, target_delta, offset_delta_min)
    assert verdict(compiled, *args) == reference_and_message(*args)[0]


# -- named cases -------------------------------------------------------------------------------


def _one(timestamp_field: bytes, *, offset_field: bytes = b"\x00", tail: bytes = b"\x01\x01\x00") -> bytes:
    body = b"\x00" + timestamp_field + offset_field + tail
    return encode_varint(len(body)) + body


def test_varints_end_within_five_bytes_and_varlongs_within_ten_keeping_the_low_bits():
    ten = _one(b"\xff" * 9 + b"\x7f")  # the 10th byte's high bits fall off: zigzag(2**64 - 1) = -2**63
    assert compiled(ten, 0, len(ten), 1, -(2**63), 0) == (0, -(2**63)) == seek_record_reference(ten, 0, len(ten), 1, -(2**63), 0)
    eleven = _one(b"\x80" * 10 + b"\x00")
    assert verdict(compiled, eleven, 0, len(eleven), 1, 0, 0) == "refused" == reference_and_message(eleven, 0, len(eleven), 1, 0, 0)[0]
    five = _one(b"\x00", offset_field=b"\xfe\xff\xff\xff\x7f")  # only the low 32 bits: zigzag(0xfffffffe) = 2**31 - 1
    assert compiled(five, 0, len(five), 1, 0, 0) == (2**31 - 1, 0) == seek_record_reference(five, 0, len(five), 1, 0, 0)
    six = _one(b"\x00", offset_field=b"\x80" * 5 + b"\x00")
    assert verdict(compiled, six, 0, len(six), 1, 0, 0) == "refused" == reference_and_message(six, 0, len(six), 1, 0, 0)[0]


def test_a_header_key_that_is_not_utf8_is_refused_as_the_decoder_refuses_it():
    bad = _one(b"\x00", tail=b"\x01\x01" + encode_varint(1) + encode_varint(2) + b"\xc3\x28" + encode_varint(-1))
    good = _one(b"\x00", tail=b"\x01\x01" + encode_varint(1) + encode_varint(2) + "é".encode() + encode_varint(-1))
    assert compiled(good, 0, len(good), 1, 0, 0) == (0, 0)
    assert verdict(compiled, bad, 0, len(bad), 1, 0, 0) == "refused" == reference_and_message(bad, 0, len(bad), 1, 0, 0)[0]


def test_a_refusal_carries_the_reference_message():
    area = _one(b"\x00") + _one(b"\x02", offset_field=b"\x02")
    lying = area[:-1]  # the second record's last byte is gone
    expected, message = reference_and_message(lying, 0, len(lying), 2, 1, 0)
    assert expected == "refused" and "record 1" in message[1]
    try:
        seek_record(lying, 0, len(lying), 2, 1, 0)
    except CorruptRecordError as exc:
        assert str(exc) == message[1]
    else:
        raise AssertionError("the lying area was accepted")


def test_the_walk_stops_at_the_match_and_checks_nothing_after_it_as_the_reference():
    area = _one(b"\x00") + b"\xff" * 12  # garbage after the first record
    assert compiled(area, 0, len(area), 5, 0, 0) == (0, 0) == seek_record_reference(area, 0, len(area), 5, 0, 0)
    assert verdict(compiled, area, 0, len(area), 5, 1, 0) == "refused"


def test_a_record_whose_fields_end_before_its_declared_length_is_refused():
    body = b"\x00" + b"\x00\x00\x01\x01\x00" + b"\x00"  # one byte too many after the header count
    area = encode_varint(len(body)) + body
    assert verdict(compiled, area, 0, len(area), 1, 0, 0) == "refused" == reference_and_message(area, 0, len(area), 1, 0, 0)[0]


def test_without_the_compiled_module_the_codec_walks_in_python_silently():
    """A client-only install without a C compiler: the import falls back, no warning, the same
    answers (a fresh interpreter in which _walk_c cannot be found, warnings as errors)."""
    program = WITHOUT_COMPILED_WALK + """
from seglog.records import walk_compiled
from seglog.records.varint import encode_varint
body = b"\\x00\\x04\\x00\\x01\\x01\\x00"
area = encode_varint(len(body)) + body
assert not walk_compiled.COMPILED
assert walk_compiled.seek_record(area, 0, len(area), 1, 2, 0) == (0, 2)
assert walk_compiled.seek_record(area, 0, len(area), 1, 3, 0) is None
print("fallback")
"""
    assert run_alone(program, warnings_as_errors=True) == (0, "fallback\n", "")


# -- several targets in one walk (seek_records) ------------------------------------------------

compiled_each = walk_compiled._compiled_first_reaching_each


def references_and_message(*args):
    try:
        return walk_compiled.seek_records_reference(*args), None
    except CodecError as exc:
        return "refused", (type(exc), str(exc))


@st.composite
def many_targets(draw, deltas):
    """Ascending timestamp targets (records' own, near them, outside int64) and an offset floor."""
    drawn = draw(st.lists(targets(deltas), max_size=12))
    offset_delta_min = drawn[0][1] if drawn and draw(st.booleans()) else draw(st.integers(-2, 40))
    return sorted(target for target, _ in drawn), offset_delta_min


@FUZZ
@given(data=st.binary(max_size=300), position=st.integers(-1, 6), shrink=st.integers(-2, 6),
       count=st.integers(-2, 60), target_deltas=st.lists(st.integers(-5, 5), max_size=6),
       offset_delta_min=st.integers(-2, 5))
def test_one_walk_for_many_targets_over_random_bytes_agrees_with_the_reference(
        data, position, shrink, count, target_deltas, offset_delta_min):
    args = (data, position, len(data) - shrink, count, sorted(target_deltas), offset_delta_min)
    assert verdict(compiled_each, *args) == references_and_message(*args)[0]
    assert verdict(walk_compiled._seek_records_python, *args) == references_and_message(*args)[0]


def test_one_walk_for_many_targets_refuses_targets_that_do_not_ascend_or_are_not_ints():
    area = _one(b"\x00") + _one(b"\x02", offset_field=b"\x02")
    assert compiled_each(area, 0, len(area), 2, [0, 1, 1, 2**70], 0) == [(0, 0), (1, 1), (1, 1), None]
    for bad, error in (([1, 0], ValueError), ([0, 1.5], TypeError), (5, TypeError)):
        try:
            compiled_each(area, 0, len(area), 2, bad, 0)
        except error:
            continue
        raise AssertionError(f"{bad!r} was accepted")


def test_one_walk_for_many_targets_stops_at_the_last_target_s_record_as_its_own_walk_does():
    area = _one(b"\x00") + _one(b"\x02", offset_field=b"\x02") + b"\xff" * 12  # garbage after two records
    assert compiled_each(area, 0, len(area), 5, [0, 1], 0) == [(0, 0), (1, 1)]
    assert verdict(compiled_each, area, 0, len(area), 5, [0, 2], 0) == "refused"
    assert compiled_each(area, 0, len(area), -1, [], 0) == [] == walk_compiled.seek_records_reference(
        area, 0, len(area), -1, [], 0)


# -- one target and many: each implementation of the walk against the reference -------------------


def _first_reaching(deltas, target_delta: int, offset_delta_min: int):
    """The reference walk's answer read off a valid area's deltas: the first record at or past
    both the target and the offset floor."""
    return next(((o, t) for t, o in deltas if t >= target_delta and o >= offset_delta_min), None)


@dataclasses.dataclass(frozen=True)
class Walk:
    """A lookup walk: its reference (and that one's refusal with its message), the compiled
    walk, the public entry, the Python fallback, the targets drawn for an area and the answer
    expected in a valid area."""

    reference: Callable
    reference_and_message: Callable
    compiled: Callable
    public: Callable
    python: Callable
    targets: Callable
    expected: Callable


WALKS = [
    Walk(seek_record_reference, reference_and_message, compiled, seek_record, walk_compiled._seek_record_python,
         targets, _first_reaching),
    Walk(walk_compiled.seek_records_reference, references_and_message, compiled_each, walk_compiled.seek_records,
         walk_compiled._seek_records_python, many_targets,
         lambda deltas, target_deltas, floor: [_first_reaching(deltas, target, floor) for target in target_deltas]),
]
WALK_IDS = ["one_target", "many_targets"]


@pytest.mark.parametrize("walk", WALKS, ids=WALK_IDS)
@FUZZ
@given(data=st.data(), area=valid_areas, as_view=st.booleans())
def test_the_compiled_walk_finds_what_the_reference_finds_in_valid_areas(walk, data, area, as_view):
    records, deltas = area
    target_deltas, offset_delta_min = data.draw(walk.targets(deltas))
    buffer = memoryview(records) if as_view else records
    args = (buffer, 0, len(records), len(deltas), target_deltas, offset_delta_min)
    expected = walk.expected(deltas, target_deltas, offset_delta_min)
    assert walk.reference(*args) == expected
    assert walk.compiled(*args) == expected
    assert walk.public(*args) == expected
    assert walk.python(*args) == expected


@pytest.mark.parametrize("walk", WALKS, ids=WALK_IDS)
@FUZZ
@given(data=st.data(), area=valid_areas, harm=damage)
def test_the_compiled_walk_refuses_what_the_reference_refuses(walk, data, area, harm):
    """For many targets: when any target's own walk refuses."""
    records, deltas = area
    buffer, position, end, count = mutated(records, deltas, harm)
    target_deltas, offset_delta_min = data.draw(walk.targets(deltas))
    args = (buffer, position, end, count, target_deltas, offset_delta_min)
    expected, message = walk.reference_and_message(*args)
    assert verdict(walk.compiled, *args) == expected
    assert verdict(walk.python, *args) == expected
    try:
        answer = walk.public(*args)
    except CodecError as exc:
        assert (type(exc), str(exc)) == message  # the reference's own message (and error class)
    else:
        assert message is None and answer == expected


# -- every record's times (record_times: the per-batch table's source) -------------------------

compiled_times = walk_compiled._compiled_record_times


def times_reference(data, position, end, count):
    try:
        pairs = list(walk_compiled.walk_records(data, position, end, count))
    except CodecError as exc:
        return "refused", (type(exc), str(exc))
    timestamps = [t for t, _ in pairs]
    return (timestamps, [o for _, o in pairs], [max(timestamps[: i + 1]) for i in range(len(timestamps))]), None


def times_verdict(walk, *args):
    try:
        columns = walk(*args)
    except CorruptRecordError:
        return "refused"
    from array import array

    return tuple(list(array("q", column) if isinstance(column, bytes) else column) for column in columns)


@FUZZ
@given(area=valid_areas, harm=st.one_of(st.none(), damage))
def test_every_record_s_times_are_the_reference_walk_s_or_both_refuse(area, harm):
    records, deltas = area
    args = (records, 0, len(records), len(deltas)) if harm is None else mutated(records, deltas, harm)
    expected, message = times_reference(*args)
    assert times_verdict(compiled_times, *args) == expected
    assert times_verdict(walk_compiled._record_times_python, *args) == expected
    try:
        columns = walk_compiled.record_times(*args)
    except CodecError as exc:
        assert (type(exc), str(exc)) == message  # the reference's own message (and error class)
    else:
        assert message is None and tuple(list(column) for column in columns) == expected


@FUZZ
@given(data=st.binary(max_size=300), position=st.integers(-1, 6), shrink=st.integers(-2, 6),
       count=st.one_of(st.integers(-2, 60), st.just(2**40)))
def test_every_record_s_times_over_random_bytes_and_lying_counts_agree_with_the_reference(data, position, shrink, count):
    args = (data, position, len(data) - shrink, count)
    assert times_verdict(compiled_times, *args) == times_reference(*args)[0]


# -- the steps of the running maximum (record_steps: the segment time-step table's source) -------

compiled_steps = walk_compiled._compiled_record_steps


def steps_reference(data, position, end, count, base_timestamp=0, base_offset=0, floor=-(2**63)):
    """Straight from the reference walk: each record above the floor and every earlier one, and the order."""
    try:
        pairs = list(walk_compiled.walk_records(data, position, end, count))
    except CodecError as exc:
        return "refused", (type(exc), str(exc))
    stamped = [(base_timestamp + t, base_offset + o) for t, o in pairs]
    steps = [(t, o) for number, (t, o) in enumerate(stamped) if t > floor and all(t > e for e, _ in stamped[:number])]
    if any(t >= 2**63 or not -(2**63) <= o < 2**63 for t, o in steps):
        return "overflow", None
    in_order = [o for _, o in pairs] == list(range(len(pairs)))
    return ([t for t, _ in steps], [o for _, o in steps], in_order), None


def steps_verdict(walk, *args):
    try:
        timestamps, offsets, in_order = walk(*args)
    except CorruptRecordError:
        return "refused"
    except OverflowError:
        return "overflow"
    from array import array

    as_list = [list(array("q", column) if isinstance(column, bytes) else column) for column in (timestamps, offsets)]
    return as_list[0], as_list[1], in_order


bases = st.one_of(st.just((0, 0, -(2**63))),
                  st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1),
                            st.integers(-(2**63), 2**63 - 1)),
                  st.tuples(st.integers(0, 2**41), st.integers(0, 2**40), st.integers(-5, 2**41)))


@FUZZ
@given(area=valid_areas, harm=st.one_of(st.none(), damage), base=bases)
def test_the_steps_are_the_reference_walk_s_rises_or_both_refuse(area, harm, base):
    records, deltas = area
    args = ((records, 0, len(records), len(deltas)) if harm is None else mutated(records, deltas, harm)) + base
    expected, message = steps_reference(*args)
    assert steps_verdict(compiled_steps, *args) == expected
    assert steps_verdict(walk_compiled._record_steps_python, *args) == expected
    try:
        found = walk_compiled.record_steps(*args)
    except CodecError as exc:
        assert (type(exc), str(exc)) == message  # the reference's own message (and error class)
    except OverflowError:
        assert expected == "overflow"
    else:
        assert message is None and (list(found[0]), list(found[1]), found[2]) == expected


@FUZZ
@given(data=st.binary(max_size=300), position=st.integers(-1, 6), shrink=st.integers(-2, 6),
       count=st.one_of(st.integers(-2, 60), st.just(2**40)), base=bases)
def test_the_steps_over_random_bytes_and_lying_counts_agree_with_the_reference(data, position, shrink, count, base):
    args = (data, position, len(data) - shrink, count) + base
    assert steps_verdict(compiled_steps, *args) == steps_reference(*args)[0]


def test_equal_and_falling_timestamps_make_no_step():
    area = b"".join(_record(delta, number, _field(None, 0), _field(2, 7), []) for number, delta in enumerate((5, 5, 3, 9, 9, 12, 1)))
    assert steps_verdict(compiled_steps, area, 0, len(area), 7, 0, 0, -(2**63)) == ([5, 9, 12], [0, 3, 5], True)
    assert steps_verdict(compiled_steps, area, 0, len(area), 7, 100, 50, 105) == ([109, 112], [53, 55], True)
    assert steps_verdict(compiled_steps, area, 0, len(area), 7, 2**63 - 6, 0, 0) == "overflow"


def test_steps_past_the_columns_first_room_grow_them_and_equal_the_reference():
    deltas = [number // 3 for number in range(3000)]  # a step every third record: 1,000 steps
    area = b"".join(_record(delta, number, _field(None, 0), _field(1, 7), []) for number, delta in enumerate(deltas))
    for count in (64, 65, 192, 193, 3000):  # the first room (64 steps), just past it, doublings
        end = len(b"".join(_record(delta, number, _field(None, 0), _field(1, 7), [])
                           for number, delta in enumerate(deltas[:count])))
        args = (area, 0, end, count, 5, 7, -(2**63))
        assert steps_verdict(compiled_steps, *args) == steps_reference(*args)[0]


def test_the_steps_walk_allocates_by_the_steps_it_finds_not_by_the_count_it_is_told():
    """A batch of 100,000 records at one timestamp makes one step: the columns stay small (they
    were 16 bytes a declared record before the walk, 1.6 MB here)."""
    import tracemalloc

    record = _record(0, 0, _field(None, 0), _field(0, 0), [])
    area = record * 100_000
    tracemalloc.start()
    try:
        timestamps, offsets, _ = compiled_steps(area, 0, len(area), 100_000, 1, 2, -(2**63))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert steps_verdict(compiled_steps, area, 0, len(area), 100_000, 1, 2, -(2**63))[:2] == ([1], [2])
    assert peak < 64 * 1024, peak


@FUZZ
@given(area=valid_areas, base=bases)
def test_where_the_compiled_steps_walk_refuses_the_reference_walks_the_same_arguments(area, base):
    """Should the two walks ever disagree, the reference's answer is the one for the arguments
    given (the base timestamp and offset and the floor), never the bare deltas."""
    records, deltas = area
    args = (records, 0, len(records), len(deltas)) + base

    def refusing(*arguments):
        raise CorruptRecordError("the compiled walk refuses")

    expected = steps_verdict(walk_compiled._record_steps_python, *args)
    walk_compiled._compiled_record_steps = refusing
    try:
        assert steps_verdict(walk_compiled._record_steps_compiled, *args) == expected
    finally:
        walk_compiled._compiled_record_steps = compiled_steps


_MUTATING_TARGETS = """
import gc
from seglog.records import walk_compiled
from seglog.records.varint import encode_varint, encode_varlong
def record(delta):
    body = b"\\x00" + encode_varlong(delta) + encode_varint(delta) + b"\\x01\\x01\\x00"
    return encode_varint(len(body)) + body
area = b"".join(record(delta) for delta in range(400))
""" + CHANGING_TARGETS + """
class Floor:
    \"\"\"An offset floor converted by its __index__, which changes the list too.\"\"\"
    def __index__(self):
        change()
        return 0
targets = [-(2**70)] + list(range(0, 390, 2)) + [Changer(390), Changer(391), 395, 2**70, Changer(2**71)]
as_called = list(targets)
HOOKS["on"] = False
expected = walk_compiled.seek_records_reference(area, 0, len(area), 400, as_called, 0)
HOOKS["on"] = True
for floor in (0, Floor()):
    call = (area, 0, len(area), 400, targets, floor)  # built first: building it may collect
    gc.set_threshold(1, 1, 1)
    arm()
    got = walk_compiled._compiled_first_reaching_each(*call)
    gc.set_threshold(700, 10, 10)
    HOOKS["on"] = False
    gc.collect()  # the last bomb, before the next call
    assert got == expected, (got[:10], expected[:10])
    assert HOOKS["fired"] > 0 and len(targets) == 700  # the list did change under the call
    HOOKS.update(on=True, fired=0)
    targets[:] = as_called
print("as called")
"""


def test_one_walk_for_many_targets_answers_the_list_as_it_was_at_the_call_when_it_changes_under_it():
    """The caller's own list is what the walk reads (PySequence_Fast does not copy a list). A
    collection run by an allocation inside the call (thresholds of one, a garbage cycle whose
    finalizer empties the list and refills it with non-ints, freeing its item array), targets
    whose comparisons do the same, or an offset floor whose __index__ does: the answers are the
    reference's to the list as it was at the call, never a read of the freed array (a fresh
    interpreter: a crash fails this test)."""
    assert run_alone(_MUTATING_TARGETS, timeout_s=120) == (0, "as called\n", "")


def test_an_argument_whose_index_resizes_the_area_meets_a_held_buffer_never_a_freed_one():
    """The walks convert their int arguments (``n``, ``L``, a target's ``__index__``) after taking the
    area's buffer, and Python code run by a conversion may try to resize a bytearray area under
    them: the buffer is held (exported), so the resize is refused with BufferError and the walks
    never read a freed area."""
    area = bytearray(_one(b"\x00") + _one(b"\x02", offset_field=b"\x02"))
    size = len(area)

    class Grows:
        def __index__(self):
            area.extend(bytes(4096))  # a reallocation, were the buffer not held
            return 1

    calls = {
        "first_reaching": lambda: compiled(area, 0, size, 2, Grows(), 0),
        "first_reaching_each": lambda: compiled_each(area, 0, size, 2, [0, 1], Grows()),
        "record_times": lambda: walk_compiled._compiled_record_times(area, 0, Grows(), 2),
        "record_steps": lambda: walk_compiled._compiled_record_steps(area, 0, size, 2, 0, 0, Grows()),
    }
    for name, call in calls.items():
        with pytest.raises(BufferError):
            call()
        assert len(area) == size, name
    assert compiled(area, 0, size, 2, 1, 0) == (1, 1)
