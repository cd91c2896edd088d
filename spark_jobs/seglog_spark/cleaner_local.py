"""The single-process baseline: the cleaning steps of cleaning.py run one after another in
this process, no Spark, no Java.  Writes the same bytes as the Spark job (job.py)."""

from __future__ import annotations

from collections import defaultdict

from .cleaning import (
    DEFAULT_MAP_BYTES,
    DEFAULT_RANGE_BYTES,
    DEFAULT_SHARD_COUNT,
    assemble_group,
    choose_replaced,
    cleaning_end,
    finish,
    merge_shard_bitmaps,
    part_path,
    plan_cleaning,
    prepare_output,
    replaced_ranges,
)
from .key_scan import scan_range
from .key_shard import decide_from_trail, decide_shard_trailed
from .rewrite import rewrite_range

__all__ = ["clean_snapshot"]


def clean_snapshot(
    snapshot_dir: str,
    *,
    map_bytes: int = DEFAULT_MAP_BYTES,
    dry_run: bool = False,
    shard_count: int = DEFAULT_SHARD_COUNT,
    range_bytes: int = DEFAULT_RANGE_BYTES,
) -> dict:
    """Clean the snapshot at `snapshot_dir`; returns the result document (also written as
    result.json unless `dry_run`)."""
    plan = plan_cleaning(snapshot_dir, map_bytes=map_bytes, shard_count=shard_count, range_bytes=range_bytes)
    snapshot = plan.snapshot
    chunks = defaultdict(list)
    for byte_range in plan.ranges:
        found = scan_range(snapshot, byte_range, shard_count)
        for shard, packed in found.entries.items():
            chunks[shard].append((found.range_id, found.record_count, packed))

    settings = {"first_dirty_offset": snapshot.first_dirty_offset, "map_bytes": map_bytes, "load_factor": plan.load_factor}
    decided = [decide_shard_trailed(shard, chunks.get(shard, []), **settings) for shard in range(shard_count)]
    shard_results = [result for result, _ in decided]
    end = cleaning_end(plan, shard_results)
    if end is not None:  # a map filled: decided again with nothing past the end in the maps,
        # each map filled in from the shard's trail rather than put again (key_shard)
        shard_results = [
            decide_from_trail(shard, chunks.get(shard, []), trail, end_offset=end, **settings)
            for shard, (_, trail) in enumerate(decided)
        ]
    del decided
    choice = choose_replaced(plan, end, merge_shard_bitmaps(shard_results))
    if not dry_run:
        prepare_output(snapshot)
    outputs = [
        rewrite_range(
            snapshot,
            byte_range,
            choice.bitmaps.get(byte_range.range_id),
            choice.upper_bound,
            None if dry_run else part_path(snapshot, byte_range.range_id),
        )
        for byte_range in replaced_ranges(plan, choice)
    ]
    segments = [] if dry_run else [s for s in (assemble_group(plan, g) for g in choice.groups) if s is not None]
    return finish(plan, choice, shard_results, outputs, segments, engine="python", dry_run=dry_run)
