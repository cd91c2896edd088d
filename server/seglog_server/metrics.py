"""Every Prometheus metric seglog exports, declared in this one module.

Two kinds of figures, one collector (``SeglogCollector``), one registry per service:

- **Read at scrape time** from ``statistics()`` snapshots (STYLE rule 12): partition offsets,
  sizes and segment counts, log directories, recovery at start, flushes, long-poll waiters and
  streams, storage-call placement, bytes and records appended per topic. Nothing is kept twice.
- **Observed per operation**, for figures no running total can give: RPC latency (``boundary.py``
  calls ``rpc_finished``), the storage's per-phase timings, index lookups by zone, pages touched
  per lookup, page faults and read age (the storage calls ``MetricsObserver``, an implementation
  of ``storage.base.observer.StorageObserver``: the storage imports no Prometheus code).

The per-operation instruments are ``_Histogram`` and plain dict counters rather than
prometheus_client's own: on the fetch path about eight observations are made per request, and a
bisect plus a list increment costs a fraction of a locked ``Histogram.labels(...).observe``
(bench/bench_metrics_cost.py measures the whole cost against metrics off). The storage's
stopwatches count their laps straight into the phase histograms (``phase_histograms``, one dict
lookup a lap, no call), and children are found by plain string keys, never by a tuple built per
observation. They take no lock:
under the GIL two threads incrementing the same bucket at the same instant can, very rarely, lose
one count; a count never goes backwards.

Bounded label sets: method x code, operation x phase, index x zone, path x kind are fixed sets.
Per-partition series (offsets, size, segments, residency) are exported for at most
``partition_series_max`` partitions (in topic, partition order; 0 turns them off); the rest are
counted in ``seglog_partition_series_omitted``. Per-topic series are capped the same way, the
remainder summed under ``topic="_other"``. The per-partition figures come from the manager's
``partition_summaries`` (``Log.summary()``: no per-segment work) and go out as ``GaugeBlock``s
(metrics_text.py), which write their own exposition lines: a 10,000-partition scrape with every
series costs about 100 ms (bench/bench_metrics_scrape.py).

The offline cleaner's figures come through a hook (``cleaner_statistics()`` on the manager),
exported when the manager offers it.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from seglog_server.metrics_text import GaugeBlock, label_block
from seglog_server.page_residency import PAGE_BYTES, resident_pages
from seglog_server.storage import StorageObserver
from seglog_server.storage.base.observer import BucketCounts

__all__ = [
    "FAMILIES",
    "LATENCY_BUCKETS_SECONDS",
    "Metrics",
    "MetricsObserver",
    "SeglogCollector",
]

_LOG = logging.getLogger(__name__)

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

PARTITION_SERIES_MAX_DEFAULT = 1000
# How often index residency is re-sampled with mincore (scrapes in between reuse the sample), and
# how many index files one sample may map: about 20 us per file here, so a sample stays < 50 ms.
RESIDENCY_INTERVAL_S = 10.0
RESIDENCY_FILES_MAX = 2000
OTHER_TOPIC = "_other"

# name -> (type, labels, help). The one list of what seglog exports; tests and the dashboard
# checks read it. Counters are listed by their family name (without ``_total``).
FAMILIES: dict[str, tuple[str, tuple[str, ...], str]] = {
    # -- latency ----------------------------------------------------------------------------
    "seglog_rpc_duration_seconds": (
        "histogram", ("method", "code"), "Unary RPC latency, server side, by method and status code."),
    "seglog_storage_phase_duration_seconds": (
        "histogram", ("operation", "phase"),
        "Time of each storage phase inside Produce, Fetch, OffsetsForTimes and flushes."),
    # -- traffic ----------------------------------------------------------------------------
    "seglog_produced_bytes": ("counter", ("topic",), "Bytes of record batches appended, by topic."),
    "seglog_produced_records": ("counter", ("topic",), "Records appended, by topic."),
    "seglog_fetched_bytes": (
        "counter", ("topic",), "Bytes of record batches sent by Fetch and Consume, by topic."),
    "seglog_fetched_records": (
        "counter", ("topic",), "Offsets delivered by Fetch and Consume, by topic."),
    # -- the page cache ----------------------------------------------------------------------
    "seglog_index_lookups": (
        "counter", ("index", "zone"),
        "Index lookups by index (offset, time) and zone (warm: newest 8 KiB; cold: the rest; "
        "none: no section searched, the index empty or the target below its first entry)."),
    "seglog_index_lookup_pages": (
        "histogram", ("index",), "Distinct index pages one search probed."),
    "seglog_page_faults": (
        "counter", ("path", "kind"),
        "Page faults taken by the storage thread around index lookups, log reads and appends."),
    "seglog_index_resident_ratio": (
        "gauge", ("topic", "partition", "index"),
        "Share of a partition's index pages (valid entries) in the page cache (mincore sample)."),
    "seglog_index_residency_sample_age_seconds": (
        "gauge", (), "Age of the residency sample the ratio series come from."),
    "seglog_fetch_read_age_bytes": (
        "histogram", (), "Bytes of log between where a read starts and the log end."),
    "seglog_fetch_read_age_offsets": (
        "histogram", (), "Offsets between where a read starts and the log end."),
    # -- partitions and directories ----------------------------------------------------------
    "seglog_log_start_offset": ("gauge", ("topic", "partition"), "First readable offset."),
    "seglog_log_end_offset": ("gauge", ("topic", "partition"), "Offset the next record gets."),
    "seglog_log_size_bytes": ("gauge", ("topic", "partition"), "Bytes of the partition's log."),
    "seglog_log_segments": ("gauge", ("topic", "partition"), "Segments of the partition's log."),
    "seglog_log_unflushed_records": (
        "gauge", ("topic", "partition"), "Offsets above the recovery point (not yet fsynced)."),
    "seglog_log_lost_offsets": (
        "gauge", ("topic", "partition"),
        "Offsets recovery cut from damaged closed segments, at or above the log start: reads there answer DATA_LOSS."),
    "seglog_partitions": ("gauge", (), "Online partitions."),
    "seglog_offline_partitions": ("gauge", (), "Partitions that exist but cannot be served."),
    "seglog_partition_series_omitted": (
        "gauge", (), "Partitions beyond partition_series_max, left out of per-partition series."),
    "seglog_log_dir_online": ("gauge", ("dir",), "1 while the log directory is online."),
    "seglog_log_dir_size_bytes": ("gauge", ("dir",), "Bytes of logs in the directory."),
    "seglog_log_dir_partitions": ("gauge", ("dir",), "Online partitions in the directory."),
    "seglog_log_flushes": ("counter", (), "Log flushes (fsync passes) since start."),
    # -- start-up and recovery ---------------------------------------------------------------
    "seglog_log_dir_clean_shutdown": (
        "gauge", ("dir",), "1 when the clean-shutdown marker was found at start."),
    "seglog_recovery_ran": (
        "gauge", (), "1 when start-up recovered a log (its directory had no clean-shutdown marker)."),
    "seglog_recovery_logs_recovered": ("gauge", (), "Logs loaded through recovery at start."),
    "seglog_recovery_segments_recovered": (
        "gauge", (), "Segments CRC-checked and reindexed by recovery (online partitions)."),
    "seglog_recovery_truncated_bytes": (
        "gauge", (), "Bytes cut from torn or corrupt tails by recovery (online partitions)."),
    "seglog_recovery_logs_reloaded": (
        "gauge", (), "Logs whose load failed and that were loaded again with recovery at start."),
    "seglog_recovery_logs_offline": (
        "gauge", (), "Logs kept offline alone at start: not loadable even with recovery."),
    "seglog_startup_duration_seconds": ("gauge", (), "Time the storage took to load at start."),
    # -- the service -------------------------------------------------------------------------
    "seglog_fetch_waiters": ("gauge", (), "Long polls and streams waiting for an append."),
    "seglog_consume_streams": ("gauge", (), "Open Consume streams."),
    "seglog_consume_buffered_bytes": (
        "gauge", (), "Bytes of Consume responses held: read, built, or waiting for the client's "
        "flow-control window (budget consume_buffer_bytes_max)."),
    "seglog_consume_buffer_bytes_max": ("gauge", (), "The budget of Consume response bytes."),
    "seglog_consume_responses_shrunk": (
        "counter", (), "Consume responses made smaller than asked because the budget was spent."),
    "seglog_storage_calls": (
        "counter", ("placement",), "Storage calls by where they ran (inline, pooled, busy)."),
    "seglog_rpc_internal_errors": ("counter", (), "RPCs that failed with an unexpected error."),
    "seglog_partitions_skipped": (
        "gauge", (), "Partitions whose figures this scrape could not read (an error, logged)."),
    "seglog_metrics_collect_errors": (
        "counter", (), "Parts of /metrics scrapes left out because building them raised (logged)."),
    # -- hooks: exported once the statistics exist -------------------------------------------
    "seglog_descriptors_in_use": ("gauge", (), "File descriptors the process holds (/proc/self/fd)."),
    "seglog_descriptors_budget": ("gauge", (), "The process's descriptor limit (RLIMIT_NOFILE, soft)."),
    "seglog_open_segments": ("gauge", (), "Segments holding descriptors and mappings now."),
    "seglog_open_segments_max": (
        "gauge", (), "Segments that may hold descriptors at once (one budget for every log)."),
    "seglog_cleaner_dirty_ratio": ("gauge", ("topic", "partition"), "Cleanable share of a log."),
    "seglog_cleaner_bytes_reclaimed": ("counter", (), "Bytes the cleaner reclaimed."),
    "seglog_cleaner_last_run_timestamp_seconds": ("gauge", (), "When the cleaner last committed."),
    "seglog_cleaner_offset_map_utilization_ratio": ("gauge", (), "Offset map fill of the last run."),
    "seglog_cleaner_offset_map_collision_ratio": ("gauge", (), "Digest collisions of the last run."),
    "seglog_cleaner_partitions_skipped": (
        "gauge", (), "Compacted partitions this scrape could not describe (an error, logged)."),
}


class _Histogram(BucketCounts):
    """Cumulative-bucket histogram without a lock (see the module docstring)."""

    __slots__ = ()

    def buckets(self) -> list[tuple[str, int]]:
        running, out = 0, []
        for bound, count in zip((*self.bounds, float("inf")), list(self.counts), strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        return out


class _Histograms:
    """Histograms by label values, created on first use (label sets are fixed and small)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = tuple(bounds)
        self.by_labels: dict[tuple[str, ...], _Histogram] = {}
        self._create_lock = threading.Lock()

    def child(self, *labels: str) -> _Histogram:
        histogram = self.by_labels.get(labels)
        if histogram is None:
            with self._create_lock:
                histogram = self.by_labels.setdefault(labels, _Histogram(self._bounds))
        return histogram


class _ChildrenByLabel(dict[str, _Histogram]):
    """label value -> the child of a one-label ``_Histograms``, created on first use."""

    def __init__(self, histograms: _Histograms) -> None:
        super().__init__()
        self._histograms = histograms

    def __missing__(self, label: str) -> _Histogram:
        histogram = self[label] = self._histograms.child(label)
        return histogram


class _Row(dict[str, _Histogram]):
    """second label value -> the child of a two-label ``_Histograms`` whose first label is
    ``first``, created there on first use."""

    def __init__(self, histograms: _Histograms, first: str) -> None:
        super().__init__()
        self._histograms = histograms
        self._first = first

    def __missing__(self, second: str) -> _Histogram:
        histogram = self[second] = self._histograms.child(self._first, second)
        return histogram


class _RowsByLabel(dict[str, _Row]):
    """first label value -> its ``_Row``: ``rows[a][b]`` is ``histograms.child(a, b)`` at the
    cost of two dict lookups (the observer's ``phase_histograms`` is one, storage/base/observer.py)."""

    def __init__(self, histograms: _Histograms) -> None:
        super().__init__()
        self._histograms = histograms

    def __missing__(self, first: str) -> _Row:
        row = self[first] = _Row(self._histograms, first)
        return row


class MetricsObserver(StorageObserver):
    """The storage's per-operation figures, kept for the collector."""

    enabled = True

    def __init__(self) -> None:
        self.phases = _Histograms(PHASE_BUCKETS_SECONDS)
        # The storage's stopwatches count laps straight into these (the same histograms).
        self.phase_histograms = _RowsByLabel(self.phases)
        self.lookup_pages = _Histograms(PAGES_BUCKETS)
        self._pages_by_index = _ChildrenByLabel(self.lookup_pages)
        self.lookups: dict[tuple[str, str], int] = {
            (index, zone): 0 for index in ("offset", "time") for zone in ("warm", "cold", "none")
        }
        self.faults: dict[tuple[str, str], int] = {
            (path, kind): 0 for path in ("index_lookup", "log_read", "append")
            for kind in ("minor", "major")
        }
        self.read_age_bytes = _Histogram(READ_AGE_BUCKETS)
        self.read_age_offsets = _Histogram(READ_AGE_BUCKETS)

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


class _TopicTraffic:
    """Bytes and records sent per topic (what the storage's statistics do not know: a read
    the service probes and then repeats on the pool is one response)."""

    def __init__(self) -> None:
        self.fetched_bytes: dict[str, int] = {}
        self.fetched_records: dict[str, int] = {}

    def fetched(self, topic: str, records: int, size_bytes: int) -> None:
        self.fetched_bytes[topic] = self.fetched_bytes.get(topic, 0) + size_bytes
        self.fetched_records[topic] = self.fetched_records.get(topic, 0) + records


@dataclass
class _ResidencySample:
    taken_at: float = float("-inf")
    ratios: dict[tuple[str, int, str], float] | None = None


class Metrics:
    """The service's metrics: the observer the storage reports to, the RPC hook, the registry."""

    def __init__(
        self,
        *,
        partition_series_max: int = PARTITION_SERIES_MAX_DEFAULT,
        residency_interval_s: float = RESIDENCY_INTERVAL_S,
        residency_files_max: int = RESIDENCY_FILES_MAX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert partition_series_max >= 0
        self.observer = MetricsObserver()
        self.rpc_durations = _Histograms(LATENCY_BUCKETS_SECONDS)
        self._rpc_by_method = _RowsByLabel(self.rpc_durations)
        self.traffic = _TopicTraffic()
        self.partition_series_max = partition_series_max
        self.residency_interval_s = residency_interval_s
        self.residency_files_max = residency_files_max
        self._clock = clock
        self._residency = _ResidencySample()
        self._residency_lock = threading.Lock()
        self._residency_thread: threading.Thread | None = None
        # (topic, partition) -> its label block, reused by every scrape (metrics_text.py).
        self.label_blocks: dict[tuple[str, int], str] = {}
        self.manager: Any = None  # the LogManager, once started
        self.servicer: Any = None  # the LogServicer, once serving
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SeglogCollector(self))

    def rpc_finished(self, method: str, code: str, seconds: float) -> None:
        histogram = self._rpc_by_method[method][code]  # str keys: no tuple built per call
        histogram.counts[_bisect_left(histogram.bounds, seconds)] += 1
        histogram.total += seconds

    def fetched(self, topic: str, records: int, size_bytes: int) -> None:
        traffic = self.traffic  # _TopicTraffic.fetched, inline: once per Fetch response
        fetched_bytes, fetched_records = traffic.fetched_bytes, traffic.fetched_records
        fetched_bytes[topic] = fetched_bytes.get(topic, 0) + size_bytes
        fetched_records[topic] = fetched_records.get(topic, 0) + records

    # -- residency: sampled with mincore at most every residency_interval_s --------------------
    def residency(self, partitions: Sequence[Any]) -> tuple[dict[tuple[str, int, str], float], float]:
        """Ratios by (topic, partition, index) and the sample's age in seconds.

        The first scrape takes the sample itself; after that, a scrape that finds the sample
        older than ``residency_interval_s`` starts a new one on a thread of its own and answers
        with the previous one, so no scrape waits for up to RESIDENCY_FILES_MAX mincore calls
        (with Prometheus scraping every 15 s and a 10 s interval, every scrape would)."""
        with self._residency_lock:
            now = self._clock()
            sample = self._residency
            if sample.ratios is None:
                sample.ratios = self._sample_residency(partitions)
                sample.taken_at = now
            elif now - sample.taken_at >= self.residency_interval_s and self._residency_thread is None:
                self._residency_thread = threading.Thread(
                    target=self._refresh_residency, args=(list(partitions), now),
                    name="seglog-residency", daemon=True)
                self._residency_thread.start()
            return sample.ratios, now - sample.taken_at

    def _refresh_residency(self, partitions: list[Any], started_at: float) -> None:
        ratios = None
        try:
            ratios = self._sample_residency(partitions)
        finally:  # a failed sample leaves the previous one; the next stale scrape tries again
            with self._residency_lock:
                if ratios is not None:
                    self._residency.ratios = ratios
                    self._residency.taken_at = started_at
                self._residency_thread = None

    def wait_residency_sampled(self, timeout_s: float | None = None) -> None:
        """Waits for a residency sample under way on its thread (for tests and benchmarks)."""
        thread = self._residency_thread
        if thread is not None:
            thread.join(timeout_s)

    def _sample_residency(self, partitions: Sequence[Any]) -> dict[tuple[str, int, str], float]:
        ratios: dict[tuple[str, int, str], float] = {}
        files_left = self.residency_files_max
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

    def _log_of(self, topic: str, partition: int) -> Any:
        try:
            return self.manager.get_log(topic, partition)
        except Exception:  # noqa: BLE001 - deleted or offline since the statistics were taken
            return None


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


class SeglogCollector(Collector):
    """Builds every family at scrape time from statistics and the observed instruments.

    Each section is built whole before any of it goes out, and a section that raises is left
    out of that scrape, logged and counted (``seglog_metrics_collect_errors``): one partition or
    one statistics hook in trouble must not cost the operator every other figure, nor turn the
    scrape into an error that alerting reads as "the service is down"."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._error_count = 0

    def collect(self) -> Iterator[Metric]:
        m = self._metrics
        sections: list[tuple[str, Callable[[], Iterable[Metric]]]] = [
            ("rpc", lambda: _rpc_families(m)),
            ("observer", lambda: _observer_families(m.observer)),
        ]
        if m.servicer is not None:
            sections.append(("servicer", lambda: _servicer_families(m.servicer.statistics(), m)))
        if m.manager is not None:
            sections.append(("storage", lambda: _storage_families(m)))
            sections.append(("cleaner", lambda: _cleaner_families(m.manager)))
        for name, build in sections:
            yield from self._section(name, build)
        errors = _family("seglog_metrics_collect_errors")
        errors.add_metric([], self._error_count)
        yield errors

    def _section(self, name: str, build: Callable[[], Iterable[Metric]]) -> list[Metric]:
        try:
            return list(build())
        except Exception:
            self._error_count += 1
            _LOG.exception("/metrics: the %s figures are left out of this scrape", name)
            return []


def _storage_families(m: Metrics) -> Iterator[Metric]:
    stats = m.manager.statistics(partition_detail=False)
    yield from _manager_families(stats)
    yield from _partition_families(stats, m)
    yield from _recovery_families(stats)
    yield from _descriptor_families(stats)


# -- families --------------------------------------------------------------------------------


def _family(name: str, labels: Sequence[str] | None = None) -> Any:
    kind, declared, text = FAMILIES[name]
    labels = declared if labels is None else labels
    if kind == "counter":
        return CounterMetricFamily(name, text, labels=labels)
    if kind == "gauge":
        return GaugeMetricFamily(name, text, labels=labels)
    return HistogramMetricFamily(name, text, labels=labels)


def _histogram_family(name: str, histograms: dict[tuple[str, ...], _Histogram]) -> Metric:
    family = _family(name)
    for labels, histogram in sorted(histograms.items()):
        family.add_metric(list(labels), histogram.buckets(), histogram.total)
    return family


def _rpc_families(m: Metrics) -> Iterator[Metric]:
    yield _histogram_family("seglog_rpc_duration_seconds", m.rpc_durations.by_labels)


def _observer_families(observer: MetricsObserver) -> Iterator[Metric]:
    yield _histogram_family("seglog_storage_phase_duration_seconds", observer.phases.by_labels)
    lookups = _family("seglog_index_lookups")
    for (index, zone), count in sorted(observer.lookups.items()):
        lookups.add_metric([index, zone], count)
    yield lookups
    yield _histogram_family("seglog_index_lookup_pages", observer.lookup_pages.by_labels)
    faults = _family("seglog_page_faults")
    for (path, kind), count in sorted(observer.faults.items()):
        faults.add_metric([path, kind], count)
    yield faults
    for name, histogram in (("seglog_fetch_read_age_bytes", observer.read_age_bytes),
                            ("seglog_fetch_read_age_offsets", observer.read_age_offsets)):
        yield _histogram_family(name, {(): histogram})


def _servicer_families(stats: Any, m: Metrics) -> Iterator[Metric]:
    waiters = _family("seglog_fetch_waiters")
    waiters.add_metric([], stats.waiters.waiting_count)
    yield waiters
    streams = _family("seglog_consume_streams")
    streams.add_metric([], stats.consume_stream_count)
    yield streams
    buffer = stats.consume_buffer
    yield _gauge("seglog_consume_buffered_bytes", buffer.held_bytes)
    yield _gauge("seglog_consume_buffer_bytes_max", buffer.bytes_max)
    shrunk = _family("seglog_consume_responses_shrunk")
    shrunk.add_metric([], buffer.shrunk_count)
    yield shrunk
    calls = _family("seglog_storage_calls")
    calls.add_metric(["inline"], stats.storage_calls.inline_count)
    calls.add_metric(["pooled"], stats.storage_calls.pooled_count)
    calls.add_metric(["busy_fallback"], stats.storage_calls.busy_fallback_count)
    yield calls
    internal = _family("seglog_rpc_internal_errors")
    internal.add_metric([], stats.rpc.internal_error_count)
    yield internal
    cap = m.partition_series_max
    yield _per_topic("seglog_fetched_bytes", m.traffic.fetched_bytes, cap)
    yield _per_topic("seglog_fetched_records", m.traffic.fetched_records, cap)


def _per_topic(name: str, values: dict[str, int], cap: int) -> Metric:
    family = _family(name)
    topics = sorted(values)
    for topic in topics[:cap]:
        family.add_metric([topic], values[topic])
    if len(topics) > cap:
        family.add_metric([OTHER_TOPIC], sum(values[topic] for topic in topics[cap:]))
    return family


def _gauge(name: str, value: float) -> Metric:
    family = _family(name)
    family.add_metric([], value)
    return family


def _manager_families(stats: Any) -> Iterator[Metric]:
    yield _gauge("seglog_partitions", stats.partition_count)
    yield _gauge("seglog_offline_partitions", stats.offline_partition_count)
    yield _gauge("seglog_partitions_skipped", getattr(stats, "skipped_partition_count", 0))
    online, size, partitions = (_family(n) for n in (
        "seglog_log_dir_online", "seglog_log_dir_size_bytes", "seglog_log_dir_partitions"))
    for log_dir in stats.log_dirs:
        online.add_metric([log_dir.path], 1 if log_dir.online else 0)
        size.add_metric([log_dir.path], log_dir.size_bytes)
        partitions.add_metric([log_dir.path], log_dir.partition_count)
    yield from (online, size, partitions)
    flushes = _family("seglog_log_flushes")
    flushes.add_metric([], sum(p.flush_count for p in stats.partition_summaries))
    yield flushes


def _partition_families(stats: Any, m: Metrics) -> Iterator[Metric]:
    """Per-partition gauges for the first ``partition_series_max`` partitions (in topic,
    partition order), read from ``partition_summaries`` and written as ``GaugeBlock``s: the
    10,000-partition scrape (bench/bench_metrics_scrape.py) lives here."""
    summaries = stats.partition_summaries
    shown = summaries[: m.partition_series_max]
    yield _gauge("seglog_partition_series_omitted", len(summaries) - len(shown))
    label_blocks = _partition_label_blocks(m.label_blocks, shown)
    label_values = _LabelValues(shown)
    for name, field in _PARTITION_GAUGES:
        values = [getattr(s, field) for s in shown]
        yield _block(name, label_blocks, label_values, values)
    produced_bytes: dict[str, int] = {}
    produced_records: dict[str, int] = {}
    for s in summaries:
        produced_bytes[s.topic] = produced_bytes.get(s.topic, 0) + s.appended_bytes
        produced_records[s.topic] = produced_records.get(s.topic, 0) + s.appended_record_count
    yield _per_topic("seglog_produced_bytes", produced_bytes, m.partition_series_max)
    yield _per_topic("seglog_produced_records", produced_records, m.partition_series_max)
    ratios, age = m.residency(shown) if shown else ({}, 0.0)
    keys = sorted(ratios)
    residency_values = [(topic, str(partition), index) for topic, partition, index in keys]
    yield _block("seglog_index_resident_ratio",
                 [label_block(_RESIDENCY_LABELS, values) for values in residency_values],
                 residency_values, [ratios[key] for key in keys])
    yield _gauge("seglog_index_residency_sample_age_seconds", age)


def _partition_label_blocks(cache: dict[tuple[str, int], str], shown: Sequence[Any]) -> list[str]:
    """``{topic="t",partition="p"}`` of each partition, kept from scrape to scrape."""
    if len(cache) > 2 * len(shown) + 1024:  # partitions deleted since: start afresh
        cache.clear()
    blocks = []
    for s in shown:
        key = (s.topic, s.partition)
        block = cache.get(key)
        if block is None:
            block = cache[key] = label_block(_PARTITION_LABELS, (s.topic, str(s.partition)))
        blocks.append(block)
    return blocks


class _LabelValues(Sequence[tuple[str, str]]):
    """(topic, partition) label values of the shown partitions, made only when read (the fast
    path writes label blocks and never reads these)."""

    def __init__(self, shown: Sequence[Any]) -> None:
        self._shown = shown

    def __len__(self) -> int:
        return len(self._shown)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [(s.topic, str(s.partition)) for s in self._shown[index]]
        s = self._shown[index]
        return (s.topic, str(s.partition))


_PARTITION_LABELS = ("topic", "partition")
_RESIDENCY_LABELS = ("topic", "partition", "index")
# Family -> the LogSummary field it shows.
_PARTITION_GAUGES = (
    ("seglog_log_start_offset", "log_start_offset"),
    ("seglog_log_end_offset", "log_end_offset"),
    ("seglog_log_size_bytes", "size_bytes"),
    ("seglog_log_segments", "segment_count"),
    ("seglog_log_unflushed_records", "unflushed_record_count"),
    ("seglog_log_lost_offsets", "lost_offset_count"),
)


def _block(name: str, label_blocks: list[str], label_values: Sequence[tuple[str, ...]],
           values: list[int] | list[float]) -> GaugeBlock:
    kind, labels, text = FAMILIES[name]
    assert kind == "gauge", name
    return GaugeBlock(name, text, labels, label_blocks, label_values, values)


def _recovery_families(stats: Any) -> Iterator[Metric]:
    """Recovery at start: the figures the log manager's loading recorded (``stats.recovery``,
    summed over the directories that loaded)."""
    marker = _family("seglog_log_dir_clean_shutdown")
    for log_dir in stats.log_dirs:
        marker.add_metric([log_dir.path], 1 if log_dir.had_clean_shutdown else 0)
    yield marker
    recovery = stats.recovery
    ran = recovery.logs_recovered > 0 or recovery.logs_reloaded_with_recovery > 0 or recovery.logs_offline > 0
    yield _gauge("seglog_recovery_ran", 1 if ran else 0)
    yield _gauge("seglog_recovery_logs_recovered", recovery.logs_recovered)
    yield _gauge("seglog_recovery_segments_recovered", recovery.segments_recovered)
    yield _gauge("seglog_recovery_truncated_bytes", recovery.bytes_truncated)
    yield _gauge("seglog_recovery_logs_reloaded", recovery.logs_reloaded_with_recovery)
    yield _gauge("seglog_recovery_logs_offline", recovery.logs_offline)
    yield _gauge("seglog_startup_duration_seconds", stats.startup_duration_ms / 1000)


def _descriptor_families(stats: Any) -> Iterator[Metric]:
    """The process's descriptors against its limit (RLIMIT_NOFILE, raised to the hard limit at
    start), and the storage's one open-segment budget (storage/segment/open_segments.py)."""
    if stats.descriptors_in_use >= 0:
        yield _gauge("seglog_descriptors_in_use", stats.descriptors_in_use)
    if stats.descriptor_limit > 0:
        yield _gauge("seglog_descriptors_budget", stats.descriptor_limit)
    yield _gauge("seglog_open_segments", stats.open_segment_count)
    yield _gauge("seglog_open_segments_max", stats.open_segments_max)


def _cleaner_families(manager: Any) -> Iterator[Metric]:
    """Hook for the offline cleaner: ``manager.cleaner_statistics()`` with ``dirty_ratios``
    ({(topic, partition): ratio}), ``bytes_reclaimed_total``, ``last_commit_time_ms``,
    ``offset_map_utilization`` and ``offset_map_collision_ratio``. Exported when offered."""
    method = getattr(manager, "cleaner_statistics", None)
    if method is None:
        return
    stats = method()
    dirty = _family("seglog_cleaner_dirty_ratio")
    for (topic, partition), ratio in sorted(getattr(stats, "dirty_ratios", {}).items()):
        dirty.add_metric([topic, str(partition)], ratio)
    yield dirty
    reclaimed = _family("seglog_cleaner_bytes_reclaimed")
    reclaimed.add_metric([], getattr(stats, "bytes_reclaimed_total", 0))
    yield reclaimed
    yield _gauge("seglog_cleaner_last_run_timestamp_seconds",
                 getattr(stats, "last_commit_time_ms", 0) / 1000)
    yield _gauge("seglog_cleaner_offset_map_utilization_ratio",
                 getattr(stats, "offset_map_utilization", 0.0))
    yield _gauge("seglog_cleaner_offset_map_collision_ratio",
                 getattr(stats, "offset_map_collision_ratio", 0.0))
    yield _gauge("seglog_cleaner_partitions_skipped", getattr(stats, "skipped_partition_count", 0))


def family_names(families: Iterable[str] = FAMILIES) -> list[str]:
    """Sample names as they appear on /metrics (counters with ``_total``)."""
    return [f"{name}_total" if FAMILIES[name][0] == "counter" else name for name in families]
