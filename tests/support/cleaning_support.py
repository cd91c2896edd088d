"""A tiny cleaner written with the codec, for testing the service's side of offline cleaning
without the Spark job: it reads a snapshot's manifest and linked segments, keeps the latest
record of each key over the whole snapshot (tombstones included, never dropped), rewrites every
kept record as its own batch at its own offset, one output per input segment (empty ones
dropped), and writes ``cleaned/`` and ``result.json`` as CLEANING-CONTRACT.md says."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from seglog.records import RecordBatchBuilder, crc32c, iter_batches


def _crc(data: bytes) -> str:
    return f"{crc32c(data):08x}"


def read_manifest(snapshot_dir: str) -> dict:
    with open(os.path.join(snapshot_dir, "manifest.json"), "rb") as file:
        return json.load(file)


def snapshot_records(snapshot_dir: str) -> list[list[tuple[int, int, bytes | None, bytes | None]]]:
    """Per manifest segment: (offset, timestamp, key, value) of every record."""
    manifest = read_manifest(snapshot_dir)
    out = []
    for segment in manifest["segments"]:
        with open(os.path.join(snapshot_dir, segment["file"]), "rb") as file:
            data = file.read()
        out.append([(r.offset, r.timestamp_ms, r.key, r.value) for b in iter_batches(data) for r in b])
    return out


def hand_clean(
    snapshot_dir: str,
    *,
    replaced_count: int | None = None,
    keep: Callable[[int, bytes | None], bool] | None = None,
    dry_run: bool = False,
) -> dict:
    """Cleans the snapshot (its first ``replaced_count`` segments) and writes the result."""
    manifest = read_manifest(snapshot_dir)
    segments = manifest["segments"][: replaced_count or len(manifest["segments"])]
    per_segment = snapshot_records(snapshot_dir)[: len(segments)]
    latest: dict[bytes | None, int] = {}
    for records in per_segment:
        for offset, _, key, _ in records:
            latest[key] = offset
    cleaned_dir = os.path.join(snapshot_dir, "cleaned")
    os.makedirs(cleaned_dir, exist_ok=True)
    outputs = []
    read = kept_count = written = 0
    for segment, records in zip(segments, per_segment):
        read += len(records)
        kept = [r for r in records if latest[r[2]] == r[0] and (keep is None or keep(r[0], r[2]))]
        if not kept:
            continue
        data = b"".join(_one_batch(*record) for record in kept)
        kept_count += len(kept)
        written += len(data)
        name = segment["file"]
        with open(os.path.join(cleaned_dir, name), "wb") as file:
            file.write(data)
        outputs.append({"base_offset": segment["base_offset"], "file": name, "size_bytes": len(data), "crc32c": _crc(data)})
    replaced_end = (
        manifest["segments"][len(segments)]["base_offset"]
        if len(segments) < len(manifest["segments"])
        else manifest["first_uncleanable_offset"]
    )
    result = {
        "format": 1,
        "snapshot_id": manifest["snapshot_id"],
        "topic": manifest["topic"],
        "partition": manifest["partition"],
        "input_segments": [
            {"base_offset": s["base_offset"], "size_bytes": s["size_bytes"], "crc32c": s["crc32c"]}
            for s in manifest["segments"]
        ],
        "replaced_segments": [s["base_offset"] for s in segments],
        "output_segments": outputs,
        "cleaned_up_to_offset": replaced_end,
        "dry_run": dry_run,
        "stats": {
            "records_read": read, "records_kept": kept_count, "bytes_read": sum(s["size_bytes"] for s in segments),
            "bytes_written": written, "distinct_keys": len(latest), "tombstones_dropped": 0,
            "records_superseded": read - kept_count, "map_utilization": 0.25, "collision_rate": 0.0,
            "duration_s": 0.01, "engine": "test hand_clean",
        },
    }
    write_result(snapshot_dir, result)
    return result


def write_result(snapshot_dir: str, result: dict) -> None:
    path = os.path.join(snapshot_dir, "result.json")
    with open(path + ".tmp", "w") as file:
        json.dump(result, file)
    os.replace(path + ".tmp", path)


def _one_batch(offset: int, timestamp_ms: int, key: bytes | None, value: bytes | None) -> bytes:
    builder = RecordBatchBuilder(base_offset=offset)
    builder.append(value, key=key, timestamp_ms=timestamp_ms)
    return builder.build()


def latest_values(pairs) -> dict:
    """key -> latest value from (key, value) pairs in offset order (tombstones stay as None)."""
    out: dict = {}
    for key, value in pairs:
        out[key] = value
    return out
