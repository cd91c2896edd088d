"""Offset checkpoint files in Kafka's text format (``CheckpointFile`` + ``OffsetCheckpointFile``).

Layout (UTF-8 text, one item per line, ``\\n`` line ends)::

    0                   version; offset checkpoints only know version 0
    3                   number of entry lines that follow
    my-topic 0 1234     "<topic> <partition> <offset>": single spaces on write,
    my-topic 1 77       any whitespace run on read; exactly three fields
    other 0 5

Reading is as lenient as Kafka's and no more: an empty file, or one that stops after the version
line, is an empty map; a malformed line, an unknown version or a count that does not match the
lines raises ``CorruptCheckpointError`` (the log manager logs it and proceeds as if the file were
empty, which only costs a longer recovery). The bytes come from outside the process, so every
error they can cause is that one: a number longer than int64's 19 digits and a sign is malformed
before ``int()`` sees it (``int()`` refuses more than 4,300 digits with a plain ValueError), and a
file above ``CHECKPOINT_BYTES_MAX`` is refused before it is read. What "as if empty" costs per
file is in ``LogDir._read_checkpoint``: never a stored record. Writing is atomic: tmp + fsync +
rename + directory fsync, so a crash leaves the old file or the new one, never a torn one.

The same module serves ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
``cleaner-offset-checkpoint``; the files differ only in what the offsets mean.

``remote-deletion-checkpoint`` (partitions of deleted tiered topics whose objects are still to
delete) is the same text with version 1 and a fourth field, the topic id, since the objects are
keyed by it (``TopicIdPartition``)::

    1
    1
    my-topic 0 1700000000000 9c1e...    "<topic> <partition> <deletion time ms> <topic id>"

A version 0 file (no topic ids: the layout before them) is ``CorruptCheckpointError``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from ..base.errors import CorruptCheckpointError
from ..base.fs import REAL_FS, FileSystem
from ..base.topic_partition import TopicIdPartition, TopicPartition

__all__ = [
    "CHECKPOINT_VERSION",
    "CLEANER_OFFSET_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "RECOVERY_POINT_CHECKPOINT",
    "REMOTE_DELETION_CHECKPOINT",
    "CorruptCheckpointError",
    "OffsetCheckpointFile",
    "RemoteDeletionCheckpointFile",
    "format_offsets",
    "parse_offsets",
]

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
REMOTE_DELETION_CHECKPOINT = "remote-deletion-checkpoint"

CHECKPOINT_VERSION = 0
REMOTE_DELETION_CHECKPOINT_VERSION = 1

# Java's Integer/Long.parseInt alphabet (optional sign, ASCII digits). Python's int() would also
# accept surrounding spaces and '_' separators, which Kafka rejects.
_DECIMAL = re.compile(r"[+-]?[0-9]+")
_LINE_END = re.compile(r"\r\n|\r|\n")
# Java's \s: ASCII whitespace only.
_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# A sign and int64's 19 digits, plus one: longer text is no number the file may hold.
_NUMBER_CHARS_MAX = 21
# One line is at most ~290 bytes (a 249-character topic, a partition, an offset): 64 MiB is over
# 200,000 partitions of the longest names in one directory. A bigger file is not ours.
CHECKPOINT_BYTES_MAX = 64 << 20



def format_offsets(offsets: Mapping[TopicPartition, int]) -> bytes:
    """The file content for ``offsets``, entries sorted so equal maps give equal bytes."""
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    for tp in sorted(offsets):
        offset = offsets[tp]
        assert " " not in tp.topic and tp.topic, tp
        assert _INT64_MIN <= offset <= _INT64_MAX, offset
        lines.append(f"{tp.topic} {tp.partition} {offset}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def parse_offsets(text: str, location: str = "<checkpoint>") -> dict[TopicPartition, int]:
    """Parses checkpoint text; raises CorruptCheckpointError naming ``location`` and the line."""
    lines = _read_lines(text)
    if not lines:
        return {}
    version = _parse_int(lines[0], location, _INT32_MIN, _INT32_MAX)
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(
            f"unrecognised version {version} in checkpoint file {location}, "
            f"expected {CHECKPOINT_VERSION}"
        )
    if len(lines) == 1:
        return {}
    expected_count = _parse_int(lines[1], location, _INT32_MIN, _INT32_MAX)
    offsets: dict[TopicPartition, int] = {}
    entry_lines = lines[2:]
    for line in entry_lines:
        tp, offset = _parse_entry(line, location)
        offsets[tp] = offset
    if len(entry_lines) != expected_count:
        raise CorruptCheckpointError(
            f"expected {expected_count} entries in checkpoint file {location}, "
            f"found {len(entry_lines)}"
        )
    return offsets


def format_remote_deletions(deletions: Mapping[TopicIdPartition, int]) -> bytes:
    lines = [str(REMOTE_DELETION_CHECKPOINT_VERSION), str(len(deletions))]
    for tp in sorted(deletions):
        assert " " not in tp.topic and tp.topic and TopicIdPartition.is_topic_id(tp.topic_id), tp
        lines.append(f"{tp.topic} {tp.partition} {deletions[tp]} {tp.topic_id}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def parse_remote_deletions(text: str, location: str = "<checkpoint>") -> dict[TopicIdPartition, int]:
    lines = _read_lines(text)
    if not lines:
        return {}
    version = _parse_int(lines[0], location, _INT32_MIN, _INT32_MAX)
    if version != REMOTE_DELETION_CHECKPOINT_VERSION:
        raise CorruptCheckpointError(
            f"unrecognised version {version} in checkpoint file {location}, expected "
            f"{REMOTE_DELETION_CHECKPOINT_VERSION} (entries with topic ids)")
    if len(lines) == 1:
        return {}
    expected_count = _parse_int(lines[1], location, _INT32_MIN, _INT32_MAX)
    deletions: dict[TopicIdPartition, int] = {}
    for line in lines[2:]:
        fields = [f for f in _WHITESPACE.split(line) if f]
        if len(fields) != 4 or not TopicIdPartition.is_topic_id(fields[3]):
            raise _malformed(line, location)
        partition = _parse_int(fields[1], location, 0, _INT32_MAX, line)
        deletions[TopicIdPartition(fields[0], partition, fields[3])] = _parse_int(
            fields[2], location, _INT64_MIN, _INT64_MAX, line)
    if len(lines) - 2 != expected_count:
        raise CorruptCheckpointError(
            f"expected {expected_count} entries in checkpoint file {location}, found {len(lines) - 2}")
    return deletions


def _read_lines(text: str) -> list[str]:
    """Lines as Java's ``BufferedReader.readLine`` sees them (ends: \\n, \\r or \\r\\n)."""
    lines = _LINE_END.split(text)
    if lines[-1] == "":
        lines.pop()  # the terminator of the last line does not start another one
    return lines


def _parse_entry(line: str, location: str) -> tuple[TopicPartition, int]:
    fields = _WHITESPACE.split(line)
    while fields and fields[-1] == "":
        fields.pop()  # Java's String.split drops trailing empty fields, keeps leading ones
    if len(fields) != 3:
        raise _malformed(line, location)
    topic, partition_text, offset_text = fields
    partition = _parse_int(partition_text, location, _INT32_MIN, _INT32_MAX, line)
    offset = _parse_int(offset_text, location, _INT64_MIN, _INT64_MAX, line)
    return TopicPartition(topic, partition), offset


def _parse_int(text: str, location: str, low: int, high: int, line: str | None = None) -> int:
    if len(text) > _NUMBER_CHARS_MAX or not _DECIMAL.fullmatch(text):
        raise _malformed(text if line is None else line, location)
    value = int(text)
    if not low <= value <= high:
        raise _malformed(text if line is None else line, location)
    return value


def _malformed(line: str, location: str) -> CorruptCheckpointError:
    shown = repr(line) if len(line) <= 120 else f"{line[:120]!r}... ({len(line)} characters)"
    return CorruptCheckpointError(f"malformed line in checkpoint file {location}: {shown}")


class OffsetCheckpointFile:
    """One checkpoint file; ``read`` and ``write`` go through the injected file system."""

    def __init__(self, path: str, *, fs: FileSystem = REAL_FS) -> None:
        self._path = path
        self._fs = fs

    @property
    def path(self) -> str:
        return self._path

    def read(self) -> dict[TopicPartition, int]:
        """The stored offsets; a missing file is an empty map.

        Raises CorruptCheckpointError for bad content and OSError when the disk fails.
        """
        data = self._read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptCheckpointError(
                f"checkpoint file {self._path} is not UTF-8 text: {exc}"
            ) from None
        return parse_offsets(text, self._path)

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Replaces the file atomically with ``offsets``."""
        self._fs.write_atomically(self._path, format_offsets(offsets))

    def _read_bytes(self) -> bytes:
        try:
            fd = self._fs.open(self._path, os.O_RDONLY)
        except FileNotFoundError:
            return b""
        try:
            size = self._fs.fsize(fd)
            if size > CHECKPOINT_BYTES_MAX:
                raise CorruptCheckpointError(
                    f"checkpoint file {self._path} holds {size} bytes, above the {CHECKPOINT_BYTES_MAX} "
                    "a checkpoint may hold")
            chunks = []
            position = 0
            while position < size:
                chunk = self._fs.pread(fd, size - position, position)
                if not chunk:
                    break
                chunks.append(chunk)
                position += len(chunk)
            return b"".join(chunks)
        finally:
            self._fs.close(fd)


class RemoteDeletionCheckpointFile(OffsetCheckpointFile):
    """``remote-deletion-checkpoint``: deleted tiered partitions (with their topic ids) -> the
    deletion time in ms."""

    def read(self) -> dict[TopicIdPartition, int]:  # type: ignore[override]
        try:
            text = self._read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptCheckpointError(f"checkpoint file {self._path} is not UTF-8 text: {exc}") from None
        return parse_remote_deletions(text, self._path)

    def write(self, deletions: Mapping[TopicIdPartition, int]) -> None:  # type: ignore[override]
        self._fs.write_atomically(self._path, format_remote_deletions(deletions))
