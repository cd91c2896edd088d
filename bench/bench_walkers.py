"""The bounded walkers' hot paths, this tree against another, interleaved in one run.

    .venv/bin/python bench/bench_walkers.py                      # against 9e568bb (before the walkers)
    .venv/bin/python bench/bench_walkers.py --old-commit <rev>   # against any commit (git archive)
    .venv/bin/python bench/bench_walkers.py --old-tree /path     # against an exported tree
    .venv/bin/python bench/bench_walkers.py --callgrind          # + instruction counts per call

Two worker processes, one importing this tree's ``seglog`` / ``seglog_server`` and one the old
tree's (``PYTHONPATH`` = its ``client``, ``server``, its root for ``tests.support`` and, for trees
from before ``tests/support/``, the storage tests' directory), each
build the same inputs once. The driver then asks them to time each case in turn, A,B,B,A,...
(the order flips every round), so both trees meet the same load: the shared machine moves single
runs by 30-50 %. A timing is CPU time per call (``process_time``) over a fixed number of calls.
The report gives, per case, the median µs of each tree over the rounds and the median of the
per-round ratios new/old (the figure to quote).

``--callgrind`` also runs each case under ``valgrind --tool=callgrind`` in each tree, once with
N calls and once with none (the set-up alone): (Ir(N) - Ir(0)) / N is the instructions per call,
repeatable under any load.

The cases (what produce, Fetch and the lookups cost per call):

- ``validate_10``: ``LogValidator.validate`` of a 10-record, ~1 KiB batch (the produce fast path)
- ``validate_1000``: the same for a 1000-record batch (~130 KiB)
- ``append_10``: ``Log.append`` of a 10-record batch (validation, offsets, index updates)
- ``read_1mib``: ``Log.read`` of 1 MiB at a random offset (sealed, mapped segments)
- ``read_16kib``: ``Log.read`` of 16 KiB at a random offset
- ``position_of``: ``Log.position_of`` of a random offset (two-level offset lookup)
- ``offset_for_time``: ``Log.offset_for_timestamp`` of a random timestamp
- ``offset_for_time_big``: the same on a log of 3,436-record batches (as ``send_many`` writes
  them): the walk inside the batch to the first record at or after the target is the lookup
- ``offset_for_time_big_lz4``: the same, the batches LZ4-compressed (decompressed, then walked)
- ``next_offset_1mib``: ``rpc.conversions.next_offset_after`` over a 1 MiB read (Fetch's walk)
- ``fetch_1mib``: what a Fetch of 1 MiB costs past the RPC layer: ``Log.read`` and
  ``rpc.conversions.fetch_response_wire`` (the next offset: walked again in the old tree, taken
  from the read's checking walk in the new one)
- ``recover_4mib``: ``LogSegment.recover`` of a 4 MiB segment (CRC and index rebuild)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OLD_COMMIT = "9e568bb"  # main before the bounded walkers were merged (f5ddf06)
NOW = 1_700_000_000_000
LOG_BATCHES = 8000  # ~8.6 MiB of 10-record batches: three 4 MiB segments, two of them sealed
BIG_BATCH_RECORDS = 3436  # a batch of send_many's (issue figures: ~150 µs a lookup walking it in Python)
BIG_LOG_BATCHES = 24  # ~11 MiB: three segments of 4 MiB

# Calls per timing: each timing takes some 20-100 ms of CPU.
LOOPS = {
    "validate_10": 3000,
    "validate_1000": 30,
    "append_10": 1000,
    "read_1mib": 30,
    "read_16kib": 1000,
    "position_of": 2000,
    "offset_for_time": 1000,
    "offset_for_time_big": 200,
    "offset_for_time_big_lz4": 50,
    "next_offset_1mib": 50,
    "fetch_1mib": 30,
    "recover_4mib": 1,
}
CASES = tuple(LOOPS)
# Instruction counts need fewer calls: callgrind runs some 50 times slower.
CALLGRIND_DEFAULT = "validate_10,validate_1000,append_10,read_16kib,read_1mib,position_of,offset_for_time,fetch_1mib"


# -- the worker: runs in the tree under test ---------------------------------------------------
class Worker:
    """The inputs of every case, built once; ``run(case, loops)`` times ``loops`` calls."""

    def __init__(self, cases: list[str]) -> None:
        import random

        from seglog.records import RecordBatchBuilder
        try:  # storage in folders by concern; an older tree has them flat
            from seglog_server.storage.base.clock import FakeClock
            from seglog_server.storage.base.log_config import LogConfig
            from seglog_server.storage.log.log_validator import LogValidator
        except ImportError:
            from seglog_server.storage.clock import FakeClock
            from seglog_server.storage.log_config import LogConfig
            from seglog_server.storage.log_validator import LogValidator

        self._builder = RecordBatchBuilder
        self._rng = random.Random(1)
        self._tmp = tempfile.mkdtemp(prefix="bench_walkers_")
        self._clock = FakeClock(NOW)
        self._config = LogConfig().replace(segment_bytes=4 * 1024 * 1024)
        self._validator = LogValidator(LogConfig(), "t-0")
        self._small = self._batch(10, 80, 0)
        self._big = self._batch(1000, 100, 0)
        self._log = None
        self._cursor = 0
        if {"append_10", "read_1mib", "read_16kib", "position_of", "offset_for_time", "next_offset_1mib",
                "fetch_1mib"} & set(cases):
            self._log = self._open_log("read")
            for index in range(LOG_BATCHES):
                self._log.append(self._batch(10, 80, index * 10))
            self._offsets = [self._rng.randrange(self._log.log_end_offset) for _ in range(4096)]
            self._times = [NOW + self._rng.randrange(LOG_BATCHES * 10) for _ in range(4096)]
            self._cursor = 0
            self._one_mib = self._log.read(0, 1024 * 1024).records
        for case, compression in (("offset_for_time_big", 0), ("offset_for_time_big_lz4", 3)):
            if case in cases:
                big = self._open_log(case)
                for index in range(BIG_LOG_BATCHES):
                    big.append(self._batch(BIG_BATCH_RECORDS, 100, index * BIG_BATCH_RECORDS, compression))
                setattr(self, "_" + case, big)
                self._big_times = [NOW + self._rng.randrange(BIG_LOG_BATCHES * BIG_BATCH_RECORDS) for _ in range(4096)]
        if "recover_4mib" in cases:
            self._sealed = self._log.segments_snapshot()[0] if self._log is not None else None

    def _batch(self, count: int, value_bytes: int, first_timestamp_delta: int, compression: int = 0) -> bytes:
        builder = self._builder(compression=compression)
        for index in range(count):
            builder.append(os.urandom(value_bytes), key=b"k%d" % index, timestamp_ms=NOW + first_timestamp_delta + index)
        return builder.build()

    def _open_log(self, name: str):
        try:  # the tree's root is on PYTHONPATH (tests.support); an older tree keeps it beside its tests
            from tests.support.log_test_support import open_log
        except ImportError:
            from log_test_support import open_log  # tests/unit/seglog_server/storage, on PYTHONPATH

        return open_log(os.path.join(self._tmp, name), self._clock, self._config)

    def _next(self, values: list[int]) -> int:
        self._cursor = (self._cursor + 1) % len(values)
        return values[self._cursor]

    def call(self, case: str):
        """The function one call of ``case`` runs."""
        log = self._log
        if case == "validate_10":
            return lambda: self._validator.validate(self._small, NOW)
        if case == "validate_1000":
            return lambda: self._validator.validate(self._big, NOW)
        if case == "append_10":
            return lambda: log.append(self._small)
        if case == "read_1mib":
            return lambda: log.read(self._next(self._offsets), 1024 * 1024)
        if case == "read_16kib":
            return lambda: log.read(self._next(self._offsets), 16 * 1024)
        if case == "position_of":
            return lambda: log.position_of(self._next(self._offsets))
        if case == "offset_for_time":
            return lambda: log.offset_for_timestamp(self._next(self._times))
        if case in ("offset_for_time_big", "offset_for_time_big_lz4"):
            big = getattr(self, "_" + case)
            return lambda: big.offset_for_timestamp(self._next(self._big_times))
        if case == "next_offset_1mib":
            from seglog_server.rpc import conversions

            return lambda: conversions.next_offset_after(self._one_mib, 0)
        if case == "fetch_1mib":
            from seglog_server.rpc import conversions

            def fetch():
                offset = self._next(self._offsets)
                return conversions.fetch_response_wire("t", 0, offset, log.read(offset, 1024 * 1024))

            return fetch
        if case == "recover_4mib":
            return self._sealed.recover
        raise ValueError(f"unknown case {case}")

    def run(self, case: str, loops: int) -> float:
        """CPU µs per call of ``case`` over ``loops`` calls."""
        fn = self.call(case)
        fn()  # warm: caches, lazily opened files, the first mapping
        start = time.process_time()
        for _ in range(loops):
            fn()
        return (time.process_time() - start) / loops * 1e6


    def close(self) -> None:
        for log in (self._log, getattr(self, "_offset_for_time_big", None), getattr(self, "_offset_for_time_big_lz4", None)):
            if log is not None:
                log.close()
        shutil.rmtree(self._tmp, ignore_errors=True)


def worker_main(cases: list[str]) -> None:
    """Answers ``case loops`` lines on stdin with µs per call, one line each."""
    worker = Worker(cases)
    try:
        print("ready", flush=True)
        for line in sys.stdin:
            case, loops = line.split()
            print(f"{worker.run(case, int(loops)):.4f}", flush=True)
    finally:
        worker.close()


def oneshot_main(case: str, loops: int) -> None:
    """Set-up, then ``loops`` calls of ``case`` (for callgrind: no timing, no warm-up call)."""
    worker = Worker([case])
    try:
        fn = worker.call(case)
        for _ in range(loops):
            fn()
    finally:
        worker.close()


# -- the driver --------------------------------------------------------------------------------
def _tree_env(tree: str) -> dict[str, str]:
    env = dict(os.environ)
    paths = [os.path.join(tree, "client"), os.path.join(tree, "server"), tree,
             os.path.join(tree, "tests/unit/seglog_server/storage")]  # tests.support, or an older tree's
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _export(commit: str) -> str:
    tree = tempfile.mkdtemp(prefix="bench_walkers_old_")
    archive = subprocess.run(["git", "-C", ROOT, "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
    return tree


def _start(tree: str, cases: list[str]) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--worker", ",".join(cases)],
        env=_tree_env(tree), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tree,
    )
    assert process.stdout.readline().strip() == "ready"
    return process


def _ask(process: subprocess.Popen, case: str, loops: int) -> float:
    process.stdin.write(f"{case} {loops}\n")
    process.stdin.flush()
    return float(process.stdout.readline())


def interleaved(old_tree: str, new_tree: str, cases: list[str], rounds: int, scale: float) -> dict:
    workers = {"old": _start(old_tree, cases), "new": _start(new_tree, cases)}
    times: dict[str, dict[str, list[float]]] = {case: {"old": [], "new": []} for case in cases}
    try:
        for round_index in range(rounds):
            order = ("old", "new") if round_index % 2 == 0 else ("new", "old")
            for case in cases:
                loops = max(1, int(LOOPS[case] * scale))
                for name in order:
                    times[case][name].append(_ask(workers[name], case, loops))
    finally:
        for process in workers.values():
            process.stdin.close()
            process.wait()
    return times


def _instructions(tree: str, case: str, loops: int) -> int:
    with tempfile.TemporaryDirectory() as out:
        path = os.path.join(out, "callgrind.out")
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={path}", sys.executable,
             os.path.abspath(__file__), "--oneshot", case, str(loops)],
            env=dict(_tree_env(tree), PYTHONHASHSEED="0"), cwd=tree, capture_output=True, text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"callgrind run of {case} in {tree} failed: {done.stderr[-2000:]}")
        with open(path) as file:
            for line in file:
                if line.startswith("summary:") or line.startswith("totals:"):
                    return int(line.split()[1])
    raise RuntimeError(f"no instruction total from callgrind for {case}")


def callgrind(old_tree: str, new_tree: str, cases: list[str], scale: float) -> dict:
    result = {}
    for case in cases:
        loops = max(1, int(LOOPS[case] * scale))
        result[case] = {}
        for name, tree in (("old", old_tree), ("new", new_tree)):
            base = _instructions(tree, case, 0)
            total = _instructions(tree, case, loops)
            result[case][name] = (total - base) / loops
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-commit", default=DEFAULT_OLD_COMMIT)
    parser.add_argument("--old-tree", help="an exported tree to compare with (instead of --old-commit)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies the calls per timing")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--callgrind", action="store_true", help="also count instructions per call")
    parser.add_argument("--callgrind-cases", default=CALLGRIND_DEFAULT)
    parser.add_argument("--callgrind-scale", type=float, default=0.1)
    parser.add_argument("--json", help="write the raw figures here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--oneshot", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        return worker_main(args.worker.split(","))
    if args.oneshot is not None:
        return oneshot_main(args.oneshot[0], int(args.oneshot[1]))
    cases = args.cases.split(",")
    old_tree = args.old_tree or _export(args.old_commit)
    try:
        times = interleaved(old_tree, ROOT, cases, args.rounds, args.scale)
        counted = [case for case in args.callgrind_cases.split(",") if case in cases]
        counts = callgrind(old_tree, ROOT, counted, args.callgrind_scale) if args.callgrind else {}
    finally:
        if args.old_tree is None:
            shutil.rmtree(old_tree, ignore_errors=True)
    print(f"old = {args.old_tree or args.old_commit}, new = this tree; {args.rounds} rounds, interleaved; "
          f"CPU µs per call (median)")
    header = f"{'case':18} {'old µs':>10} {'new µs':>10} {'new/old':>8}"
    if counts:
        header += f" {'old Ir':>12} {'new Ir':>12} {'Ir new/old':>10}"
    print(header)
    for case in cases:
        old, new = times[case]["old"], times[case]["new"]
        ratio = statistics.median(n / o for o, n in zip(old, new))
        line = f"{case:18} {statistics.median(old):10.2f} {statistics.median(new):10.2f} {ratio:8.2f}"
        if case in counts:
            ir = counts[case]
            line += f" {ir['old']:12.0f} {ir['new']:12.0f} {ir['new'] / ir['old']:10.2f}"
        print(line)
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"times": times, "instructions": counts}, file, indent=1)


if __name__ == "__main__":
    main()
