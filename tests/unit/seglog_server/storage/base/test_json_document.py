"""The bounded JSON reader (storage/base/json_document.py): hostile documents raise only the
caller's error, naming the document; good ones parse as json.loads does."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog_server.storage.base.json_document import (
    DEPTH_MAX,
    Fields,
    UnreadableNumber,
    checked_int,
    nesting_depth,
    read_json_document,
)


class DocumentError(Exception):
    """Stands for a caller's own error class."""


def read(data: bytes, bytes_max: int = 1 << 20):
    return read_json_document(data, "doc.json", DocumentError, bytes_max=bytes_max)


@pytest.mark.parametrize(("data", "message"), [
    (b'{"format": ' + b"9" * 5000 + b"}", "an integer of 5000 characters"),
    (b"[-" + b"1" * 21 + b"]", "an integer of 22 characters"),
    (b'{"t": 1e400}', "not finite"),
    (b"[-1e400]", "not finite"),
    (b"[0." + b"1" * 100 + b"]", "a number of 102 characters"),
    (b"[NaN]", "NaN is not a JSON number"),
    (b'{"a": Infinity}', "Infinity is not a JSON number"),
    (b"[" * 100_000, "nests 100000 levels deep"),
    (b'{"a":' * 5000 + b"1" + b"}" * 5000, "nests 5000 levels deep"),
    (b"\xff\xfe", "not UTF-8"),
    (b'{"a": 1', "not valid JSON"),
    (b"", "not valid JSON"),
    (b" " * 101, "101 bytes, above the 100-byte limit"),
])
def test_hostile_documents_raise_the_callers_error_naming_the_document(data, message):
    with pytest.raises(DocumentError, match=message) as raised:
        read(data, bytes_max=100 if len(data) == 101 else 1 << 20)
    assert str(raised.value).startswith("doc.json")


def test_the_depth_limit_counts_brackets_outside_strings_only():
    assert read(b'["' + b"[" * 60 + b'"]') == ["[" * 60]
    assert read(b"[" * DEPTH_MAX + b"]" * DEPTH_MAX) is not None
    with pytest.raises(DocumentError, match=f"nests {DEPTH_MAX + 1} levels"):
        read(b"[" * (DEPTH_MAX + 1) + b"]" * (DEPTH_MAX + 1))
    assert nesting_depth(r'{"a\"[[": [["\\", "]"]]}') == 3


def test_an_unterminated_string_is_blanked_in_linear_time():
    """Blanking strings never rescans: a text of many quotes that never close parses (and fails)
    at once; a quadratic regular expression would not finish here."""
    with pytest.raises(DocumentError, match="not valid JSON"):
        read(b'\\"' * 400_000 + b"[")
    with pytest.raises(DocumentError, match="not valid JSON"):
        read(b'"' + b"\\" * 800_001)


def test_fields_check_type_and_range_and_name_the_field():
    fields = Fields({"n": True, "m": 5, "s": "x" * 10, "l": {}}, "doc.json", DocumentError)
    with pytest.raises(DocumentError, match="doc.json field 'n': expected int, found bool"):
        fields.int("n", 0, 10)
    with pytest.raises(DocumentError, match=r"field 'm': expected an integer in \[6, 9\], found 5"):
        fields.int("m", 6, 9)
    with pytest.raises(DocumentError, match="field 's': expected at most 3 characters"):
        fields.str("s", 3)
    with pytest.raises(DocumentError, match="field 'l': expected list"):
        fields.list("l")
    with pytest.raises(DocumentError, match="field 'gone': missing"):
        fields.object("gone")
    with pytest.raises(DocumentError, match="expected a JSON object, found list"):
        Fields([], "doc.json", DocumentError)


@pytest.mark.parametrize(("text", "reason"), [
    ("NaN", "NaN is not a JSON number"), ("-Infinity", "-Infinity is not a JSON number"),
    ("1e400", "the number 1e400 is not finite"), ("9" * 30, "an integer of 30 characters"),
    ("9" * 5000, "an integer of 5000 characters"), ("0." + "1" * 100, "a number of 102 characters"),
])
def test_marked_numbers_read_as_unreadable_and_every_checked_field_refuses_them(text, reason):
    value = read_json_document(f'{{"a": {text}, "b": [{text}], "ok": 7}}'.encode(), "doc.json", DocumentError,
                               bytes_max=1 << 20, numbers_marked=True)
    assert isinstance(value["a"], UnreadableNumber) and reason in value["a"].reason
    assert value["ok"] == 7
    fields = Fields(value, "doc.json", DocumentError)
    for kind in (int, float, str, list, dict, bool):
        with pytest.raises(DocumentError, match=f"doc.json field 'a': expected {kind.__name__}, found"):
            fields.get("a", kind)
    with pytest.raises(DocumentError, match=r"doc.json b\[0\]: expected an integer"):
        checked_int(value["b"][0], "doc.json b[0]", 0, 10, DocumentError)
    with pytest.raises(DocumentError, match=reason.split(" ")[0]):
        read(f'{{"a": {text}}}'.encode())  # not marked: the whole document is refused


def test_marked_numbers_keep_the_depth_and_size_bounds():
    for data, message in [(b"[NaN," * 40 + b"1" + b"]" * 40, "nests 40 levels"), (b" " * 101, "above the 100")]:
        with pytest.raises(DocumentError, match=message):
            read_json_document(data, "doc.json", DocumentError, bytes_max=100 if len(data) == 101 else 1 << 20,
                               numbers_marked=True)


_SCALARS = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
_DOCUMENTS = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(_DOCUMENTS)
def test_documents_we_could_write_read_back_as_written(document):
    data = json.dumps(document).encode()
    if nesting_depth(data.decode()) <= DEPTH_MAX:
        assert read(data) == json.loads(data)


_HOSTILE_PIECES = st.sampled_from([
    b"[", b"]", b"{", b"}", b'"', b"\\", b",", b":", b"1", b"-", b"e400", b"9" * 4400, b"1e400",
    b"NaN", b"Infinity", b"-Infinity", b"null", b"true", b'"k"', b"\xff", b"\xc3", b" ", b"0.5",
    b"[" * 2000, b"{\"a\":" * 600, b"]" * 50,
])


@settings(max_examples=500, deadline=None)
@given(st.lists(_HOSTILE_PIECES, max_size=40), st.binary(max_size=64))
def test_hostile_bytes_raise_only_the_callers_error(pieces, noise):
    """Whatever the bytes, the reader returns a value or raises the caller's error: never
    ValueError, RecursionError, OverflowError or a number that is not finite."""
    data = b"".join(pieces) + noise
    try:
        value = read(data)
    except DocumentError as exc:
        assert str(exc).startswith("doc.json")
        return
    assert nesting_depth(data.decode()) <= DEPTH_MAX
    assert all(not isinstance(v, float) or math.isfinite(v) for v in _leaves(value))
    assert all(not isinstance(v, int) or -(10**20) < v < 10**20 for v in _leaves(value))


def _leaves(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value
