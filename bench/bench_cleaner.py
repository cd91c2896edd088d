"""The offline cleaner: throughput of the PySpark job and of the single-process baseline.

    .venv/bin/python bench/bench_cleaner.py [--size-mib 1024] [--keys 1000000] [--overwrites 10]
                                            [--runs 3] [--dir DIR] [--profile]

One compacted partition of `--size-mib` MiB (`--keys` distinct keys, each written
`--overwrites` times in random order, values sized to fill the snapshot, 100 records per batch,
128 MiB segments: one large partition) is written as a snapshot once, then cleaned `--runs`
times by each engine; every figure is a median.  Rows:

1. Spark local[2]: MB/s of input (goal >= 50 MB/s at 1 GiB, 1,000,000 keys, 10 overwrites).
2. Spark local[1], and the speed-up local[1] -> local[2] (goal >= 1.7x).
3. The single-process baseline (cleaner_local), and its ratio to local[2].
4. Peak RSS of a Python task process (offset map bounded by --map-bytes per key shard) and of
   the baseline process.
Each Spark engine runs in its own process (a SparkContext's master is fixed); the session start
is not timed.  `--profile` prints a cProfile of one baseline run instead.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "spark_jobs"))

from seglog.records import RecordBatchBuilder  # noqa: E402
from seglog_spark.cleaning import DEFAULT_MAP_BYTES  # noqa: E402
from seglog_spark.snapshot_writer import write_snapshot  # noqa: E402

RECORDS_PER_BATCH = 100
SEGMENT_BYTES = 128 * 1024 * 1024
BASE_TIME_MS = 1_700_000_000_000


def build(path: str, size_mib: int, keys: int, overwrites: int, seed: int = 7) -> None:
    records = keys * overwrites
    key_bytes = len(b"key-%09d" % 0)
    per_record = size_mib * 1024 * 1024 // records
    value_bytes = max(1, per_record - key_bytes - 10 - 61 // RECORDS_PER_BATCH)
    order = [k for k in range(keys) for _ in range(overwrites)]
    random.Random(seed).shuffle(order)
    value = b"v" * value_bytes
    segments, batches, segment_size = [], [], 0
    for start in range(0, records, RECORDS_PER_BATCH):
        builder = RecordBatchBuilder(base_offset=start)
        for i, k in enumerate(order[start : start + RECORDS_PER_BATCH]):
            builder.append(value, b"key-%09d" % k, BASE_TIME_MS + start + i)
        batch = builder.build()
        if segment_size + len(batch) > SEGMENT_BYTES:
            segments.append(batches)
            batches, segment_size = [], 0
        batches.append(batch)
        segment_size += len(batch)
    segments.append(batches)
    write_snapshot(path, segments, cleaning_time_ms=BASE_TIME_MS + records, configs={"segment.bytes": 1 << 30})


def run_spark(master: str, path: str, runs: int, map_bytes: int) -> None:
    """In a child process: one session, `runs` cleanings; prints one JSON line per run."""
    from seglog_spark.job import clean_snapshot
    from seglog_spark.session import build_session

    spark = build_session(master, tmp_dir=os.path.join(tempfile.gettempdir(), "seglog-bench-spark"))
    try:
        for _ in range(runs):
            started = time.perf_counter()
            result = clean_snapshot(spark, path, map_bytes=map_bytes)
            print(json.dumps({"seconds": time.perf_counter() - started, "stats": result["stats"]}), flush=True)
    finally:
        spark.stop()


def spark_runs(master: str, path: str, runs: int, map_bytes: int) -> list[dict]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", master, "--dir", path, "--runs", str(runs), "--map-bytes", str(map_bytes)],
        capture_output=True, text=True, check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def local_runs(path: str, runs: int, map_bytes: int) -> list[dict]:
    from seglog_spark.cleaner_local import clean_snapshot

    results = []
    for _ in range(runs):
        started, cpu = time.perf_counter(), time.process_time()
        result = clean_snapshot(path, map_bytes=map_bytes)
        results.append({"seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu, "stats": result["stats"]})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--overwrites", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--map-bytes", type=int, default=DEFAULT_MAP_BYTES)
    parser.add_argument("--dir", help="snapshot directory to build (or reuse, if it has a manifest)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_spark(args.child, args.dir, args.runs, args.map_bytes)
        return
    path = args.dir or tempfile.mkdtemp(prefix="seglog-bench-cleaner-")
    if not os.path.exists(os.path.join(path, "manifest.json")):
        started = time.perf_counter()
        build(path, args.size_mib, args.keys, args.overwrites)
        print(f"built {args.size_mib} MiB, {args.keys} keys x {args.overwrites} in {time.perf_counter() - started:.1f} s: {path}")
    manifest = json.load(open(os.path.join(path, "manifest.json")))
    input_bytes = sum(s["size_bytes"] for s in manifest["segments"])
    if args.profile:
        from seglog_spark.cleaner_local import clean_snapshot

        profiler = cProfile.Profile()
        profiler.runcall(clean_snapshot, path, map_bytes=args.map_bytes)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        return

    def report(name, results):
        seconds = statistics.median(r["seconds"] for r in results)
        runs = ", ".join(f"{r['seconds']:.2f}" for r in results)
        print(f"{name:>16}: median {seconds:7.2f} s  {input_bytes / seconds / 1e6:7.1f} MB/s of input  (runs: {runs})")
        return seconds

    print(f"input {input_bytes / 1e6:.1f} MB in {len(manifest['segments'])} segments; map {args.map_bytes} bytes per shard")
    two = report("spark local[2]", spark_runs("local[2]", path, args.runs, args.map_bytes))
    one = report("spark local[1]", spark_runs("local[1]", path, args.runs, args.map_bytes))
    local = local_runs(path, args.runs, args.map_bytes)
    base = report("python baseline", local)
    cpu = statistics.median(r["cpu_seconds"] for r in local)
    print(f"baseline CPU time: median {cpu:.2f} s = {input_bytes / cpu / 1e6:.1f} MB/s per core "
          f"(wall/CPU {base / cpu:.1f}: above 1 means the machine was busy with other work)")
    last = spark_runs("local[2]", path, 1, args.map_bytes)[0]["stats"]
    print(f"speed-up local[1] -> local[2]: {one / two:.2f}x (goal >= 1.7x)")
    print(f"baseline / local[2] time: {base / two:.2f}x")
    print(f"peak RSS of a Spark Python task process: {last['task_peak_rss_bytes'] / 2**20:.0f} MiB; "
          f"baseline process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print(f"records read {last['records_read']}, kept {last['records_kept']}, distinct keys {last['distinct_keys']}, "
          f"map utilization {last['map_utilization']:.3f}, collision rate {last['collision_rate']:.3f}")
    if not args.dir:
        shutil.rmtree(path)


if __name__ == "__main__":
    main()
