"""The first record reaching a target, walked in compiled code where the install built it.

A lookup by time ends inside one batch: the first record with timestamp >= T and offset >= S.
On a batch ``send_many`` wrote (thousands of records) the walk to it is most of the lookup's
CPU, about 0.1-0.3 µs a record in Python. ``_walk_c.c`` walks the same records area with every
rule of the reference walker (``walk_records``, walk.py) at a few nanoseconds a record; the
install compiles it when it can (an optional extension: a client-only install without a C
compiler gets the Python walk below, with no warning).

``seek_record`` is the one entry point for one target, ``seek_records`` for several landing in
one batch (one walk to the last one's record instead of one walk per target: a batched lookup
sends many targets to each large batch); ``seek_record_reference`` is the reference both must
equal (tests/unit/seglog/records/test_walk_compiled.py checks both ways, on valid and hostile
bytes). When the compiled walk refuses an area, the reference walks it again for its precise
message: refusals are rare, and one message per lie is what the layers above show.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left

from .errors import CorruptRecordError
from .walk import walk_records
from .walk_fast import NONE_REACHING, first_record_reaching

try:
    from ._walk_c import first_reaching as _compiled_first_reaching
    from ._walk_c import first_reaching_each as _compiled_first_reaching_each
    from ._walk_c import record_times as _compiled_record_times
except ImportError:  # not built (no compiler at install): the Python walks below
    _compiled_first_reaching = _compiled_first_reaching_each = _compiled_record_times = None
try:
    from ._walk_c import record_steps as _compiled_record_steps
except ImportError:  # not built, or built before it had record_steps
    _compiled_record_steps = None
try:
    from ._walk_c import step_answers as _compiled_step_answers
except ImportError:  # not built, or built before it had step_answers
    _compiled_step_answers = None

__all__ = ["COMPILED", "record_steps", "record_times", "seek_record", "seek_record_reference", "seek_records",
           "seek_records_reference", "step_answers", "step_answers_reference"]

COMPILED = _compiled_first_reaching is not None


def seek_record_reference(
    data, position: int, end: int, count: int, target_delta: int, offset_delta_min: int
) -> tuple[int, int] | None:
    """(offsetDelta, timestampDelta) of the first of the ``count`` records in
    ``data[position:end]`` with timestampDelta >= ``target_delta`` and offsetDelta >=
    ``offset_delta_min``, every record up to it checked by ``walk_records``; None when every
    record is checked and none reaches; CorruptRecordError at the first lie. Targets may lie
    outside int64 (a target no record reaches, or one every record does)."""
    for timestamp_delta, offset_delta in walk_records(data, position, end, count):
        if timestamp_delta >= target_delta and offset_delta >= offset_delta_min:
            return offset_delta, timestamp_delta
    return None


def _seek_record_python(data, position: int, end: int, count: int, target_delta: int, offset_delta_min: int):
    """The Python walk: the fast loop for common records (bytes only), else the reference."""
    if type(data) is bytes:
        found = first_record_reaching(data, position, end, count, 0, target_delta, offset_delta_min)
        if found is NONE_REACHING:
            return None
        if found is not None:
            return found
    return seek_record_reference(data, position, end, count, target_delta, offset_delta_min)


def _seek_record_compiled(data, position: int, end: int, count: int, target_delta: int, offset_delta_min: int):
    """The compiled walk; on a refusal, the reference's verdict and message."""
    try:
        return _compiled_first_reaching(data, position, end, count, target_delta, offset_delta_min)
    except CorruptRecordError:
        return seek_record_reference(data, position, end, count, target_delta, offset_delta_min)


seek_record = _seek_record_compiled if COMPILED else _seek_record_python
seek_record.__doc__ = seek_record_reference.__doc__


def seek_records_reference(
    data, position: int, end: int, count: int, target_deltas, offset_delta_min: int
) -> list[tuple[int, int] | None]:
    """``seek_record_reference`` for each of ``target_deltas`` (ascending): CorruptRecordError
    when any of their walks raises."""
    return [seek_record_reference(data, position, end, count, target, offset_delta_min) for target in target_deltas]


def _seek_records_python(data, position: int, end: int, count: int, target_deltas, offset_delta_min: int):
    """One walk by ``walk_records`` for every target (ascending): each record is checked once."""
    answers: list[tuple[int, int] | None] = [None] * len(target_deltas)
    if not answers:
        return answers
    following = 0
    target = target_deltas[0]
    for timestamp_delta, offset_delta in walk_records(data, position, end, count):
        if offset_delta < offset_delta_min:
            continue
        while timestamp_delta >= target:
            answers[following] = (offset_delta, timestamp_delta)
            following += 1
            if following == len(answers):
                return answers
            target = target_deltas[following]
    return answers


def _seek_records_compiled(data, position: int, end: int, count: int, target_deltas, offset_delta_min: int):
    """The compiled walk; on a refusal, the reference's verdict and message."""
    try:
        return _compiled_first_reaching_each(data, position, end, count, target_deltas, offset_delta_min)
    except CorruptRecordError:
        return seek_records_reference(data, position, end, count, target_deltas, offset_delta_min)


seek_records = _seek_records_compiled if COMPILED else _seek_records_python
seek_records.__doc__ = """``seek_record`` for each of ``target_deltas`` (ascending), in one walk: a list of
(offsetDelta, timestampDelta) or None per target; CorruptRecordError (the reference's message)
when the walk of any target alone would raise."""


def _record_times_python(data, position: int, end: int, count: int) -> tuple[array, array, array]:
    timestamps, offsets, reach = array("q"), array("q"), array("q")
    highest = None
    for timestamp_delta, offset_delta in walk_records(data, position, end, count):
        timestamps.append(timestamp_delta)
        offsets.append(offset_delta)
        highest = timestamp_delta if highest is None or timestamp_delta > highest else highest
        reach.append(highest)
    return timestamps, offsets, reach


def _record_times_compiled(data, position: int, end: int, count: int) -> tuple[array, array, array]:
    try:
        timestamps, offsets, reach = _compiled_record_times(data, position, end, count)
    except CorruptRecordError:
        return _record_times_python(data, position, end, count)  # the reference's message
    return array("q", timestamps), array("q", offsets), array("q", reach)


record_times = _record_times_compiled if COMPILED else _record_times_python
record_times.__doc__ = """(timestamp deltas, offset deltas, running maximum of the timestamp deltas)
of every record of the area, as three ``array('q')``: the walk of ``walk_records`` to the area's
end, every rule checked (CorruptRecordError with its message as it refuses)."""


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _record_steps_python(data, position: int, end: int, count: int, base_timestamp: int = 0, base_offset: int = 0,
                         floor: int = _INT64_MIN) -> tuple[array, array, bool]:
    records = list(walk_records(data, position, end, count))  # the whole walk first: its verdict
    timestamps, offsets = array("q"), array("q")
    running = floor
    for timestamp_delta, offset_delta in records:
        timestamp = base_timestamp + timestamp_delta
        if timestamp > running:
            if timestamp > _INT64_MAX or not _INT64_MIN <= base_offset + offset_delta <= _INT64_MAX:
                raise OverflowError("a step's timestamp or offset is past int64")
            timestamps.append(timestamp)
            offsets.append(base_offset + offset_delta)
            running = timestamp
    return timestamps, offsets, [offset for _, offset in records] == list(range(len(records)))


def _record_steps_compiled(data, position: int, end: int, count: int, base_timestamp: int = 0, base_offset: int = 0,
                           floor: int = _INT64_MIN) -> tuple[array, array, bool]:
    try:
        timestamps, offsets, in_order = _compiled_record_steps(data, position, end, count, base_timestamp,
                                                               base_offset, floor)
    except CorruptRecordError:  # the reference's verdict and message, on the same arguments
        return _record_steps_python(data, position, end, count, base_timestamp, base_offset, floor)
    return array("q", timestamps), array("q", offsets), in_order


STEPS_COMPILED = _compiled_record_steps is not None
record_steps = _record_steps_compiled if STEPS_COMPILED else _record_steps_python
record_steps.__doc__ = """The steps of the records area above ``floor``: (timestamps, offsets) of each record
whose ``base_timestamp`` + timestampDelta is above ``floor`` and every earlier record's (its offset
``base_offset`` + offsetDelta), as two ``array('q')``, and whether the offset deltas run
0..count-1. The walk of ``walk_records`` to the area's end, every rule checked (CorruptRecordError
with its message as it refuses); OverflowError when a step's timestamp or offset is past int64.
The first record in log order reaching a timestamp is always a step: a table of the steps answers
every target by a bisection. The arguments must be int64s (``base_*`` and ``floor``)."""
record_steps_reference = _record_steps_python


_INT64_FORMATS = frozenset(("q", "@q", "=q", "<q" if sys.byteorder == "little" else ">q")) | (
    frozenset(("l", "@l")) if array("l").itemsize == 8 else frozenset())


def _int64_column(column, name: str) -> memoryview:
    """``column`` as a memoryview of int64s: TypeError for no buffer, ValueError for one of
    another item, shape or layout (as the compiled function refuses them)."""
    try:
        view = memoryview(column)
    except TypeError:
        raise TypeError(f"step_answers: {name} must be a buffer of int64s, not {type(column).__name__}") from None
    if view.format not in _INT64_FORMATS or view.itemsize != 8 or view.ndim != 1 or not view.c_contiguous:
        raise ValueError(f"step_answers: {name} must be a 1-dimensional contiguous buffer of int64s "
                         f"(format {view.format}, item size {view.itemsize}, {view.ndim} dimensions)")
    return view


def step_answers_reference(timestamps, offsets, targets, offset_min: int, whole: bool, answer_type):
    """A time-step table's answers to ``targets`` (ints, any order), by ``bisect_left`` each: the
    first step whose timestamp is >= the target, as ``answer_type((timestamp, offset))`` (a tuple
    subclass adding no fields: a NamedTuple), else None; and the positions of the targets the
    table cannot answer (left None): their step's offset is below ``offset_min``, or no step
    reaches them and the table is not ``whole`` (it ends before its segment's end). The columns:
    1-dimensional contiguous buffers of int64s of equal length (TypeError or ValueError
    otherwise). Returns ``(answers, rest)``."""
    if not (isinstance(answer_type, type) and issubclass(answer_type, tuple)
            and answer_type.__basicsize__ == tuple.__basicsize__):
        raise TypeError(f"step_answers: answer_type must be a tuple subclass adding no fields, not {answer_type!r}")
    if not isinstance(offset_min, int):
        raise TypeError(f"step_answers: offset_min must be an int, not {type(offset_min).__name__}")
    steps, step_offsets = _int64_column(timestamps, "timestamps"), _int64_column(offsets, "offsets")
    if len(steps) != len(step_offsets):
        raise ValueError(f"step_answers: {len(steps)} timestamps but {len(step_offsets)} offsets")
    count = len(steps)
    answers: list = []
    rest: list[int] = []
    for number, target in enumerate(targets):
        if not isinstance(target, int):
            raise TypeError(f"step_answers: a target must be an int, not {type(target).__name__}")
        index = bisect_left(steps, target)
        if index == count:
            if not whole:
                rest.append(number)
            answers.append(None)
        elif step_offsets[index] < offset_min:
            rest.append(number)
            answers.append(None)
        else:
            answers.append(tuple.__new__(answer_type, (steps[index], step_offsets[index])))
    return answers, rest


STEP_ANSWERS_COMPILED = _compiled_step_answers is not None
step_answers = _compiled_step_answers if STEP_ANSWERS_COMPILED else step_answers_reference
"""``step_answers_reference``'s answers in compiled code (one bisection a target in C, the
answers built there) where the install built it, else the reference itself."""
