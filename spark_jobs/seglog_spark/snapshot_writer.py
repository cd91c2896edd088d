"""Writes a snapshot directory from record batches, as the service's CreateSnapshot lays one
out (CLEANING-CONTRACT.md): Kafka-named ``.log`` files and ``manifest.json``.  For tests and
benchmarks, which must not need a running service."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from seglog.records import RecordBatch, crc32c

from .snapshot import MANIFEST_FILE, segment_file_name, write_json_atomically

__all__ = ["write_snapshot"]

KAFKA_DEFAULT_CONFIGS = {
    "delete.retention.ms": 86_400_000,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": (1 << 63) - 1,
    "min.cleanable.dirty.ratio": 0.5,
    "segment.bytes": 1_073_741_824,
    "segment.index.bytes": 10_485_760,
    "index.interval.bytes": 4096,
    "max.message.bytes": 1_048_588,
    "message.timestamp.type": "CreateTime",
}


def write_snapshot(
    path: str,
    segments: Sequence[Iterable[bytes]],
    *,
    first_dirty_offset: int = 0,
    first_uncleanable_offset: int | None = None,
    cleaning_time_ms: int = 1_764_000_000_000,
    log_start_offset: int | None = None,
    configs: dict | None = None,
    topic: str = "events",
    partition: int = 0,
    snapshot_id: str = "events-0-test",
    producers: Sequence[tuple[int, int]] = (),
) -> dict:
    """`segments`: each an iterable of whole batches (bytes), in offset order; `producers`:
    (producer id, last offset of its last batch) pairs, the batches the cleaning keeps.
    Returns the manifest written."""
    os.makedirs(path, exist_ok=True)
    entries = []
    for batches in segments:
        batches = list(batches)
        if not batches:
            continue
        base = RecordBatch(batches[0]).base_offset
        data = b"".join(batches)
        name = segment_file_name(base)
        with open(os.path.join(path, name), "wb") as f:
            f.write(data)
        last = RecordBatch(batches[-1])
        entries.append(
            {
                "base_offset": base,
                "file": name,
                "size_bytes": len(data),
                "crc32c": f"{crc32c(data):08x}",
                "next_offset": last.next_offset,
                "largest_timestamp_ms": max(RecordBatch(b).max_timestamp for b in batches),
                "last_modified_ms": cleaning_time_ms,
            }
        )
    end = entries[-1]["next_offset"] if entries else 0
    manifest = {
        "format": 1,
        "snapshot_id": snapshot_id,
        "topic": topic,
        "partition": partition,
        "created_ms": cleaning_time_ms,
        "cleaning_time_ms": cleaning_time_ms,
        "log_start_offset": entries[0]["base_offset"] if log_start_offset is None and entries else (log_start_offset or 0),
        "first_dirty_offset": first_dirty_offset,
        "first_uncleanable_offset": end if first_uncleanable_offset is None else first_uncleanable_offset,
        "segments": entries,
        "configs": {**KAFKA_DEFAULT_CONFIGS, **(configs or {})},
        "producers": [{"producer_id": pid, "last_offset": offset} for pid, offset in producers],
    }
    write_json_atomically(os.path.join(path, MANIFEST_FILE), manifest)
    return manifest
