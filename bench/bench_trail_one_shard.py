"""The cleaner's second decision on one large key shard: deciding anew (decide_shard with the
end) against filling the map in from the shard's checked trail (decide_from_trail), CPU and
peak memory.

    .venv/bin/python bench/bench_trail_one_shard.py [--entries 10000000] [--ranges 20] [--runs 3]

One shard of --entries dirty entries in --ranges ranges, keys drawn from half as many (so about
half the puts repeat a key), a map at 0.7 of its slots once every key is put (the default load
factor's bound is not reached); the end at the base of the last two ranges.  The first decision
once (not timed); then, A B A B ..., --runs times: A from the trail, B anew, each under
tracemalloc (its peak: bytes numpy and Python allocate, the map included).  Both results are
checked equal.  Reported: medians of process CPU per side, the ratio per interleaved pair, the
peaks, the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "spark_jobs"))

from seglog_spark.key_scan import ENTRY_DTYPE  # noqa: E402
from seglog_spark.key_shard import decide_from_trail, decide_shard, decide_shard_trailed  # noqa: E402


def _chunks(entries: int, ranges: int):
    rng = np.random.default_rng(1)
    table = rng.integers(0, 256, (entries // 2, 16), dtype=np.uint8)
    keys = rng.integers(0, entries // 2, entries)
    per = entries // ranges
    chunks = []
    for r in range(ranges):
        found = np.zeros(per, dtype=ENTRY_DTYPE)
        found["digest"] = np.ascontiguousarray(table[keys[r * per : (r + 1) * per]]).view("V16").reshape(-1)
        found["offset"] = np.arange(r * per, (r + 1) * per)
        found["ordinal"] = np.arange(per)
        chunks.append((r, per, found.tobytes()))
    return chunks, per


def _measured(call):
    tracemalloc.start()
    try:
        started = time.process_time()
        result = call()
        return result, time.process_time() - started, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=10_000_000)
    parser.add_argument("--ranges", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    chunks, per = _chunks(args.entries, args.ranges)
    slots = int(args.entries / 2 / 0.7)
    options = {"first_dirty_offset": 0, "map_bytes": 24 * slots}
    _, trail = decide_shard_trailed(0, chunks, **options)
    end = (args.ranges - 2) * per
    loads, sides = [], {"trail": [], "anew": []}
    for _ in range(args.runs):
        loads.append(os.getloadavg()[0])
        from_trail = _measured(lambda: decide_from_trail(0, chunks, trail, end_offset=end, **options))
        anew = _measured(lambda: decide_shard(0, chunks, end_offset=end, **options))
        assert from_trail[0] == anew[0]
        sides["trail"].append(from_trail[1:])
        sides["anew"].append(anew[1:])
    ratios = [t[0] / a[0] for t, a in zip(sides["trail"], sides["anew"])]
    print(f"{args.entries:,} entries, {args.ranges} ranges, map {slots:,} slots ({24 * slots / 1e6:.0f} MB), "
          f"{args.runs} interleaved runs, load {min(loads):.1f}-{max(loads):.1f}")
    for side, runs in sides.items():
        print(f"  {side:5}: CPU median {statistics.median(c for c, _ in runs):.2f} s {[round(c, 2) for c, _ in runs]}, "
              f"peak {statistics.median(p for _, p in runs) / 1e6:.0f} MB")
    print(f"  trail/anew CPU per pair: median {statistics.median(ratios):.2f} {[round(r, 2) for r in ratios]}")


if __name__ == "__main__":
    main()
