"""The PySpark job: the steps of cleaning.py spread over Spark tasks (DESIGN.md section 5).

    ranges  --scan (one task per byte range)-->  .parts/<range>.keys: a block of entries a shard
                                                 (key_blocks.py: checked whole when read back)
            --(file positions)-->  one task per key shard: bounded offset map, bitmaps, and
                                   .parts/shard-<n>.trail: where its puts landed
            --collect-->  driver: which segments are replaced, merged bitmaps, groups
    ranges of replaced segments + their bitmaps --rewrite (one task per range)--> part files
    groups --assemble (one task per group)--> cleaned/<base>.log, .index, .timeindex
    driver: result.json, last

So one large segment spreads over every core (its ranges are scanned and rewritten in
parallel), and keys, not partitions, are what the map memory is divided by.  Key files, part
files and outputs go to the snapshot directory, which every executor must see (the service and
the cleaner share a filesystem; on a cluster, a shared mount).  The scanned entries (28 bytes a
keyed record) pass between tasks as files there rather than through Spark's shuffle: the
shuffle cost more CPU in the JVM and in pickling than the shard steps themselves (bench/
README.md).  A dry run, which writes nothing, shuffles them instead.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
import uuid

from .cleaning import (
    DEFAULT_MAP_BYTES,
    DEFAULT_RANGE_BYTES,
    DEFAULT_SHARD_COUNT,
    Plan,
    assemble_group,
    choose_replaced,
    cleaning_end,
    finish,
    keys_path,
    merge_shard_bitmaps,
    part_path,
    plan_cleaning,
    prepare_output,
    replaced_ranges,
    trail_path,
)
from .errors import CleanerError
from .key_blocks import KEYS_FILE_SIZE_MAX, keys_block, open_keys_block
from .key_scan import scan_range
from .key_shard import decide_from_trail, decide_shard, decide_shard_trailed, trail_size_max
from .rewrite import rewrite_range

__all__ = ["clean_snapshot"]

TASKS_PER_CORE = 4  # scan and rewrite tasks per core of the master (see _slices)


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _scan_task(plan: Plan, cpu):
    def scan(byte_range):
        started = time.process_time()
        found = scan_range(plan.snapshot, byte_range, plan.shard_count)
        cpu.add(time.process_time() - started)
        for shard, packed in found.entries.items():
            yield shard, (found.range_id, found.record_count, packed)

    return scan


def _scan_to_file_task(plan: Plan, cpu):
    def scan(byte_range):
        started = time.process_time()
        found = scan_range(plan.snapshot, byte_range, plan.shard_count)
        bounds = [0]
        packed = [keys_block(found.range_id, shard, found.base_offset, found.end_offset, found.entries.get(shard, b""))
                  for shard in range(plan.shard_count)]
        for chunk in packed:
            bounds.append(bounds[-1] + len(chunk))
        _write_whole(keys_path(plan.snapshot, byte_range.range_id), packed)
        cpu.add(time.process_time() - started)
        return found.range_id, found.record_count, bounds

    return scan


def _decide_from_files_task(plan: Plan, scanned, cpu, end_offset=None):
    """The first decision (no `end_offset`) leaves the shard's trail beside the .keys files; the
    second, when a map filled, fills its map in from it instead of putting the entries again."""
    def decide(shard):
        started = time.process_time()
        chunks = [(range_id, record_count, _read_keys_block(plan, shard, range_id, record_count, bounds))
                  for range_id, record_count, bounds in scanned if bounds[shard + 1] > bounds[shard]]
        settings = {"first_dirty_offset": plan.snapshot.first_dirty_offset, "map_bytes": plan.map_bytes,
                    "load_factor": plan.load_factor}
        if end_offset is None:
            result, trail = decide_shard_trailed(shard, chunks, **settings)
            _write_whole(trail_path(plan.snapshot, shard), [trail])
        else:
            path = trail_path(plan.snapshot, shard)
            result = decide_from_trail(shard, chunks, _read_trail_file(shard, path, trail_size_max(chunks)),
                                       end_offset=end_offset, source=path, **settings)
        cpu.add(time.process_time() - started)
        return result, _peak_rss_bytes()

    return decide


def _write_whole(path: str, chunks) -> None:
    """Writes `chunks` to `path` as one step for its readers: to a name of this write's own beside
    it, then renamed over it, so a reader (a later stage, or a second attempt of the same task,
    Spark's speculation or a retry) sees the old file or the new one whole, never one cut by a
    writer that opened it "wb".  The name is random (uuid4), not the process and thread ids:
    executors in containers sharing the snapshot mount may run with the same pid."""
    temporary = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        with open(temporary, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _read_keys_block(plan: Plan, shard: int, range_id: int, record_count: int, bounds) -> bytes:
    """Shard `shard`'s entries of range `range_id`, from the .keys file the scan left: the file
    the size the scan wrote, the block read to the bytes its bounds give (capped: key_blocks),
    checked whole (open_keys_block); missing or otherwise, refused by name."""
    path = keys_path(plan.snapshot, range_id)
    size = bounds[shard + 1] - bounds[shard]
    if size > KEYS_FILE_SIZE_MAX:
        raise CleanerError(f"key shard {shard}: range {range_id}: {path}: the scan's bounds give {size} bytes, "
                           f"above any block's {KEYS_FILE_SIZE_MAX}")
    try:
        with open(path, "rb") as f:
            file_size = os.fstat(f.fileno()).st_size
            f.seek(bounds[shard])
            block = f.read(size)
    except FileNotFoundError:
        raise CleanerError(f"key shard {shard}: range {range_id}: {path}: its .keys file is missing: the first "
                           f"stage's files changed under the job") from None
    if file_size != bounds[-1]:
        raise CleanerError(f"key shard {shard}: range {range_id}: {path}: {file_size} bytes, the scan wrote "
                           f"{bounds[-1]}: the first stage's files changed under the job")
    return open_keys_block(block, range_id=range_id, shard=shard, size=size, record_count=record_count, source=path)


def _read_trail_file(shard: int, path: str, size_max: int) -> bytes:
    """The trail the first stage left at `path`, read to at most `size_max` bytes (what the
    shard's entries allow: key_shard.trail_size_max); missing or larger, refused by name."""
    try:
        with open(path, "rb") as f:
            trail = f.read(size_max + 1)
    except FileNotFoundError:
        raise CleanerError(f"key shard {shard}: {path}: its trail is missing: the first decision's files changed "
                           f"under the job") from None
    if len(trail) > size_max:
        raise CleanerError(f"key shard {shard}: {path}: its trail is longer than the {size_max} bytes its entries "
                           f"allow: the first decision's files changed under the job")
    return trail


def _decide_task(plan: Plan, cpu, end_offset=None):
    def decide(shard, pairs):
        chunks = [chunk for _, chunk in pairs]
        started = time.process_time()
        result = decide_shard(
            shard,
            chunks,
            first_dirty_offset=plan.snapshot.first_dirty_offset,
            map_bytes=plan.map_bytes,
            load_factor=plan.load_factor,
            end_offset=end_offset,
        )
        cpu.add(time.process_time() - started)
        yield result, _peak_rss_bytes()

    return decide


def _rewrite_task(plan: Plan, upper_bound: int, dry_run: bool, cpu):
    def rewrite(item):
        byte_range, bitmap = item
        out = None if dry_run else part_path(plan.snapshot, byte_range.range_id)
        started = time.process_time()
        output = rewrite_range(plan.snapshot, byte_range, bitmap, upper_bound, out)
        cpu.add(time.process_time() - started)
        return output, _peak_rss_bytes()

    return rewrite


def _assemble_task(plan: Plan, cpu):
    def assemble(group):
        started = time.process_time()
        segment = assemble_group(plan, group)
        cpu.add(time.process_time() - started)
        return segment

    return assemble


def _slices(sc, items: int) -> int:
    """Tasks for `items` ranges: a few per core, not one per range.  Every task costs a Python
    worker about 20 ms of CPU beyond its work (measured: 2.9 s per GiB at one 16 MiB range per
    task), while a few tasks per core still let a fast core take over a slow one's share."""
    return max(1, min(items, TASKS_PER_CORE * sc.defaultParallelism))


def _lap(stages: dict, name: str, since: float) -> float:
    now = time.perf_counter()
    stages[name] = now - since
    return now


def clean_snapshot(
    spark,
    snapshot_dir: str,
    *,
    map_bytes: int = DEFAULT_MAP_BYTES,
    dry_run: bool = False,
    shard_count: int = DEFAULT_SHARD_COUNT,
    range_bytes: int = DEFAULT_RANGE_BYTES,
) -> dict:
    """Clean the snapshot at `snapshot_dir` with `spark`; returns the result document (also
    written as result.json unless `dry_run`).  Same bytes as cleaner_local.clean_snapshot."""
    plan = plan_cleaning(snapshot_dir, map_bytes=map_bytes, shard_count=shard_count, range_bytes=range_bytes)
    stages = {"plan": time.perf_counter() - plan.started}
    mark = time.perf_counter()
    sc = spark.sparkContext
    task_cpu = {name: sc.accumulator(0.0) for name in ("scan", "decide", "rewrite", "assemble")}
    ranges = list(plan.ranges)
    decided = []
    if not dry_run:
        prepare_output(plan.snapshot)
    decide_all = None
    if ranges and not dry_run:
        # Each scan task writes its range's entries, grouped by shard, to a file beside the
        # part files; each shard task reads its slice of every range's file.  Only file
        # positions pass through Spark.
        scanned = sc.parallelize(ranges, _slices(sc, len(ranges))).map(_scan_to_file_task(plan, task_cpu["scan"])).collect()

        def decide_all(end_offset):
            return (
                sc.parallelize(range(shard_count), shard_count)
                .map(_decide_from_files_task(plan, scanned, task_cpu["decide"], end_offset))
                .collect()
            )
    elif ranges:  # a dry run writes nothing, so its entries go through Spark's shuffle
        entries = sc.parallelize(ranges, _slices(sc, len(ranges))).flatMap(_scan_task(plan, task_cpu["scan"]))
        by_shard = entries.partitionBy(shard_count, lambda shard: shard)

        def decide_all(end_offset):
            return by_shard.mapPartitionsWithIndex(_decide_task(plan, task_cpu["decide"], end_offset)).collect()
    if decide_all is not None:
        decided = decide_all(None)
    end = cleaning_end(plan, [result for result, _ in decided])
    if end is not None:  # a map filled: decided again with nothing past the end in the maps
        decided = decide_all(end)
    shard_results = [result for result, _ in decided]
    choice = choose_replaced(plan, end, merge_shard_bitmaps(shard_results))
    mark = _lap(stages, "scan_decide", mark)
    work = [(r, choice.bitmaps.get(r.range_id)) for r in replaced_ranges(plan, choice)]
    rewritten = sc.parallelize(work, _slices(sc, len(work))).map(_rewrite_task(plan, choice.upper_bound, dry_run, task_cpu["rewrite"])).collect() if work else []
    outputs = [output for output, _ in rewritten]
    mark = _lap(stages, "rewrite", mark)
    segments = []
    if not dry_run and choice.groups:
        groups = list(choice.groups)
        assembled = sc.parallelize(groups, len(groups)).map(_assemble_task(plan, task_cpu["assemble"])).collect()
        segments = [segment for segment in assembled if segment is not None]
    _lap(stages, "assemble", mark)
    peak_rss = max([rss for _, rss in decided] + [rss for _, rss in rewritten], default=0)
    return finish(
        plan, choice, shard_results, outputs, segments, engine=f"spark {sc.master}", dry_run=dry_run,
        extra_stats={"task_peak_rss_bytes": peak_rss, "stage_seconds": {k: round(v, 3) for k, v in stages.items()},
                     "task_cpu_seconds": {k: round(v.value, 3) for k, v in task_cpu.items()}},
    )
