"""The ``leader-epoch-checkpoint`` file of a partition (Kafka's ``LeaderEpochCheckpointFile``).

Layout (UTF-8 text, one item per line, ``\\n`` line ends), the envelope of every Kafka checkpoint::

    0           version; leader-epoch checkpoints only know version 0
    2           number of entry lines that follow
    0 0         "<epoch> <startOffset>": the first offset appended under that epoch;
    3 1200      single spaces on write, any whitespace run on read; exactly two fields

Entries are written in epoch order. The file is a cache of the log: every entry comes from the
``partitionLeaderEpoch`` of the batches themselves (the owner stamps it on each append), so a
file that cannot be trusted is rebuilt from the log (leader_epoch_cache.py), never repaired.

Reading trusts nothing (a hostile or torn file must cost bounded work and end in one
``CorruptCheckpointError`` naming the file): at most ``LEADER_EPOCH_CHECKPOINT_BYTES_MAX`` bytes
are read, the count line is checked against ``ENTRY_COUNT_MAX`` and against the lines present
before any entry is parsed, each field is Java's decimal alphabet in its type's range (epoch
int32, offset int64), and the entries must be what the cache's rules can produce: epochs and
start offsets both non-negative and strictly increasing. Kafka reads the same envelope more
leniently (it re-sorts by epoch); we refuse instead, because we rebuild from the log.

Writing is atomic through the ``fs`` seam: tmp + fsync + rename + directory fsync, so a crash
leaves the old file or the new one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import NamedTuple

from ..base.errors import CorruptCheckpointError
from ..base.fs import REAL_FS, FileSystem

__all__ = [
    "ENTRY_COUNT_MAX",
    "LEADER_EPOCH_CHECKPOINT",
    "LEADER_EPOCH_CHECKPOINT_BYTES_MAX",
    "LEADER_EPOCH_CHECKPOINT_VERSION",
    "EpochEntry",
    "LeaderEpochCheckpointFile",
    "format_epochs",
    "parse_epochs",
]

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
LEADER_EPOCH_CHECKPOINT_VERSION = 0

# One entry per ownership change of the partition. A hundred thousand is far past anything an
# operator does (a move every ten minutes for two years); the limit bounds what a hostile file costs.
ENTRY_COUNT_MAX = 100_000
# The longest entry line is 11 + 1 + 20 + 1 bytes ("-2147483648 -9223372036854775808\n"); the
# envelope adds two short lines. Anything larger is not a file we wrote.
_ENTRY_LINE_BYTES_MAX = 33
LEADER_EPOCH_CHECKPOINT_BYTES_MAX = 64 + ENTRY_COUNT_MAX * _ENTRY_LINE_BYTES_MAX

_DECIMAL = re.compile(r"[+-]?[0-9]+")  # Java's Integer/Long.parseInt alphabet: no '_', no spaces
_LINE_END = re.compile(r"\r\n|\r|\n")  # BufferedReader.readLine's line ends
_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")  # Java's \s
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class EpochEntry(NamedTuple):
    """The first offset (``start_offset``) appended under leader epoch ``epoch``."""

    epoch: int
    start_offset: int


def format_epochs(entries: Iterable[EpochEntry]) -> bytes:
    """The file content for ``entries`` (already in epoch order, as the cache keeps them)."""
    entries = list(entries)
    lines = [str(LEADER_EPOCH_CHECKPOINT_VERSION), str(len(entries))]
    for epoch, start_offset in entries:
        assert 0 <= epoch <= _INT32_MAX and 0 <= start_offset <= _INT64_MAX, (epoch, start_offset)
        lines.append(f"{epoch} {start_offset}")
    return ("\n".join(lines) + "\n").encode("ascii")


def parse_epochs(data: bytes, location: str = "<leader-epoch-checkpoint>") -> list[EpochEntry]:
    """The entries of a file's bytes; raises CorruptCheckpointError naming ``location``.

    An empty file, or one that stops after the version line, holds no entries (Kafka's reading).
    """
    if len(data) > LEADER_EPOCH_CHECKPOINT_BYTES_MAX:
        raise CorruptCheckpointError(
            f"{location}: {len(data)} bytes or more, above the {LEADER_EPOCH_CHECKPOINT_BYTES_MAX} a "
            f"leader-epoch checkpoint of at most {ENTRY_COUNT_MAX} entries can take")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"{location}: not ASCII text ({exc})") from None
    lines = _LINE_END.split(text)
    if lines[-1] == "":
        lines.pop()  # the last line's terminator does not start another line
    if not lines:
        return []
    version = _parse_int(lines[0], location, _INT32_MIN, _INT32_MAX)
    if version != LEADER_EPOCH_CHECKPOINT_VERSION:
        raise CorruptCheckpointError(
            f"{location}: unrecognised version {version}, expected {LEADER_EPOCH_CHECKPOINT_VERSION}")
    if len(lines) == 1:
        return []
    count = _parse_int(lines[1], location, 0, ENTRY_COUNT_MAX)
    if count != len(lines) - 2:
        raise CorruptCheckpointError(f"{location}: expected {count} entries, found {len(lines) - 2} lines")
    entries = [_parse_entry(line, location) for line in lines[2:]]
    _check_increasing(entries, location)
    return entries


def _parse_entry(line: str, location: str) -> EpochEntry:
    fields = _WHITESPACE.split(line)
    while fields and fields[-1] == "":
        fields.pop()  # Java's String.split drops trailing empty fields, keeps leading ones
    if len(fields) != 2:
        raise _malformed(line, location)
    epoch = _parse_int(fields[0], location, 0, _INT32_MAX, line)
    start_offset = _parse_int(fields[1], location, 0, _INT64_MAX, line)
    return EpochEntry(epoch, start_offset)


def _check_increasing(entries: list[EpochEntry], location: str) -> None:
    for before, after in zip(entries, entries[1:]):
        if after.epoch <= before.epoch or after.start_offset <= before.start_offset:
            raise CorruptCheckpointError(
                f"{location}: entry {tuple(after)} does not follow {tuple(before)}: epochs and start "
                "offsets must both increase")


def _parse_int(text: str, location: str, low: int, high: int, line: str | None = None) -> int:
    if len(text) > 21 or not _DECIMAL.fullmatch(text):  # 21: a sign and int64's 19 digits, plus one
        raise _malformed(text if line is None else line, location)
    value = int(text)
    if not low <= value <= high:
        raise _malformed(text if line is None else line, location)
    return value


def _malformed(line: str, location: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(f"{location}: malformed line {line[:80]!r}")


class LeaderEpochCheckpointFile:
    """One partition's ``leader-epoch-checkpoint``; ``read`` and ``write`` go through ``fs``."""

    def __init__(self, directory: str, *, fs: FileSystem = REAL_FS) -> None:
        self._path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT)
        self._fs = fs

    @property
    def path(self) -> str:
        return self._path

    def exists(self) -> bool:
        return self._fs.exists(self._path)

    def read(self) -> list[EpochEntry]:
        """The stored entries; a missing file has none. Raises CorruptCheckpointError for bad
        content (at most ``LEADER_EPOCH_CHECKPOINT_BYTES_MAX`` + 1 bytes are read) and OSError
        when the disk fails."""
        try:
            fd = self._fs.open(self._path, os.O_RDONLY)
        except FileNotFoundError:
            return []
        try:
            data = self._read_bounded(fd)
        finally:
            self._fs.close(fd)
        return parse_epochs(data, self._path)

    def write(self, entries: Iterable[EpochEntry]) -> None:
        """Replaces the file atomically and durably with ``entries``."""
        self._fs.write_atomically(self._path, format_epochs(entries))

    def _read_bounded(self, fd: int) -> bytes:
        limit = LEADER_EPOCH_CHECKPOINT_BYTES_MAX + 1  # one byte past the limit says "too large"
        chunks: list[bytes] = []
        position = 0
        while position < limit:
            chunk = self._fs.pread(fd, min(limit - position, 1 << 20), position)
            if not chunk:
                break
            chunks.append(chunk)
            position += len(chunk)
        return b"".join(chunks)
