"""Pages touched and page faults of tail lookups while an offset index grows: plain binary search
against Kafka's warm/cold search (KAFKA-6432, "the seed's claim, measured").

    .venv/bin/python bench/bench_index_pages.py [--initial-pages 2048] [--growth-steps 64]

The claim (index_search.py, kafka-storage.md 3.2): nearly every lookup is a tail lookup. A plain
binary search over the whole mmap'd file touches pages spread across it, and when the index grows
by one page the probes shift onto pages no lookup touched for a long time, which the page cache may
have evicted, so the first tail lookup after the growth waits on the disk. The warm/cold search
touches at most 3 pages (the newest 8 KiB) and nothing new after growth.

Three parts, each for both searches:

1. Probes (deterministic): an offset index grows from 1 page to 2560 pages (10 MiB, the default
   segment.index.bytes). While it fills a page, tail lookups at 32 entry counts across the page
   define the steady-state set S of pages touched. After it grows onto the next page, the first
   tail lookup's pages minus S minus the page just written are "new pages": the ones an LRU page
   cache would have had every reason to evict.
2. Real faults, LRU model: an index file of --initial-pages pages grows --growth-steps pages. Before
   each growth every page not in S is evicted (fdatasync, MADV_DONTNEED on the mapping,
   POSIX_FADV_DONTNEED on the file), as an LRU cache under pressure would have; the writer then
   appends the next page (pwrite) and the first tail lookup is measured: per-thread minor/major
   faults (getrusage(RUSAGE_THREAD)) and latency.
3. Real faults, cold cache: the whole index evicted, then one tail lookup.

The mapping the lookups read is advised MADV_RANDOM, so each miss is one fault reading one page:
no readahead around it. The whole file is evicted before each pass so that pages come back as
single-page folios: a large folio (what buffered writes create) stays cached while any page of it
is mapped, and would absorb faults on its other pages. The writer uses pwrite, not a second
mapping, because a page mapped anywhere cannot be dropped from the page cache. See
platform-notes.md section 6 on why majflt alone is a poor signal with readahead on.
"""

from __future__ import annotations

import argparse
import mmap
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from seglog_server.storage.format import offset_index
from seglog_server.storage.format.index_search import (
    LARGEST_LOWER_BOUND,
    Bound,
    EntryField,
    plain_slot_range_for,
    recording,
    slot_range_for,
)
from seglog_server.storage.format.offset_index import OffsetIndex, OffsetPosition

ENTRY = offset_index.ENTRY
KEY = offset_index.LAYOUT.key
PAGE_BYTES = mmap.PAGESIZE
ENTRIES_PER_PAGE = PAGE_BYTES // ENTRY.size
DEFAULT_INDEX_PAGES = 10 * 1024 * 1024 // PAGE_BYTES  # segment.index.bytes default: 10 MiB
POSITION_STEP = 1024  # bytes of log per index entry; keeps 10 MiB of entries inside int32 positions
STEADY_SAMPLES_PER_PAGE = 32  # tail lookups per page of growth that define the steady-state set
COLD_REPETITIONS = 7

Search = Callable[[object, int, int, EntryField, Bound], int]
SEARCHES: dict[str, Search] = {"plain": plain_slot_range_for, "warm/cold": slot_range_for}


def key_of(slot: int) -> int:
    """Relative offsets of the benchmark index: every 3rd offset is indexed (a sparse index)."""
    return 3 * slot


def entries_bytes(first_slot: int, count: int) -> bytes:
    return b"".join(ENTRY.pack(key_of(slot), slot * POSITION_STEP) for slot in range(first_slot, first_slot + count))


def tail_target(entry_count: int) -> int:
    """A follower or caught-up consumer fetching past the last indexed offset."""
    return key_of(entry_count - 1) + 1


def probed_pages(search: Search, buffer: object, entry_count: int) -> set[int]:
    probed: list[int] = []
    search(buffer, entry_count, tail_target(entry_count), recording(KEY, probed), LARGEST_LOWER_BOUND)
    return {slot * ENTRY.size // PAGE_BYTES for slot in probed}


# -- part 1: probes -------------------------------------------------------------------------------
@dataclass
class ProbeFigures:
    pages_per_lookup: list[int]
    new_pages_per_growth: list[int]


def probe_growth(search: Search, buffer: bytes, page_count: int) -> ProbeFigures:
    figures = ProbeFigures([], [])
    step = ENTRIES_PER_PAGE // STEADY_SAMPLES_PER_PAGE
    for last_page in range(page_count - 1):
        steady: set[int] = set()
        for entry_count in range(last_page * ENTRIES_PER_PAGE + 1, (last_page + 1) * ENTRIES_PER_PAGE + 1, step):
            pages = probed_pages(search, buffer, entry_count)
            figures.pages_per_lookup.append(len(pages))
            steady |= pages
        grown = probed_pages(search, buffer, (last_page + 1) * ENTRIES_PER_PAGE + 1)
        figures.new_pages_per_growth.append(len(grown - steady - {last_page + 1}))
    return figures


# -- parts 2 and 3: real faults -------------------------------------------------------------------
def thread_faults() -> tuple[int, int]:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_minflt, usage.ru_majflt


@dataclass
class Measured:
    minor_faults: int
    major_faults: int
    latency_us: float


def measure(search: Search, mapping: mmap.mmap, entry_count: int) -> Measured:
    target = tail_target(entry_count)
    minor_before, major_before = thread_faults()
    started = time.perf_counter_ns()
    search(mapping, entry_count, target, KEY, LARGEST_LOWER_BOUND)
    elapsed_ns = time.perf_counter_ns() - started
    minor_after, major_after = thread_faults()
    return Measured(minor_after - minor_before, major_after - major_before, elapsed_ns / 1000)


class IndexFile:
    """An offset index file preallocated by OffsetIndex, grown by pwrite, read through one
    MADV_RANDOM mapping."""

    def __init__(self, directory: str, initial_pages: int, total_pages: int, advice: int) -> None:
        self.path = os.path.join(directory, "00000000000000000000.index")
        creator = OffsetIndex(self.path, 0, total_pages * PAGE_BYTES)
        creator.flush()  # materialises: creates and preallocates the file
        creator.close_handler()  # no mapping of ours may pin pages in the page cache
        self.fd = os.open(self.path, os.O_RDWR)
        os.pwrite(self.fd, entries_bytes(0, initial_pages * ENTRIES_PER_PAGE), 0)
        self.mapping = mmap.mmap(self.fd, total_pages * PAGE_BYTES)
        self.mapping.madvise(advice)
        self.total_pages = total_pages

    def write_page(self, page: int) -> None:
        os.pwrite(self.fd, entries_bytes(page * ENTRIES_PER_PAGE, ENTRIES_PER_PAGE), page * PAGE_BYTES)

    def evict_all_but(self, keep: set[int]) -> None:
        # Only clean pages can be dropped. The writer uses pwrite, so fdatasync is what cleans them;
        # the mapping is only read, so an msync would have nothing to write.
        os.fdatasync(self.fd)
        first = 0
        for page in sorted(keep) + [self.total_pages]:
            if page > first:
                self.mapping.madvise(mmap.MADV_DONTNEED, first * PAGE_BYTES, (page - first) * PAGE_BYTES)
                os.posix_fadvise(self.fd, first * PAGE_BYTES, (page - first) * PAGE_BYTES, os.POSIX_FADV_DONTNEED)
            first = page + 1

    def close(self) -> None:
        self.mapping.close()
        os.close(self.fd)


@dataclass
class FaultFigures:
    after_growth: list[Measured]
    predicted_new_pages: list[int]  # from the probes: touched after growth, not in S, not just written
    steady_latency_us: list[float]
    cold: list[Measured]


def fault_pass(search: Search, index_file: IndexFile, initial_pages: int, growth_steps: int) -> FaultFigures:
    figures = FaultFigures([], [], [], [])
    index_file.evict_all_but(set())  # start cold: every page comes back as a single-page folio
    for _ in range(3):
        thread_faults()  # warm the measuring path itself
    step = ENTRIES_PER_PAGE // STEADY_SAMPLES_PER_PAGE
    for last_page in range(initial_pages - 1, initial_pages - 1 + growth_steps):
        steady: set[int] = set()
        for entry_count in range(last_page * ENTRIES_PER_PAGE + 1, (last_page + 1) * ENTRIES_PER_PAGE + 1, step):
            steady |= probed_pages(search, index_file.mapping, entry_count)
            figures.steady_latency_us.append(measure(search, index_file.mapping, entry_count).latency_us)
        index_file.evict_all_but(steady)  # the LRU model: what no lookup touched is gone
        index_file.write_page(last_page + 1)  # the index grows onto a new page
        grown_count = (last_page + 1) * ENTRIES_PER_PAGE + 1
        figures.after_growth.append(measure(search, index_file.mapping, grown_count))
        grown_pages = probed_pages(search, index_file.mapping, grown_count)
        figures.predicted_new_pages.append(len(grown_pages - steady - {last_page + 1}))
    entry_count = (initial_pages + growth_steps) * ENTRIES_PER_PAGE
    for _ in range(COLD_REPETITIONS):
        index_file.evict_all_but(set())
        figures.cold.append(measure(search, index_file.mapping, entry_count))
    return figures


def check_file_reads_as_an_offset_index(index_file: IndexFile, entry_count: int) -> None:
    """The benchmark's file is a real .index: trimmed, OffsetIndex finds the last entry."""
    os.truncate(index_file.path, entry_count * ENTRY.size)
    with OffsetIndex(index_file.path, 0, writable=False) as index:
        last = entry_count - 1
        assert index.lookup(key_of(last) + 1) == OffsetPosition(key_of(last), last * POSITION_STEP)


# -- report ---------------------------------------------------------------------------------------
NOTES = """
Reading the fault figures:
- majflt: a page read from disk inside the lookup. Under MADV_RANDOM each evicted page a search
  probes is exactly one major fault, so "predicted new pages" (from the probes) and majflt agree.
- minflt: both searches take one minor fault per growth: the page the writer just wrote is in the
  page cache but not yet in the reader's page table. No disk read; a few microseconds (compare
  warm/cold's after-growth and steady latencies).
- With --readahead (MADV_NORMAL) a major fault reads neighbouring pages too, so later probes hit
  pages that came in with an earlier fault: majflt undercounts the pages read (platform-notes 6),
  while each fault costs more (see the latencies).
"""

def print_probe_table(results: dict[str, ProbeFigures], page_count: int) -> None:
    print(f"\n1. Probes: offset index growing from 1 to {page_count} pages, tail lookups")
    print(f"   ({STEADY_SAMPLES_PER_PAGE} steady-state lookups per page; new = touched after growth, not before,")
    print("   excluding the page just written)")
    header = f"   {'search':<10} | {'pages/lookup mean':>17} {'max':>4} | {'growths with new pages':>22} | {'new pages/growth mean':>21} {'max':>4}"
    print(header)
    print("   " + "-" * (len(header) - 3))
    for name, figures in results.items():
        touched, new = figures.pages_per_lookup, figures.new_pages_per_growth
        with_new = sum(1 for count in new if count)
        print(
            f"   {name:<10} | {statistics.mean(touched):>17.2f} {max(touched):>4} | "
            f"{with_new:>10} of {len(new):<9} | {statistics.mean(new):>21.2f} {max(new):>4}"
        )


def print_fault_table(results: dict[str, FaultFigures], initial_pages: int, growth_steps: int, advice: str) -> None:
    print(f"\n2. Real faults, LRU model: {initial_pages}-page index ({initial_pages * PAGE_BYTES >> 20} MiB) growing")
    print(f"   {growth_steps} pages; first tail lookup after each growth ({advice}, RUSAGE_THREAD)")
    header = (
        f"   {'search':<10} | {'predicted new pages':>19} | {'majflt total':>12} {'per growth':>10} {'growths w/ majflt':>17} | "
        f"{'minflt total':>12} | {'after-growth us median':>22} {'max':>8} | {'steady us median':>16}"
    )
    print(header)
    print("   " + "-" * (len(header) - 3))
    for name, figures in results.items():
        grown = figures.after_growth
        majors = [m.major_faults for m in grown]
        latencies = [m.latency_us for m in grown]
        print(
            f"   {name:<10} | {sum(figures.predicted_new_pages):>19} | {sum(majors):>12} {statistics.mean(majors):>10.2f} "
            f"{sum(1 for m in majors if m):>8} of {len(majors):<5} | {sum(m.minor_faults for m in grown):>12} | "
            f"{statistics.median(latencies):>22.1f} {max(latencies):>8.1f} | "
            f"{statistics.median(figures.steady_latency_us):>16.1f}"
        )
    print(f"\n3. Real faults, cold cache: whole index evicted, one tail lookup ({COLD_REPETITIONS} repetitions, medians)")
    header = f"   {'search':<10} | {'majflt':>6} | {'minflt':>6} | {'latency us':>10}"
    print(header)
    print("   " + "-" * (len(header) - 3))
    for name, figures in results.items():
        cold = figures.cold
        print(
            f"   {name:<10} | {statistics.median(m.major_faults for m in cold):>6} | "
            f"{statistics.median(m.minor_faults for m in cold):>6} | "
            f"{statistics.median(m.latency_us for m in cold):>10.1f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--initial-pages", type=int, default=2048, help="index pages before growth (8 MiB)")
    parser.add_argument("--growth-steps", type=int, default=64, help="pages the index grows by")
    parser.add_argument("--probe-pages", type=int, default=DEFAULT_INDEX_PAGES, help="part 1 final size")
    parser.add_argument("--dir", default=None, help="where to put the index file (must be disk-backed)")
    parser.add_argument(
        "--readahead", action="store_true", help="leave the mapping MADV_NORMAL (readahead, fault-around) to compare"
    )
    args = parser.parse_args()
    print(f"seglog bench_index_pages: Linux {platform.release()}, page {PAGE_BYTES} B, {ENTRIES_PER_PAGE} entries/page")

    probe_buffer = entries_bytes(0, args.probe_pages * ENTRIES_PER_PAGE + 1)
    print_probe_table({name: probe_growth(s, probe_buffer, args.probe_pages) for name, s in SEARCHES.items()}, args.probe_pages)

    with tempfile.TemporaryDirectory(prefix="seglog-bench-index-", dir=args.dir) as directory:
        total_pages = args.initial_pages + args.growth_steps + 1
        advice = mmap.MADV_NORMAL if args.readahead else mmap.MADV_RANDOM
        index_file = IndexFile(directory, args.initial_pages, total_pages, advice)
        try:
            results = {
                name: fault_pass(search, index_file, args.initial_pages, args.growth_steps)
                for name, search in SEARCHES.items()
            }
        finally:
            index_file.close()
        check_file_reads_as_an_offset_index(index_file, (args.initial_pages + args.growth_steps) * ENTRIES_PER_PAGE)
    print_fault_table(results, args.initial_pages, args.growth_steps, "MADV_NORMAL" if args.readahead else "MADV_RANDOM")
    print(NOTES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
