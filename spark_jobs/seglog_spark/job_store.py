"""The PySpark job on a snapshot in an object store (object_io.py): job.py's steps, with every
byte that passes between them going through the store instead of a shared directory.

    driver    manifest + segments by ranged GETs into a private scratch dir; plan_cleaning checks
              sizes, CRC-32C and batch headers exactly as on a shared disk
    scan      (per range)  ranged GET of the range -> .work/<range>.keys (a block of entries a shard,
              key_blocks.py: checked whole when read back)
    decide    (per shard)  ranged GETs of its slice of every .keys object -> offset map, bitmaps,
              and .work/shard-<n>.trail (where its puts landed: a second decision, when a map
              filled, fills its map in from it)
    rewrite   (per range)  ranged GET of the range -> .work/<range>.part
    assemble  (per group)  its .part objects -> cleaned/<base>.log, .index, .timeindex
    driver    .work/ deleted, then result.json, last (its presence means the output is complete)

Executors share nothing with the driver or with each other but the store: each Python worker
fetches what its task reads into its own scratch directory (object_io.local_view) and removes it
after. The bytes written are those of job.py and cleaner_local.py (the same step functions).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

from .cleaning import (
    DEFAULT_MAP_BYTES,
    DEFAULT_RANGE_BYTES,
    DEFAULT_SHARD_COUNT,
    Plan,
    assemble_group,
    choose_replaced,
    cleaning_end,
    finish,
    merge_shard_bitmaps,
    part_path,
    plan_cleaning,
    replaced_ranges,
)
from .errors import CleanerError
from .key_blocks import KEYS_FILE_SIZE_MAX, keys_block, open_keys_block
from .key_scan import scan_range
from .key_shard import decide_from_trail, decide_shard_trailed, trail_size_max
from .object_io import WORK_DIR, StoreError, StoreSnapshot, download_snapshot, fetch_range, local_view
from .rewrite import filter_range
from .snapshot import CLEANED_DIR, RESULT_FILE, segment_file_name

__all__ = ["clean_store_snapshot"]

TASKS_PER_CORE = 4  # as job.py: a few tasks per core, not one per range


def _keys_name(range_id: int) -> str:
    return f"{WORK_DIR}/{range_id:08d}.keys"


def _trail_name(shard: int) -> str:
    return f"{WORK_DIR}/shard-{shard:03d}.trail"


def _part_name(range_id: int) -> str:
    return f"{WORK_DIR}/{range_id:08d}.part"


def _with_range(store: StoreSnapshot, plan: Plan, byte_range, work):
    """Runs ``work(local_snapshot)`` with the range's bytes fetched into this worker's scratch,
    removed after (a worker runs its tasks one at a time; a long-lived worker keeps nothing)."""
    snapshot = local_view(plan.snapshot)
    try:
        fetch_range(store, snapshot, byte_range.segment_index, byte_range.start, byte_range.end)
        return work(snapshot)
    finally:
        shutil.rmtree(snapshot.path, ignore_errors=True)


def _scan_task(store: StoreSnapshot, plan: Plan):
    def scan(byte_range):
        found = _with_range(store, plan, byte_range, lambda s: scan_range(s, byte_range, plan.shard_count))
        packed = [keys_block(found.range_id, shard, found.base_offset, found.end_offset, found.entries.get(shard, b""))
                  for shard in range(plan.shard_count)]
        bounds = [0]
        for chunk in packed:
            bounds.append(bounds[-1] + len(chunk))
        store.put(_keys_name(byte_range.range_id), b"".join(packed))
        return found.range_id, found.record_count, bounds

    return scan


def _decide_task(store: StoreSnapshot, plan: Plan, scanned, end_offset=None):
    """The first decision (no `end_offset`) leaves the shard's trail as a .work/ object; the
    second, when a map filled, fills its map in from it instead of putting the entries again."""
    def decide(shard):
        chunks = [(range_id, record_count, _get_keys_block(store, shard, range_id, record_count, bounds))
                  for range_id, record_count, bounds in scanned if bounds[shard + 1] > bounds[shard]]
        settings = {"first_dirty_offset": plan.snapshot.first_dirty_offset, "map_bytes": plan.map_bytes,
                    "load_factor": plan.load_factor}
        if end_offset is None:
            result, trail = decide_shard_trailed(shard, chunks, **settings)
            store.put(_trail_name(shard), trail)
            return result
        trail = store.get(_trail_name(shard), size_max=trail_size_max(chunks))
        return decide_from_trail(shard, chunks, trail, end_offset=end_offset, source=_trail_name(shard), **settings)

    return decide


def _get_keys_block(store: StoreSnapshot, shard: int, range_id: int, record_count: int, bounds) -> bytes:
    """Shard `shard`'s entries of range `range_id`: a ranged GET of the bytes the scan's bounds
    give (refused above any block's size before reading), checked whole (open_keys_block); a
    missing object, or one of another length, refused by name."""
    name = _keys_name(range_id)
    first, size = bounds[shard], bounds[shard + 1] - bounds[shard]
    try:
        block = store.get(name, first, first + size - 1, size_max=min(size, KEYS_FILE_SIZE_MAX))
    except StoreError as exc:
        raise StoreError(f"key shard {shard}: range {range_id}: {name}: {exc}") from exc
    return open_keys_block(block, range_id=range_id, shard=shard, size=size, record_count=record_count, source=name)


def _rewrite_task(store: StoreSnapshot, plan: Plan, upper_bound: int):
    def rewrite(item):
        byte_range, bitmap = item
        output, stats = _with_range(store, plan, byte_range, lambda s: filter_range(s, byte_range, bitmap, upper_bound))
        store.put(_part_name(byte_range.range_id), bytes(output))
        return stats

    return rewrite


def _assemble_task(store: StoreSnapshot, plan: Plan, part_sizes: dict[int, int]):
    def assemble(group):
        snapshot = local_view(plan.snapshot)
        local = Plan(snapshot, plan.layouts, plan.ranges, plan.shard_count, plan.map_bytes, plan.load_factor, plan.started)
        members = set(group)
        ranges = [r for r in plan.ranges if r.segment_index in members]
        os.makedirs(os.path.dirname(part_path(snapshot, 0)), exist_ok=True)
        try:
            for r in ranges:
                store.download(_part_name(r.range_id), part_path(snapshot, r.range_id), part_sizes[r.range_id])
            segment = assemble_group(local, group)
            if segment is not None:
                base = segment["base_offset"]
                for suffix in (".log", ".index", ".timeindex"):
                    name = segment_file_name(base, suffix)
                    store.put_file(f"{CLEANED_DIR}/{name}", os.path.join(snapshot.cleaned_dir, name))
            return segment
        finally:
            shutil.rmtree(snapshot.path, ignore_errors=True)

    return assemble


def _slices(sc, items: int) -> int:
    return max(1, min(items, TASKS_PER_CORE * sc.defaultParallelism))


def clean_store_snapshot(
    spark,
    store: StoreSnapshot,
    *,
    map_bytes: int = DEFAULT_MAP_BYTES,
    dry_run: bool = False,
    shard_count: int = DEFAULT_SHARD_COUNT,
    range_bytes: int = DEFAULT_RANGE_BYTES,
) -> dict:
    """Clean the snapshot at ``store`` with ``spark``; returns the result document, also written
    to the store as result.json (last). Raises CleanerError (StoreError for the store)."""
    if dry_run:
        raise CleanerError("a dry run of a snapshot in an object store is not supported: run it on a shared disk")
    scratch = tempfile.mkdtemp(prefix="seglog-clean-driver-")
    try:
        started = time.perf_counter()
        # A rerun starts from nothing: an earlier run's output and result go first.
        store.delete_under(RESULT_FILE)
        store.delete_under(CLEANED_DIR + "/")
        store.delete_under(WORK_DIR + "/")
        path = download_snapshot(store, scratch)
        plan = plan_cleaning(path, map_bytes=map_bytes, shard_count=shard_count, range_bytes=range_bytes)
        stages = {"download_plan": time.perf_counter() - started}
        mark = time.perf_counter()
        sc = spark.sparkContext
        ranges = list(plan.ranges)
        shard_results = []
        if ranges:
            scanned = sc.parallelize(ranges, _slices(sc, len(ranges))).map(_scan_task(store, plan)).collect()
            shard_results = sc.parallelize(range(shard_count), shard_count).map(_decide_task(store, plan, scanned)).collect()
        end = cleaning_end(plan, shard_results)
        if end is not None:  # a map filled: decided again with nothing past the end in the maps
            shard_results = (
                sc.parallelize(range(shard_count), shard_count).map(_decide_task(store, plan, scanned, end)).collect()
            )
        choice = choose_replaced(plan, end, merge_shard_bitmaps(shard_results))
        work = [(r, choice.bitmaps.get(r.range_id)) for r in replaced_ranges(plan, choice)]
        outputs = sc.parallelize(work, _slices(sc, len(work))).map(_rewrite_task(store, plan, choice.upper_bound)).collect() if work else []
        stages["scan_decide_rewrite"] = time.perf_counter() - mark
        mark = time.perf_counter()
        part_sizes = {o.range_id: o.bytes_written for o in outputs}
        segments = []
        if choice.groups:
            groups = list(choice.groups)
            assembled = sc.parallelize(groups, len(groups)).map(_assemble_task(store, plan, part_sizes)).collect()
            segments = [segment for segment in assembled if segment is not None]
        stages["assemble"] = time.perf_counter() - mark
        document = finish(plan, choice, shard_results, outputs, segments, engine=f"spark {sc.master} via {store.url}",
                          dry_run=False, extra_stats={"stage_seconds": {k: round(v, 3) for k, v in stages.items()}})
        store.delete_under(WORK_DIR + "/")
        store.put(RESULT_FILE, json.dumps(document, indent=1, sort_keys=True).encode())
        return document
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
