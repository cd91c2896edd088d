"""The steps of one cleaning, shared by both engines (cleaner_local.py runs them in one
process, job.py spreads them over Spark tasks); both therefore write the same bytes.

    plan       (driver)   read and verify the snapshot, walk batch headers, cut byte ranges
    scan       (per range) key_scan.scan_range: (digest, offset, ordinal) entries per shard
    decide     (per shard) key_shard.decide_shard: a bounded offset map, superseded bitmaps
    choose     (driver)   the replaced segments: all, or those below where a map filled; then
                          decide again, every shard, with nothing at or past that end, from
                          each map filled in from its shard's trail (key_shard.decide_from_trail)
    rewrite    (per range) rewrite.rewrite_range: filtered batches into a part file
    assemble   (per group) concatenate a group's parts into <base>.log, build its indexes
    finish     (driver)   result.json, written atomically, last
"""

from __future__ import annotations

import mmap
import os
import shutil
import time
from dataclasses import dataclass

from seglog.records import crc32c

from .errors import CleanerError
from .grouping import SegmentSize, group_segments_by_size
from .index_writer import build_indexes
from .key_shard import DEFAULT_LOAD_FACTOR, MAP_SLOTS_MAX, ShardResult, or_bitmaps
from .layout import ByteRange, SegmentLayout, read_layout
from .offset_map import SkimpyOffsetMap
from .rewrite import RangeOutput
from .snapshot import (
    RESULT_FILE,
    Snapshot,
    file_crc32c,
    read_snapshot,
    segment_file_name,
    verify_segments,
    write_json_atomically,
)

__all__ = [
    "DEFAULT_MAP_BYTES",
    "DEFAULT_RANGE_BYTES",
    "DEFAULT_SHARD_COUNT",
    "Choice",
    "Plan",
    "assemble_group",
    "choose_replaced",
    "cleaning_end",
    "finish",
    "keys_path",
    "merge_shard_bitmaps",
    "part_path",
    "plan_cleaning",
    "prepare_output",
    "replaced_ranges",
    "trail_path",
]

# Offset-map memory per key shard: 16 MiB hold 699,050 MD5 entries, 629,145 keys at the 0.9
# load factor, so the default 8 shards index about 5 million distinct keys per round while
# one task holds one map at a time.
DEFAULT_MAP_BYTES = 16 * 1024 * 1024
# Key shards: a property of the cleaning, not of the engine, so that every engine fills its
# maps at the same offsets and writes the same bytes.  8 keeps 2-8 cores busy.
DEFAULT_SHARD_COUNT = 8
# Byte ranges a segment is cut into: large enough that a task's fixed cost is noise, small
# enough that a 1 GiB segment spreads over dozens of tasks.
DEFAULT_RANGE_BYTES = 16 * 1024 * 1024
_PARTS_DIR = ".parts"


@dataclass(frozen=True)
class Plan:
    snapshot: Snapshot
    layouts: tuple[SegmentLayout, ...]
    ranges: tuple[ByteRange, ...]
    shard_count: int
    map_bytes: int
    load_factor: float
    started: float


@dataclass(frozen=True)
class Choice:
    replaced_count: int  # the first replaced_count manifest segments are replaced
    cleaned_up_to_offset: int
    upper_bound: int  # next offset of the last replaced segment: its last batch is always kept
    bitmaps: dict
    groups: tuple[tuple[int, ...], ...]


def plan_cleaning(
    snapshot_dir: str,
    *,
    map_bytes: int = DEFAULT_MAP_BYTES,
    shard_count: int = DEFAULT_SHARD_COUNT,
    range_bytes: int = DEFAULT_RANGE_BYTES,
    load_factor: float = DEFAULT_LOAD_FACTOR,
) -> Plan:
    started = time.perf_counter()
    if not 1 <= shard_count <= 256:
        raise ValueError(f"shard_count must be in [1, 256] (one digest byte picks the shard), found {shard_count}")
    if range_bytes < 1:
        raise ValueError(f"range_bytes must be positive, found {range_bytes}")
    if SkimpyOffsetMap.slots_of(map_bytes) > MAP_SLOTS_MAX:  # refused here, not after a first decision
        raise ValueError(f"map_bytes {map_bytes} makes a key shard's map of {SkimpyOffsetMap.slots_of(map_bytes)} "
                         f"slots, above {MAP_SLOTS_MAX} (the rows of a shard's trail are 4 bytes)")
    snapshot = read_snapshot(snapshot_dir)
    verify_segments(snapshot)
    layouts = []
    ranges: list[ByteRange] = []
    for index in range(len(snapshot.segments)):
        layout = read_layout(snapshot, index, range_bytes, len(ranges))
        layouts.append(layout)
        ranges.extend(layout.ranges)
    return Plan(snapshot, tuple(layouts), tuple(ranges), shard_count, map_bytes, load_factor, started)


def cleaning_end(plan: Plan, shard_results: list[ShardResult]) -> int | None:
    """Where this round's cleaning ends when a shard's map filled: the base offset of the segment
    holding the first offset a map had no room for (Kafka stops at the last fully indexed
    segment; the next round goes on from there).  None when no map filled: the round cleans up
    to first_uncleanable_offset.  The shards are then decided again below this end, so that no
    record is superseded by one past it."""
    full = [result.full_at for result in shard_results if result.full_at is not None]
    if not full:
        return None
    stop = min(full)
    end = max(segment.base_offset for segment in plan.snapshot.segments if segment.base_offset <= stop)
    if end <= plan.snapshot.first_dirty_offset:
        raise CleanerError(
            f"the offset map filled at offset {stop}, before one dirty segment was wholly indexed: "
            f"{plan.map_bytes} bytes per shard x {plan.shard_count} shards is too small for this log; "
            f"raise --map-bytes"
        )
    return end


def choose_replaced(plan: Plan, end: int | None, range_bitmaps: dict[int, bytes]) -> Choice:
    """Which segments this round replaces: all of them when `end` is None, else those wholly
    below `end` (cleaning_end); `range_bitmaps` must come from shards decided below `end`."""
    snapshot = plan.snapshot
    segments = snapshot.segments
    if end is None:
        replaced, cleaned_up_to = len(segments), snapshot.first_uncleanable_offset
    else:
        replaced = sum(1 for segment in segments if segment.base_offset < end)
        cleaned_up_to = end
    upper_bound = segments[replaced - 1].next_offset if replaced else snapshot.first_uncleanable_offset
    sizes = [
        SegmentSize(
            segment.base_offset,
            segment.size_bytes,
            plan.layouts[i].offset_index_bytes,
            plan.layouts[i].time_index_bytes,
            snapshot.end_of(i) - 1,
        )
        for i, segment in enumerate(segments[:replaced])
    ]
    groups = group_segments_by_size(sizes, snapshot.settings.segment_bytes, snapshot.settings.segment_index_bytes)
    return Choice(replaced, cleaned_up_to, upper_bound, range_bitmaps, tuple(tuple(g) for g in groups))


def merge_shard_bitmaps(shard_results: list[ShardResult]) -> dict[int, bytes]:
    merged: dict[int, bytes] = {}
    for result in shard_results:
        for range_id, bitmap in result.bitmaps.items():
            merged[range_id] = or_bitmaps(merged[range_id], bitmap) if range_id in merged else bitmap
    return merged


def replaced_ranges(plan: Plan, choice: Choice) -> list[ByteRange]:
    return [r for r in plan.ranges if r.segment_index < choice.replaced_count]


def prepare_output(snapshot: Snapshot) -> None:
    """An empty cleaned/ with its parts directory (a rerun starts from nothing)."""
    shutil.rmtree(snapshot.cleaned_dir, ignore_errors=True)
    os.makedirs(os.path.join(snapshot.cleaned_dir, _PARTS_DIR))


def part_path(snapshot: Snapshot, range_id: int) -> str:
    return os.path.join(snapshot.cleaned_dir, _PARTS_DIR, f"{range_id:08d}.part")


def keys_path(snapshot: Snapshot, range_id: int) -> str:
    """Where the Spark job keeps a range's scanned entries between its scan and shard steps."""
    return os.path.join(snapshot.cleaned_dir, _PARTS_DIR, f"{range_id:08d}.keys")


def trail_path(snapshot: Snapshot, shard: int) -> str:
    """Where the Spark job keeps a shard's trail (key_shard.decide_shard_trailed) between its two
    decisions."""
    return os.path.join(snapshot.cleaned_dir, _PARTS_DIR, f"shard-{shard:03d}.trail")


def _fsync_write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def assemble_group(plan: Plan, group: tuple[int, ...]) -> dict | None:
    """Concatenate the parts of a group's segments into cleaned/<base>.log and write its
    indexes; None when nothing survived (the group is dropped, as the contract says)."""
    snapshot = plan.snapshot
    base = snapshot.segments[group[0]].base_offset
    members = set(group)
    parts = [part_path(snapshot, r.range_id) for r in plan.ranges if r.segment_index in members]
    if not any(os.path.getsize(p) for p in parts):
        return None
    log_path = os.path.join(snapshot.cleaned_dir, segment_file_name(base, ".log"))
    with open(log_path, "wb") as out:
        for part in parts:
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out, 8 * 1024 * 1024)
        out.flush()
        os.fsync(out.fileno())
        size = out.tell()
    with open(log_path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as log:
        offset_index, time_index = build_indexes(log, size, base, snapshot.settings.index_interval_bytes, log_path)
    _fsync_write(os.path.join(snapshot.cleaned_dir, segment_file_name(base, ".index")), offset_index)
    _fsync_write(os.path.join(snapshot.cleaned_dir, segment_file_name(base, ".timeindex")), time_index)
    return {
        "base_offset": base,
        "file": segment_file_name(base, ".log"),
        "size_bytes": size,
        "crc32c": file_crc32c(log_path),
        "index_crc32c": _crc(offset_index),
        "timeindex_crc32c": _crc(time_index),
    }


def _crc(data: bytes) -> str:
    return f"{crc32c(data):08x}"


def finish(
    plan: Plan,
    choice: Choice,
    shard_results: list[ShardResult],
    range_outputs: list[RangeOutput],
    output_segments: list[dict],
    *,
    engine: str,
    dry_run: bool,
    extra_stats: dict | None = None,
) -> dict:
    """The result document; written as result.json (atomically, last) unless a dry run."""
    snapshot = plan.snapshot
    slots = sum(r.slots for r in shard_results)
    lookups = sum(r.lookups for r in shard_results)
    stats = {
        "records_read": sum(o.records_read for o in range_outputs),
        "records_kept": sum(o.records_kept for o in range_outputs),
        "bytes_read": sum(o.bytes_read for o in range_outputs),
        "bytes_written": sum(o.bytes_written for o in range_outputs),
        "distinct_keys": sum(r.entries for r in shard_results),
        "tombstones_dropped": sum(o.tombstones_dropped for o in range_outputs),
        "records_superseded": sum(o.records_superseded for o in range_outputs),
        "keyless_dropped": sum(o.keyless_dropped for o in range_outputs),
        "batches_rebuilt": sum(o.batches_rebuilt for o in range_outputs),
        "map_utilization": sum(r.entries for r in shard_results) / slots if slots else 0.0,
        "map_utilization_max": max((r.entries / r.slots for r in shard_results), default=0.0),
        "collision_rate": (sum(r.probes for r in shard_results) - lookups) / lookups if lookups else 0.0,
        "map_bytes": plan.map_bytes,
        "shard_count": plan.shard_count,
        "range_count": len(plan.ranges),
        "duration_s": round(time.perf_counter() - plan.started, 6),
        "engine": engine,
        **(extra_stats or {}),
    }
    document = {
        "format": 1,
        "snapshot_id": snapshot.snapshot_id,
        "topic": snapshot.topic,
        "partition": snapshot.partition,
        "input_segments": [
            {"base_offset": s.base_offset, "size_bytes": s.size_bytes, "crc32c": s.crc32c} for s in snapshot.segments
        ],
        "replaced_segments": [s.base_offset for s in snapshot.segments[: choice.replaced_count]],
        "output_segments": output_segments,
        "cleaned_up_to_offset": choice.cleaned_up_to_offset,
        "dry_run": dry_run,
        "stats": stats,
    }
    if not dry_run:
        shutil.rmtree(os.path.join(snapshot.cleaned_dir, _PARTS_DIR), ignore_errors=True)
        write_json_atomically(os.path.join(snapshot.path, RESULT_FILE), document)
    return document

