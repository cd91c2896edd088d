"""A cleaning snapshot can be taken of every topic Kafka allows: the id names a directory and must
start with a letter or digit and hold no ``..``, while a topic may start with ``_``, ``.`` or ``-``
(``__consumer_offsets``, the consumer groups' compacted topic) and hold ``..``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seglog_server.storage.base.topic_partition import TOPIC_NAME_LENGTH_MAX, validate_topic
from seglog_server.storage.cleaning.log_snapshot import check_snapshot_id, new_snapshot_id

legal_topics = st.text(
    alphabet="abcXYZ019._-", min_size=1, max_size=TOPIC_NAME_LENGTH_MAX
).filter(lambda topic: topic not in (".", ".."))


@given(topic=legal_topics, partition=st.integers(0, 99_999), now_ms=st.integers(0, 2**62))
def test_every_legal_topic_gets_a_valid_snapshot_id(topic, partition, now_ms):
    validate_topic(topic)
    snapshot_id = new_snapshot_id(topic, partition, now_ms)
    assert check_snapshot_id(snapshot_id) == snapshot_id
    assert snapshot_id.endswith(f"-{partition}-{now_ms}-{snapshot_id[-4:]}")


def test_the_consumer_offsets_topic_gets_a_readable_id():
    assert new_snapshot_id("__consumer_offsets", 7, 1).startswith("consumer_offsets-7-1-")


def test_a_topic_of_only_separators_still_gets_an_id():
    assert new_snapshot_id("__", 0, 1).startswith("topic-0-1-")
    assert ".." not in new_snapshot_id("a..b", 0, 1)
