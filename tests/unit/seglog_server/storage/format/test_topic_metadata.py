"""topic.properties: the per-partition record of a topic's partition count and config overrides."""

import os

import pytest

from seglog_server.storage.format.topic_metadata import (
    TOPIC_METADATA_FILE_NAME,
    CorruptTopicMetadataError,
    TopicMetadata,
    format_topic_metadata,
    parse_topic_metadata,
    read_topic_metadata,
    write_topic_metadata,
)

ID = "5f0c0e2ad8e44c3c9d6f1b7a2e4c8d10"
GOLDEN = (
    b"# seglog topic metadata (written by CreateTopic, read at start-up)\n"
    b"version=0\n"
    b"topic=orders\n"
    b"topic.id=5f0c0e2ad8e44c3c9d6f1b7a2e4c8d10\n"
    b"partition.count=3\n"
    b"config.cleanup.policy=compact\n"
    b"config.retention.ms=86400000\n"
)


def test_format_writes_the_golden_text_with_sorted_overrides():
    metadata = TopicMetadata(
        "orders", ID, 3, {"retention.ms": "86400000", "cleanup.policy": "compact"}
    )
    assert format_topic_metadata(metadata) == GOLDEN


def test_parse_reads_the_golden_text():
    metadata = parse_topic_metadata(GOLDEN.decode())
    assert metadata == TopicMetadata(
        "orders", ID, 3, {"cleanup.policy": "compact", "retention.ms": "86400000"}
    )


def test_parse_ignores_comments_blank_lines_and_spaces_around_equals():
    text = f"\n# c\nversion = 0\n  topic=t\ntopic.id ={ID}\npartition.count= 1\n\nconfig.flush.ms =5\n"
    assert parse_topic_metadata(text) == TopicMetadata("t", ID, 1, {"flush.ms": "5"})


T = f"topic=t\ntopic.id={ID}\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version=0\ntopic=t\n", "must hold exactly"),
        ("version=0\ntopic=t\npartition.count=1\n", "must hold exactly"),
        ("version=0\ntopic=t\ntopic.id=XYZ\npartition.count=1\n", "topic.id"),
        ("version=0\n" + T + "partition.count=1\nextra=1\n", "must hold exactly"),
        ("version=1\n" + T + "partition.count=1\n", "unrecognised version"),
        ("version=0\n" + T + "partition.count=0\n", "partition.count"),
        ("version=0\n" + T + "partition.count=-1\n", "partition.count"),
        ("version=0\n" + T + "partition.count=x\n", "partition.count"),
        ("version=0\n" + T + "partition.count=1\nno equals sign\n", "malformed line"),
        ("version=0\n" + T + "topic=u\npartition.count=1\n", "duplicate key"),
        ("version=0\n" + T + "partition.count=1\nconfig.a=1\nconfig.a=2\n", "duplicate key"),
    ],
)
def test_parse_refuses_malformed_content(text, message):
    with pytest.raises(CorruptTopicMetadataError, match=message):
        parse_topic_metadata(text)


def test_file_round_trips_and_is_written_atomically(tmp_path):
    metadata = TopicMetadata("t", ID, 2, {"segment.bytes": "1024"})
    write_topic_metadata(str(tmp_path), metadata)
    assert read_topic_metadata(str(tmp_path)) == metadata
    assert os.listdir(tmp_path) == [TOPIC_METADATA_FILE_NAME]


def test_read_of_a_directory_without_the_file_is_none(tmp_path):
    assert read_topic_metadata(str(tmp_path)) is None


def test_read_of_non_utf8_file_is_corrupt(tmp_path):
    (tmp_path / TOPIC_METADATA_FILE_NAME).write_bytes(b"\xff\xfe")
    with pytest.raises(CorruptTopicMetadataError, match="UTF-8"):
        read_topic_metadata(str(tmp_path))
