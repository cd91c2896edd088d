"""Kafka's remote segment states and the JSON state record: transitions, round trip, damage."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog_server.storage.base.errors import CorruptRemoteObjectError
from seglog_server.storage.remote.remote_segment_metadata import (
    FILE_KINDS,
    METADATA_BYTES_MAX,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    new_segment_id,
)

S = RemoteLogSegmentState
# Kafka's RemoteLogSegmentState.isValidTransition, written out.
KAFKA_TRANSITIONS = {
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED), (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED), (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
} | {(s, s) for s in S}


def record(**changes):
    fields = dict(topic="events", partition=3, topic_id="0123456789abcdef0123456789abcdef", segment_id=new_segment_id(), base_offset=100,
                  end_offset=199, max_timestamp_ms=5, files={".log": 10, ".index": 8},
                  state=S.COPY_SEGMENT_STARTED, event_timestamp_ms=7, leader_epochs=((1, 100),))
    fields.update(changes)
    return RemoteLogSegmentMetadata(**fields)


def test_transitions_are_kafkas():
    assert {(a, b) for a in S for b in S if a.may_become(b)} == KAFKA_TRANSITIONS


def test_state_values_are_kafkas_wire_bytes():
    assert [s.value for s in S] == [0, 1, 2, 3]


def test_finished_cannot_go_back_to_started():
    with pytest.raises(AssertionError, match="cannot become"):
        record(state=S.COPY_SEGMENT_FINISHED).with_state(S.COPY_SEGMENT_STARTED, 0)


@given(base=st.integers(0, 2**62), length=st.integers(0, 2**20), state=st.sampled_from(list(S)),
       files=st.dictionaries(st.sampled_from(FILE_KINDS[1:]), st.integers(0, 2**40)),
       epochs=st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**62)), max_size=5),
       topic=st.from_regex(r"[a-zA-Z0-9._-]{1,249}", fullmatch=True))
def test_json_round_trip(base, length, state, files, epochs, topic):
    original = record(topic=topic, base_offset=base, end_offset=base + length, state=state,
                      files={".log": length, **files}, leader_epochs=tuple(epochs))
    assert RemoteLogSegmentMetadata.from_json(original.to_json(), "k") == original


@pytest.mark.parametrize(("change", "message"), [
    ({"version": 1}, "'version': 1, expected 2"),  # the layout before topic ids
    ({"topic_id": "../events"}, "'topic_id': expected 32 hex digits"),
    ({"topic_id": 7}, "'topic_id': expected str"),
    ({"state": "COPY_SEGMENT_HALF"}, "'state': expected one of"),
    ({"segment_id": "../../etc"}, "32 hex digits"),
    ({"base_offset": 10, "end_offset": 9}, r"'end_offset': expected an integer in \[10,"),
    ({"files": {".index": 3}}, "'files': expected .log"),
    ({"files": {".log": -1}}, r"'\.log': expected an integer in \[0,"),
    ({"partition": "0"}, "'partition': expected int"),
    ({"event_timestamp_ms": True}, "'event_timestamp_ms': expected int, found bool"),
    # Hostile values the parser or int() once let through as ValueError / OverflowError:
    ({"leader_epochs": [[1e300, 0]]}, r"leader_epochs\[0\]: expected an integer"),
    ({"leader_epochs": [[1, 2, 3]]}, r"leader_epochs\[0\]: expected \[epoch, start_offset\]"),
    ({"leader_epochs": [["1", 0]]}, r"leader_epochs\[0\]: expected an integer"),
    ({"leader_epochs": {"1": 0}}, "'leader_epochs': expected list"),
    ({"base_offset": 2**63}, r"'base_offset': expected an integer in \[0,"),
])
def test_damaged_record_is_a_corrupt_remote_object_naming_the_key(change, message):
    raw = json.loads(record().to_json())
    raw.update(change)
    with pytest.raises(CorruptRemoteObjectError, match=message) as caught:
        RemoteLogSegmentMetadata.from_json(json.dumps(raw).encode(), "bucket/events/3/metadata/x.json")
    assert "events/3/metadata/x.json" in str(caught.value)


def test_not_json_and_missing_fields_are_corrupt():
    for data in (b"\xff\x00", b"[]", b"{}", b'{"version": 2}', b"{"):
        with pytest.raises(CorruptRemoteObjectError, match="not UTF-8|expected a JSON object|missing|not valid JSON"):
            RemoteLogSegmentMetadata.from_json(data, "k")


def test_oversized_record_is_refused_before_parsing():
    with pytest.raises(CorruptRemoteObjectError, match="above"):
        RemoteLogSegmentMetadata.from_json(b" " * (METADATA_BYTES_MAX + 1), "k")


@pytest.mark.parametrize(("text", "message"), [
    (b'{"version": 2, "leader_epochs": [[1e400, 0]]}', "not finite"),
    (b'{"version": 2, "base_offset": ' + b"9" * 5000 + b"}", "an integer of 5000 characters"),
    (b'{"version": 2, "max_timestamp_ms": NaN}', "NaN is not a JSON number"),
    (b"[" * 100_000, "nests 100000 levels deep"),
])
def test_hostile_json_is_a_corrupt_remote_object_not_a_python_error(text, message):
    with pytest.raises(CorruptRemoteObjectError, match=message):
        RemoteLogSegmentMetadata.from_json(text, "bucket/events/3/metadata/x.json")
