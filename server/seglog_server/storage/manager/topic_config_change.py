"""A topic's configs changed after creation: Kafka's IncrementalAlterConfigs on a TOPIC resource.

A topic's config is "service defaults + overrides" (``format/topic_metadata.py``). A change is a
set of SET and DELETE operations on the overrides, as Kafka's ``AlterConfigOp.OpType``: SET gives a
name a value, DELETE removes the override so the name returns to the service default. The result is
validated exactly as CreateTopic validates its configs (``LogConfig.from_properties``: unknown names
and bad values refused, naming the key), and nothing changes when it is refused.

What a changed value does to the live logs follows Kafka, where ``UnifiedLog.updateConfig`` swaps the
log's config and each rule reads it when it next runs: flush.messages, max.message.bytes and
message.timestamp.type at the next append; segment.bytes, segment.ms and segment.index.bytes at the
next roll (the active segment keeps its size); retention.* at the next retention pass;
cleanup.policy and the compaction lags at the next cleaner listing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from ..base.errors import InvalidConfigError
from ..base.fs import FileSystem
from ..base.log_config import LogConfig
from ..format.topic_metadata import TopicMetadata, write_topic_metadata

__all__ = [
    "UNCHANGEABLE_CONFIGS",
    "PartitionWriteError",
    "changed_overrides",
    "check_changeable",
    "write_overrides",
]

_log = logging.getLogger(__name__)

# Names fixed at creation. A tiered log's remote tier (its uploads, its remote segments' metadata
# and the topic id that keys them in the store) is opened with the log; turning it on or off on a
# live log is not done here (Kafka 3.6 also refuses turning it off).
UNCHANGEABLE_CONFIGS = frozenset({"remote.storage.enable"})


def changed_overrides(
    overrides: Mapping[str, str], set_configs: Mapping[str, str], delete_names: Iterable[str]
) -> dict[str, str]:
    """The overrides after DELETE then SET, names checked (values are checked by the caller's
    ``LogConfig.from_properties``). Raises InvalidConfigError for an unknown name (in either list)
    and for a name both set and deleted (Kafka refuses a name twice in one resource)."""
    deleted = list(delete_names)
    known = set(LogConfig.known_names())
    for name in [*set_configs, *deleted]:
        if name not in known:
            raise InvalidConfigError(
                f"unknown topic config {name!r}; known configs: {', '.join(sorted(known))}")
    both = sorted(set(set_configs) & set(deleted))
    if both:
        raise InvalidConfigError(f"topic config {both[0]!r} is both set and deleted in one change")
    result = {name: value for name, value in overrides.items() if name not in deleted}
    result.update(set_configs)
    return result


def check_changeable(topic: str, before: LogConfig, after: LogConfig) -> None:
    """Raises InvalidConfigError when a name fixed at creation would change value."""
    old, new = before.to_properties(), after.to_properties()
    for name in sorted(UNCHANGEABLE_CONFIGS):
        if old[name] != new[name]:
            raise InvalidConfigError(
                f"topic {topic!r}: {name} is fixed at creation ({old[name]}); it cannot be changed "
                f"to {new[name]}")


def write_overrides(
    partition_dirs: Sequence[str], before: TopicMetadata, overrides: Mapping[str, str], fs: FileSystem
) -> None:
    """Rewrites ``topic.properties`` in every partition directory with the new overrides, each
    file atomically (a crash leaves each file old or new, never torn). When one write fails, the
    files already rewritten are put back (best effort: a failure there is logged) and the
    failure is raised as ``PartitionWriteError`` naming the directory, its cause chained."""
    after = replace(before, overrides=dict(overrides))
    written: list[str] = []
    for path in partition_dirs:
        try:
            write_topic_metadata(path, after, fs=fs)
        except BaseException as exc:
            _put_back(written, before, fs)
            raise PartitionWriteError(path, exc) from exc
        written.append(path)


class PartitionWriteError(Exception):
    """Carries the partition directory whose ``topic.properties`` could not be written."""

    def __init__(self, path: str, cause: BaseException) -> None:
        super().__init__(f"{path}: {cause}")
        self.path = path
        self.cause = cause


def _put_back(paths: Sequence[str], before: TopicMetadata, fs: FileSystem) -> None:
    for path in paths:
        try:
            write_topic_metadata(path, before, fs=fs)
        except OSError as exc:
            _log.warning("%s: the topic's previous configs not put back after a failed change: %s "
                         "(the topic takes one partition's file at the next start)", path, exc)
