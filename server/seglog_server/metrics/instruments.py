"""The instruments observed per operation: RPC latency, the storage's phases, index lookups by
zone, pages per lookup, page faults, read age, offset indexes rebuilt after a read found them
lying (by log directory), and bytes and records fetched per topic.

These are figures no running total can give, so they are counted as they happen: ``boundary.py``
calls ``Metrics.rpc_finished``, and the storage calls ``MetricsObserver``, an implementation of
``storage.base.observer.StorageObserver`` (the storage imports no Prometheus code).

The instruments are ``Histogram`` and plain dict counters rather than prometheus_client's own:
on the fetch path about eight observations are made per request, and a bisect plus a list
increment costs a fraction of a locked ``Histogram.labels(...).observe``
(bench/bench_metrics_cost.py measures the whole cost against metrics off). The storage's
stopwatches count their laps straight into the phase histograms (``phase_histograms``, one dict
lookup a lap, no call), and children are found by plain string keys, never by a tuple built per
observation. They take no lock: under the GIL two threads incrementing the same bucket at the same
instant can, very rarely, lose one count; a count never goes backwards.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence

from seglog_server.storage import StorageObserver
from seglog_server.storage.base.observer import BucketCounts

__all__ = [
    "LATENCY_BUCKETS_SECONDS",
    "PAGES_BUCKETS",
    "PHASE_BUCKETS_SECONDS",
    "READ_AGE_BUCKETS",
    "Histogram",
    "Histograms",
    "MetricsObserver",
    "RowsByLabel",
    "TopicTraffic",
]

_bisect_left = bisect.bisect_left

# Latency buckets from 50 us (an inline page-cache read) to 10 s (a long poll, a slow fsync).
LATENCY_BUCKETS_SECONDS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
)
# Phases are shorter than whole RPCs: from 5 us (a warm index search) to 1 s.
PHASE_BUCKETS_SECONDS = (
    0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025, 0.1, 1.0,
)
# A warm lookup touches at most 3 pages (index_search.WARM_SECTION_BYTES); a cold binary search
# over a full 10 MiB index about log2(2560) + 1 = 12.
PAGES_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)
# Read age: 0 is a tail read; powers of 16 up to a terabyte / 2^40 offsets behind.
READ_AGE_BUCKETS = (0, 16, 256, 4096, 65536, 1 << 20, 1 << 24, 1 << 28, 1 << 32, 1 << 36, 1 << 40)


class Histogram(BucketCounts):
    """Cumulative-bucket histogram without a lock (see the module docstring)."""

    __slots__ = ()

    def buckets(self) -> list[tuple[str, int]]:
        running, out = 0, []
        for bound, count in zip((*self.bounds, float("inf")), list(self.counts), strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        return out


class Histograms:
    """Histograms by label values, created on first use (label sets are fixed and small)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = tuple(bounds)
        self.by_labels: dict[tuple[str, ...], Histogram] = {}
        self._create_lock = threading.Lock()

    def child(self, *labels: str) -> Histogram:
        histogram = self.by_labels.get(labels)
        if histogram is None:
            with self._create_lock:
                histogram = self.by_labels.setdefault(labels, Histogram(self._bounds))
        return histogram


class _ChildrenByLabel(dict[str, Histogram]):
    """label value -> the child of a one-label ``Histograms``, created on first use."""

    def __init__(self, histograms: Histograms) -> None:
        super().__init__()
        self._histograms = histograms

    def __missing__(self, label: str) -> Histogram:
        histogram = self[label] = self._histograms.child(label)
        return histogram


class _Row(dict[str, Histogram]):
    """second label value -> the child of a two-label ``Histograms`` whose first label is
    ``first``, created there on first use."""

    def __init__(self, histograms: Histograms, first: str) -> None:
        super().__init__()
        self._histograms = histograms
        self._first = first

    def __missing__(self, second: str) -> Histogram:
        histogram = self[second] = self._histograms.child(self._first, second)
        return histogram


class RowsByLabel(dict[str, _Row]):
    """first label value -> its ``_Row``: ``rows[a][b]`` is ``histograms.child(a, b)`` at the
    cost of two dict lookups (the observer's ``phase_histograms`` is one, storage/base/observer.py)."""

    def __init__(self, histograms: Histograms) -> None:
        super().__init__()
        self._histograms = histograms

    def __missing__(self, first: str) -> _Row:
        row = self[first] = _Row(self._histograms, first)
        return row


class MetricsObserver(StorageObserver):
    """The storage's per-operation figures, kept for the collector."""

    enabled = True

    def __init__(self) -> None:
        self.phases = Histograms(PHASE_BUCKETS_SECONDS)
        # The storage's stopwatches count laps straight into these (the same histograms).
        self.phase_histograms = RowsByLabel(self.phases)
        self.lookup_pages = Histograms(PAGES_BUCKETS)
        self._pages_by_index = _ChildrenByLabel(self.lookup_pages)
        self.lookups: dict[tuple[str, str], int] = {
            (index, zone): 0 for index in ("offset", "time") for zone in ("warm", "cold", "none")
        }
        self.faults: dict[tuple[str, str], int] = {
            (path, kind): 0 for path in ("index_lookup", "log_read", "append")
            for kind in ("minor", "major")
        }
        self.read_age_bytes = Histogram(READ_AGE_BUCKETS)
        self.read_age_offsets = Histogram(READ_AGE_BUCKETS)
        # log directory -> offset indexes a read found lying and rebuilt there. Rare, so under a
        # lock: no count of a data-integrity signal may be lost to a race.
        self._index_rebuilds: dict[str, int] = {}
        self._rebuilds_lock = threading.Lock()
        # Log flushes since start, counted as they end (not summed from the live logs: a deleted
        # topic's would leave the sum). Under a lock: pool threads flush different logs at once.
        self._flush_count = 0
        self._flushes_lock = threading.Lock()

    # Each method observes inline (no further calls): they run several times per request.
    def index_lookup(self, index: str, zone: str, pages: int) -> None:
        self.lookups[index, zone] += 1
        histogram = self._pages_by_index[index]
        histogram.counts[_bisect_left(histogram.bounds, pages)] += 1
        histogram.total += pages

    def phase(self, operation: str, phase: str, seconds: float) -> None:
        histogram = self.phase_histograms[operation][phase]
        histogram.counts[_bisect_left(histogram.bounds, seconds)] += 1
        histogram.total += seconds

    def page_faults(self, path: str, minor: int, major: int) -> None:
        if minor:
            self.faults[path, "minor"] += minor
        if major:
            self.faults[path, "major"] += major

    def read_age(self, offsets: int, bytes_behind: int) -> None:
        histogram = self.read_age_offsets
        histogram.counts[_bisect_left(histogram.bounds, offsets)] += 1
        histogram.total += offsets
        histogram = self.read_age_bytes
        histogram.counts[_bisect_left(histogram.bounds, bytes_behind)] += 1
        histogram.total += bytes_behind

    def offset_index_rebuilt(self, log_dir: str) -> None:
        with self._rebuilds_lock:
            self._index_rebuilds[log_dir] = self._index_rebuilds.get(log_dir, 0) + 1

    def index_rebuilds(self) -> dict[str, int]:
        """log directory -> offset indexes rebuilt there: a copy taken under the lock, as a pool
        thread may add a directory while the collector reads."""
        with self._rebuilds_lock:
            return dict(self._index_rebuilds)

    def log_flushed(self) -> None:
        with self._flushes_lock:
            self._flush_count += 1

    def flush_count(self) -> int:
        with self._flushes_lock:
            return self._flush_count


class TopicTraffic:
    """Bytes and records sent per topic (what the storage's statistics do not know: a read
    the service probes and then repeats on the pool is one response)."""

    def __init__(self) -> None:
        self.fetched_bytes: dict[str, int] = {}
        self.fetched_records: dict[str, int] = {}

    def fetched(self, topic: str, records: int, size_bytes: int) -> None:
        self.fetched_bytes[topic] = self.fetched_bytes.get(topic, 0) + size_bytes
        self.fetched_records[topic] = self.fetched_records.get(topic, 0) + records

