"""A packed OffsetsForTimes entry's per-target work: its answers as ``offsets_for_times_many``
returns them, and a request's timestamps of one partition in the field's wire form.

An entry answers a partition's targets as two packed columns, offsets and timestamps; a target
refused, or with no record at or after its time, has offset -1 (the proto says so) and answers
None. ``packed_answers`` builds the list in compiled code where the install built
``_answers_c`` (an optional extension, as the records walk is: a client-only install without a
C compiler gets the reference below, with no warning). The reference makes each answer with
``tuple.__new__`` through ``map``, about 0.2 us a target, the largest piece of the client's own
Python in a call of 100 targets; the compiled one allocates each answer and stores its two items.
``packed_answers_reference`` is what it must equal (tests/unit/seglog/test_lookup_answers.py).
On good columns (sequences of ints) the two agree; on bad ones they differ where checking costs
the reference's every call: both refuse columns of unequal length and an ``answer_type`` that is
no tuple subclass or adds fields, but only the compiled one refuses an item that is not an int
(the reference would answer a float; a check of each item is about a quarter of its time), and
the compiled one takes any iterable as a column where the reference takes only what slices.
The admin passes the response's int64 columns and ``OffsetAndTimestamp``, good either way.

``packed_timestamps`` writes a call's timestamps as the packed field's bytes when every target
is a plain ``(partition, int)`` of one partition object, which the entry then parses (upb's
``extend`` converts each int through Python's number protocol, about 0.1 us a target); anything
else, and an install without the extension, takes ``extend``. Its bytes are held to upb's own
serialization of the extended field by the same tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import Any

__all__ = ["COMPILED", "packed_answers", "packed_answers_reference", "packed_timestamps"]

_new_tuple = tuple.__new__


def _check_answer_type(answer_type: type) -> None:
    """TypeError unless answer_type is a tuple subclass adding no fields (a NamedTuple), as the
    compiled builder, which allocates it with a tuple's layout, requires."""
    if not (isinstance(answer_type, type) and issubclass(answer_type, tuple)
            and answer_type.__basicsize__ == tuple.__basicsize__
            and answer_type.__itemsize__ == tuple.__itemsize__):
        name = getattr(answer_type, "__name__", type(answer_type).__name__)
        raise TypeError(f"packed_answers: answer_type must be a tuple subclass adding no fields, not {name}")


def packed_answers_reference(offsets: Sequence[int], timestamps_ms: Sequence[int], answer_type: type) -> list[Any]:
    """For each target in order: None where its offset is negative, else
    ``answer_type((offset, timestamp_ms))``; ValueError for columns of unequal length, TypeError
    for an answer_type the compiled builder refuses."""
    _check_answer_type(answer_type)
    offsets, timestamps_ms = offsets[:], timestamps_ms[:]  # lists (quicker than list())
    if len(offsets) != len(timestamps_ms):
        raise ValueError(f"packed_answers: {len(offsets)} offsets but {len(timestamps_ms)} timestamps")
    # tuple.__new__ given its class by repeat: a third less than a functools.partial of it.
    answers: list[Any] = list(map(_new_tuple, repeat(answer_type, len(offsets)), zip(offsets, timestamps_ms)))
    if offsets and min(offsets) < 0:
        answers = [None if offset < 0 else answer for offset, answer in zip(offsets, answers)]
    return answers


try:
    from seglog._answers_c import packed_answers
except ImportError:  # not built (no compiler at install): the reference
    packed_answers = packed_answers_reference
try:
    # A request's timestamps of one partition in the packed field's wire form (None where not
    # built: the admin extends the field through upb, a conversion of each int, about 0.1 us).
    from seglog._answers_c import packed_timestamps
except ImportError:  # not built, or built before it had packed_timestamps
    packed_timestamps = None

COMPILED = packed_answers is not packed_answers_reference
