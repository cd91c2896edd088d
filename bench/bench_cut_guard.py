"""What reading files safely costs: an index's length check and a sealed ``.log`` read with preads.

    .venv/bin/python bench/bench_cut_guard.py --old-tree /path/to/exported/older/tree [--rounds 9]

A file cut short from outside the process must not SIGBUS the service: a sealed ``.log`` is read
with preads instead of a mapping, and an index fstats its file before each use of its mapping.
This times, in this tree and in an older exported one (``git archive <rev> | tar -x -C DIR``),
alternating A,B,B,A,... so both meet the same load, CPU time per call (``process_time``):

- ``index_tail``: ``OffsetIndex.lookup`` of targets among the newest 64 of 100,000 entries;
- ``sealed_scan``: ``FileRecords.search_for_offset_with_size`` on a sealed 1.3 MB log, from about
  4 KiB before the batch sought (where an index entry puts a lookup), a 4 KiB first read.

The report gives each case's median per tree and the median of the per-round ratios new/old.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAIL_TARGETS = 1000
SCAN_TARGETS = 1000


def worker() -> dict[str, float]:
    """Runs inside the tree under test (its ``PYTHONPATH``)."""
    import random
    import tempfile
    import time

    from seglog_server.storage.format.file_records import FileRecords
    from seglog_server.storage.format.offset_index import OffsetIndex
    from tests.support.log_test_support import batch

    directory = tempfile.mkdtemp(prefix="bench-cut-guard-")
    index = OffsetIndex(os.path.join(directory, "00000000000000000000.index"), 0, 10 * 1024 * 1024)
    for number in range(100_000):
        index.append(number * 7, number * 4096)
    index.trim_to_valid_size()
    records = FileRecords.create(os.path.join(directory, "00000000000000000000.log"))
    for offset in range(4000):
        records.append([batch(b"v" * 300, base_offset=offset)])
    records.seal()
    positions = [header.position for header in records.batch_headers(0)]
    rng = random.Random(1)
    tail = [rng.randrange(99_936 * 7, 100_000 * 7) for _ in range(TAIL_TARGETS)]
    scans = [(offset, positions[(offset // 14) * 14]) for offset in (rng.randrange(100, 3990) for _ in range(SCAN_TARGETS))]

    def index_tail() -> float:
        started = time.process_time()
        for _ in range(20):
            for target in tail:
                index.lookup(target)
        return (time.process_time() - started) / (20 * len(tail)) * 1e6

    def sealed_scan() -> float:
        started = time.process_time()
        for _ in range(5):
            for offset, start in scans:
                records.search_for_offset_with_size(offset, start, 4096)
        return (time.process_time() - started) / (5 * len(scans)) * 1e6

    index_tail(), sealed_scan()  # warm
    return {"index_tail": statistics.median(index_tail() for _ in range(7)),
            "sealed_scan": statistics.median(sealed_scan() for _ in range(7))}


def run_in(tree: str) -> dict[str, float]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(tree, "client"), os.path.join(tree, "server"), tree])
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker"], env=env, cwd=tree,
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-tree", help="an exported older tree to compare with")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker()))
        return
    if not args.old_tree:
        parser.error("--old-tree is needed")
    rows: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for number in range(args.rounds):
        order = [("old", args.old_tree), ("new", ROOT)]
        for name, tree in order if number % 2 == 0 else reversed(order):
            rows[name].append(run_in(tree))
    print(f"{args.rounds} rounds, interleaved; CPU µs per call (median); load {os.getloadavg()[0]:.2f}")
    print(f"{'case':<14}{'old µs':>9}{'new µs':>9}{'new/old':>9}")
    for case in ("index_tail", "sealed_scan"):
        old = [row[case] for row in rows["old"]]
        new = [row[case] for row in rows["new"]]
        ratio = statistics.median(b / a for a, b in zip(old, new))
        print(f"{case:<14}{statistics.median(old):>9.2f}{statistics.median(new):>9.2f}{ratio:>9.2f}")


if __name__ == "__main__":
    main()
