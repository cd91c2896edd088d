"""Index residency at scrape time: the share of each partition's index pages in the page cache.

Sampled with mincore (page_residency.py) at most every ``interval_s``: the first scrape takes
the sample itself; after that, a scrape that finds the sample older than ``interval_s`` starts a
new one on a thread of its own and answers with the previous one, so no scrape waits for up to
``files_max`` mincore calls (with Prometheus scraping every 15 s and a 10 s interval, every
scrape would).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from seglog_server.metrics.page_residency import PAGE_BYTES, resident_pages

__all__ = ["RESIDENCY_FILES_MAX", "RESIDENCY_INTERVAL_S", "ResidencySampler"]

# How often index residency is re-sampled with mincore (scrapes in between reuse the sample), and
# how many index files one sample may map: about 20 us per file here, so a sample stays < 50 ms.
RESIDENCY_INTERVAL_S = 10.0
RESIDENCY_FILES_MAX = 2000

Ratios = dict[tuple[str, int, str], float]


@dataclass
class _ResidencySample:
    taken_at: float = float("-inf")
    ratios: Ratios | None = None


class ResidencySampler:
    """Ratios by (topic, partition, index), sampled over the logs ``log_of`` finds."""

    def __init__(
        self,
        log_of: Callable[[str, int], Any],
        *,
        interval_s: float,
        files_max: int,
        clock: Callable[[], float],
    ) -> None:
        self._log_of = log_of
        self.interval_s = interval_s
        self.files_max = files_max
        self._clock = clock
        self._sample = _ResidencySample()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def ratios(self, partitions: Sequence[Any]) -> tuple[Ratios, float]:
        """Ratios by (topic, partition, index) and the sample's age in seconds."""
        with self._lock:
            now = self._clock()
            sample = self._sample
            if sample.ratios is None:
                sample.ratios = self.sample(partitions)
                sample.taken_at = now
            elif now - sample.taken_at >= self.interval_s and self._thread is None:
                self._thread = threading.Thread(
                    target=self._refresh, args=(list(partitions), now),
                    name="seglog-residency", daemon=True)
                self._thread.start()
            return sample.ratios, now - sample.taken_at

    def _refresh(self, partitions: list[Any], started_at: float) -> None:
        ratios = None
        try:
            ratios = self.sample(partitions)
        finally:  # a failed sample leaves the previous one; the next stale scrape tries again
            with self._lock:
                if ratios is not None:
                    self._sample.ratios = ratios
                    self._sample.taken_at = started_at
                self._thread = None

    def wait_sampled(self, timeout_s: float | None = None) -> None:
        """Waits for a sample under way on its thread (for tests and benchmarks)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def sample(self, partitions: Sequence[Any]) -> Ratios:
        """One sample now, on the caller's thread, of at most ``files_max`` index files."""
        ratios: Ratios = {}
        files_left = self.files_max
        for stats in partitions:
            if files_left <= 0:
                break
            log = self._log_of(stats.topic, stats.partition)
            if log is None:
                continue
            pages = {"offset": [0, 0], "time": [0, 0]}
            for segment in log.segments_snapshot():
                for label, index in (("offset", segment.offset_index), ("time", segment.time_index)):
                    files_left -= _add_residency(index, pages[label])
            for label, (resident, total) in pages.items():
                if total:
                    ratios[stats.topic, stats.partition, label] = resident / total
        return ratios


def _add_residency(index: Any, pages: list[int]) -> int:
    """Adds (resident, total) pages of ``index``'s valid entries; returns files mapped (0 or 1).

    An index the storage has not opened (an inactive segment nobody read since the start) is not
    opened here either: its file was trimmed to its entries when it was closed, so its length is
    its valid size, and mincore tells whether those pages are cached all the same."""
    stats = index.statistics()  # no file is opened for an index never used
    size_bytes = stats.size_in_bytes
    if not stats.is_materialized:
        try:
            size_bytes = os.stat(stats.path).st_size
        except OSError:
            return 0
    if size_bytes == 0:
        return 0
    valid_pages = (size_bytes + PAGE_BYTES - 1) // PAGE_BYTES
    vector = resident_pages(stats.path, size_bytes)
    pages[0] += vector.count(1)
    pages[1] += valid_pages
    return 1

