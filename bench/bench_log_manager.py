"""Start-up time of a log directory holding 10,000 segments.

    .venv/bin/python bench/bench_log_manager.py [--segments 10000] [--runs 7] [--keep DIR]

Builds the directory once (tiny ``segment.bytes`` so every batch rolls a new segment), shuts down
cleanly, then times ``LogManager.startup()`` over repeated runs in three situations:

- clean: the ``.kafka_cleanshutdown`` marker is present, nothing is recovered; indexes stay lazy
  (goal: <= 1 s for 10,000 segments);
- unclean, recovery point checkpoint present: only the segments from the recovery point on are
  recovered (Kafka's normal crash case: the tail);
- unclean, no recovery point checkpoint: every segment is recovered (CRC of every batch, index
  rebuild), the worst case, for comparison.

Two layouts: one partition with all the segments (the longest single Log.load) and 100
partitions sharing them (per-partition overheads). Medians over the runs; the page cache is warm
(the files were just written), which is what a restart of a running machine sees.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time

from seglog.records import RecordBatchBuilder
from seglog_server.storage.format.clean_shutdown import CLEAN_SHUTDOWN_FILE_NAME
from seglog_server.storage.base.errors import StorageError
from seglog_server.storage.manager.log_manager import LogManager

CLEAN_GOAL_S = 1.0
# 120 bytes holds exactly one of the batches below (61-byte header + one ~40-byte record), so
# every append rolls: the cheapest way to make many real segments.
SEGMENT_BYTES = 120


def build(root: str, segment_count: int, partition_count: int) -> float:
    """Appends one batch per segment (each append rolls), then shuts down cleanly."""
    started = time.perf_counter()
    manager = LogManager([root])
    manager.startup()
    manager.create_topic(
        "bench", partition_count, {"segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1"}
    )
    now_ms = int(time.time() * 1000)
    per_partition = segment_count // partition_count
    for partition in range(partition_count):
        log = manager.get_log("bench", partition)
        for i in range(per_partition):
            builder = RecordBatchBuilder()
            builder.append(b"value-%08d" % i + b"." * 20, key=b"k", timestamp_ms=now_ms + i)
            log.append(builder.build())
    segments = manager.statistics().segment_count
    manager.shutdown()
    assert segments >= segment_count, f"built {segments} segments, wanted {segment_count}"
    return time.perf_counter() - started


def time_startup(root: str, prepare) -> tuple[float, float, int]:
    """(startup seconds, shutdown seconds, segments loaded) of one run."""
    prepare(root)
    manager = LogManager([root])
    started = time.perf_counter()
    manager.startup()
    loaded = time.perf_counter()
    segments = manager.statistics().segment_count
    manager.shutdown()
    return loaded - started, time.perf_counter() - loaded, segments


def clean(root: str) -> None:
    assert os.path.exists(os.path.join(root, CLEAN_SHUTDOWN_FILE_NAME))


def unclean_with_checkpoint(root: str) -> None:
    os.unlink(os.path.join(root, CLEAN_SHUTDOWN_FILE_NAME))


def unclean_without_checkpoint(root: str) -> None:
    os.unlink(os.path.join(root, CLEAN_SHUTDOWN_FILE_NAME))
    os.unlink(os.path.join(root, "recovery-point-offset-checkpoint"))


SCENARIOS = [
    ("clean shutdown", clean),
    ("unclean, recovery point checkpointed", unclean_with_checkpoint),
    ("unclean, no recovery point (full recovery)", unclean_without_checkpoint),
]


def run_layout(base: str, segment_count: int, partition_count: int, runs: int) -> list[tuple]:
    root = os.path.join(base, f"p{partition_count}")
    build_s = build(root, segment_count, partition_count)
    print(f"built {segment_count} segments in {partition_count} partition(s) in {build_s:.1f} s")
    rows = []
    for name, prepare in SCENARIOS:
        try:
            samples = [time_startup(root, prepare) for _ in range(runs)]
        except StorageError as exc:
            # e.g. EMFILE: recovery keeps descriptors open for every segment it touches.
            print(f"  {name}: FAILED: {exc}", flush=True)
            rows.append((partition_count, name, None, None, None))
            break  # the directory is left unclean; later scenarios would measure nothing
        startup = statistics.median(s[0] for s in samples)
        shutdown = statistics.median(s[1] for s in samples)
        rows.append((partition_count, name, samples[0][2], startup, shutdown))
        print(f"  {name}: startup median {startup * 1000:.0f} ms over {runs} runs", flush=True)
    return rows


def print_table(rows: list[tuple], runs: int) -> None:
    print()
    print(f"LogManager start-up, medians of {runs} runs (warm page cache)")
    header = (
        f"{'partitions':>10}  {'scenario':<44} {'segments':>8} {'startup':>10} "
        f"{'shutdown':>10}  goal"
    )
    print(header)
    print("-" * len(header))
    for partitions, name, segments, startup, shutdown in rows:
        if startup is None:
            print(f"{partitions:>10}  {name:<44} {'-':>8} {'failed':>10} {'-':>10}")
            continue
        goal = ""
        if name == "clean shutdown":
            verdict = "met" if startup <= CLEAN_GOAL_S else "MISSED"
            goal = f"<= {CLEAN_GOAL_S:.0f} s: {verdict}"
        print(
            f"{partitions:>10}  {name:<44} {segments:>8} {startup * 1000:>8.0f} ms "
            f"{shutdown * 1000:>7.0f} ms  {goal}"
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--keep", help="build under this directory and keep it")
    args = parser.parse_args(argv)
    # Recovery logs a line per truncated or rebuilt segment; the figures are the point here.
    logging.basicConfig(level=logging.ERROR)
    base = args.keep or tempfile.mkdtemp(prefix="seglog-bench-log-manager-")
    try:
        rows = []
        for partition_count in (1, 100):
            rows += run_layout(base, args.segments, partition_count, args.runs)
        print_table(rows, args.runs)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
