"""The offline cleaner: throughput of the PySpark job and of the single-process baseline.

    .venv/bin/python bench/bench_cleaner.py [--size-mib 1024] [--keys 1000000] [--overwrites 10]
                                            [--runs 3] [--cache-dir DIR] [--map-bytes N] [--profile]
                                            [--snapshot-store] [--engines local[2],store-local[2],...]

One compacted partition of `--size-mib` MiB (`--keys` distinct keys, each written
`--overwrites` times in random order, values sized to fill the snapshot, 100 records per batch,
uncompressed, 128 MiB segments: one large partition) is written as a snapshot once and kept in
`--cache-dir` (default: the system temp dir), named by its parameters, so that later runs reuse
it.  Three engines, each a long-lived child process started before the timed runs (a Spark
session's start is not timed), then run in turn, A B C A B C ..., `--runs` times:

1. Spark local[2]: MB/s of input (goal >= 50 MB/s at 1 GiB, 1,000,000 keys, 10 overwrites);
2. Spark local[1], and the speed-up local[1] -> local[2] (goal >= 1.7x);
3. the single-process baseline (cleaner_local: the same steps, no Spark), and its ratio.
``python-anew`` and ``local[2]-anew`` (not in the default list) are the baseline and the job
deciding every shard anew when a map fills, as before the trails (key_shard.decide_from_trail):
with ``--map-bytes`` small enough that maps fill, an A/B of that step (``--engines
python-anew,python`` or ``local[2]-anew,local[2]``).

Every figure is a median; each run's wall time, the CPU time of the engine's whole process tree
(Spark: its driver, JVM and Python workers) and the 1-minute load average before it are
printed, because the machine may be shared: CPU time per byte is what contention does not
change.  Peak memory: the largest RSS any Spark Python worker reached (each
task holds at most one offset map of --map-bytes), and the baseline process's.  `--profile`
prints a cProfile (process time) of one baseline run instead.

`--snapshot-store` adds the same engines cleaning through an object store (docs/tiered-storage.md):
a real S3-compatible server (weed, tests/support/s3_server.py) on loopback holds the snapshot
(uploaded once, not timed), and ``store-local[2]`` / ``store-python`` run the job as
``seglog cleaner run --snapshot-store`` does (seglog_spark.job_store: ranged GETs on the executors,
.keys/.part objects between tasks, cleaned/ and result.json written back; the baseline downloads,
cleans and uploads). The fetch of the result by CommitCleaned is not part of it.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "spark_jobs"))

import numpy as np  # noqa: E402

from seglog.records import RecordBatchBuilder  # noqa: E402
from seglog_spark.cleaning import DEFAULT_MAP_BYTES  # noqa: E402
from seglog_spark.snapshot_writer import write_snapshot  # noqa: E402

RECORDS_PER_BATCH = 100
SEGMENT_BYTES = 128 * 1024 * 1024
BASE_TIME_MS = 1_700_000_000_000
ENGINES = ("local[2]", "local[1]", "python")
STORE_ENGINES = ("store-local[2]", "store-python")
STORE_BUCKET = "seglog-bench"


def _segments(size_mib: int, keys: int, overwrites: int, seed: int):
    """Segments (generators of batches) of the workload, built as they are written."""
    records = keys * overwrites
    key_bytes = len(b"key-%09d" % 0)
    per_record = size_mib * 1024 * 1024 // records
    value = b"v" * max(1, per_record - key_bytes - 10 - 61 // RECORDS_PER_BATCH)
    order = np.random.default_rng(seed).permutation(np.repeat(np.arange(keys), overwrites)).tolist()
    start = 0

    def segment():
        nonlocal start
        size = 0
        while start < records:
            builder = RecordBatchBuilder(base_offset=start)
            for i, k in enumerate(order[start : start + RECORDS_PER_BATCH]):
                builder.append(value, b"key-%09d" % k, BASE_TIME_MS + start + i)
            batch = builder.build()
            if size and size + len(batch) > SEGMENT_BYTES:
                return  # this batch is rebuilt as the next segment's first
            yield batch
            size += len(batch)
            start += RECORDS_PER_BATCH

    while start < records:
        yield segment()


def cached_snapshot(cache_dir: str, size_mib: int, keys: int, overwrites: int, seed: int = 7) -> str:
    path = os.path.join(cache_dir, f"seglog-bench-cleaner-{size_mib}mib-{keys}keys-{overwrites}x-seed{seed}")
    if os.path.exists(os.path.join(path, "manifest.json")):
        print(f"reusing the snapshot in {path}")
        return path
    started = time.perf_counter()
    write_snapshot(path, _segments(size_mib, keys, overwrites, seed), cleaning_time_ms=BASE_TIME_MS + keys * overwrites,
                   configs={"segment.bytes": 1 << 30})
    print(f"built {size_mib} MiB, {keys} keys x {overwrites} in {time.perf_counter() - started:.1f} s: {path}")
    return path


def child(engine: str, path: str, map_bytes: int) -> None:
    """One engine, one cleaning per line read on stdin; one JSON line per cleaning on stdout."""
    if engine.startswith("store-"):
        from seglog_spark.object_io import StoreSnapshot

        store = StoreSnapshot.parse(path, os.environ["SEGLOG_BENCH_S3_ENDPOINT"])
        engine = engine[len("store-"):]
    else:
        store = None
    if engine == "python" and store is not None:
        from seglog_spark.cleaner_local import clean_snapshot as clean_local
        from seglog_spark.object_io import clean_downloaded

        def clean():
            return clean_downloaded(store, clean_local, map_bytes=map_bytes)
    elif store is not None:
        from seglog_spark.job_store import clean_store_snapshot
        from seglog_spark.session import build_session

        spark = build_session(engine, tmp_dir=os.path.join(tempfile.gettempdir(), "seglog-bench-spark"))

        def clean():
            return clean_store_snapshot(spark, store, map_bytes=map_bytes)
    elif engine == "python":
        from seglog_spark.cleaner_local import clean_snapshot as clean_local

        def clean():
            return clean_local(path, map_bytes=map_bytes)
    elif engine == "python-anew":
        # The baseline as it was before the trails: when a map fills, every shard is decided
        # anew from its entries (the A of an A/B against "python").
        from seglog_spark import cleaner_local
        from seglog_spark.key_shard import decide_shard

        def anew(shard, chunks, trail, **settings):
            return decide_shard(shard, chunks, **settings)

        cleaner_local.decide_from_trail = anew

        def clean():
            return cleaner_local.clean_snapshot(path, map_bytes=map_bytes)
    else:
        from seglog_spark import job
        from seglog_spark.job import clean_snapshot
        from seglog_spark.session import build_session

        if engine.endswith("-anew"):  # the job as before its trails: the second stage decides anew
            engine = engine[: -len("-anew")]
            job._decide_from_files_task = _decide_anew_from_files_task
        spark = build_session(engine, tmp_dir=os.path.join(tempfile.gettempdir(), "seglog-bench-spark"))

        def clean():
            return clean_snapshot(spark, path, map_bytes=map_bytes)
    print(json.dumps({"ready": engine}), flush=True)
    for _ in sys.stdin:
        started, cpu, tree = time.perf_counter(), time.process_time(), _tree_cpu_seconds()
        result = clean()
        seconds, cpu, tree = time.perf_counter() - started, time.process_time() - cpu, _tree_cpu_seconds() - tree
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "tree_cpu_seconds": tree, "process_peak_rss_bytes": peak,
                          "stats": result["stats"]}), flush=True)


def _decide_anew_from_files_task(plan, scanned, cpu, end_offset=None):
    """seglog_spark.job's shard task before the trails (defined here, so that it is shipped to
    the Python workers by value): both decisions read the shard's entries and put them."""
    from seglog_spark.job import _peak_rss_bytes, _read_keys_block
    from seglog_spark.key_shard import decide_shard

    def decide(shard):
        started = time.process_time()
        chunks = [(range_id, record_count, _read_keys_block(plan, shard, range_id, record_count, bounds))
                  for range_id, record_count, bounds in scanned if bounds[shard + 1] > bounds[shard]]
        result = decide_shard(shard, chunks, first_dirty_offset=plan.snapshot.first_dirty_offset, map_bytes=plan.map_bytes,
                              load_factor=plan.load_factor, end_offset=end_offset)
        cpu.add(time.process_time() - started)
        return result, _peak_rss_bytes()

    return decide


def _tree_cpu_seconds() -> float:
    """CPU time of this process and all its descendants (Spark's JVM and Python workers),
    those already reaped included."""
    import psutil

    total = 0.0
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def upload_snapshot(path: str, endpoint: str) -> str:
    """The snapshot directory's manifest and segments as objects (the service's export); its URL."""
    import boto3

    client = boto3.session.Session().client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=STORE_BUCKET)
    prefix = f"cleaning-snapshots/{os.path.basename(path)}/"
    manifest = json.load(open(os.path.join(path, "manifest.json")))
    for name in [segment["file"] for segment in manifest["segments"]] + ["manifest.json"]:
        client.upload_file(os.path.join(path, name), STORE_BUCKET, prefix + name)
    return f"s3://{STORE_BUCKET}/{prefix}"


def start_store(cache_dir: str):
    """A weed on loopback, credentials in this process's environment (children inherit them)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from tests.support.s3_server import CREDENTIALS_ENV, WeedServer

    os.environ.update(CREDENTIALS_ENV)
    server = WeedServer.start(tempfile.mkdtemp(prefix="seglog-bench-weed-", dir=cache_dir))
    os.environ["SEGLOG_BENCH_S3_ENDPOINT"] = server.endpoint
    return server


def _engine_name(engine: str) -> str:
    store = engine.startswith("store-")
    engine = engine[len("store-"):] if store else engine
    name = {"python": "python baseline", "python-anew": "python deciding anew"}.get(engine, f"spark {engine}")
    name = name.replace("-anew", " deciding anew")
    return f"{name} via store" if store else name


class Engine:
    def __init__(self, engine: str, path: str, map_bytes: int) -> None:
        self.name = _engine_name(engine)
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--child", engine, "--dir", path, "--map-bytes", str(map_bytes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self._read()  # ready
        self.results: list[dict] = []

    def _read(self) -> dict:
        for line in self.process.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"{self.name}: the child exited with status {self.process.wait()}")

    def run(self) -> dict:
        load = os.getloadavg()[0]
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        result = self._read() | {"load": load}
        self.results.append(result)
        return result

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--overwrites", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--map-bytes", type=int, default=DEFAULT_MAP_BYTES)
    parser.add_argument("--cache-dir", default=tempfile.gettempdir(), help="where the snapshot is built once and reused")
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated subset of " + ",".join(ENGINES))
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--snapshot-store", action="store_true",
                        help="also clean through an object store (a weed on loopback): " + ",".join(STORE_ENGINES))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.dir, args.map_bytes)
        return
    path = cached_snapshot(args.cache_dir, args.size_mib, args.keys, args.overwrites)
    manifest = json.load(open(os.path.join(path, "manifest.json")))
    input_bytes = sum(s["size_bytes"] for s in manifest["segments"])
    if args.profile:
        from seglog_spark.cleaner_local import clean_snapshot

        profiler = cProfile.Profile(time.process_time)
        profiler.runcall(clean_snapshot, path, map_bytes=args.map_bytes)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
        return
    print(f"input {input_bytes / 1e6:.1f} MB in {len(manifest['segments'])} segments; map {args.map_bytes} bytes "
          f"per key shard; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at the start")
    names = args.engines.split(",")
    store_server, store_url = None, None
    if args.snapshot_store or any(name.startswith("store-") for name in names):
        if not any(name.startswith("store-") for name in names):
            names = [n for pair in zip(names, [f"store-{n}" for n in names]) for n in pair
                     if n.replace("store-", "") in ("local[2]", "python")]
        store_server = start_store(args.cache_dir)
        store_url = upload_snapshot(path, store_server.endpoint)
        print(f"snapshot uploaded to {store_url} at {store_server.endpoint}")
    try:
        engines = [Engine(name, store_url if name.startswith("store-") else path, args.map_bytes) for name in names]
    except BaseException:
        if store_server is not None:
            store_server.stop()
        raise
    try:
        for i in range(args.runs):
            for engine in engines:
                r = engine.run()
                print(f"run {i + 1} {engine.name:>16}: {r['seconds']:7.2f} s  {input_bytes / r['seconds'] / 1e6:7.1f} MB/s"
                      f"  (CPU of all its processes {r['tree_cpu_seconds']:.2f} s, load {r['load']:.2f})", flush=True)
    finally:
        for engine in engines:
            engine.close()
        if store_server is not None:
            store_server.stop()
    print()
    medians = {}
    for engine in engines:
        seconds = statistics.median(r["seconds"] for r in engine.results)
        medians[engine.name] = seconds
        loads = ", ".join(f"{r['load']:.1f}" for r in engine.results)
        runs = ", ".join(f"{r['seconds']:.2f}" for r in engine.results)
        print(f"{engine.name:>16}: median {seconds:7.2f} s  {input_bytes / seconds / 1e6:7.1f} MB/s of input  "
              f"(runs: {runs}; load {loads})")
    for engine in engines:
        cpu = statistics.median(r["tree_cpu_seconds"] for r in engine.results)
        print(f"{engine.name:>16}: median CPU of all its processes {cpu:7.2f} s = {input_bytes / cpu / 1e6:6.1f} MB per "
              f"CPU-second (Spark: driver, JVM and Python workers)")
    two, one, base = (medians.get(n) for n in ("spark local[2]", "spark local[1]", "python baseline"))
    for engine in engines:
        anew, name = engine.name, engine.name.replace(" deciding anew", "").replace("python", "python baseline")
        if anew == name or name not in medians:
            continue
        runs = next(e for e in engines if e.name == name).results
        pairs = [a["seconds"] / b["seconds"] for a, b in zip(engine.results, runs)]
        cpu_pairs = [a["tree_cpu_seconds"] / b["tree_cpu_seconds"] for a, b in zip(engine.results, runs)]
        print(f"{anew} / {name}: {medians[anew] / medians[name]:.2f}x of medians; per interleaved pair: wall median "
              f"{statistics.median(pairs):.2f}x ({', '.join(f'{p:.2f}' for p in pairs)}), CPU of all processes median "
              f"{statistics.median(cpu_pairs):.2f}x ({', '.join(f'{p:.2f}' for p in cpu_pairs)})")
    if two and one:
        print(f"speed-up local[1] -> local[2]: {one / two:.2f}x (goal >= 1.7x)")
    if two and base:
        print(f"baseline time / local[2] time: {base / two:.2f}x")
    for name in ("spark local[2]", "python baseline"):
        if medians.get(name) and medians.get(f"{name} via store"):
            print(f"{name}: through the store {input_bytes / medians[name + ' via store'] / 1e6:.1f} MB/s, shared disk "
                  f"{input_bytes / medians[name] / 1e6:.1f} MB/s: ratio {medians[name] / medians[name + ' via store']:.2f}")
    for engine in engines:
        if engine.name.startswith("python"):
            cpu = statistics.median(r["cpu_seconds"] for r in engine.results)
            print(f"baseline CPU time: median {cpu:.2f} s = {input_bytes / cpu / 1e6:.1f} MB/s per core "
                  f"(wall/CPU {medians[engine.name] / cpu:.2f}: above 1 means the CPU was shared with other work); "
                  f"peak RSS of the baseline process {max(r['process_peak_rss_bytes'] for r in engine.results) / 2**20:.0f} MiB")
        else:
            stats = engine.results[-1]["stats"]
            print(f"{engine.name}: peak RSS of a Python worker (task) {stats.get('task_peak_rss_bytes', 0) / 2**20:.0f} MiB, "
                  f"{stats['range_count']} ranges, {stats['shard_count']} key shards of {stats['map_bytes'] / 2**20:.0f} MiB maps; "
                  f"last run: task CPU seconds {stats.get('task_cpu_seconds')}, stage wall seconds {stats['stage_seconds']}")
    stats = engines[-1].results[-1]["stats"]
    print(f"records read {stats['records_read']}, kept {stats['records_kept']}, distinct keys {stats['distinct_keys']}, "
          f"map utilization {stats['map_utilization']:.3f}, collision rate {stats['collision_rate']:.3f}; "
          f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
