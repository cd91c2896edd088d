"""How index entries get their disk space: per-entry cost of the ways to make a full disk an
``OSError`` instead of a SIGBUS, against the unsafe sparse mmap stores seglog used to make.

    .venv/bin/python bench/bench_index_append.py [--entries 20000] [--runs 7] [--dir DIR]

Each variant builds a fresh 10 MiB (sparse, ``ftruncate``) offset index of ``--entries`` 8-byte
entries, then trims it to its entries (what a roll does) and fdatasyncs it (what a flush does):

- ``sparse_mmap``: stores into holes of the mapping (main before: SIGBUS on a full disk);
- ``fallocate_ahead``: ``posix_fallocate`` of 16 KiB just ahead of the write position, then
  stores (blocks exist as *unwritten* extents: ext4 converts them at page fault and writeback);
- ``zero_fill_ahead``: ``pwrite`` of 16 KiB of zeros just ahead, then stores (the free slots
  are zeros anyway; the pages are then ordinary dirty page-cache pages with their space reserved);
- ``pwrite_entries``: every entry written with ``pwrite`` on a descriptor kept open (no stores);
- ``OffsetIndex``: seglog's index as built (its chosen way, with its lock and checks).

Rows: per-entry append cost in microseconds and the trim + fdatasync in milliseconds, medians
over ``--runs`` (min-max). A second table is the many-partitions case: ``--files`` new indexes
with one entry each, each trimmed and fdatasynced (a roll or shutdown flush of mostly idle
partitions), in milliseconds per file. The machine is shared and noisy: compare rows of the same
run.
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import struct
import tempfile
import time
from collections.abc import Callable

from seglog_server.storage.format.abstract_index import RESERVE_AHEAD_BYTES
from seglog_server.storage.format.offset_index import OffsetIndex

ENTRY = struct.Struct(">ii")
INDEX_BYTES = 10 * 1024 * 1024
ZEROS = bytes(RESERVE_AHEAD_BYTES)


def _round_up(number: int, factor: int) -> int:
    return -factor * (-number // factor)


def raw_variant(reserve: str) -> Callable[[str, int], tuple[float, float]]:
    def run(path: str, entry_count: int) -> tuple[float, float]:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.ftruncate(fd, INDEX_BYTES)
        mapping = mmap.mmap(fd, INDEX_BYTES)
        reserved = 0
        started = time.perf_counter_ns()
        for slot in range(entry_count):
            position = slot * ENTRY.size
            end = position + ENTRY.size
            if reserve == "pwrite_entries":
                os.pwrite(fd, ENTRY.pack(slot, slot * 4096), position)
                continue
            if end > reserved and reserve != "sparse_mmap":
                stop = min(INDEX_BYTES, _round_up(end + RESERVE_AHEAD_BYTES, mmap.PAGESIZE))
                if reserve == "fallocate_ahead":
                    os.posix_fallocate(fd, reserved, stop - reserved)
                else:
                    os.pwrite(fd, ZEROS[: stop - max(reserved, position)], max(reserved, position))
                reserved = stop
            ENTRY.pack_into(mapping, position, slot, slot * 4096)
        appended_ns = time.perf_counter_ns() - started
        started = time.perf_counter_ns()
        mapping.close()
        os.ftruncate(fd, entry_count * ENTRY.size)
        os.fdatasync(fd)
        os.close(fd)
        return appended_ns / entry_count / 1000, (time.perf_counter_ns() - started) / 1e6

    return run


def offset_index_variant(path: str, entry_count: int) -> tuple[float, float]:
    index = OffsetIndex(path, 0, INDEX_BYTES)
    started = time.perf_counter_ns()
    for slot in range(entry_count):
        index.append(slot, slot * 4096)
    appended_ns = time.perf_counter_ns() - started
    started = time.perf_counter_ns()
    index.close()
    fd = os.open(path, os.O_RDONLY)
    os.fdatasync(fd)
    os.close(fd)
    return appended_ns / entry_count / 1000, (time.perf_counter_ns() - started) / 1e6


VARIANTS = {
    "sparse_mmap": raw_variant("sparse_mmap"),
    "fallocate_ahead": raw_variant("fallocate_ahead"),
    "zero_fill_ahead": raw_variant("zero_fill_ahead"),
    "pwrite_entries": raw_variant("pwrite_entries"),
    "OffsetIndex": offset_index_variant,
}


def one_entry_file(path: str, reserve: str) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    os.ftruncate(fd, INDEX_BYTES)
    mapping = mmap.mmap(fd, INDEX_BYTES)
    stop = _round_up(ENTRY.size + RESERVE_AHEAD_BYTES, mmap.PAGESIZE)
    if reserve == "fallocate_ahead":
        os.posix_fallocate(fd, 0, stop)
    elif reserve == "zero_fill_ahead":
        os.pwrite(fd, bytes(stop), 0)
    if reserve == "pwrite_entries":
        os.pwrite(fd, ENTRY.pack(1, 4096), 0)
    else:
        ENTRY.pack_into(mapping, 0, 1, 4096)
        mapping.flush()
    mapping.close()
    os.ftruncate(fd, ENTRY.size)
    os.fdatasync(fd)
    os.close(fd)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--dir", default=None, help="where the files go (default: a temp dir)")
    parser.add_argument("--files", type=int, default=100, help="one-entry indexes per run")
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        for run in range(args.runs):
            for name, variant in VARIANTS.items():  # interleaved: drift hits every row alike
                path = os.path.join(directory, f"{name}-{run}.index")
                results[name].append(variant(path, args.entries))
                os.unlink(path)
    print(f"{args.entries} entries per run, {args.runs} runs, in {args.dir or tempfile.gettempdir()}")
    print(f"{'variant':<16} {'append us/entry':>28} {'trim+fdatasync ms':>30}")
    for name, rows in results.items():
        appends = [row[0] for row in rows]
        syncs = [row[1] for row in rows]
        print(
            f"{name:<16} {statistics.median(appends):>10.3f} ({min(appends):.3f}-{max(appends):.3f})"
            f"   {statistics.median(syncs):>10.2f} ({min(syncs):.2f}-{max(syncs):.2f})"
        )
    per_file: dict[str, list[float]] = {name: [] for name in list(VARIANTS)[:4]}
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        for run in range(args.runs):
            for name in per_file:
                started = time.perf_counter_ns()
                for number in range(args.files):
                    one_entry_file(os.path.join(directory, f"{name}-{run}-{number}.index"), name)
                per_file[name].append((time.perf_counter_ns() - started) / args.files / 1e6)
    print(f"\n{args.files} one-entry indexes per run (store, trim, fdatasync)")
    print(f"{'variant':<16} {'ms per file':>28}")
    for name, rows in per_file.items():
        print(f"{name:<16} {statistics.median(rows):>10.2f} ({min(rows):.2f}-{max(rows):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
