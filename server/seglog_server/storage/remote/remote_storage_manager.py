"""Copy a closed segment to the object store, read it back, delete it (Kafka's
``RemoteStorageManager``), each step bracketed by its state record.

A copy, step by step (``step_hook`` is told each step's name once it is done; the fault tests
raise from it to stop a copy between any two steps)::

    copy_started      record COPY_SEGMENT_STARTED, create-only     nothing readable yet
    put .log          each file, create-only, under the new id    an orphan if we stop here
    put .index ...
    copy_finished     record COPY_SEGMENT_FINISHED                readable from now on

and a deletion::

    delete_started    record DELETE_SEGMENT_STARTED               no longer readable
    objects_deleted   every file of the segment
    delete_finished   record DELETE_SEGMENT_FINISHED
    record_removed    the record itself: nothing of the segment is left

So no object is ever written before a record that names it, and a read sees only segments whose
every object was stored. What a crash leaves is an orphan for ``cleanup_orphans``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..base.clock import Clock, SystemClock
from ..base.errors import CorruptRemoteObjectError, RemoteStorageError
from ..base.fs import REAL_FS, FileSystem
from ..base.topic_partition import TopicIdPartition
from .object_store import ObjectStore
from .remote_log_metadata import RemoteLogMetadata, partition_prefix, segment_object_key
from .remote_segment_metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    new_segment_id,
)

__all__ = ["LogSegmentData", "RemoteStorageManager"]

_S = RemoteLogSegmentState
# Leader-epoch data is a few lines of text per epoch; a bound keeps a runaway caller from
# uploading an arbitrary buffer as it.
LEADER_EPOCH_BYTES_MAX = 1024 * 1024


@dataclass(frozen=True)
class LogSegmentData:
    """A closed segment's files and facts (Kafka's ``LogSegmentData``): the caller, the log, knows
    the offsets and times; the files are immutable once the segment is closed."""

    topic: str
    partition: int
    base_offset: int
    end_offset: int  # the last offset the segment holds
    max_timestamp_ms: int
    log_path: str
    offset_index_path: str
    time_index_path: str
    producer_snapshot_path: str | None = None
    leader_epoch_bytes: bytes | None = None
    leader_epochs: tuple[tuple[int, int], ...] = ()


class RemoteStorageManager:
    def __init__(self, store: ObjectStore, *, fs: FileSystem = REAL_FS, clock: Clock | None = None,
                 step_hook: Callable[[str], None] | None = None,
                 read_store: ObjectStore | None = None) -> None:
        self.store = store
        # Reads on the request path (fetch_log_segment, fetch_index) go through ``read_store``:
        # the same bucket with a tighter deadline (one attempt, the read deadline), so a silent
        # store answers a consumer UNAVAILABLE in seconds, not after the uploader's 36 s.
        self.read_store = read_store or store
        # Ranged GETs of remote reads (segment bytes and indexes): count, bytes, seconds.
        self.fetch_count = self.fetch_bytes = 0
        self.fetch_seconds = 0.0
        self._fetch_lock = threading.Lock()
        self.metadata = RemoteLogMetadata(store)
        self._fs = fs
        self._clock = clock or SystemClock()
        self._step_hook = step_hook or (lambda step: None)

    # -- copy ---------------------------------------------------------------------------------
    def copy_log_segment(self, topic_id: str, data: LogSegmentData) -> RemoteLogSegmentMetadata:
        """Upload the segment of topic ``topic_id`` (the generation: the log's topic.id) under a
        new id; returns its COPY_SEGMENT_FINISHED record. Any failure leaves at most an orphan
        (COPY_SEGMENT_STARTED) and raises a RemoteStorageError."""
        sources = self._sources(data)
        started = RemoteLogSegmentMetadata(
            topic=data.topic, partition=data.partition, topic_id=topic_id, segment_id=new_segment_id(),
            base_offset=data.base_offset, end_offset=data.end_offset,
            max_timestamp_ms=data.max_timestamp_ms,
            files={kind: size for kind, (_, size) in sources.items()},
            state=_S.COPY_SEGMENT_STARTED, event_timestamp_ms=self._clock.time_ms(),
            leader_epochs=data.leader_epochs)
        self.metadata.write(started)
        self._step_hook("copy_started")
        for kind, (source, size) in sources.items():
            self._put_file(segment_object_key(started, kind), source, size)
            self._step_hook(f"put {kind}")
        finished = started.with_state(_S.COPY_SEGMENT_FINISHED, self._clock.time_ms())
        self.metadata.write(finished)
        self._step_hook("copy_finished")
        return finished

    def _sources(self, data: LogSegmentData) -> dict[str, tuple[str | bytes, int]]:
        paths = {".log": data.log_path, ".index": data.offset_index_path,
                 ".timeindex": data.time_index_path, ".snapshot": data.producer_snapshot_path}
        sources: dict[str, tuple[str | bytes, int]] = {}
        for kind, path in paths.items():
            if path is not None:
                sources[kind] = (path, self._file_size(path))
        if data.leader_epoch_bytes is not None:
            if len(data.leader_epoch_bytes) > LEADER_EPOCH_BYTES_MAX:
                raise RemoteStorageError(
                    f"leader-epoch data of {len(data.leader_epoch_bytes)} bytes is above "
                    f"{LEADER_EPOCH_BYTES_MAX}")
            sources[".leader-epoch-checkpoint"] = (data.leader_epoch_bytes,
                                                   len(data.leader_epoch_bytes))
        return sources

    def _file_size(self, path: str) -> int:
        fd = self._fs.open(path, os.O_RDONLY)
        try:
            return self._fs.fsize(fd)
        finally:
            self._fs.close(fd)

    def _put_file(self, key: str, source: str | bytes, size: int) -> None:
        if isinstance(source, bytes):
            self.store.put(key, source, size, create_only=True)
            return
        fd = self._fs.open(source, os.O_RDONLY)
        try:
            self.store.put(key, _FileReader(self._fs, fd, size), size, create_only=True)
        finally:
            self._fs.close(fd)

    # -- read ---------------------------------------------------------------------------------
    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, position: int,
                          size_bytes: int) -> bytes:
        """Bytes ``position .. position + size_bytes`` of the segment's .log (clamped to its
        end), by one ranged GET."""
        _require_readable(metadata)
        segment_bytes = metadata.segment_bytes
        if not 0 <= position < segment_bytes:
            raise CorruptRemoteObjectError(
                f"position {position} is outside segment {metadata.segment_id} of "
                f"{segment_bytes} bytes (base offset {metadata.base_offset})")
        last = min(position + size_bytes, segment_bytes) - 1
        if last < position:
            return b""
        return self._timed_get(segment_object_key(metadata, ".log"), last - position + 1, position, last)

    def fetch_index_range(self, metadata: RemoteLogSegmentMetadata, kind: str, first: int, last: int) -> bytes:
        """Bytes ``first..last`` (inclusive, within its recorded size) of one of the segment's
        index objects, by one ranged GET: the chunk cache's fetch for indexes."""
        _require_readable(metadata)
        if kind == ".log" or kind not in metadata.files:
            raise RemoteStorageError(
                f"segment {metadata.segment_id} has no {kind!r} object (it has {sorted(metadata.files)})")
        if not 0 <= first <= last < metadata.files[kind]:
            raise CorruptRemoteObjectError(
                f"range {first}..{last} is outside {kind} of segment {metadata.segment_id} "
                f"({metadata.files[kind]} bytes)")
        return self._timed_get(segment_object_key(metadata, kind), last - first + 1, first, last)

    def _timed_get(self, key: str, size: int, first: int, last: int) -> bytes:
        started = time.monotonic()
        data = self.read_store.get(key, size, first, last)
        elapsed = time.monotonic() - started
        with self._fetch_lock:
            self.fetch_count += 1
            self.fetch_bytes += len(data)
            self.fetch_seconds += elapsed
        return data

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, kind: str) -> bytes:
        """A whole index (or snapshot, or leader-epoch data) of the segment: ``.index``,
        ``.timeindex``, ``.snapshot``, ``.leader-epoch-checkpoint``."""
        _require_readable(metadata)
        if kind == ".log" or kind not in metadata.files:
            raise RemoteStorageError(
                f"segment {metadata.segment_id} has no {kind!r} object (it has {sorted(metadata.files)})")
        expected = metadata.files[kind]
        data = self.read_store.get(segment_object_key(metadata, kind), expected)
        if len(data) != expected:
            raise CorruptRemoteObjectError(
                f"{segment_object_key(metadata, kind)!r}: expected {expected} bytes (its record), "
                f"found {len(data)}")
        return data

    # -- delete -------------------------------------------------------------------------------
    def delete_log_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete the segment's objects and then its record (from any state: a finished segment
        retention removes, or an orphan). Stopping half way leaves DELETE_SEGMENT_STARTED."""
        if metadata.state is not _S.DELETE_SEGMENT_FINISHED:
            metadata = metadata.with_state(_S.DELETE_SEGMENT_STARTED, self._clock.time_ms())
            self.metadata.write(metadata)
            self._step_hook("delete_started")
            self.store.delete([segment_object_key(metadata, kind) for kind in metadata.files])
            self._step_hook("objects_deleted")
            metadata = metadata.with_state(_S.DELETE_SEGMENT_FINISHED, self._clock.time_ms())
            self.metadata.write(metadata)
            self._step_hook("delete_finished")
        else:
            self.store.delete([segment_object_key(metadata, kind) for kind in metadata.files])
        self.metadata.remove(metadata)
        self._step_hook("record_removed")

    def delete_partition(self, tp: TopicIdPartition) -> int:
        """Delete every segment of a deleted partition (any state, each through its deletion
        states), then any object left under its prefix; returns how many segments went. Only
        that topic id's prefix: a later topic of the same name is another prefix."""
        records = self.metadata.records(tp)
        for metadata in records:
            self.delete_log_segment(metadata)
        leftover = list(self.store.list(partition_prefix(tp)))
        if leftover:
            self.store.delete(leftover)
        return len(records)

    def cleanup_orphans(self, tp: TopicIdPartition, *, older_than_ms: int = 0) -> int:
        """Delete every orphan of the partition (whose state is at least ``older_than_ms`` old);
        returns how many. Run where no copy of the partition is in flight."""
        orphans = self.metadata.orphans(tp, now_ms=self._clock.time_ms(),
                                        older_than_ms=older_than_ms)
        for orphan in orphans:
            self.delete_log_segment(orphan)
        return len(orphans)


def _require_readable(metadata: RemoteLogSegmentMetadata) -> None:
    if metadata.state is not _S.COPY_SEGMENT_FINISHED:
        raise RemoteStorageError(
            f"segment {metadata.segment_id} (base offset {metadata.base_offset}) is "
            f"{metadata.state.name}: only COPY_SEGMENT_FINISHED segments are read")


class _FileReader:
    """A read-only file object over an fd of the ``fs`` seam, for botocore to stream a PUT body
    from (it seeks back to retry, so ``seek`` and ``tell`` are real)."""

    def __init__(self, fs: FileSystem, fd: int, size: int) -> None:
        self._fs, self._fd, self._size, self._position = fs, fd, size, 0

    def read(self, amount: int = -1) -> bytes:
        if amount is None or amount < 0:
            amount = self._size - self._position
        amount = min(amount, self._size - self._position)
        if amount <= 0:
            return b""
        data = self._fs.pread(self._fd, amount, self._position)
        self._position += len(data)
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._size}[whence]
        self._position = base + offset
        assert 0 <= self._position, self._position
        return self._position

    def tell(self) -> int:
        return self._position

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

