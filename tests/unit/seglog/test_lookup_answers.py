"""A packed lookup entry's answers: the compiled builder (_answers_c.c) against the reference,
differentially, and the admin's reader of packed answers with either."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog import _lookup_answers, admin
from seglog._lookup_answers import packed_answers_reference
from seglog.structs import OffsetAndTimestamp, TopicPartition
from seglog.v1 import log_service_pb2 as pb
from tests.support.walk_support import run_alone

compiled = _lookup_answers.packed_answers
INT64 = st.integers(-(2**63), 2**63 - 1)
# Offsets as the service answers them: mostly found (>= 0), some -1 (refused or none reaching),
# and any other negative or int64 value the wire can carry; and ints past int64 either way (a
# caller's list, not the wire): the compiled one reads only their sign.
PAST_INT64 = st.one_of(st.integers(2**63, 2**80), st.integers(-(2**80), -(2**63) - 1))
OFFSETS = st.one_of(st.integers(0, 2**40), st.just(-1), INT64, PAST_INT64)
TIMESTAMPS = st.one_of(INT64, PAST_INT64)


def test_the_install_built_the_compiled_answers():
    """scripts/bootstrap's editable install compiles _answers_c (as it does the records walk);
    without it every compiled case here would test the reference against itself."""
    assert _lookup_answers.COMPILED, "seglog._answers_c is not built: run scripts/bootstrap (needs a C compiler)"


@given(st.lists(st.tuples(OFFSETS, TIMESTAMPS), max_size=300))
def test_compiled_answers_equal_the_reference(pairs):
    offsets = [offset for offset, _ in pairs]
    timestamps_ms = [timestamp_ms for _, timestamp_ms in pairs]
    expected = packed_answers_reference(offsets, timestamps_ms, OffsetAndTimestamp)
    got = compiled(offsets, timestamps_ms, OffsetAndTimestamp)
    assert got == expected
    assert [type(answer) for answer in got] == [type(answer) for answer in expected]
    assert [answer is None for answer in got] == [offset < 0 for offset in offsets]
    assert all(answer.offset == offset and answer.timestamp_ms == timestamp_ms
               for answer, offset, timestamp_ms in zip(got, offsets, timestamps_ms) if answer is not None)
    # Equal answers hash alike (on CPython >= 3.14 a tuple caches its hash, which tp_alloc leaves 0).
    assert [hash(answer) for answer in got] == [hash(answer) for answer in expected]
    assert all(hash(answer) == hash(OffsetAndTimestamp(offset, timestamp_ms))
               for answer, offset, timestamp_ms in zip(got, offsets, timestamps_ms) if answer is not None)


@pytest.mark.parametrize("build", [compiled, packed_answers_reference], ids=["compiled", "reference"])
def test_answers_read_a_response_entry_as_it_is(build):
    """The upb columns of a packed entry are taken as they are (no list made of them first)."""
    entry = pb.OffsetsForTimesResponse().packed.add()
    entry.offsets.extend([5, -1, 0, 2**62])
    entry.timestamps_ms.extend([1_700_000_000_000, -1, 0, 7])
    assert build(entry.offsets, entry.timestamps_ms, OffsetAndTimestamp) == [
        OffsetAndTimestamp(5, 1_700_000_000_000), None, OffsetAndTimestamp(0, 0), OffsetAndTimestamp(2**62, 7)]


@pytest.mark.parametrize("build", [compiled, packed_answers_reference], ids=["compiled", "reference"])
def test_columns_of_unequal_length_are_refused(build):
    with pytest.raises(ValueError, match="2 offsets but 3 timestamps"):
        build([1, 2], [1, 2, 3], OffsetAndTimestamp)


def test_compiled_answers_refuse_what_is_not_an_int_before_building_any():
    with pytest.raises(TypeError, match="must be an int, not str"):
        compiled([1, "2"], [1, 2], OffsetAndTimestamp)
    with pytest.raises(TypeError, match="must be an int, not float"):
        compiled([1, 2], [1, 2.0], OffsetAndTimestamp)
    with pytest.raises(TypeError, match="offsets must be a sequence"):
        compiled(7, [1], OffsetAndTimestamp)


@pytest.mark.parametrize("build", [compiled, packed_answers_reference], ids=["compiled", "reference"])
@pytest.mark.parametrize("answer_type", [list, dict, type("WithDict", (tuple,), {})])
def test_answers_refuse_an_answer_type_other_than_a_plain_tuple_subclass(build, answer_type):
    with pytest.raises(TypeError, match="answer_type must be a tuple subclass adding no fields"):
        build([1], [1], answer_type)


_CHANGING_COLUMNS = """
import gc
from seglog import _lookup_answers
from seglog.structs import OffsetAndTimestamp
HOOKS = {"on": True, "fired": 0}
class Bomb:
    def __del__(self):
        if HOOKS["on"] and HOOKS["fired"] < 200:
            HOOKS["fired"] += 1
            offsets.clear()
            offsets.extend(object() for _ in range(700))
            arm()
def arm():
    bomb = Bomb()
    bomb.cycle = bomb
offsets = list(range(-5, 400))
timestamps_ms = list(range(1000, 1405))
as_called = list(offsets)
call = (offsets, timestamps_ms, OffsetAndTimestamp)  # built first: building it may collect
gc.set_threshold(1, 1, 1)
arm()
got = _lookup_answers.packed_answers(*call)
gc.set_threshold(700, 10, 10)
HOOKS["on"] = False
gc.collect()
assert HOOKS["fired"] > 0 and len(offsets) == 700  # the list did change under the call
assert got == _lookup_answers.packed_answers_reference(as_called, timestamps_ms, OffsetAndTimestamp)
print("as called")
"""


def test_compiled_answers_read_the_columns_as_they_were_at_the_call_when_they_change_under_it():
    """A collection run by an allocation inside the call (thresholds of one, a garbage cycle
    whose finalizer empties the offsets list and refills it with non-ints, freeing its item
    array): the answers are the reference's to the list as it was at the call, never a read of
    the freed array (a fresh interpreter: a crash fails this test)."""
    assert run_alone(_CHANGING_COLUMNS, timeout_s=120) == (0, "as called\n", "")


# A collection started by an answer's allocation whose finalizer walks gc.get_objects() and reads
# every list as long as the answers: it must never meet the answer list with items not yet set.
_ANSWER_LIST_SEEN_BY_A_COLLECTION = """
import gc
from seglog import _lookup_answers
from seglog.structs import OffsetAndTimestamp
COUNT = 4321
HOOKS = {"fired": 0, "read": 0}
class Bomb:
    def __del__(self):
        if HOOKS["fired"] < 50:
            HOOKS["fired"] += 1
            for found in gc.get_objects():
                if type(found) is list and len(found) == COUNT:
                    HOOKS["read"] += sum(1 for item in found if item is None)
            arm()
def arm():
    bomb = Bomb()
    bomb.cycle = bomb
call = (list(range(-3, COUNT - 3)), list(range(COUNT)), OffsetAndTimestamp)
arm()
gc.set_threshold(1, 1, 1)
got = _lookup_answers.packed_answers(*call)
gc.set_threshold(700, 10, 10)
HOOKS["fired"] = 50
assert got == _lookup_answers.packed_answers_reference(*call)
print("read", HOOKS["fired"] > 0)
"""


def test_a_collection_during_the_call_finds_no_answer_list_with_items_unset():
    """A list from PyList_New holds NULL items until filled; the answers are built first and
    moved into the list after, so a finalizer reading gc.get_objects() reads only set items (a
    fresh interpreter: a crash fails this test)."""
    assert run_alone(_ANSWER_LIST_SEEN_BY_A_COLLECTION, timeout_s=120) == (0, "read True\n", "")


# The start of a program whose seglog._answers_c is an older build, with packed_answers but not
# packed_timestamps (placed in sys.modules before _lookup_answers imports it).
_OLDER_BUILD = """
import sys, types
older = types.ModuleType("seglog._answers_c")
older.packed_answers = lambda offsets, timestamps_ms, answer_type: "older"
sys.modules["seglog._answers_c"] = older
"""


def test_an_older_build_without_packed_timestamps_leaves_the_request_to_the_general_path():
    program = _OLDER_BUILD + """
from seglog import _lookup_answers, admin
from seglog.structs import TopicPartition
assert _lookup_answers.packed_timestamps is None and admin.packed_timestamps is None
assert _lookup_answers.COMPILED and _lookup_answers.packed_answers([], [], tuple) == "older"
built = admin._packed_request([(TopicPartition("t", 0), -1)] * 3)
assert list(built[0].packed[0].timestamps_ms) == [-1, -1, -1], built
print("general")
"""
    assert run_alone(program, warnings_as_errors=True) == (0, "general\n", "")


def test_an_install_without_the_module_takes_the_reference_for_both():
    program = """
import sys
sys.modules["seglog._answers_c"] = None  # its import fails: an install without a C compiler
from seglog import _lookup_answers, admin
from seglog.structs import OffsetAndTimestamp
assert not _lookup_answers.COMPILED
assert _lookup_answers.packed_answers is _lookup_answers.packed_answers_reference
assert _lookup_answers.packed_timestamps is None and admin.packed_timestamps is None
assert _lookup_answers.packed_answers([4, -1], [40, 0], OffsetAndTimestamp) == [OffsetAndTimestamp(4, 40), None]
print("reference")
"""
    assert run_alone(program, warnings_as_errors=True) == (0, "reference\n", "")


def _packed_response(*entries: tuple[list[int], list[int]]) -> pb.OffsetsForTimesResponse:
    """A packed answer: per entry (a partition's) its offsets and timestamps."""
    response = pb.OffsetsForTimesResponse()
    for number, (offsets, timestamps_ms) in enumerate(entries):
        entry = response.packed.add()
        entry.topic, entry.partition = "t", number
        entry.offsets.extend(offsets)
        entry.timestamps_ms.extend(timestamps_ms)
    return response


@pytest.mark.parametrize("build", [compiled, packed_answers_reference], ids=["compiled", "reference"])
def test_the_admin_reads_packed_answers_alike_with_either_builder(monkeypatch, build):
    """Targets of two partitions interleaved (their numbers given per entry), one refused with
    no record reaching it: each answer lands at its target's number, None where refused."""
    monkeypatch.setattr(admin, "packed_answers", build)
    response = _packed_response(([3, -1], [30, -1]), ([8, 9, 10], [80, 90, 100]))
    read = admin._packed_reader([[0, 2], [1, 3, 4]], 5)
    assert read(response.packed, True) == [
        OffsetAndTimestamp(3, 30), OffsetAndTimestamp(8, 80), None, OffsetAndTimestamp(9, 90),
        OffsetAndTimestamp(10, 100)]
    everything = admin._packed_reader(None, 2)
    assert everything(_packed_response(([4, 5], [40, 50])).packed, True) == [
        OffsetAndTimestamp(4, 40), OffsetAndTimestamp(5, 50)]


# -- a request's timestamps of one partition, in the packed field's wire form ---------------------

compiled_timestamps = _lookup_answers.packed_timestamps
PARTITION = TopicPartition("t", 0)
TIMESTAMPS_FIELD = admin._TIMESTAMPS_FIELD


def _entry_extended(timestamps_ms: list[int]) -> pb.PartitionTimestamps:
    entry = pb.PartitionTimestamps()
    entry.timestamps_ms.extend(timestamps_ms)
    return entry


@given(st.lists(INT64, max_size=300))
def test_packed_timestamps_parse_as_the_field_extended_and_serialize_alike(timestamps_ms):
    wire = compiled_timestamps([(PARTITION, t) for t in timestamps_ms], PARTITION, TIMESTAMPS_FIELD)
    entry = pb.PartitionTimestamps()
    entry.MergeFromString(wire)
    assert list(entry.timestamps_ms) == timestamps_ms
    if timestamps_ms:  # (an empty packed field serializes to nothing)
        assert wire == _entry_extended(timestamps_ms).SerializeToString()


@pytest.mark.parametrize("targets", [
    [(PARTITION, 1), (TopicPartition("t", 0), 2)],  # equal, not the same object: the general path decides
    [(PARTITION, 1), [PARTITION, 2]],
    [(PARTITION, 1), (PARTITION, 2, 3)],
    [(PARTITION, 1.0)],
    [(PARTITION, True)],
    [(PARTITION, 2**63)],
    [(PARTITION, -(2**63) - 1)],
], ids=["equal-partition", "list-target", "three-items", "float", "bool", "past-int64", "below-int64"])
def test_packed_timestamps_leave_anything_but_plain_targets_of_the_partition_to_the_general_path(targets):
    assert compiled_timestamps(targets, PARTITION, TIMESTAMPS_FIELD) is None


def test_packed_timestamps_refuse_what_is_no_field_number_or_sequence():
    with pytest.raises(ValueError, match="not a protobuf field number"):
        compiled_timestamps([(PARTITION, 1)], PARTITION, 0)
    with pytest.raises(TypeError, match="targets must be a sequence"):
        compiled_timestamps(7, PARTITION, TIMESTAMPS_FIELD)


@given(st.lists(st.one_of(INT64, st.integers(-3, -1)), min_size=1, max_size=200), st.booleans())
def test_a_packed_request_of_one_partition_is_the_same_message_either_way(timestamps_ms, same_object):
    """The compiled wire form and upb's extend build the same request; targets whose partition
    objects differ (equal) take the general path and still make one entry."""
    targets = [(PARTITION if same_object or i == 0 else TopicPartition("t", 0), t)
               for i, t in enumerate(timestamps_ms)]
    built = admin._packed_request(targets)
    saved = admin.packed_timestamps
    admin.packed_timestamps = None
    try:
        general = admin._packed_request(targets)
    finally:
        admin.packed_timestamps = saved
    assert built is not None and general is not None
    assert built[0] == general[0] and built[1] == general[1] is None
    assert built[0].SerializeToString() == general[0].SerializeToString()

