"""Rot written into an offset index file on disk, as a failing disk or an outside writer would:
the tests of the read guard, the rebuild and its counters (unit and integration) share it.

A slot's entry is rewritten in place; the load checks only the index's tail, so a rotted entry
mid-file survives a clean restart and the first read over it meets the lie."""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

from seglog_server.storage.format.offset_index import ENTRY

__all__ = ["rot_index_entries", "rot_mid_entry"]


def rot_index_entries(index_path: str | pathlib.Path,
                      rot: Mapping[int, tuple[int | None, int | None]]) -> None:
    """Rewrites each ``slot: (relative_offset, position)`` of ``rot`` in the index file; a None
    keeps that half of the entry as written."""
    with open(index_path, "r+b") as f:
        for slot, (relative, position) in rot.items():
            f.seek(slot * ENTRY.size)
            old_relative, old_position = ENTRY.unpack(f.read(ENTRY.size))
            f.seek(slot * ENTRY.size)
            f.write(ENTRY.pack(old_relative if relative is None else relative,
                               old_position if position is None else position))


def rot_mid_entry(partition_dir: str | pathlib.Path) -> int:
    """The partition's one offset index: its middle entry rotted to relative offset 3, out of
    order, which the load passes and a read past it meets. Returns the rotted slot."""
    [index] = pathlib.Path(partition_dir).glob("*.index")
    slot = index.stat().st_size // ENTRY.size // 2
    assert slot > 10, f"{index}: too few entries ({2 * slot}) for a mid-file rot below them"
    rot_index_entries(index, {slot: (3, None)})
    return slot
