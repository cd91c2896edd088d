"""A move's staging directory (``<topic>-<partition>.<id>-future``) is told apart from every other
partition's: the clean-up of an earlier attempt's copy deletes only its own partition's. Topic
names may hold '.' and '-', so a prefix match took topic ``a-1.b``'s copy for one of ``a``-1's."""

from __future__ import annotations

import uuid

from hypothesis import assume, given
from hypothesis import strategies as st

from seglog_server.rpc.move_rpcs import is_staging_of, staging_name
from seglog_server.storage.base.errors import InvalidTopicError
from seglog_server.storage.base.topic_partition import validate_topic

ATTEMPT_IDS = st.builds(lambda: uuid.uuid4().hex)


def _valid(topic: str) -> bool:
    try:
        validate_topic(topic)
    except InvalidTopicError:
        return False
    return True


# Names built from the characters topics may hold, weighted towards the separators.
TOPICS = st.text(alphabet=st.sampled_from("ab01.-_"), min_size=1, max_size=12).filter(_valid)
PARTITIONS = st.one_of(st.integers(min_value=0, max_value=3), st.integers(min_value=0, max_value=1 << 20))


@given(TOPICS, PARTITIONS, ATTEMPT_IDS)
def test_a_staging_name_is_its_own_partitions(topic, partition, attempt_id):
    assert is_staging_of(staging_name(topic, partition, attempt_id), topic, partition)


@given(TOPICS, PARTITIONS, TOPICS, PARTITIONS, ATTEMPT_IDS)
def test_a_staging_name_is_no_other_partitions(topic, partition, other_topic, other_partition, attempt_id):
    assume((topic, partition) != (other_topic, other_partition))
    assert not is_staging_of(staging_name(other_topic, other_partition, attempt_id), topic, partition)


@given(TOPICS, PARTITIONS, TOPICS, PARTITIONS, ATTEMPT_IDS)
def test_a_topic_named_after_another_partitions_prefix_keeps_its_staging_names(
        topic, partition, rest, other_partition, attempt_id):
    other_topic = f"{topic}-{partition}.{rest}"  # its staging names begin with "<topic>-<partition>."
    assume(_valid(other_topic))
    assert not is_staging_of(staging_name(other_topic, other_partition, attempt_id), topic, partition)


def test_a_topic_with_dots_and_dashes_and_the_partition_its_name_begins_with():
    named = staging_name("a-1.b", 0, "0" * 32)
    assert named == "a-1.b-0." + "0" * 32 + "-future"
    assert not is_staging_of(named, "a", 1)
    assert is_staging_of(named, "a-1.b", 0)


def test_names_that_are_not_staging_directories():
    attempt_id = "f" * 32
    for name in ("t-0", "t-0.-future", f"t-0.{attempt_id}", f"t-0.{attempt_id}-delete", f"t-0.{'F' * 32}-future",
                 f"t-0.{attempt_id[:31]}-future", f"t-00.{attempt_id}-future", f"xt-0.{attempt_id}-future"):
        assert not is_staging_of(name, "t", 0), name
