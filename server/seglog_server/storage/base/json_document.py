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

__all__ = ["DEPTH_MAX", "INT64_MAX", "Fields", "checked_int", "nesting_depth", "read_json_document"]

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


def _parse_int(text: str) -> int:
    if len(text) > _INT_CHARS_MAX:
        raise _Refused(f"an integer of {len(text)} characters (at most {_INT_CHARS_MAX}: an int64)")
    return int(text)


def _parse_float(text: str) -> float:
    if len(text) > _FLOAT_CHARS_MAX:
        raise _Refused(f"a number of {len(text)} characters (at most {_FLOAT_CHARS_MAX})")
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {text[:_FLOAT_CHARS_MAX]} is not finite as a double")
    return value


def _parse_constant(text: str) -> NoReturn:
    raise _Refused(f"{text} is not a JSON number")


def nesting_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in ``text`` outside its strings (for valid JSON
    exactly the parser's depth; for any text at least the depth of its longest valid prefix)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def read_json_document(data: bytes, what: str, error: ErrorFactory, *, bytes_max: int,
                       depth_max: int = DEPTH_MAX) -> Any:
    """The JSON value in ``data``; any fault raises ``error(message)``, the message starting with
    ``what`` (the file or object)."""
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
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)
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
