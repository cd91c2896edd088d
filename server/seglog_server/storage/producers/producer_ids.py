"""Producer ids for InitProducerId, never handed out twice, restarts and directory failures included.

Kafka's controller hands brokers blocks of 1000 ids (ProducerIdsRecord in the metadata log) and
each broker serves ids from its block. seglog has no metadata log: it keeps the block counter in a
small file, ``producer-id-block``, in every online log directory (JBOD: any of them may fail).
Before the first id of a block is given out, the end of that block is written (tmp + fsync +
rename + directory fsync) to every online directory, and the block is used only when at least one
write was durable. A directory whose write fails is left out of the block's *holders* (and, unless
the failure was an exhausted resource, reported so the manager takes it offline).

The file is text, in the style of Kafka's checkpoint files::

    1                   version
    4000                the first id not yet reserved
    2                   how many directories this block was written to (its holders)
    /data/a             one holder per line (absolute paths)
    /data/b

A restart starts at the largest counter a directory holds, *when that can be shown to be the
newest*: every holder named in the newest file is online again. Then the newest block is among
the files read, because every block's holders overlap the previous block's (``_reserve`` jumps
to the wall clock when they would not). Otherwise the directory holding the newest block may be
the one that failed (missing, offline, or taken out of ``log_dirs``), and the counter starts at
the wall clock in milliseconds times ``BLOCK_SIZE`` (or the largest counter found, if larger): an
id reserved at fewer than ``BLOCK_SIZE`` ids per millisecond, on average since the first run, is
below it. The same floor is taken when a file is damaged or unreadable, when the newest file is a
version-0 one (no holders named), and when no directory holds a file: a first start looks like a
start whose only holders are gone or replaced by empty disks, so a first start's ids begin at the
wall clock too (int64 ids leave room for that for some 290,000 years). The floor assumes a wall
clock that does not step back across restarts.

In cluster mode the ids come from one counter for the whole cluster instead (Kafka's controller
block allocation; seglog_server/cluster/producer_id_blocks.py, a key in etcd): the service gives
the storage a ``ProducerIdBlocks`` callable (``LogManager.use_producer_id_blocks``) and
``AllocatedProducerIds`` serves ids from the blocks it returns, in place of the local files,
which two instances would fill with overlapping ids (each floor is only its own wall clock). The
storage never imports the cluster package: it knows only the callable.

Reusing an id would be harmful: a partition that still remembers the old producer would refuse
the new one's sequence 0 as out of order, or take it for a retry. Every producer id starts at
epoch 0.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..base.fs import FileSystem

__all__ = ["BLOCK_SIZE", "PRODUCER_ID_BLOCK_FILE", "AllocatedProducerIds", "ProducerIdBlocks", "ProducerIdManager"]

_LOG = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_FILE = "producer-id-block"
# Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE: one fsync'd write per thousand producers.
BLOCK_SIZE = 1000
_VERSION = 1
_LEGACY_VERSION = 0  # "0\n<end>\n": no holders recorded
_ID_MAX = 2**63 - 1 - BLOCK_SIZE
# A file larger than this is not one we wrote (a few holders of at most PATH_MAX bytes each).
_FILE_BYTES_MAX = 256 * 1024

DirError = Callable[[str, OSError], None]
# Reserves a block of BLOCK_SIZE ids no other caller anywhere got and returns its first id; blocking;
# raises (nothing reserved) when it cannot. Cluster mode: an etcd counter.
ProducerIdBlocks = Callable[[], int]


@dataclass(frozen=True)
class _Block:
    end: int  # the first id not reserved
    holders: frozenset[str] | None  # None: a version-0 file, holders unknown


class ProducerIdManager:
    """Hands out producer ids; thread-safe. ``dirs`` gives the online log directories (absolute
    paths); ``on_dir_error`` hears of a directory whose block write failed."""

    def __init__(
        self,
        fs: FileSystem,
        dirs: Callable[[], Sequence[str]],
        now_ms: Callable[[], int],
        *,
        on_dir_error: DirError | None = None,
    ) -> None:
        self._fs = fs
        self._dirs = dirs
        self._now_ms = now_ms
        self._on_dir_error = on_dir_error
        self._lock = threading.Lock()
        self._last_error = OSError("no online log directory to reserve producer ids in")
        self._next_id, self._holders = self._load()
        self._block_end = self._next_id  # nothing reserved yet in this run

    # -- load --------------------------------------------------------------------------------
    def _load(self) -> tuple[int, frozenset[str]]:
        """The first id this run may reserve from, and the directories holding it."""
        online = list(self._dirs())
        blocks: dict[str, _Block] = {}
        damaged = False
        for directory in online:
            block, ok = self._read(directory)
            damaged |= not ok
            if block is not None:
                blocks[directory] = block
        if not blocks:
            why = "a producer-id block file is damaged or unreadable" if damaged else (
                "no log directory holds a producer-id block (a first start, or the directories "
                "that held it are gone)"
            )
            return self._floor(0, why, level=logging.INFO), frozenset()
        newest = max(blocks.values(), key=lambda block: block.end)
        holders = frozenset(d for d, block in blocks.items() if block.end == newest.end)
        if damaged:
            return self._floor(newest.end, "a producer-id block file is damaged or unreadable"), holders
        if newest.holders is None:
            return self._floor(newest.end, "the producer-id block file names no holders (version 0)"), holders
        missing = sorted(newest.holders - set(online))
        if missing:
            why = f"the newest producer-id block was also written to {missing}, not online now"
            return self._floor(newest.end, why), holders
        return newest.end, holders

    def _read(self, directory: str) -> tuple[_Block | None, bool]:
        """(the directory's block or None, whether the file was absent or sound)."""
        path = os.path.join(directory, PRODUCER_ID_BLOCK_FILE)
        try:
            text = _read_text(self._fs, path)
        except FileNotFoundError:
            return None, True
        except OSError as exc:  # unreadable: as untrusted as a damaged one
            _LOG.warning("%s cannot be read: %s", path, exc)
            return None, False
        block = _parse(text)
        if block is None:
            _LOG.warning("%s is damaged: not trusted", path)
        return block, block is not None

    def _floor(self, found: int, why: str, *, level: int = logging.WARNING) -> int:
        """The wall-clock floor (see the module docstring), or ``found`` if larger."""
        floor = max(found, self._now_ms() * BLOCK_SIZE)
        _LOG.log(level, "%s: producer ids restart at %d (the wall clock times %d)", why, floor, BLOCK_SIZE)
        return floor

    # -- allocation --------------------------------------------------------------------------
    def next_id(self) -> int:
        """A producer id no earlier call, in this run or a former one, returned. Raises OSError
        when no online directory took the block durably (nothing is handed out then)."""
        with self._lock:
            if self._next_id >= self._block_end:
                self._reserve()
            producer_id = self._next_id
            self._next_id += 1
            return producer_id

    def _reserve(self) -> None:
        block_start = self._next_id
        written = self._write_block(block_start + BLOCK_SIZE)
        if written and self._holders and not written & self._holders:
            # Every copy of the previous block is in a directory this write missed: a restart
            # with those directories alone would trust their older counter. Jump beyond it.
            block_start = self._floor(block_start, "no holder of the previous producer-id block took the next")
            written = self._write_block(block_start + BLOCK_SIZE)
        if not written:
            raise self._last_error
        self._next_id = block_start
        self._block_end = block_start + BLOCK_SIZE
        self._holders = written

    def _write_block(self, block_end: int) -> frozenset[str]:
        """Writes the block to every online directory, naming as holders the directories it
        reaches: written again, to fewer, until every directory named took it."""
        if block_end > _ID_MAX:
            raise OverflowError("producer ids are exhausted")
        self._last_error = OSError("no online log directory to reserve producer ids in")
        candidates = frozenset(self._dirs())
        while candidates:
            data = _encode(_Block(block_end, candidates))
            written = frozenset(d for d in sorted(candidates) if self._write_one(d, data))
            if written == candidates:
                return written
            candidates = written
        return frozenset()

    def _write_one(self, directory: str, data: bytes) -> bool:
        try:
            self._fs.write_atomically(os.path.join(directory, PRODUCER_ID_BLOCK_FILE), data)
        except OSError as exc:
            _LOG.warning("reserving producer ids in %s failed: %s", directory, exc)
            self._last_error = exc
            if self._on_dir_error is not None:
                self._on_dir_error(directory, exc)
            return False
        return True


class AllocatedProducerIds:
    """Hands out producer ids from blocks reserved by ``reserve_block``; thread-safe. A failed
    reservation raises what ``reserve_block`` raised, and the next call tries again."""

    def __init__(self, reserve_block: ProducerIdBlocks) -> None:
        self._reserve_block = reserve_block
        self._lock = threading.Lock()
        self._next_id = self._block_end = 0

    def next_id(self) -> int:
        with self._lock:
            if self._next_id >= self._block_end:
                start = self._reserve_block()
                if not 0 <= start <= _ID_MAX:
                    raise OverflowError(f"producer-id block at {start} is out of range")
                self._next_id, self._block_end = start, start + BLOCK_SIZE
            producer_id = self._next_id
            self._next_id += 1
            return producer_id


def _read_text(fs: FileSystem, path: str) -> str:
    fd = fs.open(path, os.O_RDONLY)
    try:
        return fs.pread(fd, _FILE_BYTES_MAX, 0).decode("utf-8", errors="surrogateescape")
    finally:
        fs.close(fd)


def _encode(block: _Block) -> bytes:
    assert block.holders is not None
    lines = [str(_VERSION), str(block.end), str(len(block.holders)), *sorted(block.holders)]
    return ("\n".join(lines) + "\n").encode("utf-8", errors="surrogateescape")


def _parse(text: str) -> _Block | None:
    lines = text.split("\n")
    if len(lines) < 3 or lines[-1] != "" or len(text) >= _FILE_BYTES_MAX:
        return None
    end = _parse_id(lines[1])
    if end is None:
        return None
    if lines[0] == str(_LEGACY_VERSION) and len(lines) == 3:
        return _Block(end, None)
    if lines[0] != str(_VERSION) or not lines[2].isdigit():
        return None
    holders = lines[3:-1]
    if int(lines[2]) != len(holders) or not all(holders):
        return None
    return _Block(end, frozenset(holders))


def _parse_id(value: str) -> int | None:
    if not value.isdigit() or len(value) > 19:
        return None
    number = int(value)
    return number if number <= _ID_MAX else None
