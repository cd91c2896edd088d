"""The consumer's arguments that contradict each other are refused at construction, in the
caller's thread, before anything connects: a group member subscribes (``group_id`` and
``topics``), a consumer without a group is given its topic (and partitions) by hand, never both
(KafkaConsumer refuses subscribe without a group.id and mixing subscribe with assign)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import seglog
from seglog import _sync

GROUP_ONLY = {"enable_auto_commit": True, "auto_commit_interval_ms": 1000, "on_assign": print, "on_revoke": print,
              "group_instance_id": "i-1"}
MANUAL_ONLY = {"topic": "t", "partition": 0, "start": "earliest"}

CONTRADICTIONS = [
    ({"group_id": "g"}, "topics="),
    ({"group_id": "g", "topics": []}, "topics="),
    ({"group_id": "g", "topics": "orders"}, "a list of topic names"),
    ({"group_id": "", "topics": ["a"]}, "group_id"),
    ({"topics": ["a"]}, "group_id"),
    ({"topics": ["a"], "topic": "a"}, "group_id"),
    ({"group_id": "g", "topics": ["a"], "topic": "a"}, "topic= and partition="),
    ({"group_id": "g", "topics": ["a"], "partition": [0, 1]}, "topic= and partition="),
    ({"group_id": "g", "topics": ["a"], "start": "earliest"}, "auto_offset_reset"),
    ({"topic": "t", "enable_auto_commit": True}, "enable_auto_commit"),
    ({"topic": "t", "on_assign": print}, "on_assign"),
    ({"topic": "t", "on_revoke": print}, "on_revoke"),
    ({"topic": "t", "auto_commit_interval_ms": 100}, "auto_commit_interval_ms"),
    ({"topic": "t", "group_instance_id": "i-1"}, "group_instance_id"),
    ({"group_id": "g", "topics": ["a"], "auto_commit_interval_ms": 0}, "auto_commit_interval_ms"),
    ({"group_id": "g", "topics": ["a"], "group_instance_id": ""}, "group_instance_id"),
    ({"group_id": "g", "topics": ["a"], "auto_offset_reset": "smallest"}, "auto_offset_reset"),
]


@pytest.mark.parametrize(("arguments", "message"), CONTRADICTIONS, ids=[str(a) for a, _ in CONTRADICTIONS])
@pytest.mark.parametrize("cls", [seglog.Consumer, seglog.AsyncConsumer])
def test_contradictory_arguments_are_refused_at_construction(cls, arguments, message):
    with pytest.raises(ValueError, match=message):
        cls("127.0.0.1:1", **arguments)
    assert _sync._shared is None  # no loop thread was started for it


@given(group_only=st.dictionaries(st.sampled_from(sorted(GROUP_ONLY)), st.just(None), min_size=1),
       manual_only=st.dictionaries(st.sampled_from(sorted(MANUAL_ONLY)), st.just(None)))
def test_any_group_option_without_a_group_and_any_assignment_with_one_is_refused(group_only, manual_only):
    """For every mix: group options on a consumer without a group, or hand-assignment options
    on a group member, fail at construction naming an option of the mix."""
    chosen = {name: GROUP_ONLY[name] for name in group_only}
    without_group = {"topic": "t", **chosen}
    with pytest.raises(ValueError) as refused:
        seglog.AsyncConsumer("127.0.0.1:1", **without_group)
    assert any(name in str(refused.value) for name in chosen)
    if manual_only:
        assigned = {name: MANUAL_ONLY[name] for name in manual_only}
        with pytest.raises(ValueError) as refused:
            seglog.AsyncConsumer("127.0.0.1:1", group_id="g", topics=["a"], **assigned)
        assert any(name in str(refused.value) for name in assigned) or "auto_offset_reset" in str(refused.value)


def test_a_group_member_and_a_consumer_without_a_group_construct_without_connecting():
    member = seglog.AsyncConsumer("127.0.0.1:1", group_id="g", topics=["a", "b"])
    assert member.group_id == "g"
    plain = seglog.AsyncConsumer("127.0.0.1:1", "t", enable_auto_commit=False)
    assert plain.group_id is None
