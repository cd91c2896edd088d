"""A time-step table's answers in one call (``step_answers``, _walk_c.c) against the reference.

``step_answers(timestamps, offsets, targets, offset_min, whole, answer_type)`` answers each
target by the first step whose timestamp reaches it (time_steps.py: the table a segment's
lookups by time bisect). The compiled function and ``step_answers_reference`` (bisect_left a
target, the fallback of installs without a compiler) must give the same answers, the same
targets left to the caller, and the same refusal (TypeError or ValueError, never a crash) for
hostile arguments: no buffer, empty or unequal columns, items of another size or kind,
non-contiguous or many-dimensional buffers, targets and offsets past int64, non-int targets.
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.records import walk_compiled
from seglog.records.walk_compiled import step_answers_reference
from tests.support.walk_support import CHANGING_TARGETS, WITHOUT_COMPILED_WALK, run_alone

compiled = walk_compiled._compiled_step_answers
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
PROPERTY = settings(max_examples=300, deadline=None)


class Answer(NamedTuple):
    timestamp_ms: int
    offset: int


def test_the_install_built_the_compiled_step_answers():
    """scripts/bootstrap's editable install compiles _walk_c with it; the storage then answers
    a call's targets on a segment's table in C."""
    assert walk_compiled.STEP_ANSWERS_COMPILED and walk_compiled.step_answers is compiled


def first_step(timestamps, offsets, target, offset_min, whole):
    """The definition, by a linear walk: (answer, left to the caller)."""
    for timestamp, offset in zip(timestamps, offsets):
        if timestamp >= target:
            return (None, True) if offset < offset_min else (Answer(timestamp, offset), False)
    return None, not whole


int64s = st.integers(INT64_MIN, INT64_MAX)
wide_ints = st.one_of(int64s, st.integers(INT64_MIN - 3, INT64_MIN + 3), st.integers(INT64_MAX - 3, INT64_MAX + 3),
                      st.integers(-(1 << 80), 1 << 80))


@st.composite
def tables(draw):
    """Strictly ascending timestamps (near the int64 edges sometimes) and any offsets."""
    timestamps = sorted(draw(st.sets(st.one_of(int64s, st.integers(INT64_MIN, INT64_MIN + 5),
                                               st.integers(INT64_MAX - 5, INT64_MAX), st.integers(0, 200)),
                                     max_size=60)))
    offsets = draw(st.lists(int64s, min_size=len(timestamps), max_size=len(timestamps)))
    return timestamps, offsets


def targets_for(draw, timestamps):
    near = [value + delta for value in timestamps for delta in (-1, 0, 1)]
    pool = st.one_of(wide_ints, st.sampled_from(near)) if near else wide_ints
    targets = draw(st.lists(pool, max_size=40))
    return sorted(targets) if draw(st.booleans()) else targets


def columns(values, kind: str):
    """The same int64 column as an array, a memoryview of one, a slice of a larger view, or
    bytes cast to int64."""
    column = array("q", values)
    if kind == "array":
        return column
    if kind == "view":
        return memoryview(column)
    if kind == "slice":
        return memoryview(array("q", [7] + list(values) + [9]))[1:-1]
    return memoryview(column.tobytes()).cast("q")


@PROPERTY
@given(data=st.data(), table=tables(), whole=st.booleans(), kind=st.sampled_from(["array", "view", "slice", "bytes"]))
def test_the_compiled_answers_are_the_reference_s_and_the_definition_s(data, table, whole, kind):
    timestamps, offsets = table
    targets = targets_for(data.draw, timestamps)
    offset_min = data.draw(st.one_of(wide_ints, st.sampled_from(offsets) if offsets else wide_ints))
    got = compiled(columns(timestamps, kind), columns(offsets, kind), targets, offset_min, whole, Answer)
    expected = step_answers_reference(array("q", timestamps), array("q", offsets), targets, offset_min, whole, Answer)
    assert got == expected
    assert [type(answer) for answer in got[0]] == [type(answer) for answer in expected[0]]
    # Equal answers hash alike (on CPython >= 3.14 a tuple caches its hash, which tp_alloc leaves 0).
    assert [hash(answer) for answer in got[0]] == [hash(answer) for answer in expected[0]]
    defined = [first_step(timestamps, offsets, target, offset_min, whole) for target in targets]
    assert got[0] == [answer for answer, _ in defined]
    assert got[1] == [number for number, (_, left) in enumerate(defined) if left]


def test_targets_in_any_order_are_each_answered_by_their_own_step():
    timestamps, offsets = array("q", [10, 20, 30, 40]), array("q", [1, 2, 3, 4])
    answers, rest = compiled(timestamps, offsets, [35, 5, 40, 20, 41, 11, 11], 2, False, Answer)
    assert answers == [Answer(40, 4), None, Answer(40, 4), Answer(20, 2), None, Answer(20, 2), Answer(20, 2)]
    assert rest == [1, 4]  # 5's step (10, 1) lies below offset 2; no step reaches 41 in a partial table


def test_empty_columns_answer_nothing_and_leave_each_target_to_the_caller_unless_whole():
    empty = array("q")
    assert compiled(empty, empty, [1, 2], 0, False, Answer) == ([None, None], [0, 1])
    assert compiled(empty, empty, [1, 2], 0, True, Answer) == ([None, None], [])
    assert compiled(empty, empty, [], 0, True, Answer) == ([], [])


class Wider(tuple):
    """A tuple subclass with an instance dict: more than a tuple's layout."""


def hostile_calls():
    good = array("q", [1, 2, 3])
    many = memoryview(array("q", range(6))).cast("B").cast("q", shape=[2, 3])
    return {
        "unequal lengths": (good, array("q", [1, 2]), [1], 0, True, Answer),
        "timestamps of 4-byte items": (array("i", [1, 2, 3]), good, [1], 0, True, Answer),
        "offsets of doubles": (good, array("d", [1.0, 2.0, 3.0]), [1], 0, True, Answer),
        "bytes, not int64s": (bytes(24), good, [1], 0, True, Answer),
        "bytearray, not int64s": (bytearray(24), good, [1], 0, True, Answer),
        "unsigned 8-byte items": (array("Q", [1, 2, 3]), good, [1], 0, True, Answer),
        "a non-contiguous view": (memoryview(array("q", range(6)))[::2], good, [1], 0, True, Answer),
        "a two-dimensional view": (many, good, [1], 0, True, Answer),
        "a list, no buffer": ([1, 2, 3], good, [1], 0, True, Answer),
        "None, no buffer": (good, None, [1], 0, True, Answer),
        "a float target": (good, good, [1, 2.5], 0, True, Answer),
        "a string target": (good, good, ["1"], 0, True, Answer),
        "targets not iterable": (good, good, 5, 0, True, Answer),
        "offset_min a float": (good, good, [1], 0.5, True, Answer),
        "offset_min None": (good, good, [1], None, True, Answer),
        "answer_type not a type": (good, good, [1], 0, True, Answer(1, 2)),
        "answer_type not a tuple": (good, good, [1], 0, True, list),
        "answer_type a tuple with a dict": (good, good, [1], 0, True, Wider),
    }


@pytest.mark.parametrize("name", sorted(hostile_calls()))
def test_hostile_arguments_are_refused_with_the_reference_s_error_never_a_crash(name):
    arguments = hostile_calls()[name]
    with pytest.raises((TypeError, ValueError)) as compiled_refusal:
        compiled(*arguments)
    with pytest.raises((TypeError, ValueError)) as reference_refusal:
        step_answers_reference(*arguments)
    assert compiled_refusal.type is reference_refusal.type
    assert str(compiled_refusal.value).startswith("step_answers:") or name == "answer_type not a type"


@PROPERTY
@given(timestamps=st.binary(max_size=40), offsets=st.binary(max_size=40),
       item=st.sampled_from(["b", "h", "i", "q", "d", "Q", "B"]), targets=st.lists(wide_ints, max_size=5),
       whole=st.booleans())
def test_any_buffer_is_answered_or_refused_as_the_reference_answers_or_refuses_it(timestamps, offsets, item, targets,
                                                                                 whole):
    """Random bytes seen as columns of random item kinds: both answer alike, or both refuse with
    the same exception type."""
    size = array(item).itemsize
    first = memoryview(timestamps[: len(timestamps) // size * size]).cast(item)
    second = memoryview(offsets[: len(offsets) // 8 * 8]).cast("q")
    outcomes = []
    for answer in (compiled, step_answers_reference):
        try:
            outcomes.append(answer(first, second, targets, 0, whole, Answer))
        except (TypeError, ValueError) as exc:
            outcomes.append(type(exc))
    assert outcomes[0] == outcomes[1]  # (int64s that do not ascend: both bisect alike)


def test_without_the_compiled_module_the_reference_answers_silently():
    """An install without a C compiler: ``step_answers`` is the reference, no warning (a fresh
    interpreter in which _walk_c cannot be found, warnings as errors)."""
    program = WITHOUT_COMPILED_WALK + """
from array import array
from typing import NamedTuple
from seglog.records import walk_compiled
class Answer(NamedTuple):
    timestamp_ms: int
    offset: int
assert not walk_compiled.STEP_ANSWERS_COMPILED
assert walk_compiled.step_answers is walk_compiled.step_answers_reference
got = walk_compiled.step_answers(array("q", [5, 9]), array("q", [0, 3]), [9, 1, 10], 1, False, Answer)
assert got == ([Answer(9, 3), None, None], [1, 2]), got
print("fallback")
"""
    assert run_alone(program, warnings_as_errors=True) == (0, "fallback\n", "")


def test_a_target_past_int64_does_not_hide_the_step_at_int64_max_from_the_targets_after_it():
    """A target above every int64 has no step; the target INT64_MAX after it still has the step
    at INT64_MAX (the bound the first leaves for the next is INT64_MAX's own)."""
    timestamps, offsets = array("q", [5, INT64_MAX]), array("q", [1, 2])
    targets = [1 << 70, INT64_MAX, 1 << 64, 6, INT64_MAX]
    expected = ([None, Answer(INT64_MAX, 2), None, Answer(INT64_MAX, 2), Answer(INT64_MAX, 2)], [])
    assert compiled(timestamps, offsets, targets, 0, True, Answer) == expected
    assert step_answers_reference(timestamps, offsets, targets, 0, True, Answer) == expected


def test_more_targets_than_a_block_in_any_order_are_each_answered():
    """The compiled bisection works a block of targets at a time: calls of many blocks, targets
    ascending, descending and shuffled, each equal to the reference."""
    import random

    timestamps = array("q", range(0, 30_000, 3))
    offsets = array("q", range(len(timestamps)))
    rng = random.Random(5)
    for size in (7, 8, 9, 17, 100, 1000):
        targets = [rng.randrange(-10, 30_010) for _ in range(size)]
        for order in (sorted(targets), sorted(targets, reverse=True), targets):
            assert compiled(timestamps, offsets, order, 40, False, Answer) == \
                step_answers_reference(timestamps, offsets, order, 40, False, Answer)


_MUTATING_TARGETS = """
import gc
from array import array
from typing import NamedTuple
from seglog.records import walk_compiled
class Answer(NamedTuple):
    timestamp_ms: int
    offset: int
compiled = walk_compiled._compiled_step_answers
timestamps, offsets = array("q", range(0, 3000, 3)), array("q", range(1000))
targets = [10**6 + n for n in range(8)] + [(n * 7919) % 3100 - 50 for n in range(600)]
""" + CHANGING_TARGETS + """
targets[20:20] = [Changer(30), Changer(10**30), Changer(-5)]
as_called = list(targets)
HOOKS["on"] = False
expected = walk_compiled.step_answers_reference(timestamps, offsets, as_called, 4, False, Answer)
HOOKS["on"] = True
call = (timestamps, offsets, targets, 4, False, Answer)  # built first: building it may collect
gc.set_threshold(1, 1, 1)
arm()
got = compiled(*call)
gc.set_threshold(700, 10, 10)
HOOKS["on"] = False
gc.collect()  # the last bomb
assert got == expected, (got[0][:30], expected[0][:30])
assert HOOKS["fired"] > 0 and len(targets) == 700  # the list did change under the call
print("as called")
"""


def test_a_targets_list_changed_under_the_call_is_answered_as_it_was_at_the_call_never_a_crash():
    """The caller's own list is what the call reads (PySequence_Fast does not copy a list). A
    collection run by an allocation inside the call (thresholds of one, a garbage cycle whose
    finalizer empties the list and refills it with non-ints, freeing its item array) or a
    target's own hooks doing the same must not leave the call reading the freed array: the
    answers are the reference's to the list as it was at the call (a fresh interpreter: a
    crash fails this test)."""
    assert run_alone(_MUTATING_TARGETS, timeout_s=120) == (0, "as called\n", "")
