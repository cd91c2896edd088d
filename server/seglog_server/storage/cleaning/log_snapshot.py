"""Cleaning snapshots: hard links of a compacted log's cleanable segments plus a manifest
(CLEANING-CONTRACT.md), the input of the offline cleaner.

Layout, inside the log directory holding the partition (hard links need one filesystem)::

    <log dir>/.seglog-snapshots/<snapshot id>/
        00000000000000000000.log        hard links of the cleanable closed segments' .log files
        00000000000000002650.log
        manifest.json                   written last, atomically: its presence means complete
        cleaned/ ... result.json        written by the cleaning job (read by the install)

Taking one (``take_snapshot``) asks the log three explicit operations, each holding its lock
briefly: ``cleanable_view`` (the facts the choice is made from), ``snapshot_segments`` (the
chosen range's segments checked and hard-linked under one lock, one ``link`` per segment: ~0.5 ms
for 32 segments here; refused as stale if the log start moved meanwhile) and, once per segment,
``describe_segment`` (its next offset and times, a few microseconds), so appends never wait long. Closed segments never change in place (a
cleaning or retention replaces or renames them; the link keeps the old inode), so the checksums
are computed afterwards, off the lock, from the links. The log loader never looks here (it is
not a partition directory); a snapshot without ``manifest.json`` is removed at start-up.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from seglog.records import crc32c

from .cleaning_manifest import (
    MANIFEST_BYTES_MAX,
    ProducerLastBatch,
    SnapshotManifest,
    SnapshotSegment,
    manifest_configs,
)
from ..base.errors import InvalidCleaningResultError, InvalidSnapshotIdError, NotCleanableError
from ..base.fs import FileSystem
from ..log.unified_log import Log
from ..dirs.log_dir import SNAPSHOTS_DIR_NAME, remove_tree
from ..log.segment_views import SegmentDescription
from ..segment.log_segment import LogSegment
from .log_to_clean import LogToClean, log_to_clean

__all__ = [
    "CLEANED_DIR_NAME",
    "MANIFEST_FILE_NAME",
    "RESULT_FILE_NAME",
    "SNAPSHOTS_DIR_NAME",
    "TakenSnapshot",
    "check_snapshot_id",
    "file_crc32c",
    "new_snapshot_id",
    "read_capped",
    "read_manifest",
    "remove_snapshot",
    "snapshot_path",
    "snapshots_root",
    "take_snapshot",
]

MANIFEST_FILE_NAME = "manifest.json"
RESULT_FILE_NAME = "result.json"
CLEANED_DIR_NAME = "cleaned"

# Snapshot ids name directories: a plain name well under the 255-byte file-name limit.
_SNAPSHOT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
# The topic part of a new id: ids stay below 200 bytes with the partition, time and random tail.
_ID_TOPIC_CHARS_MAX = 160
_DOT_RUN = re.compile(r"\.{2,}")
# Checksums read files in pieces this large: big enough that a syscall per piece is noise.
_READ_CHUNK_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class TakenSnapshot:
    manifest: SnapshotManifest
    log_dir: str
    path: str
    # The live segments that were linked, so a commit in this process can check that the very
    # same segment objects are still in the log (besides sizes and checksums).
    segments: tuple[LogSegment, ...]


def snapshots_root(log_dir: str) -> str:
    return os.path.join(log_dir, SNAPSHOTS_DIR_NAME)


def snapshot_path(log_dir: str, snapshot_id: str) -> str:
    return os.path.join(snapshots_root(log_dir), check_snapshot_id(snapshot_id))


def check_snapshot_id(snapshot_id: str) -> str:
    if not isinstance(snapshot_id, str) or not _SNAPSHOT_ID.fullmatch(snapshot_id) or ".." in snapshot_id:
        raise InvalidSnapshotIdError(
            f"invalid snapshot id {str(snapshot_id)[:60]!r}: expected 1-200 characters from "
            f"[A-Za-z0-9._-], starting with a letter or digit, as CreateSnapshot returns them"
        )
    return snapshot_id


def new_snapshot_id(topic: str, partition: int, now_ms: int) -> str:
    """``<topic>-<partition>-<created ms>-<4 hex>`` (the contract's example form).

    Every legal topic name gives a valid id: Kafka allows a name that starts with ``.``, ``_`` or
    ``-`` (``__consumer_offsets``) or holds ``..``, which an id may not (it names a directory), so
    those leading characters are dropped and dot runs squeezed; the id only has to be unique and
    readable, the manifest names the topic exactly."""
    readable = _DOT_RUN.sub(".", topic[:_ID_TOPIC_CHARS_MAX]).lstrip("._-") or "topic"
    return check_snapshot_id(f"{readable}-{partition}-{now_ms}-{secrets.token_hex(2)}")


def take_snapshot(
    log: Log,
    log_dir: str,
    *,
    checkpoint: int | None,
    now_ms: int,
    snapshot_id: str,
    fs: FileSystem,
) -> TakenSnapshot:
    """Links the cleanable segments of ``log`` into a new snapshot and writes its manifest.

    Raises NotCleanableError when the topic is not compacted or nothing is cleanable, and
    OSError when the disk fails (the caller takes the directory offline). A failure leaves no
    snapshot directory behind (best effort: start-up removes incomplete ones anyway)."""
    if not log.config.is_compacted:
        raise NotCleanableError(
            f"{log.topic}-{log.partition} is not compacted (cleanup.policy="
            f"{','.join(sorted(log.config.cleanup_policy))}); only compacted topics are cleaned"
        )
    path = snapshot_path(log_dir, snapshot_id)
    fs.makedirs(path)
    try:
        to_clean = log_to_clean(log.cleanable_view(timestamps_from=checkpoint), checkpoint=checkpoint, now_ms=now_ms)
        _check_cleanable(log, to_clean)
        taken = log.snapshot_segments(
            to_clean.first_uncleanable_offset, link_into=path, log_start_offset=to_clean.log_start_offset
        )
        described = [_Described(linked.file, linked.size_bytes, log.describe_segment(linked.segment))
                     for linked in taken.linked]
        entries = tuple(
            SnapshotSegment(crc32c=file_crc32c(os.path.join(path, entry.file), entry.size_bytes, fs), **_fields(entry))
            for entry in described
        )
        manifest = SnapshotManifest(
            snapshot_id=snapshot_id,
            topic=log.topic,
            partition=log.partition,
            created_ms=now_ms,
            cleaning_time_ms=now_ms,
            log_start_offset=to_clean.log_start_offset,
            first_dirty_offset=to_clean.first_dirty_offset,
            first_uncleanable_offset=to_clean.first_uncleanable_offset,
            segments=entries,
            configs=manifest_configs(log.config.to_properties()),
            producers=_producers_within(taken.producer_last_offsets, described),
        )
        fs.write_atomically(os.path.join(path, MANIFEST_FILE_NAME), manifest.to_json_bytes())
        fs.fsync_dir(snapshots_root(log_dir))
    except BaseException:
        _remove_quietly(path, fs)
        raise
    return TakenSnapshot(manifest, log_dir, path, tuple(linked.segment for linked in taken.linked))


@dataclass(frozen=True)
class _Described:
    """A linked segment as the lock saw it (its checksum comes later, off the lock)."""

    file: str
    size_bytes: int
    segment: SegmentDescription

    @property
    def base_offset(self) -> int:
        return self.segment.base_offset

    @property
    def next_offset(self) -> int:
        return self.segment.next_offset


def _producers_within(last_offsets: Mapping[int, int], described: list[_Described]) -> tuple[ProducerLastBatch, ...]:
    """The producers whose last batch ends in the linked segments: the batches the cleaning
    must keep. Taken under the same lock as the links: a producer that writes after it only
    adds a batch past these segments, and the one kept here is then merely one batch more."""
    start, end = described[0].base_offset, described[-1].next_offset
    return tuple(
        ProducerLastBatch(pid, offset)
        for offset, pid in sorted((offset, pid) for pid, offset in last_offsets.items())
        if start <= offset < end
    )


def _fields(entry: _Described) -> dict[str, int | str]:
    return {
        "base_offset": entry.base_offset,
        "file": entry.file,
        "size_bytes": entry.size_bytes,
        "next_offset": entry.next_offset,
        "largest_timestamp_ms": entry.segment.largest_timestamp_ms,
        "last_modified_ms": entry.segment.last_modified_ms,
    }


def _check_cleanable(log: Log, to_clean: LogToClean) -> None:
    """NotCleanableError when the range holds no segment or no cleanable byte."""
    if to_clean.log_start_offset >= to_clean.first_uncleanable_offset or to_clean.cleanable_bytes == 0:
        raise NotCleanableError(
            f"{log.topic}-{log.partition} has nothing to clean: first dirty offset "
            f"{to_clean.first_dirty_offset}, first uncleanable offset {to_clean.first_uncleanable_offset} "
            f"(the active segment and segments younger than min.compaction.lag.ms are never cleaned)"
        )


def file_crc32c(path: str, size_bytes: int, fs: FileSystem) -> int:
    """CRC-32C of the first ``size_bytes`` of ``path``; the file must be exactly that long."""
    fd = fs.open(path, os.O_RDONLY)
    try:
        found = fs.fsize(fd)
        if found != size_bytes:
            raise InvalidCleaningResultError(f"{path} is {found} bytes, expected {size_bytes}")
        buffer = bytearray(min(_READ_CHUNK_BYTES, max(size_bytes, 1)))
        value = 0
        position = 0
        while position < size_bytes:
            want = min(len(buffer), size_bytes - position)
            got = fs.preadinto(fd, memoryview(buffer)[:want], position)
            if got == 0:
                raise InvalidCleaningResultError(f"{path} ended at {position} bytes, expected {size_bytes}")
            value = crc32c(memoryview(buffer)[:got], value)
            position += got
        return value
    finally:
        fs.close(fd)


def read_capped(path: str, bytes_max: int, fs: FileSystem) -> bytes:
    """A small file's bytes; InvalidCleaningResultError when it is larger than ``bytes_max``."""
    fd = fs.open(path, os.O_RDONLY)
    try:
        size = fs.fsize(fd)
        if size > bytes_max:
            raise InvalidCleaningResultError(f"{path} is {size} bytes, above the {bytes_max}-byte limit")
        buffer = bytearray(size)
        got = fs.preadinto(fd, buffer, 0)
        return bytes(buffer[:got])
    finally:
        fs.close(fd)


def read_manifest(path: str, fs: FileSystem) -> SnapshotManifest:
    location = os.path.join(path, MANIFEST_FILE_NAME)
    return SnapshotManifest.parse(read_capped(location, MANIFEST_BYTES_MAX, fs), location)


def remove_snapshot(path: str, fs: FileSystem) -> None:
    """Removes a snapshot directory and everything in it (links, the job's output)."""
    remove_tree(path, fs)


def _remove_quietly(path: str, fs: FileSystem) -> None:
    try:
        remove_tree(path, fs)
    except OSError:
        pass
