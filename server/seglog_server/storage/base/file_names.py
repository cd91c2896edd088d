"""Names of the files inside a partition directory (Kafka's ``LogFileUtils``).

A segment's files are named by its base offset rendered in decimal and left-padded with zeros to
20 digits (enough for any int64), followed by the file kind and, during a life-cycle step, one
more suffix appended to the *whole* name::

    00000000000000000045.log              record batches
    00000000000000000045.index            sparse offset index
    00000000000000000045.timeindex        time index
    00000000000000000045.log.deleted      removed from the log, unlinked after file.delete.delay.ms
    00000000000000000045.log.cleaned      a replacement segment still being written
    00000000000000000045.log.swap         a finished replacement, ready to take the final name

Parsing takes the text before the first ``.`` as the offset, so it works on every suffix.
"""

from __future__ import annotations

import os

__all__ = [
    "CLEANED_SUFFIX",
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "OFFSET_DIGITS",
    "SWAP_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "filename_prefix",
    "is_index_file",
    "is_log_file",
    "log_path",
    "offset_from_name",
    "offset_index_path",
    "replace_suffix",
    "time_index_path",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
# Never written by seglog (no transactions), but recognised so a Kafka directory loads and its
# orphans are cleaned up like Kafka's.
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

# 20 digits hold the largest int64 (9,223,372,036,854,775,807 has 19) so names sort like offsets.
OFFSET_DIGITS = 20

_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def filename_prefix(offset: int) -> str:
    """The 20-digit zero-padded decimal name of ``offset`` (``45`` -> ``000...045``)."""
    assert offset >= 0, f"offsets in file names are never negative, found {offset}"
    return f"{offset:0{OFFSET_DIGITS}d}"


def log_path(directory: str, base_offset: int, suffix: str = "") -> str:
    return os.path.join(directory, filename_prefix(base_offset) + LOG_SUFFIX + suffix)


def offset_index_path(directory: str, base_offset: int, suffix: str = "") -> str:
    return os.path.join(directory, filename_prefix(base_offset) + INDEX_SUFFIX + suffix)


def time_index_path(directory: str, base_offset: int, suffix: str = "") -> str:
    return os.path.join(directory, filename_prefix(base_offset) + TIME_INDEX_SUFFIX + suffix)


def offset_from_name(name: str) -> int:
    """The offset a file name starts with; ValueError when the name does not start with one."""
    base = os.path.basename(name)
    prefix = base.split(".", 1)[0]
    if not prefix.isdigit():
        raise ValueError(f"file name {base!r} does not start with an offset")
    return int(prefix)


def is_log_file(name: str) -> bool:
    """A ``.log`` file with no life-cycle suffix."""
    return name.endswith(LOG_SUFFIX)


def is_index_file(name: str) -> bool:
    """An ``.index``, ``.timeindex`` or ``.txnindex`` file with no life-cycle suffix."""
    return name.endswith(_INDEX_SUFFIXES)


def replace_suffix(path: str, old_suffix: str, new_suffix: str) -> str:
    """``path`` with its trailing ``old_suffix`` (possibly empty) replaced by ``new_suffix``."""
    if old_suffix and not path.endswith(old_suffix):
        raise ValueError(f"{path!r} does not end with {old_suffix!r}")
    stem = path[: len(path) - len(old_suffix)] if old_suffix else path
    return stem + new_suffix
