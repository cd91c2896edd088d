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

A change is crash-consistent across the topic's partitions. Each ``topic.properties`` is
rewritten atomically, but a topic has one file per partition, so a crash between two of them left
the partitions disagreeing until the next change. Now the change first writes its result, the
whole new ``topic.properties``, atomically as an *intent* (``topic.properties.change``) into one
served partition directory of each log directory holding the topic, then rewrites every
partition's file, then removes the intents. Once every file is written the change is made: an
intent whose removal fails is logged and left, as it holds what the files hold and a start redoing
it changes nothing; a change first removes any intent left in the topic's partitions, so the
intents on disk are always one change's (failing after removing one, it puts the old file back in
every partition: a start that could not complete that change left them mixed). A start that finds
an intent of the topic's id completes it (``complete_interrupted_change``): every loaded
partition's file is rewritten to it and the live logs take its config. A crash before the first intent is durable leaves every file
old; from then on the change is completed, as a change that failed and could not put the old
files back is. One intent per log directory: a partition that loads is on an online directory,
and that directory holds a copy. Something named like the intent that is not a regular file (a
directory, a FIFO) was not written by a change: a start ignores it, a change leaves it where it is
and writes its intent into another partition directory of that log directory (refused, naming it,
when there is none).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from ..base.errors import InvalidConfigError, LogDirStateError
from ..base.fs import FileSystem
from ..base.log_config import LogConfig
from ..format.topic_metadata import (
    CorruptTopicMetadataError,
    TopicMetadata,
    format_topic_metadata,
    parse_topic_metadata,
    write_topic_metadata,
)

__all__ = [
    "CHANGE_INTENT_FILE_NAME",
    "UNCHANGEABLE_CONFIGS",
    "IntentReadError",
    "PartitionWriteError",
    "changed_overrides",
    "check_changeable",
    "complete_interrupted_change",
    "intent_dirs_of",
    "write_overrides",
]

CHANGE_INTENT_FILE_NAME = "topic.properties.change"
# An intent is one topic.properties: a few hundred bytes; the rest of a larger file is left unread
# (and the intent found corrupt).
_INTENT_BYTES_MAX = 1 << 20
# What reading something named like the intent that is not a regular file answers: a directory
# (EISDIR), a FIFO opened without blocking (ESPIPE), a socket (ENXIO).
_NOT_A_FILE_ERRNOS = frozenset({errno.EISDIR, errno.ESPIPE, errno.ENXIO})

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


def intent_dirs_of(partition_dirs_by_log_dir: Iterable[Sequence[str]], fs: FileSystem) -> list[str]:
    """Where a change writes its intent: in each log directory (its partition directories in
    order), the first whose intent name is free or a regular file. Something else under that name
    (a directory, a FIFO) is no intent and is left where it is. Raises LogDirStateError naming it
    when a log directory has no partition directory free."""
    chosen: list[str] = []
    for paths in partition_dirs_by_log_dir:
        taken = [path for path in paths if _taken_by_no_file(path, fs)]
        free = [path for path in paths if path not in taken]
        if not free:
            raise LogDirStateError(
                f"{os.path.join(taken[0], CHANGE_INTENT_FILE_NAME)} is not a regular file (nor is the "
                "name free in the topic's other partitions of its log directory): the change's intent "
                "cannot be written there; remove it and retry")
        chosen.append(free[0])
    return chosen


def _taken_by_no_file(path: str, fs: FileSystem) -> bool:
    try:
        return not fs.is_regular_file(os.path.join(path, CHANGE_INTENT_FILE_NAME))
    except OSError:
        return False  # free, or a failing disk: the intent's write meets it and fails as such


def write_overrides(
    partition_dirs: Sequence[str], before: TopicMetadata, overrides: Mapping[str, str], fs: FileSystem,
    *, intent_dirs: Sequence[str] = (),
) -> None:
    """Rewrites ``topic.properties`` in every partition directory with the new overrides, each
    file atomically (a crash leaves each file old or new, never torn), between writing the
    change's intent into each of ``intent_dirs`` and removing it (the module's docstring). When
    one write fails, the old file is put back (in every partition when an intent left over was
    removed first: a start that could not complete that change left the files mixed) and the
    intents removed (a failure there is logged, and the intents left: the next start completes
    the change) and the failure is raised as ``PartitionWriteError`` naming the directory, its
    cause chained."""
    after = replace(before, overrides=dict(overrides))
    intent = format_topic_metadata(after)
    # Every partition's, not only where this change writes: an intent left over (a removal that
    # failed, a start that could not complete a change) would undo this change at the next start.
    # Nothing changed yet, so a failure here is the change's.
    left_over = _remove_intents(partition_dirs, fs, quietly=False)
    intents: list[str] = []
    for path in intent_dirs:
        try:
            fs.write_atomically(os.path.join(path, CHANGE_INTENT_FILE_NAME), intent)
        except BaseException as exc:
            # No partition's file changed yet; this directory's intent may have landed.
            if not left_over or _put_back(partition_dirs, before, fs):
                _remove_intents([*intents, path], fs, quietly=True)
            raise PartitionWriteError(path, exc) from exc
        intents.append(path)
    written: list[str] = []
    for path in partition_dirs:
        try:
            write_topic_metadata(path, after, fs=fs)
        except BaseException as exc:
            # This one's rename may have landed; with an intent left over removed, the files not
            # written yet may hold that change.
            if _put_back(partition_dirs if left_over else [*written, path], before, fs):
                _remove_intents(intents, fs, quietly=True)
            raise PartitionWriteError(path, exc) from exc
        written.append(path)
    # Every file is new: the change is made whatever happens to its intents now.
    _remove_intents(intents, fs, quietly=True)


def _remove_intents(paths: Sequence[str], fs: FileSystem, *, quietly: bool) -> bool:
    """Removes the intents in ``paths``; True when one was there. Something named like the
    intent that is not a regular file is no intent: left where it is, with a warning. Quietly a
    failure is logged (the intent left holds what the files hold, or is dropped at the next
    start); otherwise (before a change writes anything) it is the directory's
    ``PartitionWriteError``."""
    found = False
    for path in paths:
        intent_path = os.path.join(path, CHANGE_INTENT_FILE_NAME)
        try:
            if not fs.is_regular_file(intent_path):
                _log.warning("%s: not removed as the intent of a topic config change: not a regular file",
                             intent_path)
                continue
            fs.unlink(intent_path)
        except FileNotFoundError:
            continue  # none here (most partitions): nothing to sync
        except OSError as exc:
            if not quietly:
                raise PartitionWriteError(path, exc) from exc
            _log.warning("%s: the intent of a topic config change not removed: %s (the next start "
                         "completes the change)", path, exc)
            continue
        found = True
        try:
            fs.fsync_dir(path)
        except OSError as exc:
            if not quietly:
                raise PartitionWriteError(path, exc) from exc
            _log.warning("%s: the intent of a topic config change not removed: %s (the next start "
                         "completes the change)", path, exc)
    return found


def complete_interrupted_change(
    partition_dirs: Sequence[str], topic_id: str, fs: FileSystem,
    validate: Callable[[TopicMetadata], LogConfig],
) -> tuple[TopicMetadata, LogConfig] | None:
    """At start: the change an intent in one of ``partition_dirs`` (a topic's loaded partitions)
    records for ``topic_id`` and its config, written to every partition's ``topic.properties`` and
    its intents removed (a removal that fails is logged); None when there is none. ``validate``
    answers the intent's config or raises InvalidConfigError, before anything is written: an
    intent of another topic id (left by a deleted incarnation), unreadable or invalid is removed
    (written whole, it would take every partition offline at the next start). Raises ``PartitionWriteError``
    when a write fails (the intents stay: the next start tries again) and ``IntentReadError``
    when an intent cannot be read. Anything named like an intent that is not a regular file is
    ignored."""
    found: list[str] = []
    change: tuple[TopicMetadata, LogConfig] | None = None
    for path in partition_dirs:
        intent_path = os.path.join(path, CHANGE_INTENT_FILE_NAME)
        try:
            text = _read_intent(intent_path, fs)
        except OSError as exc:
            if exc.errno not in _NOT_A_FILE_ERRNOS:
                raise IntentReadError(path, exc) from exc
            # Not written by a change (a change writes a file by rename): left where it is.
            _log.warning("ignoring %s, not a regular file: %s", intent_path, exc)
            continue
        if text is None:
            continue
        found.append(path)
        try:
            metadata = parse_topic_metadata(text, intent_path)
        except CorruptTopicMetadataError as exc:
            _log.warning("ignoring the unreadable intent of a topic config change: %s", exc)
            continue
        if metadata.topic_id != topic_id:
            continue
        try:
            change = metadata, validate(metadata)
        except InvalidConfigError as exc:
            _log.warning("ignoring the invalid intent of a topic config change in %s: %s", path, exc)
    if change is not None:
        _log.warning("topic %s: completing a config change interrupted by a stop (overrides %s)",
                     change[0].topic, dict(change[0].overrides))
        for path in partition_dirs:
            try:
                write_topic_metadata(path, change[0], fs=fs)
            except OSError as exc:
                raise PartitionWriteError(path, exc) from exc
    # Every file holds the change (or none was found): an intent left is redone or dropped again.
    _remove_intents(found, fs, quietly=True)
    return change


def _read_intent(intent_path: str, fs: FileSystem) -> str | None:
    """The intent's text; None when there is none. Opened without blocking: a FIFO named like
    the intent answers ESPIPE instead of holding the start."""
    try:
        fd = fs.open(intent_path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    try:
        return fs.pread(fd, _INTENT_BYTES_MAX, 0).decode("utf-8", errors="replace")
    finally:
        fs.close(fd)


class IntentReadError(Exception):
    """Carries the partition directory whose intent could not be read (its cause an I/O error)."""

    def __init__(self, path: str, cause: OSError) -> None:
        super().__init__(f"{os.path.join(path, CHANGE_INTENT_FILE_NAME)}: {cause}")
        self.path = path
        self.cause = cause


class PartitionWriteError(Exception):
    """Carries the partition directory whose ``topic.properties`` could not be written."""

    def __init__(self, path: str, cause: BaseException) -> None:
        super().__init__(f"{path}: {cause}")
        self.path = path
        self.cause = cause


def _put_back(paths: Sequence[str], before: TopicMetadata, fs: FileSystem) -> bool:
    """Writes the old file back into ``paths``; False when one could not be (logged)."""
    whole = True
    for path in paths:
        try:
            write_topic_metadata(path, before, fs=fs)
        except OSError as exc:
            whole = False
            _log.warning("%s: the topic's previous configs not put back after a failed change: %s "
                         "(the next start completes the change)", path, exc)
    return whole
