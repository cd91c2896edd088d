"""The one reader of the JSON documents the service reads back from its disks and the object store
(a cleaning snapshot's ``manifest.json`` and ``result.json``, a remote segment's state record, the
cluster's held-topics file): bytes a crash, a disk or another program may have written, so none
is trusted.

``read_json_document`` parses such bytes and can only raise the caller's own error class, with a
message naming the document:

- the size is checked against the caller's cap before anything is decoded;
- the nesting depth is measured before the parser runs (Python's parser recurses once per level:
  about a thousand ``[`` raise RecursionError, which no caller expects), over a text whose strings
  are blanked out by one linear regular expression;
- a number is refused by its text before it becomes a Python number: an integer of more digits
  than an int64 has (``int()`` of more than 4,300 digits raises a plain ValueError, and a long one
  costs time quadratic in its length), a float that is not finite (``1e400`` parses to infinity,
  and ``int(inf)`` raises OverflowError later) or is longer than any float we write, and the
  constants ``NaN`` / ``Infinity`` that Python's parser accepts beyond the JSON grammar.
  A caller whose document holds lenient fields (a cleaning result's ``stats``, where Python's
  ``json.dumps`` writes ``NaN`` by default) asks for ``numbers_marked=True``: such a number then
  reads as an ``UnreadableNumber`` (its text never converted), which every checked field refuses
  and a lenient one counts as 0; the size and depth bounds hold either way.

``Fields`` then reads an object's fields one by one, each checked for its type (a bool is never
an int) and range, raising the same error class with the document and the field's name.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from itertools import accumulate
from typing import Any, NoReturn

__all__ = [
    "DEPTH_MAX", "INT64_MAX", "Fields", "UnreadableNumber", "checked_int", "nesting_depth", "read_json_document",
]

# Our documents nest four levels at most (a result's output segment inside its list inside the
# document); 32 leaves room for what a later format adds and stays far below the ~1,000 levels at
# which the parser's recursion fails.
DEPTH_MAX = 32
# An int64 in decimal is at most 19 digits and a sign: a longer integer cannot pass any range check.
_INT_CHARS_MAX = 20
# repr() of any finite double is at most 24 characters; 64 admits other writers' spellings.
_FLOAT_CHARS_MAX = 64
INT64_MAX = 2**63 - 1

ErrorFactory = Callable[[str], Exception]

# A JSON string (possessive: never backtracks), or an unterminated one running to the end of the
# text: every quote starts at most one match, so blanking strings is linear in the text's length.
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class _Refused(Exception):
    """A number or constant the parser hooks refuse; translated to the caller's error."""


class UnreadableNumber:
    """A number a document held that no field can take (too long, not finite, NaN / Infinity),
    read with ``numbers_marked=True``: its text is kept short and never converted. It is neither
    an int nor a float, so every checked field refuses it; a lenient field counts it as 0."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<{self.reason}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnreadableNumber) and other.reason == self.reason

    def __hash__(self) -> int:
        return hash(self.reason)


def _int_fault(text: str) -> str | None:
    if len(text) > _INT_CHARS_MAX:
        return f"an integer of {len(text)} characters (at most {_INT_CHARS_MAX}: an int64)"
    return None


def _float_fault(text: str) -> str | None:
    if len(text) > _FLOAT_CHARS_MAX:
        return f"a number of {len(text)} characters (at most {_FLOAT_CHARS_MAX})"
    if not math.isfinite(float(text)):
        return f"the number {text} is not finite as a double"
    return None


def _refusing(fault: Callable[[str], str | None], convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        reason = fault(text)
        if reason is not None:
            raise _Refused(reason)
        return convert(text)
    return parse


def _marking(fault: Callable[[str], str | None], convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        reason = fault(text)
        return convert(text) if reason is None else UnreadableNumber(reason)
    return parse


def _constant_fault(text: str) -> str:
    return f"{text} is not a JSON number"


def _refuse_constant(text: str) -> NoReturn:
    raise _Refused(_constant_fault(text))


def _mark_constant(text: str) -> UnreadableNumber:
    return UnreadableNumber(_constant_fault(text))


_STRICT_HOOKS = {"parse_int": _refusing(_int_fault, int), "parse_float": _refusing(_float_fault, float),
                 "parse_constant": _refuse_constant}
_MARKING_HOOKS = {"parse_int": _marking(_int_fault, int), "parse_float": _marking(_float_fault, float),
                  "parse_constant": _mark_constant}


def nesting_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in ``text`` outside its strings (for valid JSON
    exactly the parser's depth; for any text at least the depth of its longest valid prefix)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def read_json_document(data: bytes, what: str, error: ErrorFactory, *, bytes_max: int,
                       depth_max: int = DEPTH_MAX, numbers_marked: bool = False) -> Any:
    """The JSON value in ``data``; any fault raises ``error(message)``, the message starting with
    ``what`` (the file or object). With ``numbers_marked`` a number no field can take reads as an
    ``UnreadableNumber`` instead of refusing the whole document."""
    if len(data) > bytes_max:
        raise error(f"{what} is {len(data)} bytes, above the {bytes_max}-byte limit")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} is not UTF-8: {exc}") from None
    depth = nesting_depth(text)
    if depth > depth_max:
        raise error(f"{what} nests {depth} levels deep, above the limit of {depth_max}")
    try:
        return json.loads(text, **(_MARKING_HOOKS if numbers_marked else _STRICT_HOOKS))
    except _Refused as exc:
        raise error(f"{what} is refused: {exc}") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise error(f"{what} is not valid JSON: {exc}") from None


class Fields:
    """One JSON object of a document, read field by field: each field's type (a bool is never an
    int) and range checked, any fault raised as ``error`` naming ``location`` and the field."""

    def __init__(self, data: Any, location: str, error: ErrorFactory) -> None:
        if not isinstance(data, dict):
            raise error(f"{location}: expected a JSON object, found {type(data).__name__}")
        self.data = data
        self.location = location
        self.error = error

    def __contains__(self, name: str) -> bool:
        return name in self.data

    def fail(self, name: str, message: str) -> NoReturn:
        raise self.error(f"{self.location} field {name!r}: {message}")

    def get(self, name: str, kind: type) -> Any:
        if name not in self.data:
            self.fail(name, "missing")
        value = self.data[name]
        if isinstance(value, UnreadableNumber):
            self.fail(name, f"expected {kind.__name__}, found {value.reason}")
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            self.fail(name, f"expected {kind.__name__}, found {type(value).__name__}")
        return value

    def int(self, name: str, low: int, high: int) -> int:
        value = self.get(name, int)
        if not low <= value <= high:
            self.fail(name, f"expected an integer in [{low}, {high}], found {value}")
        return value  # type: ignore[no-any-return]

    def str(self, name: str, chars_max: int) -> str:
        value = self.get(name, str)
        if len(value) > chars_max:
            self.fail(name, f"expected at most {chars_max} characters, found {len(value)}")
        return value  # type: ignore[no-any-return]

    def list(self, name: str) -> list[Any]:
        return self.get(name, list)  # type: ignore[no-any-return]

    def object(self, name: str) -> Fields:
        return Fields(self.get(name, dict), f"{self.location} {name}", self.error)


def checked_int(value: Any, where: str, low: int, high: int, error: ErrorFactory) -> int:
    """An element of a list (no field name): an int in [low, high], else ``error`` naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise error(f"{where}: expected an integer in [{low}, {high}], found {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
