"""The manifest and result documents are read back from disk, written by another program: any
edit of a valid one either parses or raises InvalidCleaningResultError naming what was wrong,
never another exception (Hypothesis over random edits at random places)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog_server.storage.cleaning.cleaning_manifest import (
    RESULT_BYTES_MAX,
    ProducerLastBatch,
    SnapshotManifest,
    SnapshotSegment,
    parse_result,
)
from seglog_server.storage.base.errors import InvalidCleaningResultError

MANIFEST = SnapshotManifest(
    snapshot_id="t-0-1-abcd", topic="t", partition=0, created_ms=1, cleaning_time_ms=1,
    log_start_offset=0, first_dirty_offset=0, first_uncleanable_offset=20,
    segments=(
        SnapshotSegment(0, "00000000000000000000.log", 100, 0x1A2B3C4D, 10, 5, 5),
        SnapshotSegment(10, "00000000000000000010.log", 200, 0x0BADBEEF, 20, 6, 6),
    ),
    configs={"delete.retention.ms": 1},
    producers=(ProducerLastBatch(4000, 3), ProducerLastBatch(4001, 19)),
)
RESULT = {
    "format": 1, "snapshot_id": "t-0-1-abcd", "topic": "t", "partition": 0,
    "input_segments": [{"base_offset": 0, "size_bytes": 100, "crc32c": "1a2b3c4d"},
                       {"base_offset": 10, "size_bytes": 200, "crc32c": "0badbeef"}],
    "replaced_segments": [0, 10],
    "output_segments": [{"base_offset": 0, "file": "00000000000000000000.log", "size_bytes": 50,
                         "crc32c": "00000001", "index_crc32c": "00000002", "timeindex_crc32c": "00000003"}],
    "cleaned_up_to_offset": 20, "dry_run": False, "stats": {"records_read": 3},
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def paths(document, prefix=()):
    yield prefix
    if isinstance(document, dict):
        for key, value in document.items():
            yield from paths(value, prefix + (key,))
    elif isinstance(document, list):
        for slot, value in enumerate(document):
            yield from paths(value, prefix + (slot,))


ALL_PATHS = [p for p in paths(RESULT) if p]


def replaced(document, path, value):
    copy = json.loads(json.dumps(document))
    target = copy
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return copy


def test_the_valid_result_parses():
    result = parse_result(json.dumps(RESULT).encode(), "result.json", MANIFEST)
    assert result.replaced_segments == (0, 10) and result.output_segments[0].crc32c == 1


def test_the_manifest_round_trips():
    assert SnapshotManifest.parse(MANIFEST.to_json_bytes(), "m") == MANIFEST


def test_a_manifest_without_producers_names_none():
    document = json.loads(MANIFEST.to_json_bytes())
    del document["producers"]
    assert SnapshotManifest.parse(json.dumps(document).encode(), "m").producers == ()


@pytest.mark.parametrize("producers, message", [
    ([{"producer_id": 1, "last_offset": 20}], r"outside the segments \[0, 20\)"),
    ([{"producer_id": 1, "last_offset": 3}, {"producer_id": 2, "last_offset": 3}], "named twice"),
    ([{"producer_id": -1, "last_offset": 3}], "producer_id"),
    ({"producer_id": 1}, "expected list"),
])
def test_a_manifest_naming_a_producer_badly_is_refused_by_name(producers, message):
    document = json.loads(MANIFEST.to_json_bytes())
    document["producers"] = producers
    with pytest.raises(InvalidCleaningResultError, match=message):
        SnapshotManifest.parse(json.dumps(document).encode(), "m")


@settings(max_examples=150, deadline=None)
@given(path=st.sampled_from(ALL_PATHS), value=json_values)
def test_any_edited_result_parses_or_is_refused_by_name(path, value):
    data = json.dumps(replaced(RESULT, path, value)).encode()
    try:
        parse_result(data, "result.json", MANIFEST)
    except InvalidCleaningResultError as exc:
        assert "result.json" in str(exc)


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_are_refused_by_name(data):
    with pytest.raises(InvalidCleaningResultError):
        parse_result(data, "result.json", MANIFEST)


def test_oversized_documents_are_refused_before_parsing():
    with pytest.raises(InvalidCleaningResultError, match="limit"):
        parse_result(b" " * (RESULT_BYTES_MAX + 1), "result.json", MANIFEST)


# Raw JSON texts json.dumps never writes but a file or an object can hold: each once escaped the
# parse as ValueError (int() of > 4,300 digits), RecursionError (deep nesting) or, as an int
# later, OverflowError (1e400 is infinity).
HOSTILE_TEXTS = st.sampled_from([
    "9" * 5000, "-" + "9" * 5000, "1e400", "-1e400", "NaN", "Infinity", "[" * 5000 + "]" * 5000,
    '{"a":' * 3000 + "1" + "}" * 3000, "[[1e400, 0]]", "1" * 25, "0." + "5" * 200,
])


STRICT_PATHS = [p for p in ALL_PATHS if p[0] != "stats" or len(p) == 1]


@settings(max_examples=200, deadline=None)
@given(path=st.sampled_from(STRICT_PATHS), text=HOSTILE_TEXTS)
def test_hostile_json_text_in_any_result_field_is_refused_by_name(path, text):
    data = json.dumps(replaced(RESULT, path, "@HOSTILE@")).replace('"@HOSTILE@"', text).encode()
    with pytest.raises(InvalidCleaningResultError, match="result.json"):
        parse_result(data, "result.json", MANIFEST)


MANIFEST_PATHS = [p for p in paths(json.loads(MANIFEST.to_json_bytes())) if p]


@settings(max_examples=200, deadline=None)
@given(path=st.sampled_from(MANIFEST_PATHS), text=HOSTILE_TEXTS)
def test_hostile_json_text_in_any_manifest_field_is_refused_by_name(path, text):
    document = replaced(json.loads(MANIFEST.to_json_bytes()), path, "@HOSTILE@")
    data = json.dumps(document).replace('"@HOSTILE@"', text).encode()
    try:
        SnapshotManifest.parse(data, "manifest.json")
    except InvalidCleaningResultError as exc:
        assert "manifest.json" in str(exc)


# Numbers no checked field can take but another writer's stats may hold: Python's json.dumps
# writes NaN and Infinity by default, and a counter may outgrow an int64.
UNREADABLE_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "9" * 30, "-" + "9" * 30, "0." + "5" * 100]


@pytest.mark.parametrize("text", UNREADABLE_NUMBERS)
def test_an_unreadable_number_in_stats_counts_as_zero(text):
    stats = {"records_read": "@A@", "map_utilization": "@B@", "duration_s": 1.5, "engine": "spark"}
    data = json.dumps({**RESULT, "stats": stats}).replace('"@A@"', text).replace('"@B@"', text)
    result = parse_result(data.encode(), "result.json", MANIFEST)
    assert (result.stat_int("records_read"), result.stat_float("map_utilization")) == (0, 0.0)
    assert (result.stat_float("duration_s"), result.stat_str("engine")) == (1.5, "spark")


def test_json_dumps_of_a_nan_stat_parses():
    """What Python writes by default (allow_nan=True), as a job computing 0/0 would."""
    result = parse_result(json.dumps({**RESULT, "stats": {"map_utilization": float("nan"),
                                                          "collision_rate": float("inf")}}).encode(),
                          "result.json", MANIFEST)
    assert (result.stat_float("map_utilization"), result.stat_float("collision_rate")) == (0.0, 0.0)


@pytest.mark.parametrize("text", UNREADABLE_NUMBERS)
@pytest.mark.parametrize("path", [("format",), ("partition",), ("cleaned_up_to_offset",), ("replaced_segments",),
                                  ("input_segments", 0, "size_bytes"), ("output_segments", 0, "base_offset")])
def test_an_unreadable_number_in_a_checked_field_is_refused_by_name(path, text):
    document = json.loads(json.dumps(RESULT))
    target = document
    for step in path[:-1]:
        target = target[step]
    if path == ("replaced_segments",):
        target[path[-1]] = [0, "@A@"]
    else:
        target[path[-1]] = "@A@"
    data = json.dumps(document).replace('"@A@"', text).encode()
    with pytest.raises(InvalidCleaningResultError, match=r"result.json.*(expected|found)"):
        parse_result(data, "result.json", MANIFEST)


def test_stats_keep_the_depth_and_size_bounds():
    deep = json.dumps({**RESULT, "stats": {"x": "@A@"}}).replace('"@A@"', "[" * 40 + "]" * 40)
    with pytest.raises(InvalidCleaningResultError, match="nests 42 levels"):
        parse_result(deep.encode(), "result.json", MANIFEST)
    big = json.dumps({**RESULT, "stats": {"x": "9" * RESULT_BYTES_MAX}})
    with pytest.raises(InvalidCleaningResultError, match="limit"):
        parse_result(big.encode(), "result.json", MANIFEST)
