"""The held-topics file (cluster/topic_records.py HeldTopics): whatever bytes it holds, the
instance starts; a file the bounded reader or the field checks refuse is read as empty (nothing
deleted for etcd's sake), as its docstring promises, and a good one reads back as written."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog_server.cluster.topic_records import HELD_TOPICS_BYTES_MAX, HELD_TOPICS_FILE_NAME, HeldTopics


def _write(directory, data: bytes) -> None:
    with open(os.path.join(directory, HELD_TOPICS_FILE_NAME), "wb") as handle:
        handle.write(data)


def test_the_file_reads_back_what_was_recorded(tmp_path):
    held = HeldTopics(str(tmp_path))
    held.record("events", 42)
    held.record("orders", 7)
    assert HeldTopics(str(tmp_path)).get("events") == 42 and HeldTopics(str(tmp_path)).get("orders") == 7


@pytest.mark.parametrize("data", [
    b'{"version": 1, "topics": {"t": 1e400}}',                      # once OverflowError in __init__
    b'{"version": 1, "topics": {"t": ' + b"9" * 5000 + b"}}",        # once ValueError (caught) ...
    b'{"version": 1, "topics": ' + b"[" * 100_000,                  # once RecursionError in __init__
    b'{"version": 1, "topics": {"t": NaN}}',
    b'{"version": 1, "topics": {"t": "12"}}',                        # once read as 12
    b'{"version": 1, "topics": {"t": true}}',                        # once read as 1
    b'{"version": 1, "topics": {"t": -3}}',
    b'{"version": 1, "topics": {"' + b"t" * 250 + b'": 3}}',
    b'{"version": 1, "topics": [1]}',
    b'{"version": 2, "topics": {}}',
    b"[]",
    b"\xff\xfe",
    b" " * (HELD_TOPICS_BYTES_MAX + 1),
])
def test_a_hostile_file_is_read_as_empty_and_logged(tmp_path, caplog, data):
    _write(tmp_path, data)
    held = HeldTopics(str(tmp_path))
    assert held.get("t") is None
    assert "unreadable" in caplog.text and HELD_TOPICS_FILE_NAME in caplog.text


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)
_RAW = st.sampled_from([b"9" * 4400, b"1e400", b"NaN", b"-Infinity", b"[" * 3000, b'{"a":' * 1200])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topics=st.dictionaries(st.text(min_size=1, max_size=8), _VALUES, max_size=4), raw=_RAW,
       noise=st.binary(max_size=16), where=st.integers(0, 3))
def test_any_file_lets_the_instance_start(tmp_path, topics, raw, noise, where):
    """HeldTopics never raises on its file's content: hostile JSON values, raw hostile number
    texts and nesting spliced in, or bytes appended; it reads the topics or nothing."""
    document = json.dumps({"version": 1, "topics": {**topics, "@": "@HOSTILE@"}})
    data = [document.encode(), document.replace('"@HOSTILE@"', raw.decode()).encode(),
            document.encode() + noise, noise][where]
    _write(tmp_path, data)
    held = HeldTopics(str(tmp_path))
    for topic in topics:
        generation = held.get(topic)
        assert generation is None or (type(generation) is int and 0 <= generation < 2**63)


def test_a_file_that_cannot_be_read_is_read_as_empty_and_logged(tmp_path, caplog):
    os.mkdir(tmp_path / HELD_TOPICS_FILE_NAME)  # open() succeeds, read() fails: EISDIR
    assert HeldTopics(str(tmp_path)).get("t") is None
    assert "unreadable" in caplog.text and "Is a directory" in caplog.text
