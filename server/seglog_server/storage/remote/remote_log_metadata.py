"""Where a partition's remote segments are, read from their state records in the store (Kafka's
``RemoteLogMetadataManager``, kept as objects beside the segments instead of in a topic).

The object layout under the store's prefix (topic names are Kafka-legal: ``[a-zA-Z0-9._-]``; the
topic id is the topic's ``topic.id``, 32 hex digits, so a name ending in ``-<hex>`` stays
unambiguous)::

    <topic>-<topic id>/<partition>/segments/<base offset, 20 digits>-<segment id>.log   (.index, ...)
    <topic>-<topic id>/<partition>/metadata/<base offset, 20 digits>-<segment id>.json  state record

The topic id is Kafka's ``TopicIdPartition``: a topic deleted and created again under its name is
another prefix, so deleting the old generation's objects (late, by an instance that was down)
never touches the new one's, and a new generation never takes the old one's segments for its own.

A segment's keys carry its random id, so an upload never overwrites another's objects (the PUTs
are conditional too). ``list`` returns what reads may use: records in COPY_SEGMENT_FINISHED, in
offset order. ``orphans`` returns the rest (a copy or a deletion a crash interrupted, or a
deletion that finished but whose record is still there), which cleanup deletes. A record listed
but gone when read was removed in between (by the owner's deletion or cleanup) and is left out.

The partition's owner is its only writer (as in Kafka, the leader), so a record rewritten at each
state change needs no compare-and-swap; cleanup runs where no upload of the partition is in flight
(at the owner's start, or with ``older_than_ms``).
"""

from __future__ import annotations

from ..base.file_names import OFFSET_DIGITS, filename_prefix
from ..base.topic_partition import TopicIdPartition
from ..base.errors import CorruptRemoteObjectError, RemoteResourceNotFoundError
from .object_store import ObjectStore
from .remote_segment_metadata import (
    METADATA_BYTES_MAX,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
)

__all__ = ["RemoteLogMetadata", "metadata_key", "partition_prefix", "segment_object_key"]

_RECORD_SUFFIX = ".json"


def partition_prefix(tp: TopicIdPartition) -> str:
    assert tp.topic and "/" not in tp.topic and tp.partition >= 0, tp
    assert TopicIdPartition.is_topic_id(tp.topic_id), tp
    return f"{tp.topic}-{tp.topic_id}/{tp.partition}/"


def segment_object_key(metadata: RemoteLogSegmentMetadata, kind: str) -> str:
    stem = f"{filename_prefix(metadata.base_offset)}-{metadata.segment_id}"
    return f"{partition_prefix(metadata.topic_id_partition)}segments/{stem}{kind}"


def metadata_key(metadata: RemoteLogSegmentMetadata) -> str:
    stem = f"{filename_prefix(metadata.base_offset)}-{metadata.segment_id}"
    return f"{partition_prefix(metadata.topic_id_partition)}metadata/{stem}{_RECORD_SUFFIX}"


class RemoteLogMetadata:
    """The state records of the store's segments: write one, list the readable ones, the orphans."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store

    def write(self, metadata: RemoteLogSegmentMetadata) -> None:
        data = metadata.to_json()
        assert len(data) <= METADATA_BYTES_MAX, len(data)
        # The first record of a segment is a create-only PUT: a reused id fails instead of
        # taking over another upload's record.
        first = metadata.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED
        self._store.put(metadata_key(metadata), data, len(data), create_only=first)

    def remove(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._store.delete([metadata_key(metadata)])

    def records(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Every record of the partition, in base offset order (the keys sort that way)."""
        prefix = partition_prefix(tp) + "metadata/"
        found = []
        for key in self._store.list(prefix):
            if not _is_record_key(key[len(prefix):]):
                continue  # not ours: left alone, never parsed
            try:
                data = self._store.get(key, METADATA_BYTES_MAX)
            except RemoteResourceNotFoundError:
                continue  # removed since the listing (the owner deleted or cleaned it): not a record now
            metadata = RemoteLogSegmentMetadata.from_json(data, self._store.full_key(key))
            if metadata.topic_id_partition != tp:
                raise CorruptRemoteObjectError(
                    f"state record {self._store.full_key(key)!r} names {metadata.topic_id_partition}, "
                    f"not {tp} whose prefix holds it")
            found.append(metadata)
        return found

    def list(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """The segments reads may use: COPY_SEGMENT_FINISHED only, by base offset."""
        return [m for m in self.records(tp)
                if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]

    def orphans(self, tp: TopicIdPartition, *, now_ms: int | None = None,
                older_than_ms: int = 0) -> list[RemoteLogSegmentMetadata]:
        """Records no read may use, for cleanup; with ``now_ms``, only those whose state was
        written at least ``older_than_ms`` before it (leaves a copy in flight alone)."""
        return [m for m in self.records(tp)
                if m.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                and (now_ms is None or now_ms - m.event_timestamp_ms >= older_than_ms)]


def _is_record_key(name: str) -> bool:
    stem, dot, suffix = name.partition(".")
    offset, dash, segment_id = stem.partition("-")
    return (dot == "." and "." + suffix == _RECORD_SUFFIX and dash == "-"
            and len(offset) == OFFSET_DIGITS and offset.isdigit() and len(segment_id) == 32)
