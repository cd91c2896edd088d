"""Which ``OSError``s mean "a resource ran out" rather than "the disk failed".

Kafka takes a log directory offline on any ``IOException``. Two kinds are not failures of the
disk and pass when the resource comes back, so seglog answers them as retriable errors and keeps
the directory online:

- **Disk full** (ENOSPC, EDQUOT): appends, roll and creation refuse with ``LogDirFullError``;
  reads, DeleteTopic and DeleteRecords go on, so an operator can free space through the API, and
  produce resumes by itself once there is space again. This needs every write to fail *before*
  it changes anything, which the storage arranges: index pages are reserved (zeros written
  through ``pwrite``) before their store (abstract_index.py), a half-written batch is cut (file_records.py).
- **Descriptors** (EMFILE, ENFILE; ENOMEM from mmap, whose mapping count also runs out):
  ``TooManyOpenFilesError``, back-pressure. The open-segment budget (open_segments.py) keeps the
  process below its limit; reaching it anyway means the limit is too small for the load.

An fsync error is a failure whatever its errno: after a failed fsync Linux may drop the dirty
pages, so data may already be lost (the 2018 "fsyncgate"). ENOSPC and EDQUOT from fsync are such
failures (delayed allocation found no block for a page already acknowledged), never back-pressure.
A sync step asks with ``sync=True``: only running out of descriptors is retriable there, because
fsync(2) and fdatasync(2) never answer EMFILE/ENFILE: those come from the ``open`` a sync makes
first (a flush's descriptor, a directory's), before anything was synced or lost.
"""

from __future__ import annotations

import errno

from .errors import LogDirFullError, ResourceExhaustedError, TooManyOpenFilesError

__all__ = [
    "DISK_FULL_ERRNOS",
    "OUT_OF_DESCRIPTORS_ERRNOS",
    "SYNC_RETRIABLE_ERRNOS",
    "exhaustion_error",
    "is_exhaustion",
]

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
OUT_OF_DESCRIPTORS_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})
# The errnos a sync step may answer without having lost anything: only an ``open``'s (see above).
# ENOMEM is left out: it is not an open's answer for lack of descriptors, and from a writeback it
# may mean pages were dropped.
SYNC_RETRIABLE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})


def is_exhaustion(exc: BaseException, *, sync: bool = False) -> bool:
    if not isinstance(exc, OSError):
        return False
    if sync:
        return exc.errno in SYNC_RETRIABLE_ERRNOS
    return exc.errno in DISK_FULL_ERRNOS or exc.errno in OUT_OF_DESCRIPTORS_ERRNOS


def exhaustion_error(exc: BaseException, what: str, *, sync: bool = False) -> ResourceExhaustedError | None:
    """The retriable error for ``exc`` met while doing ``what`` (for example "appending to
    partition t-0"), or None when ``exc`` is not an exhausted resource. With ``sync`` (``exc``
    came from a step that fsyncs) only a descriptor shortage is: anything else is a failure."""
    if not is_exhaustion(exc, sync=sync):
        return None
    assert isinstance(exc, OSError)
    if exc.errno in DISK_FULL_ERRNOS:
        return LogDirFullError(
            f"no space left on the log directory's file system while {what}: free space (for "
            f"example DeleteTopic or DeleteRecords) and retry; reads still work ({exc.strerror})"
        )
    if exc.errno in OUT_OF_DESCRIPTORS_ERRNOS:
        return TooManyOpenFilesError(
            f"out of file descriptors or mappings while {what}: retry later, or raise the "
            f"service's RLIMIT_NOFILE / open_segments_max ({exc.strerror})"
        )
    return None
