"""The cleaner's second decision when a map fills: every key shard decided anew from its entries
(decide_shard with the end) against each shard's map taken back to the end (decide_again).

    .venv/bin/python bench/bench_decide_again.py [--size-mib 256] [--keys 400000] [--overwrites 4]
                                                 [--map-bytes N] [--runs 7] [--cache-dir DIR]

The snapshot is bench_cleaner.py's (built once in --cache-dir, reused).  The default --map-bytes
is the smallest map in which all but one of the 8 key shards hold every key of the default
workload: one map fills, late in the log, and the round ends at the last segment's base.  Scan
and first decision once (not timed); then, A B A B ..., --runs times: A decides every shard
anew, B takes each shard's map back (its first decision is rerun, untimed, before each B: a
state is used up).  Both results are checked equal.  Reported: medians of the CPU time of the
process (what contention does not change) and of wall time, their ratio per interleaved pair,
and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "spark_jobs"))

from bench_cleaner import cached_snapshot  # noqa: E402
from seglog_spark.cleaning import cleaning_end, plan_cleaning  # noqa: E402
from seglog_spark.key_scan import scan_range  # noqa: E402
from seglog_spark.key_shard import decide_again, decide_shard, decide_shard_keeping  # noqa: E402

ONE_MAP_FILLS = 24 * 55_783  # 50,204 keys before full: 7 of the 8 shards of 400,000 keys fit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--keys", type=int, default=400_000)
    parser.add_argument("--overwrites", type=int, default=4)
    parser.add_argument("--map-bytes", type=int, default=ONE_MAP_FILLS)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--cache-dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    path = cached_snapshot(args.cache_dir, args.size_mib, args.keys, args.overwrites)
    plan = plan_cleaning(path, map_bytes=args.map_bytes)
    snapshot = plan.snapshot
    chunks = defaultdict(list)
    for byte_range in plan.ranges:
        found = scan_range(snapshot, byte_range, plan.shard_count)
        for shard, packed in found.entries.items():
            chunks[shard].append((found.range_id, found.record_count, packed))

    def first_decisions():
        return [decide_shard_keeping(shard, chunks.get(shard, []), first_dirty_offset=snapshot.first_dirty_offset,
                                     map_bytes=args.map_bytes, load_factor=plan.load_factor)
                for shard in range(plan.shard_count)]

    decided = first_decisions()
    end = cleaning_end(plan, [result for result, _ in decided])
    filled = [result.shard for result, _ in decided if result.full_at is not None]
    if end is None:
        raise SystemExit("no map filled: choose a smaller --map-bytes")
    print(f"{sum(len(c) for c in chunks.values())} chunks, {plan.shard_count} shards, maps of {args.map_bytes} bytes; "
          f"shards whose map filled: {filled}; the round ends at offset {end} of {snapshot.first_uncleanable_offset}; "
          f"load average {os.getloadavg()[0]:.2f} at the start")
    rows = {"anew": [], "again": []}
    for run in range(args.runs):
        load = os.getloadavg()[0]
        cpu, wall = time.process_time(), time.perf_counter()
        anew = [decide_shard(shard, chunks.get(shard, []), first_dirty_offset=snapshot.first_dirty_offset,
                             map_bytes=args.map_bytes, load_factor=plan.load_factor, end_offset=end)
                for shard in range(plan.shard_count)]
        rows["anew"].append((time.process_time() - cpu, time.perf_counter() - wall, load))
        decided = first_decisions()
        load = os.getloadavg()[0]
        cpu, wall = time.process_time(), time.perf_counter()
        again = [decide_again(state, end) for _, state in decided]
        rows["again"].append((time.process_time() - cpu, time.perf_counter() - wall, load))
        assert again == anew, "decide_again differs from deciding anew"
        del decided, again, anew
        print(f"run {run + 1}: anew {rows['anew'][-1][0]:.3f} s CPU ({rows['anew'][-1][1]:.3f} s wall, load "
              f"{rows['anew'][-1][2]:.2f}); taken back {rows['again'][-1][0]:.3f} s CPU ({rows['again'][-1][1]:.3f} s wall, "
              f"load {rows['again'][-1][2]:.2f})", flush=True)
    for name, label in (("anew", "decided anew"), ("again", "taken back")):
        print(f"{label:>13}: median {statistics.median(r[0] for r in rows[name]):.3f} s CPU, "
              f"{statistics.median(r[1] for r in rows[name]):.3f} s wall")
    cpu_pairs = [a[0] / b[0] for a, b in zip(rows["anew"], rows["again"])]
    wall_pairs = [a[1] / b[1] for a, b in zip(rows["anew"], rows["again"])]
    print(f"anew / taken back per interleaved pair: CPU median {statistics.median(cpu_pairs):.2f}x "
          f"({', '.join(f'{p:.2f}' for p in cpu_pairs)}); wall median {statistics.median(wall_pairs):.2f}x; "
          f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
