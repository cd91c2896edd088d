"""Topic names, partition numbers and partition directory names (Kafka's Topic.validate and
LocalLog.parseTopicPartitionName rules)."""

import os

import pytest

from seglog_server.storage.base.errors import InvalidTopicError
from seglog_server.storage.base.topic_partition import (
    DIR_NAME_LENGTH_MAX,
    PARTITION_COUNT_MAX,
    TOPIC_NAME_LENGTH_MAX,
    DirKind,
    TopicPartition,
    delete_dir_name,
    has_collision_chars,
    log_dir_name,
    parse_log_dir_name,
    partition_path,
    unify_collision_chars,
    validate_partition,
    validate_topic,
)


@pytest.mark.parametrize(
    "topic",
    ["a", "orders", "Orders.v2", "under_score", "dash-ed", "-", "_", "...", "a" * 249, "0"],
)
def test_validate_topic_accepts_kafka_legal_names(topic):
    assert validate_topic(topic) == topic


@pytest.mark.parametrize(
    ("topic", "reason"),
    [
        ("", "empty string"),
        (".", "'.' is not allowed"),
        ("..", "'..' is not allowed"),
        ("a" * 250, "longer than the maximum 249"),
        ("../x", "characters other than"),
        ("a/b", "characters other than"),
        ("a\\b", "characters other than"),
        ("/etc", "characters other than"),
        ("a b", "characters other than"),
        ("tab\t", "characters other than"),
        ("new\nline", "characters other than"),
        ("nul\x00", "characters other than"),
        ("caf\u00e9", "characters other than"),
        ("\u0430pple", "characters other than"),  # Cyrillic a
        ("\uff0e\uff0e", "characters other than"),  # full-width dots
        ("a:b", "characters other than"),
        ("a*", "characters other than"),
    ],
)
def test_validate_topic_rejects_illegal_names_with_the_reason(topic, reason):
    with pytest.raises(InvalidTopicError, match="topic name is invalid") as info:
        validate_topic(topic)
    assert reason in str(info.value)


def test_validate_topic_rejects_non_strings():
    with pytest.raises(InvalidTopicError, match="expected a string"):
        validate_topic(b"orders")


def test_topic_length_limit_is_kafkas():
    assert TOPIC_NAME_LENGTH_MAX == 249
    validate_topic("x" * TOPIC_NAME_LENGTH_MAX)
    with pytest.raises(InvalidTopicError):
        validate_topic("x" * (TOPIC_NAME_LENGTH_MAX + 1))


@pytest.mark.parametrize("partition", [0, 1, PARTITION_COUNT_MAX - 1])
def test_validate_partition_accepts_non_negative_ints_below_the_limit(partition):
    assert validate_partition(partition) == partition


@pytest.mark.parametrize("partition", [-1, PARTITION_COUNT_MAX, True, "0", 1.0, None])
def test_validate_partition_rejects_negative_huge_and_non_int(partition):
    with pytest.raises(InvalidTopicError, match="partition"):
        validate_partition(partition)


def test_log_dir_name_is_topic_dash_partition():
    assert log_dir_name(TopicPartition("my-topic", 12)) == "my-topic-12"
    assert str(TopicPartition("t", 0)) == "t-0"


def test_longest_legal_name_fits_the_file_name_limit():
    name = log_dir_name(TopicPartition("t" * TOPIC_NAME_LENGTH_MAX, PARTITION_COUNT_MAX - 1))
    assert len(name) <= DIR_NAME_LENGTH_MAX


def test_log_dir_name_validates_both_parts():
    with pytest.raises(InvalidTopicError):
        log_dir_name(TopicPartition("../etc", 0))
    with pytest.raises(InvalidTopicError):
        log_dir_name(TopicPartition("t", -1))


def test_parse_splits_at_the_last_dash():
    parsed = parse_log_dir_name("my-topic-with-dashes-7")
    assert parsed.topic_partition == TopicPartition("my-topic-with-dashes", 7)
    assert parsed.kind == DirKind.LIVE


def test_parse_reads_a_double_dash_as_a_topic_ending_in_dash():
    # Kafka splits at the last '-', so "t--1" is topic "t-" partition 1, never partition -1.
    assert parse_log_dir_name("t--1").topic_partition == TopicPartition("t-", 1)


def test_parse_round_trips_log_dir_name():
    tp = TopicPartition("a.b_c-d", 42)
    assert parse_log_dir_name(log_dir_name(tp)).topic_partition == tp


@pytest.mark.parametrize(
    "name",
    [
        "",
        "nodash",
        "-0",  # empty topic
        "topic-",  # empty partition
        "topic-x",
        "topic-1.5",
        "topic-007",  # not the canonical rendering of 7
        "topic- 1",
        "topic-+1",
        "lost+found",
        "a/b-0",
        "..-0",
        "topic-99999999999",  # beyond int32
    ],
)
def test_parse_rejects_names_that_are_not_partition_dirs(name):
    with pytest.raises(InvalidTopicError, match="not a partition directory|topic name is invalid"):
        parse_log_dir_name(name)


def test_delete_dir_name_has_a_32_hex_id_and_parses_back():
    tp = TopicPartition("orders", 3)
    name = delete_dir_name(tp, "0123456789abcdef0123456789abcdef")
    assert name == "orders-3.0123456789abcdef0123456789abcdef-delete"
    parsed = parse_log_dir_name(name)
    assert parsed == (tp, DirKind.DELETE)


def test_delete_dir_name_is_random_by_default():
    tp = TopicPartition("orders", 3)
    assert delete_dir_name(tp) != delete_dir_name(tp)


def test_delete_dir_name_truncates_long_topics_to_255():
    tp = TopicPartition("t" * TOPIC_NAME_LENGTH_MAX, 99_999)
    name = delete_dir_name(tp)
    assert len(name) == DIR_NAME_LENGTH_MAX
    assert name.endswith("-delete")
    assert parse_log_dir_name(name).kind == DirKind.DELETE


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("t-0.abc-future", DirKind.FUTURE),
        ("t-0.abc-stray", DirKind.STRAY),
        ("t-0.abc-delete", DirKind.DELETE),
    ],
)
def test_parse_recognises_suffixed_dirs(name, kind):
    assert parse_log_dir_name(name) == (TopicPartition("t", 0), kind)


@pytest.mark.parametrize("name", ["t-delete", "t-0-delete", "t-0.-delete", "-0.abc-delete"])
def test_parse_rejects_malformed_suffixed_dirs(name):
    with pytest.raises(InvalidTopicError):
        parse_log_dir_name(name)


def test_collision_chars_unify_dot_and_underscore():
    assert has_collision_chars("a.b") and has_collision_chars("a_b")
    assert not has_collision_chars("a-b")
    assert unify_collision_chars("a.b") == unify_collision_chars("a_b")


def test_partition_path_stays_inside_the_log_dir(tmp_path):
    path = partition_path(str(tmp_path), TopicPartition("orders", 1))
    assert path == os.path.join(str(tmp_path), "orders-1")


def test_partition_path_keeps_a_symlinked_log_dir_as_configured(tmp_path):
    disk = tmp_path / "disk1"
    disk.mkdir()
    alias = tmp_path / "data"
    os.symlink(disk, alias)
    path = partition_path(str(alias), TopicPartition("orders", 0))
    assert path == os.path.join(str(alias), "orders-0")


@pytest.mark.parametrize("topic", ["..", "../x", "a/b", "/abs", "."])
def test_partition_path_refuses_traversal(tmp_path, topic):
    with pytest.raises(InvalidTopicError):
        partition_path(str(tmp_path), TopicPartition(topic, 0))


def test_partition_path_refuses_a_partition_dir_symlinked_elsewhere(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, log_dir / "orders-0")
    with pytest.raises(InvalidTopicError, match="outside the log directory"):
        partition_path(str(log_dir), TopicPartition("orders", 0))
