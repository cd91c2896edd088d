"""The cleaner's second decision when a map fills: every key shard decided anew from its entries
(decide_shard with the end) against each shard's map filled in from its trail (decide_from_trail).

    .venv/bin/python bench/bench_decide_again.py [--size-mib 256] [--keys 400000] [--overwrites 4]
                                                 [--map-bytes N] [--runs 7] [--cache-dir DIR]

The snapshot is bench_cleaner.py's (built once in --cache-dir, reused).  The default --map-bytes
is the smallest map in which all but one of the 8 key shards hold every key of the default
workload: one map fills, late in the log, and the round ends at the last segment's base.  Scan
and first decisions once (not timed); then, A B A B ..., --runs times: A decides every shard anew,
B fills each map in from its trail.  Both results are checked equal.  Reported: medians of the
CPU time of the process (what contention does not change) and of wall time, the ratios per
interleaved pair, the load average, and the trails' bytes (written in every Spark round, a map
filling or not) and what building them adds to the first decision (CPU, median of interleaved
runs with and without).
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
from seglog_spark.key_shard import decide_from_trail, decide_shard, decide_shard_trailed  # noqa: E402

ONE_MAP_FILLS = 24 * 55_783  # 50,204 keys before full: 7 of the 8 shards of 400,000 keys fit
LABELS = (("anew", "decided anew"), ("trail", "from trail"))


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

    settings = {"first_dirty_offset": snapshot.first_dirty_offset, "map_bytes": args.map_bytes, "load_factor": plan.load_factor}
    decided = [decide_shard_trailed(shard, chunks.get(shard, []), **settings) for shard in range(plan.shard_count)]
    end = cleaning_end(plan, [result for result, _ in decided])
    trails = [trail for _, trail in decided]
    filled = [result.shard for result, _ in decided if result.full_at is not None]
    if end is None:
        raise SystemExit("no map filled: choose a smaller --map-bytes")
    print(f"{sum(len(c) for c in chunks.values())} chunks, {plan.shard_count} shards, maps of {args.map_bytes} bytes; "
          f"shards whose map filled: {filled}; the round ends at offset {end} of {snapshot.first_uncleanable_offset}; "
          f"the trails {sum(len(t) for t in trails)} bytes; load average {os.getloadavg()[0]:.2f} at the start")
    rows = {"anew": [], "trail": []}
    first = {"plain": [], "trailed": []}
    for run in range(args.runs):
        for name, decide in (("plain", decide_shard), ("trailed", decide_shard_trailed)):
            cpu = time.process_time()
            for shard in range(plan.shard_count):
                decide(shard, chunks.get(shard, []), **settings)
            first[name].append(time.process_time() - cpu)
        for name, decide in (("anew", lambda shard: decide_shard(shard, chunks.get(shard, []), end_offset=end, **settings)),
                             ("trail", lambda shard: decide_from_trail(shard, chunks.get(shard, []), trails[shard],
                                                                       end_offset=end, **settings))):
            load = os.getloadavg()[0]
            cpu, wall = time.process_time(), time.perf_counter()
            results = [decide(shard) for shard in range(plan.shard_count)]
            rows[name].append((time.process_time() - cpu, time.perf_counter() - wall, load))
            if name == "anew":
                anew = results
            else:
                assert results == anew, "decide_from_trail differs from deciding anew"
        print(f"run {run + 1}: " + "; ".join(f"{label} {rows[name][-1][0]:.3f} s CPU ({rows[name][-1][1]:.3f} s wall, load "
                                             f"{rows[name][-1][2]:.2f})" for name, label in LABELS), flush=True)
    for name, label in LABELS:
        print(f"{label:>13}: median {statistics.median(r[0] for r in rows[name]):.3f} s CPU, "
              f"{statistics.median(r[1] for r in rows[name]):.3f} s wall")
    cpu_pairs = [a[0] / b[0] for a, b in zip(rows["anew"], rows["trail"])]
    wall_pairs = [a[1] / b[1] for a, b in zip(rows["anew"], rows["trail"])]
    print(f"anew / from trail per interleaved pair: CPU median {statistics.median(cpu_pairs):.2f}x "
          f"({', '.join(f'{p:.2f}' for p in cpu_pairs)}); wall median {statistics.median(wall_pairs):.2f}x")
    print(f"first decision of the 8 shards: plain median {statistics.median(first['plain']):.3f} s CPU, with the trails "
          f"{statistics.median(first['trailed']):.3f} s; load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
