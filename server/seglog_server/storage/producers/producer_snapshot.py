"""Producer-state snapshot files, ``<20-digit offset>.snapshot`` (kafka-storage.md 1.7).

Byte for byte Kafka's ``ProducerSnapshot`` message, version 1 (``ProducerStateManager
.writeSnapshot``), big-endian::

    0   int16   version            1
    2   uint32  crc                CRC-32C of every byte from offset 6 to the end
    6   int32   entry count
    10  entries, 46 bytes each:
        int64   producerId
        int16   epoch
        int32   lastSequence         of the producer's last batch (-1: none)
        int64   lastOffset           of that batch (-1: no batch; only the epoch is known)
        int32   offsetDelta          lastSequence - firstSequence of that batch
        int64   timestamp            the producer's last activity (Kafka: its last batch's max
                                     timestamp; seglog: the service's time it arrived)
        int32   coordinatorEpoch     -1 here: seglog has no transaction coordinator
        int64   currentTxnFirstOffset  -1: no open transaction (seglog refuses transactions)

The offset in the name is the log end offset the state covers: every batch below it is in the
snapshot, none at or above it. Only a producer's *last* batch is kept (Kafka's format), so after a
restart the duplicate check sees one batch per producer until new ones arrive.

Reading trusts nothing: the size must be exactly the header plus the declared entries (bounded
by ``SNAPSHOT_BYTES_MAX``), the version 1, the CRC right, and every entry plausible (ids and
epochs not negative, a last offset below the file's own offset). Any failure raises
``CorruptProducerSnapshotError``; the caller then falls back to an older snapshot or the log.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from seglog.records import crc32c

from ..base import file_names
from ..base.errors import CorruptProducerSnapshotError
from ..base.fs import FileSystem

__all__ = [
    "ENTRY",
    "HEADER",
    "SNAPSHOT_BYTES_MAX",
    "SNAPSHOT_SUFFIX",
    "SNAPSHOT_VERSION",
    "SnapshotEntry",
    "decode_snapshot",
    "encode_snapshot",
    "is_snapshot_file",
    "read_snapshot",
    "snapshot_path",
    "sync_snapshot",
    "write_snapshot",
]

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1

HEADER = struct.Struct(
    ">"
    "h"  # version
    "I"  # crc: CRC-32C of everything after this field
    "i"  # entry count
)
ENTRY = struct.Struct(
    ">"
    "q"  # producerId
    "h"  # epoch
    "i"  # lastSequence
    "q"  # lastOffset
    "i"  # offsetDelta
    "q"  # timestamp
    "i"  # coordinatorEpoch
    "q"  # currentTxnFirstOffset
)
# Kafka's PRODUCER_ENTRIES_OFFSET: the CRC covers the count and the entries.
CRC_START = struct.calcsize(">hI")
assert HEADER.size == 10 and ENTRY.size == 46 and CRC_START == 6

# 64 MiB: 1.4 million producers on one partition, far above any real load (each idle producer
# expires after producer.id.expiration.ms); a damaged length cannot make a load read gigabytes.
SNAPSHOT_BYTES_MAX = 64 * 1024 * 1024
_NO_COORDINATOR_EPOCH = -1
_NO_TXN = -1


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """One producer as a snapshot stores it (its last batch only)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int  # -1: no batch known, only the epoch
    offset_delta: int
    timestamp_ms: int


def snapshot_path(directory: str, offset: int) -> str:
    return os.path.join(directory, file_names.filename_prefix(offset) + SNAPSHOT_SUFFIX)


def is_snapshot_file(name: str) -> bool:
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    return name.endswith(SNAPSHOT_SUFFIX) and len(stem) == file_names.OFFSET_DIGITS and stem.isdigit()


def encode_snapshot(entries: list[SnapshotEntry]) -> bytes:
    """The file's bytes, entries in the order given (seglog sorts them by producer id)."""
    body = bytearray(HEADER.size + ENTRY.size * len(entries))
    HEADER.pack_into(body, 0, SNAPSHOT_VERSION, 0, len(entries))
    position = HEADER.size
    for entry in entries:
        ENTRY.pack_into(
            body, position, entry.producer_id, entry.epoch, entry.last_sequence, entry.last_offset,
            entry.offset_delta, entry.timestamp_ms, _NO_COORDINATOR_EPOCH, _NO_TXN,
        )
        position += ENTRY.size
    struct.pack_into(">I", body, 2, crc32c(memoryview(body)[CRC_START:]))
    return bytes(body)


def decode_snapshot(data: bytes, snapshot_offset: int, where: str = "<snapshot>") -> list[SnapshotEntry]:
    """The entries of a snapshot taken at ``snapshot_offset``; raises CorruptProducerSnapshotError."""
    if len(data) < HEADER.size:
        raise _corrupt(where, f"{len(data)} bytes cannot hold the {HEADER.size}-byte header")
    version, crc, count = HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise _corrupt(where, f"unknown version {version}, expected {SNAPSHOT_VERSION}")
    if count < 0 or HEADER.size + count * ENTRY.size != len(data):
        raise _corrupt(where, f"{count} entries need {HEADER.size + max(count, 0) * ENTRY.size} bytes, the file has {len(data)}")
    computed = crc32c(memoryview(data)[CRC_START:])
    if computed != crc:
        raise _corrupt(where, f"CRC mismatch: stored {crc:#010x}, computed {computed:#010x}")
    entries = []
    for position in range(HEADER.size, len(data), ENTRY.size):
        producer_id, epoch, last_sequence, last_offset, offset_delta, timestamp, _, txn = ENTRY.unpack_from(
            data, position
        )
        if producer_id < 0 or epoch < 0 or last_offset < -1 or last_offset >= snapshot_offset or offset_delta < 0:
            raise _corrupt(
                where,
                f"implausible entry at byte {position}: producer id {producer_id}, epoch {epoch}, "
                f"last offset {last_offset} (must be below the snapshot offset {snapshot_offset}), "
                f"offset delta {offset_delta}",
            )
        if txn != _NO_TXN:
            raise _corrupt(where, f"producer {producer_id} has an open transaction at {txn}; seglog has none")
        entries.append(SnapshotEntry(producer_id, epoch, last_sequence, last_offset, offset_delta, timestamp))
    return entries


def write_snapshot(fs: FileSystem, directory: str, offset: int, entries: list[SnapshotEntry], *, sync: bool) -> str:
    """Writes ``<offset>.snapshot`` (replacing one of that name). Not atomic, as in Kafka: a torn
    file fails its CRC on load and the state comes from an older snapshot and the log instead."""
    path = snapshot_path(directory, offset)
    data = encode_snapshot(entries)
    fd = fs.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        try:
            view = memoryview(data)
            written = 0
            while written < len(view):
                written += fs.pwrite(fd, view[written:], written)
            if sync:
                fs.fdatasync(fd)
        finally:
            fs.close(fd)
    except BaseException:
        # A torn file would fail its CRC at the next load anyway; on a full disk it would also
        # hold blocks that nothing frees (it is not among the snapshots the state knows).
        try:
            fs.unlink(path)
        except OSError:
            pass
        raise
    if sync:
        fs.fsync_dir(directory)
    return path


def sync_snapshot(fs: FileSystem, directory: str, offset: int) -> None:
    """Makes an existing ``<offset>.snapshot`` durable (its data and its name)."""
    fd = fs.open(snapshot_path(directory, offset), os.O_RDONLY)
    try:
        fs.fdatasync(fd)
    finally:
        fs.close(fd)
    fs.fsync_dir(directory)


def read_snapshot(fs: FileSystem, path: str, offset: int) -> list[SnapshotEntry]:
    """The entries of the file at ``path``; CorruptProducerSnapshotError when damaged."""
    fd = fs.open(path, os.O_RDONLY)
    try:
        size = fs.fsize(fd)
        if size > SNAPSHOT_BYTES_MAX:
            raise _corrupt(path, f"{size} bytes, above the {SNAPSHOT_BYTES_MAX}-byte limit")
        chunks = []
        position = 0
        while position < size:
            chunk = fs.pread(fd, size - position, position)
            if not chunk:
                break
            chunks.append(chunk)
            position += len(chunk)
    finally:
        fs.close(fd)
    return decode_snapshot(b"".join(chunks), offset, path)


def _corrupt(where: str, what: str) -> CorruptProducerSnapshotError:
    return CorruptProducerSnapshotError(f"producer snapshot {where}: {what}")
