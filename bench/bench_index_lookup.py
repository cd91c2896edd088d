"""In-process lookup latency of OffsetIndex and TimeIndex at a realistic size.

    .venv/bin/python bench/bench_index_lookup.py [--entries 262144] [--runs 21]

A 1 GiB segment indexed every 4096 bytes (Kafka's index.interval.bytes) has 262,144 offset-index
entries (2 MiB) and as many time-index entries at most (3 MiB); the files are preallocated to the
default segment.index.bytes (10 MiB). Measured, all in the page cache:

- tail lookups (targets among the newest 64 entries: followers and caught-up consumers), which the
  warm/cold search answers from the newest 8 KiB; goal: median <= 5 us through OffsetIndex.lookup;
- random lookups over the whole index (mostly cold-section searches);
- the bare search (index_search.slot_range_for on a mapping of the same file) and the plain binary
  search, to show what the index shell (lock, lazy-open check, result tuple) adds;
- a no-op call in the same loop: the harness's own cost per call, included in every row above.

Each row: ``--runs`` runs of ``--calls`` calls; per-call mean of each run, then the median (and min,
max) over runs. The machine is shared and noisy: read medians, compare rows of the same run.
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

from seglog_server.storage.format import offset_index, time_index
from seglog_server.storage.format.index_search import LARGEST_LOWER_BOUND, plain_slot_range_for, slot_range_for
from seglog_server.storage.format.offset_index import OffsetIndex
from seglog_server.storage.format.time_index import TimeIndex

TAIL_GOAL_US = 5.0
TAIL_SPREAD = 64  # tail targets fall among the newest 64 entries
OFFSETS_PER_ENTRY = 7  # a sparse index: one entry per 7 offsets (one batch of 7 records per 4 KiB)
BASE_OFFSET = 1_000_000
BASE_TIMESTAMP_MS = 1_700_000_000_000


def time_calls(call: Callable[[int], object], targets: Sequence[int], runs: int) -> list[float]:
    """Per-call mean in microseconds of each run."""
    means = []
    for _ in range(runs):
        started = time.perf_counter_ns()
        for target in targets:
            call(target)
        means.append((time.perf_counter_ns() - started) / len(targets) / 1000)
    return means


def build_offset_index(directory: str, entry_count: int) -> OffsetIndex:
    index = OffsetIndex(os.path.join(directory, "00000000000001000000.index"), BASE_OFFSET)
    for slot in range(entry_count):
        index.append(BASE_OFFSET + slot * OFFSETS_PER_ENTRY, slot * 4096)
    return index


def build_time_index(directory: str, entry_count: int) -> TimeIndex:
    index = TimeIndex(os.path.join(directory, "00000000000001000000.timeindex"), BASE_OFFSET)
    for slot in range(entry_count):
        index.maybe_append(BASE_TIMESTAMP_MS + slot * 3, BASE_OFFSET + slot * OFFSETS_PER_ENTRY)
    return index


def map_file(path: str) -> mmap.mmap:
    fd = os.open(path, os.O_RDONLY)
    try:
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=262_144, help="entries per index")
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--calls", type=int, default=2000, help="lookups per run")
    args = parser.parse_args()
    rng = random.Random(1)
    count = args.entries
    last_offset = BASE_OFFSET + (count - 1) * OFFSETS_PER_ENTRY
    last_timestamp_ms = BASE_TIMESTAMP_MS + (count - 1) * 3
    tail_offsets = [last_offset - rng.randrange(TAIL_SPREAD * OFFSETS_PER_ENTRY) + 3 for _ in range(args.calls)]
    random_offsets = [rng.randrange(BASE_OFFSET, last_offset + 10) for _ in range(args.calls)]
    tail_timestamps = [last_timestamp_ms - rng.randrange(TAIL_SPREAD * 3) + 1 for _ in range(args.calls)]
    random_timestamps = [rng.randrange(BASE_TIMESTAMP_MS, last_timestamp_ms + 10) for _ in range(args.calls)]

    with tempfile.TemporaryDirectory(prefix="seglog-bench-lookup-") as directory:
        started = time.perf_counter()
        offsets, times = build_offset_index(directory, count), build_time_index(directory, count)
        offsets.flush()
        times.flush()
        print(f"seglog bench_index_lookup: {count:,} entries per index, built in {time.perf_counter() - started:.1f} s")
        print(f"{args.runs} runs x {args.calls} calls; per-call mean of each run, in us\n")
        offset_map, time_map = map_file(offsets.path), map_file(times.path)
        offset_key, time_key = offset_index.LAYOUT.key, time_index.LAYOUT.key

        def relative(targets: list[int]) -> list[int]:
            return [target - BASE_OFFSET for target in targets]

        rows: list[tuple[str, Callable[[int], object], list[int]]] = [
            ("harness: no-op call", lambda target: None, tail_offsets),
            ("OffsetIndex.lookup, tail", offsets.lookup, tail_offsets),
            ("OffsetIndex.lookup, random", offsets.lookup, random_offsets),
            ("TimeIndex.lookup, tail", times.lookup, tail_timestamps),
            ("TimeIndex.lookup, random", times.lookup, random_timestamps),
            (
                "bare warm/cold search, offset tail",
                lambda target: slot_range_for(offset_map, count, target, offset_key, LARGEST_LOWER_BOUND),
                relative(tail_offsets),
            ),
            (
                "bare plain search, offset tail",
                lambda target: plain_slot_range_for(offset_map, count, target, offset_key, LARGEST_LOWER_BOUND),
                relative(tail_offsets),
            ),
            (
                "bare warm/cold search, time tail",
                lambda target: slot_range_for(time_map, count, target, time_key, LARGEST_LOWER_BOUND),
                tail_timestamps,
            ),
        ]
        results = {}
        for name, call, targets in rows:
            time_calls(call, targets[:200], 1)  # warm-up
            results[name] = time_calls(call, targets, args.runs)
        width = max(len(name) for name in results)
        print(f"{'lookup':<{width}} | {'median':>7} {'min':>7} {'max':>7}")
        print("-" * (width + 27))
        for name, means in results.items():
            print(f"{name:<{width}} | {statistics.median(means):>7.2f} {min(means):>7.2f} {max(means):>7.2f}")
        stats = offsets.statistics()
        print(f"\nOffsetIndex statistics: {stats.warm_lookup_count:,} warm, {stats.cold_lookup_count:,} cold lookups")
        tail_median = statistics.median(results["OffsetIndex.lookup, tail"])
        verdict = "met" if tail_median <= TAIL_GOAL_US else "NOT met"
        print(f"goal: OffsetIndex tail lookup median <= {TAIL_GOAL_US} us: {tail_median:.2f} us, {verdict}")
        offset_map.close()
        time_map.close()
        offsets.close()
        times.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
