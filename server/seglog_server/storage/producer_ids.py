"""Producer ids for InitProducerId, never handed out twice, restarts included.

Kafka's controller hands brokers blocks of 1000 ids (ProducerIdsRecord in the metadata log) and
each broker serves ids from its block. seglog keeps the block counter in a small file,
``producer-id-block``, in every online log directory: before the first id of a block is given
out, the end of that block is written (tmp + fsync + rename + directory fsync) to all of them.
A restart starts at the largest counter any directory holds, so an id of a block reserved before
a crash is skipped, never reused.

The file is text, in the style of Kafka's checkpoint files::

    0                   version
    4000                the first id not yet reserved

A file that cannot be parsed is not trusted: its directory's value is ignored and, unless
another directory has a valid one, the counter starts at the wall clock in milliseconds times
``BLOCK_SIZE``, above any id an earlier run could have reserved at fewer than ``BLOCK_SIZE``
blocks per millisecond.

Reusing an id would be harmful: a partition that still remembers the old producer would refuse
the new one's sequence 0 as out of order. Every producer id starts at epoch 0.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence

from .fs import FileSystem

__all__ = ["BLOCK_SIZE", "PRODUCER_ID_BLOCK_FILE", "ProducerIdManager"]

_LOG = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_FILE = "producer-id-block"
# Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE: one fsync'd write per thousand producers.
BLOCK_SIZE = 1000
_VERSION = 0
_ID_MAX = 2**63 - 1 - BLOCK_SIZE


class ProducerIdManager:
    """Hands out producer ids; thread-safe. ``dirs`` gives the online log directories."""

    def __init__(self, fs: FileSystem, dirs: Callable[[], Sequence[str]], now_ms: Callable[[], int]) -> None:
        self._fs = fs
        self._dirs = dirs
        self._lock = threading.Lock()
        self._next_id = self._load(now_ms)
        self._block_end = self._next_id  # nothing reserved yet in this run

    def _load(self, now_ms: Callable[[], int]) -> int:
        found = 0
        damaged = False
        for directory in self._dirs():
            path = os.path.join(directory, PRODUCER_ID_BLOCK_FILE)
            try:
                text = _read_text(self._fs, path)
            except FileNotFoundError:
                continue
            except OSError as exc:  # unreadable: as untrusted as a damaged one
                _LOG.warning("%s cannot be read: %s", path, exc)
                text = ""
            value = _parse(text)
            if value is None:
                _LOG.warning("%s is damaged: not trusted (ids restart above the wall clock)", path)
                damaged = True
                continue
            found = max(found, value)
        if damaged:
            found = max(found, now_ms() * BLOCK_SIZE)
        return found

    def next_id(self) -> int:
        """A producer id no earlier call, in this run or a former one, returned."""
        with self._lock:
            if self._next_id >= self._block_end:
                self._reserve(self._next_id + BLOCK_SIZE)
            producer_id = self._next_id
            self._next_id += 1
            return producer_id

    def _reserve(self, block_end: int) -> None:
        if block_end > _ID_MAX:
            raise OverflowError("producer ids are exhausted")
        data = f"{_VERSION}\n{block_end}\n".encode()
        directories = list(self._dirs())
        if not directories:
            raise OSError("no online log directory to reserve producer ids in")
        for directory in directories:
            self._fs.write_atomically(os.path.join(directory, PRODUCER_ID_BLOCK_FILE), data)
        self._block_end = block_end


def _read_text(fs: FileSystem, path: str) -> str:
    fd = fs.open(path, os.O_RDONLY)
    try:
        return fs.pread(fd, 64, 0).decode("ascii", errors="replace")
    finally:
        fs.close(fd)


def _parse(text: str) -> int | None:
    lines = text.split("\n")
    if len(lines) != 3 or lines[2] != "" or lines[0] != str(_VERSION):
        return None
    value = lines[1]
    if not value.isdigit() or len(value) > 19:
        return None
    number = int(value)
    return number if number <= _ID_MAX else None
