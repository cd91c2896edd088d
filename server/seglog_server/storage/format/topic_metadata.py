"""What seglog remembers about a topic across restarts: ``topic.properties`` in each partition dir.

Kafka keeps topic configs in its metadata log (KRaft) or ZooKeeper; seglog has neither, so each
partition directory carries a small text file, written atomically once at CreateTopic::

    # seglog topic metadata (written by CreateTopic, read at start-up)
    version=0
    topic=orders
    topic.id=5f0c0e2ad8e44c3c9d6f1b7a2e4c8d10
    partition.count=3
    config.retention.ms=86400000
    config.cleanup.policy=compact

``config.*`` lines are the topic's *overrides* under Kafka's names, not the full config: like a
Kafka topic, a seglog topic is "service defaults + overrides", so a changed service default applies
to every topic that did not override it. Every partition holds a copy so that any surviving
partition (another log dir may be offline) still knows the topic's config and partition count.
A partition directory without the file (a Kafka partition directory copied in) gets the service
defaults. Lines are ``key=value``; '#' starts a comment line; blank lines are ignored.

``topic.id`` (a random UUID, 32 hex digits, like Kafka's ``partition.metadata``) names one
incarnation of a topic: when start-up finds the leftover ``-delete`` directory of an interrupted
DeleteTopic, it finishes deleting the partitions with the same id, and only those (a topic
re-created under the same name has a new id).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..base.errors import CorruptTopicMetadataError
from ..base.fs import REAL_FS, FileSystem
from ..base.topic_partition import PARTITION_COUNT_MAX, validate_topic

__all__ = [
    "TOPIC_METADATA_FILE_NAME",
    "TOPIC_METADATA_VERSION",
    "CorruptTopicMetadataError",
    "TopicMetadata",
    "format_topic_metadata",
    "new_topic_id",
    "parse_topic_metadata",
    "read_topic_metadata",
    "write_topic_metadata",
]

TOPIC_METADATA_FILE_NAME = "topic.properties"
TOPIC_METADATA_VERSION = 0
_CONFIG_PREFIX = "config."
_HEADER = "# seglog topic metadata (written by CreateTopic, read at start-up)"
_TOPIC_ID = re.compile(r"[0-9a-f]{32}")
# A few hundred bytes in practice; a bigger file is not ours.
_METADATA_BYTES_MAX = 1 << 20



@dataclass(frozen=True)
class TopicMetadata:
    topic: str
    topic_id: str  # 32 lowercase hex digits
    partition_count: int
    overrides: Mapping[str, str] = field(default_factory=dict)


def new_topic_id() -> str:
    return uuid.uuid4().hex


def format_topic_metadata(metadata: TopicMetadata) -> bytes:
    assert 1 <= metadata.partition_count <= PARTITION_COUNT_MAX, metadata.partition_count
    assert _TOPIC_ID.fullmatch(metadata.topic_id), metadata.topic_id
    lines = [
        _HEADER,
        f"version={TOPIC_METADATA_VERSION}",
        f"topic={validate_topic(metadata.topic)}",
        f"topic.id={metadata.topic_id}",
        f"partition.count={metadata.partition_count}",
    ]
    for name in sorted(metadata.overrides):
        value = metadata.overrides[name]
        assert "\n" not in value and "\r" not in value and "=" not in name, (name, value)
        lines.append(f"{_CONFIG_PREFIX}{name}={value}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def parse_topic_metadata(text: str, location: str = "<topic.properties>") -> TopicMetadata:
    values: dict[str, str] = {}
    overrides: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        if not sep:
            raise CorruptTopicMetadataError(f"malformed line in {location}: {line!r}")
        key = key.strip()
        target = overrides if key.startswith(_CONFIG_PREFIX) else values
        name = key[len(_CONFIG_PREFIX) :] if target is overrides else key
        if name in target:
            raise CorruptTopicMetadataError(f"duplicate key {key!r} in {location}")
        target[name] = value.strip()
    return _build(values, overrides, location)


def _build(values: dict[str, str], overrides: dict[str, str], location: str) -> TopicMetadata:
    expected = {"version", "topic", "topic.id", "partition.count"}
    if set(values) != expected:
        raise CorruptTopicMetadataError(
            f"{location} must hold exactly {sorted(expected)} besides config.* lines, "
            f"found {sorted(values)}"
        )
    if values["version"] != str(TOPIC_METADATA_VERSION):
        raise CorruptTopicMetadataError(
            f"unrecognised version {values['version']!r} in {location}, "
            f"expected {TOPIC_METADATA_VERSION}"
        )
    if not _TOPIC_ID.fullmatch(values["topic.id"]):
        raise CorruptTopicMetadataError(
            f"topic.id in {location} must be 32 lowercase hex digits, found {values['topic.id']!r}"
        )
    count_text = values["partition.count"]
    # Length first: int() refuses over 4,300 digits with a plain ValueError, not this file's error.
    if len(count_text) > len(str(PARTITION_COUNT_MAX)) or not count_text.isascii() or not count_text.isdigit():
        raise CorruptTopicMetadataError(
            f"partition.count in {location} must be an integer in [1, {PARTITION_COUNT_MAX}], "
            f"found {count_text[:40]!r}{'...' if len(count_text) > 40 else ''}"
        )
    count = int(count_text)
    if not 1 <= count <= PARTITION_COUNT_MAX:
        raise CorruptTopicMetadataError(
            f"partition.count in {location} must be in [1, {PARTITION_COUNT_MAX}], found {count}"
        )
    return TopicMetadata(values["topic"], values["topic.id"], count, overrides)


def read_topic_metadata(partition_dir: str, *, fs: FileSystem = REAL_FS) -> TopicMetadata | None:
    """The metadata of the partition in ``partition_dir``; None when the file is absent.

    Raises CorruptTopicMetadataError for bad content (its partition then stays offline with the
    error as the reason, every other partition serves, the files are kept), OSError when the disk
    fails. A file above ``_METADATA_BYTES_MAX`` is refused, not read in part.
    """
    path = os.path.join(partition_dir, TOPIC_METADATA_FILE_NAME)
    try:
        fd = fs.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        data = fs.pread(fd, _METADATA_BYTES_MAX + 1, 0)
    finally:
        fs.close(fd)
    if len(data) > _METADATA_BYTES_MAX:
        raise CorruptTopicMetadataError(f"{path} holds more than {_METADATA_BYTES_MAX} bytes: not seglog's")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptTopicMetadataError(f"{path} is not UTF-8 text") from None
    return parse_topic_metadata(text, path)


def write_topic_metadata(
    partition_dir: str, metadata: TopicMetadata, *, fs: FileSystem = REAL_FS
) -> None:
    """Writes the file atomically (tmp + fsync + rename + directory fsync)."""
    path = os.path.join(partition_dir, TOPIC_METADATA_FILE_NAME)
    fs.write_atomically(path, format_topic_metadata(metadata))
