"""Cleaning snapshots and installs in-process: what a snapshot costs and what appends feel.

1. Snapshot of a compacted log of SEGMENTS closed segments (SEGMENT_BYTES each): total time
   (links under the log lock + checksums off it), median of REPEATS.
2. Append latency (one small keyed batch per append) with no snapshot running vs with snapshots
   taken back to back in another thread: p50 / p99 / max of APPENDS appends each; the ratio of
   p99s says how much the snapshot's lock hold is felt.
3. Install (CommitCleaned's checks + swap) of a latest-per-key cleaning of that snapshot.

    .venv/bin/python bench/bench_snapshot.py [--segments 64] [--segment-bytes 1048576]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from seglog.records import RecordBatchBuilder  # noqa: E402
from seglog_server.storage.base.clock import SYSTEM_CLOCK  # noqa: E402
from seglog_server.storage.base.fs import REAL_FS  # noqa: E402
from seglog_server.storage.log.unified_log import Log  # noqa: E402
from seglog_server.storage.cleaning.log_cleaning_install import install_cleaned  # noqa: E402
from seglog_server.storage.base.log_config import LogConfig  # noqa: E402
from seglog_server.storage.cleaning.log_snapshot import remove_snapshot, take_snapshot  # noqa: E402
from tests.support.cleaning_support import hand_clean  # noqa: E402

_ids = itertools.count()


def keyed_batch(key: int, records: int, value_bytes: int) -> bytes:
    builder = RecordBatchBuilder()
    for n in range(records):
        builder.append(b"v" * value_bytes, key=b"key-%d" % ((key + n) % 5000))
    return builder.build()


def build_log(root: str, segments: int, segment_bytes: int) -> Log:
    config = LogConfig(segment_bytes=segment_bytes, cleanup_policy=frozenset({"compact"}))
    log = Log.load(os.path.join(root, "c-0"), "c", 0, config, had_clean_shutdown=True, flush_scheduler=lambda task: None)
    batch_count = 0
    while log.segment_count <= segments:
        log.append(keyed_batch(batch_count * 50, 50, 100))
        batch_count += 1
    return log


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    return f"p50 {statistics.median(ordered) * 1e6:7.1f} us  p99 {p99 * 1e6:7.1f} us  max {ordered[-1] * 1e6:8.1f} us"


def append_latencies(log: Log, count: int) -> list[float]:
    batch = keyed_batch(0, 1, 100)
    out = []
    for _ in range(count):
        started = time.perf_counter()
        log.append(batch)
        out.append(time.perf_counter() - started)
    return out


def snapshot(log: Log, root: str):
    return take_snapshot(log, root, checkpoint=None, now_ms=SYSTEM_CLOCK.time_ms(), snapshot_id=f"b{next(_ids)}", fs=REAL_FS)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--segments", type=int, default=64)
    parser.add_argument("--segment-bytes", type=int, default=1024 * 1024)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--appends", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as root:
        log = build_log(root, args.segments, args.segment_bytes)
        size_mib = sum(s.size_in_bytes for s in log.segments_snapshot()[:-1]) / 2**20
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            taken = snapshot(log, root)
            times.append(time.perf_counter() - started)
            remove_snapshot(taken.path, REAL_FS)
        print(f"snapshot of {len(taken.manifest.segments)} segments ({size_mib:.0f} MiB): "
              f"median {statistics.median(times) * 1000:.1f} ms over {args.repeats}")

        quiet = append_latencies(log, args.appends)
        stop = threading.Event()

        def snapshots() -> None:
            while not stop.is_set():
                remove_snapshot(snapshot(log, root).path, REAL_FS)

        worker = threading.Thread(target=snapshots)
        worker.start()
        try:
            busy = append_latencies(log, args.appends)
        finally:
            stop.set()
            worker.join()
        print(f"appends, no snapshot:        {percentiles(quiet)}")
        print(f"appends, snapshots running:  {percentiles(busy)}")
        ratio = sorted(busy)[int(len(busy) * 0.99) - 1] / sorted(quiet)[int(len(quiet) * 0.99) - 1]
        print(f"p99 ratio (running / none): {ratio:.2f}")

        taken = snapshot(log, root)
        hand_clean(taken.path)
        started = time.perf_counter()
        outcome = install_cleaned(log, taken.path, taken.manifest, expected_segments=taken.segments, fs=REAL_FS)
        elapsed = time.perf_counter() - started
        print(f"install of {outcome.installed_segment_count} cleaned segments replacing {outcome.replaced_segment_count} "
              f"({outcome.bytes_before / 2**20:.0f} MiB -> {outcome.bytes_after / 2**20:.1f} MiB): {elapsed * 1000:.0f} ms")
        log.close()


if __name__ == "__main__":
    main()
