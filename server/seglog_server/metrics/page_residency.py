"""Which pages of a file are in the page cache: ``mincore(2)`` over a fresh read-only mapping.

mincore reports, for a file mapping, whether each page of the *file* is resident in the page
cache, whether or not this process ever touched it (this is how util-linux ``fincore`` works).
Mapping costs no I/O: nothing is read, no page is faulted in. Used at scrape time for
``seglog_index_resident_ratio`` (rate-limited by the caller) and by ExplainLookup, never on the
produce/fetch paths. Linux only; elsewhere every answer is "unknown" (an empty vector).

Why not page faults: on this machine kind cold mmap reads barely raise the major-fault count
(readahead, fault-around and large folios absorb them; reference/platform-notes.md section 6), so
residency is what shows an index going cold.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os

__all__ = ["PAGE_BYTES", "resident_pages", "residency_counts"]

PAGE_BYTES = mmap.PAGESIZE

_PROT_READ = 0x1
_MAP_SHARED = 0x01
_MAP_FAILED = ctypes.c_void_p(-1).value


def _load_libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
    return libc


_LIBC = _load_libc()


# mincore's vector byte -> its residency bit (the other bits are reserved), for bytes.translate.
_RESIDENT_BIT = bytes(byte & 1 for byte in range(256))


def resident_pages(path: str, bytes_max: int | None = None) -> bytes:
    """One byte per page of ``path`` (of its first ``bytes_max`` bytes, when given): 1 when the
    page is in the page cache. Empty when the file is empty, missing, or mincore is unavailable.
    ``bytes_max`` keeps a preallocated index (10 MiB, a few entries used) to the pages asked
    about: the mapping and the vector then cover those pages only."""
    if _LIBC is None:
        return b""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        length = os.fstat(fd).st_size
        if bytes_max is not None:
            length = min(length, bytes_max)
        if length == 0:
            return b""
        address = _LIBC.mmap(None, length, _PROT_READ, _MAP_SHARED, fd, 0)
        if address is None or address == _MAP_FAILED:
            return b""
        try:
            vector = ctypes.create_string_buffer((length + PAGE_BYTES - 1) // PAGE_BYTES)
            if _LIBC.mincore(address, length, vector) != 0:
                return b""
            return vector.raw.translate(_RESIDENT_BIT)
        finally:
            _LIBC.munmap(address, length)
    finally:
        os.close(fd)


def residency_counts(path: str) -> tuple[int, int]:
    """(resident pages, total pages) of ``path``; (0, 0) when unknown."""
    vector = resident_pages(path)
    return sum(vector), len(vector)
