"""Offsets lost to damage of a closed segment, remembered in the partition directory.

Kafka, replicated, deletes every segment after a cut and fetches them again from the leader.
seglog has one copy: when recovery cuts the tail of a segment that is not the last, the later
segments are kept (log_loader.py pass 4) and the offsets between the cut and the next segment's
base offset are gone for good. Reads must not step over them as compaction's gaps are stepped
over: a Fetch at an offset in such a range fails with DATA_LOSS naming the range
(``OffsetsLostError``), until an operator accepts the loss by moving the log start offset past
the range (DeleteRecords to its end) or reads on from its end.

The files alone cannot tell such a range from a gap compaction left, and once cut the segment
looks whole, so the range is written down the moment the cut is found, in a file of the
partition directory (written atomically through the ``fs`` seam, so it survives restarts)::

    0                   version
    2                   number of ranges
    50 100              "<first lost offset> <end offset, exclusive>", ascending, disjoint
    170 171

The loader ignores the file (its name starts with no digit). Ranges wholly below the log start
offset are accepted losses and are dropped when the file is next written.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Sequence

from ..base.errors import CorruptCheckpointError, OffsetsLostError
from ..base.fs import FileSystem

__all__ = ["LOST_OFFSETS_FILE", "LostOffsets"]

LOST_OFFSETS_FILE = "lost-offset-ranges"
_VERSION = 0
_LOG = logging.getLogger(__name__)
_OFFSET_MAX = 2**63 - 1


class LostOffsets:
    """The lost ranges of one partition: [start, end) pairs, ascending and disjoint."""

    def __init__(self, directory: str, fs: FileSystem, ranges: Sequence[tuple[int, int]] = ()) -> None:
        self._path = os.path.join(directory, LOST_OFFSETS_FILE)
        self._fs = fs
        self._starts = [start for start, _ in ranges]
        self._ends = [end for _, end in ranges]

    @classmethod
    def read(cls, directory: str, fs: FileSystem) -> LostOffsets:
        """The ranges on disk (none without the file); CorruptCheckpointError when it is damaged."""
        path = os.path.join(directory, LOST_OFFSETS_FILE)
        try:
            fd = fs.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return cls(directory, fs)
        try:
            data = bytearray(fs.fsize(fd))
            fs.preadinto(fd, data, 0)
        finally:
            fs.close(fd)
        return cls(directory, fs, _parse(bytes(data), path))

    @property
    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends))

    def record(self, start: int, end: int, log_start_offset: int) -> None:
        """Adds [start, end) (merged with what it touches), drops ranges below the log start
        offset, and writes the file before returning (OSError from the disk propagates)."""
        assert 0 <= start < end, (start, end)
        ranges = [(s, e) for s, e in self.ranges if e > log_start_offset]
        ranges.append((start, end))
        ranges.sort()
        merged: list[tuple[int, int]] = []
        for s, e in ranges:
            if merged and s <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], e))
            else:
                merged.append((s, e))
        self._fs.write_atomically(self._path, _format(merged))
        self._starts = [s for s, _ in merged]
        self._ends = [e for _, e in merged]

    def note_cut(self, start: int, end: int, log_start_offset: int, what: str) -> None:
        """A cut left [start, end) between a segment's new end and the next segment's base:
        written down (nothing when the segment still reaches ``end``). On a compacted topic
        part of the range may be a gap the cleaner left; the files cannot tell, so all of it
        counts as lost."""
        if start >= end:
            return
        self.record(start, end, log_start_offset)
        _LOG.warning(
            "%s: offsets [%d, %d) were cut from %s and are lost; reads there answer DATA_LOSS until "
            "the log start offset moves past them (DeleteRecords to %d accepts the loss)",
            os.path.dirname(self._path), start, end, what, end,
        )

    def check(self, offset: int, log_start_offset: int, name: str) -> None:
        """Raises OffsetsLostError when a read at ``offset`` would step over lost offsets."""
        if not self._starts:
            return
        found = self.covering(offset)
        if found is None:
            return
        start, end = max(found[0], log_start_offset), found[1]
        raise OffsetsLostError(
            f"partition {name}: offsets [{start}, {end}) were lost (recovery cut them from a damaged "
            f"closed segment); a read at offset {offset} cannot continue past them. Read from offset "
            f"{end} on, or accept the loss with DeleteRecords to offset {end}",
            start, end,
        )

    def covering(self, offset: int) -> tuple[int, int] | None:
        """The range holding ``offset``, or None (the read path: usually no range at all)."""
        slot = bisect.bisect_right(self._starts, offset) - 1
        if slot >= 0 and offset < self._ends[slot]:
            return self._starts[slot], self._ends[slot]
        return None

    def offset_count(self, log_start_offset: int) -> int:
        """Lost offsets at or above the log start offset: the ones a reader can still run into."""
        return sum(e - max(s, log_start_offset) for s, e in zip(self._starts, self._ends) if e > log_start_offset)


def _format(ranges: list[tuple[int, int]]) -> bytes:
    lines = [str(_VERSION), str(len(ranges))] + [f"{start} {end}" for start, end in ranges]
    return ("\n".join(lines) + "\n").encode("ascii")


def _parse(data: bytes, path: str) -> list[tuple[int, int]]:
    def fail(what: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"{path}: {what}; expected version {_VERSION}, a count, then "
                                      f"'<start> <end>' lines in ascending order")

    try:
        lines = data.decode("ascii").splitlines()
        if not lines or int(lines[0]) != _VERSION or len(lines) < 2 or int(lines[1]) != len(lines) - 2:
            raise fail("bad version or count")
        ranges = [tuple(int(field) for field in line.split(" ")) for line in lines[2:]]
    except (UnicodeDecodeError, ValueError):
        raise fail("not a lost-offset file") from None
    previous_end = -1
    for one in ranges:
        if len(one) != 2 or not previous_end <= one[0] < one[1] <= _OFFSET_MAX:
            raise fail(f"bad range {one}")
        previous_end = one[1]
    return [(start, end) for start, end in ranges]
