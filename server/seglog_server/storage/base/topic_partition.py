"""Topic and partition names, and the directory names built from them.

A partition lives in ``<log dir>/<topic>-<partition>``; a partition being deleted is first renamed
to ``<topic>-<partition>.<uuid32hex>-delete`` (Kafka's ``LocalLog`` names). Names come from
clients, so they are validated with Kafka's rules (``Topic.validate``) *and* checked never to
leave their log directory: the legal alphabet has no separator, "." and ".." are refused, and the
resolved path is compared with the log directory as a second line of defence.

Parsing follows ``LocalLog.parseTopicPartitionName``: strip a ``.<id>-delete|-future|-stray``
tail, then split at the *last* '-' (topics may contain '-', partitions are plain integers).
"""

from __future__ import annotations

import os
import re
import uuid
from typing import NamedTuple

from .errors import InvalidTopicError

__all__ = [
    "DELETE_DIR_SUFFIX",
    "DIR_NAME_LENGTH_MAX",
    "FUTURE_DIR_SUFFIX",
    "PARTITION_COUNT_MAX",
    "STRAY_DIR_SUFFIX",
    "TOPIC_NAME_LENGTH_MAX",
    "DirKind",
    "ParsedDirName",
    "TopicIdPartition",
    "TopicPartition",
    "delete_dir_name",
    "has_collision_chars",
    "log_dir_name",
    "parse_log_dir_name",
    "partition_path",
    "unify_collision_chars",
    "validate_partition",
    "validate_topic",
]

# Kafka's limit: 249 leaves room for "-" and a partition number of up to 5 digits inside the
# 255-byte file-name limit of common file systems (ext4, xfs).
TOPIC_NAME_LENGTH_MAX = 249
DIR_NAME_LENGTH_MAX = 255
# Partitions 0..99,999 have at most 5 digits, so every legal "<topic>-<partition>" fits in
# DIR_NAME_LENGTH_MAX; it is also far beyond what one process can serve.
PARTITION_COUNT_MAX = 100_000
assert TOPIC_NAME_LENGTH_MAX + len("-") + len(str(PARTITION_COUNT_MAX - 1)) <= DIR_NAME_LENGTH_MAX

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
# "<topic>-<partition>.<id><suffix>", every part non-empty and without whitespace (Kafka's pattern).
_SUFFIXED_DIR = re.compile(r"(\S+)-(\S+)\.(\S+)(-delete|-future|-stray)")
# Java's Integer.parseInt alphabet; Python's int() would also take spaces and underscores.
_DECIMAL = re.compile(r"[+-]?[0-9]+")
_INT32_MAX = 2**31 - 1


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return log_dir_name(self)


_TOPIC_ID = re.compile(r"[0-9a-f]{32}")


class TopicIdPartition(NamedTuple):
    """A partition of one generation of a topic (Kafka's ``TopicIdPartition``): a topic deleted
    and created again under the same name is a new topic id. What the object store keys a
    partition's remote segments by, so one generation's objects are never another's."""

    topic: str
    partition: int
    topic_id: str  # 32 lowercase hex digits (partition.metadata's topic.id)

    def __str__(self) -> str:
        return f"{log_dir_name(TopicPartition(self.topic, self.partition))} (topic id {self.topic_id})"

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @staticmethod
    def is_topic_id(text: str) -> bool:
        return _TOPIC_ID.fullmatch(text) is not None


class DirKind:
    """What a directory found in a log directory is for."""

    LIVE = "live"  # <topic>-<partition>: a partition being served
    DELETE = "delete"  # scheduled for removal (interrupted delete)
    FUTURE = "future"  # Kafka's replica-move target; seglog never writes one
    STRAY = "stray"  # Kafka's stray replica; seglog never writes one


_SUFFIX_KINDS = {
    DELETE_DIR_SUFFIX: DirKind.DELETE,
    FUTURE_DIR_SUFFIX: DirKind.FUTURE,
    STRAY_DIR_SUFFIX: DirKind.STRAY,
}


class ParsedDirName(NamedTuple):
    topic_partition: TopicPartition
    kind: str  # a DirKind value


# -- validation -------------------------------------------------------------------------------
def validate_topic(topic: object) -> str:
    """Returns ``topic`` if Kafka would accept it as a topic name, else raises InvalidTopicError."""
    reason = _topic_problem(topic)
    if reason is not None:
        raise InvalidTopicError(f"topic name is invalid: {reason}")
    assert isinstance(topic, str)
    return topic


def _topic_problem(topic: object) -> str | None:
    if not isinstance(topic, str):
        return f"expected a string, found {type(topic).__name__}"
    if topic == "":
        return "the empty string is not allowed"
    if topic in (".", ".."):
        return f"{topic!r} is not allowed"
    if len(topic) > TOPIC_NAME_LENGTH_MAX:
        return (
            f"{topic[:40]!r}... is {len(topic)} characters long, "
            f"longer than the maximum {TOPIC_NAME_LENGTH_MAX}"
        )
    if not _LEGAL_TOPIC.fullmatch(topic):
        return f"{topic!r} contains characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def validate_partition(partition: object) -> int:
    """Returns ``partition`` if it is a non-negative int below PARTITION_COUNT_MAX."""
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise InvalidTopicError(f"partition must be an integer, found {partition!r}")
    if not 0 <= partition < PARTITION_COUNT_MAX:
        raise InvalidTopicError(
            f"partition must be in [0, {PARTITION_COUNT_MAX}), found {partition}"
        )
    return partition


def has_collision_chars(topic: str) -> bool:
    """'.' and '_' become the same character in metric names (Kafka's ``Topic.hasCollisionChars``)."""
    return "." in topic or "_" in topic


def unify_collision_chars(topic: str) -> str:
    return topic.replace(".", "_")


# -- directory names --------------------------------------------------------------------------
def log_dir_name(tp: TopicPartition) -> str:
    """``<topic>-<partition>``, after validating both parts."""
    return f"{validate_topic(tp.topic)}-{validate_partition(tp.partition)}"


def delete_dir_name(tp: TopicPartition, unique_id: str | None = None) -> str:
    """``<topic>-<partition>.<uuid32hex>-delete``; the topic is cut so the name fits in 255."""
    unique_id = uuid.uuid4().hex if unique_id is None else unique_id
    assert re.fullmatch(r"[0-9a-f]{32}", unique_id), unique_id
    tail = f"-{validate_partition(tp.partition)}.{unique_id}{DELETE_DIR_SUFFIX}"
    prefix = validate_topic(tp.topic)[: DIR_NAME_LENGTH_MAX - len(tail)]
    name = prefix + tail
    assert len(name) <= DIR_NAME_LENGTH_MAX
    return name


def parse_log_dir_name(name: str) -> ParsedDirName:
    """Reads the topic-partition out of a directory name found in a log directory.

    Raises InvalidTopicError when ``name`` is not a partition directory seglog could have made:
    no '-', a bad topic, a partition that is not a canonical non-negative integer.
    """
    kind = DirKind.LIVE
    base = name
    for suffix, suffix_kind in _SUFFIX_KINDS.items():
        if name.endswith(suffix):
            if not _SUFFIXED_DIR.fullmatch(name):
                raise InvalidTopicError(_not_a_partition_dir(name))
            kind = suffix_kind
            base = name[: name.rindex(".")]
            break
    topic, sep, partition_text = base.rpartition("-")
    if not sep or not topic or not _DECIMAL.fullmatch(partition_text):
        raise InvalidTopicError(_not_a_partition_dir(name))
    partition = int(partition_text)
    if not 0 <= partition <= _INT32_MAX or str(partition) != partition_text:
        raise InvalidTopicError(_not_a_partition_dir(name))
    validate_topic(topic)
    return ParsedDirName(TopicPartition(topic, partition), kind)


def _not_a_partition_dir(name: str) -> str:
    return (
        f"{name!r} is not a partition directory: expected <topic>-<partition> or "
        f"<topic>-<partition>.<id>-delete"
    )


def partition_path(log_dir: str, tp: TopicPartition) -> str:
    """The partition directory of ``tp`` inside ``log_dir`` (kept as configured, made absolute),
    proven not to escape it."""
    path = os.path.join(os.path.abspath(log_dir), log_dir_name(tp))
    # The alphabet already excludes separators; this catches what validation might miss
    # (a partition directory symlinked elsewhere, a future change to the rules). The log
    # directory itself may be a symlink (a mount point alias), so both sides are resolved.
    root = os.path.realpath(log_dir)
    resolved = os.path.realpath(path)
    if os.path.dirname(resolved) != root:
        raise InvalidTopicError(
            f"partition directory for {tp.topic!r} partition {tp.partition} resolves to "
            f"{resolved!r}, outside the log directory {root!r}"
        )
    return path
