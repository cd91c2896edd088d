"""Scrape-time collection: every family built from ``statistics()`` snapshots and the instruments.

Read at scrape time (STYLE rule 12): partition offsets, sizes and segment counts, log
directories, recovery at start, flushes, long-poll waiters and streams, storage-call placement,
bytes and records appended per topic. Nothing is kept twice. The per-operation instruments
(instruments.py) are read here too.

Per-partition series (offsets, size, segments, residency) are exported for at most
``partition_series_max`` partitions (in topic, partition order; 0 turns them off); the rest are
counted in ``seglog_partition_series_omitted``. Per-topic series are capped the same way, the
remainder summed under ``topic="_other"``. The per-partition figures come from the manager's
``partition_summaries`` (``Log.summary()``: no per-segment work) and go out as ``GaugeBlock``s
(text.py), which write their own exposition lines: a 10,000-partition scrape with every series
costs about 100 ms (bench/bench_metrics_scrape.py).

The offline cleaner's figures come through a hook (``cleaner_statistics()`` on the manager),
exported when the manager offers it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from seglog_server.metrics.cluster_metrics import cluster_families
from seglog_server.metrics.families import FAMILIES, new_family
from seglog_server.metrics.instruments import Histogram, Histograms, MetricsObserver, TopicTraffic
from seglog_server.metrics.text import GaugeBlock, label_block

__all__ = ["OTHER_TOPIC", "PARTITION_SERIES_MAX_DEFAULT", "SeglogCollector"]

_LOG = logging.getLogger(__name__)

PARTITION_SERIES_MAX_DEFAULT = 1000
OTHER_TOPIC = "_other"


class Metrics(Protocol):
    """What the collector reads of ``service_metrics.Metrics`` (which sits above it)."""

    observer: MetricsObserver
    rpc_durations: Histograms
    traffic: TopicTraffic
    partition_series_max: int
    label_blocks: dict[tuple[str, int], str]
    manager: Any
    servicer: Any

    def residency(self, partitions: Sequence[Any]) -> tuple[dict[tuple[str, int, str], float], float]: ...


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
            sections.append(("groups", lambda: _group_families(m.servicer, m.partition_series_max)))
            if getattr(m.servicer.core, "cluster", None) is not None:  # --etcd (cluster_metrics.py)
                sections.append(("cluster", lambda: cluster_families(m.servicer.core.cluster)))
        if m.manager is not None:
            sections.append(("storage", lambda: _storage_families(m)))
            sections.append(("cleaner", lambda: _cleaner_families(m.manager)))
            sections.append(("remote", lambda: _remote_families(m.manager)))
        for name, build in sections:
            yield from self._section(name, build)
        errors = new_family("seglog_metrics_collect_errors")
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
    yield _index_rebuild_family(stats, m.observer)
    yield _flush_family(m.observer)
    yield from _partition_families(stats, m)
    yield from _recovery_families(stats)
    yield from _descriptor_families(stats)


def _histogram_family(name: str, histograms: dict[tuple[str, ...], Histogram]) -> Metric:
    family = new_family(name)
    for labels, histogram in sorted(histograms.items()):
        family.add_metric(list(labels), histogram.buckets(), histogram.total)
    return family


def _rpc_families(m: Metrics) -> Iterator[Metric]:
    yield _histogram_family("seglog_rpc_duration_seconds", m.rpc_durations.by_labels)


def _observer_families(observer: MetricsObserver) -> Iterator[Metric]:
    yield _histogram_family("seglog_storage_phase_duration_seconds", observer.phases.by_labels)
    lookups = new_family("seglog_index_lookups")
    for (index, zone), count in sorted(observer.lookups.items()):
        lookups.add_metric([index, zone], count)
    yield lookups
    yield _histogram_family("seglog_index_lookup_pages", observer.lookup_pages.by_labels)
    faults = new_family("seglog_page_faults")
    for (path, kind), count in sorted(observer.faults.items()):
        faults.add_metric([path, kind], count)
    yield faults
    for name, histogram in (("seglog_fetch_read_age_bytes", observer.read_age_bytes),
                            ("seglog_fetch_read_age_offsets", observer.read_age_offsets)):
        yield _histogram_family(name, {(): histogram})


def _servicer_families(stats: Any, m: Metrics) -> Iterator[Metric]:
    waiters = new_family("seglog_fetch_waiters")
    waiters.add_metric([], stats.waiters.waiting_count)
    yield waiters
    streams = new_family("seglog_consume_streams")
    streams.add_metric([], stats.consume_stream_count)
    yield streams
    buffer = stats.consume_buffer
    yield _gauge("seglog_consume_buffered_bytes", buffer.held_bytes)
    yield _gauge("seglog_consume_buffer_bytes_max", buffer.bytes_max)
    shrunk = new_family("seglog_consume_responses_shrunk")
    shrunk.add_metric([], buffer.shrunk_count)
    yield shrunk
    calls = new_family("seglog_storage_calls")
    calls.add_metric(["inline"], stats.storage_calls.inline_count)
    calls.add_metric(["pooled"], stats.storage_calls.pooled_count)
    calls.add_metric(["busy_fallback"], stats.storage_calls.busy_fallback_count)
    yield calls
    refused = new_family("seglog_storage_calls_inline_refused")
    refused.add_metric([], stats.storage_calls.inline_refused_count)
    yield refused
    internal = new_family("seglog_rpc_internal_errors")
    internal.add_metric([], stats.rpc.internal_error_count)
    yield internal
    cap = m.partition_series_max
    yield _per_topic("seglog_fetched_bytes", m.traffic.fetched_bytes, cap)
    yield _per_topic("seglog_fetched_records", m.traffic.fetched_records, cap)


def _per_topic(name: str, values: dict[str, int], cap: int) -> Metric:
    family = new_family(name)
    topics = sorted(values)
    for topic in topics[:cap]:
        family.add_metric([topic], values[topic])
    if len(topics) > cap:
        family.add_metric([OTHER_TOPIC], sum(values[topic] for topic in topics[cap:]))
    return family


def _gauge(name: str, value: float) -> Metric:
    family = new_family(name)
    family.add_metric([], value)
    return family


def _manager_families(stats: Any) -> Iterator[Metric]:
    yield _gauge("seglog_partitions", stats.partition_count)
    yield _gauge("seglog_offline_partitions", stats.offline_partition_count)
    yield _gauge("seglog_partitions_skipped", getattr(stats, "skipped_partition_count", 0))
    online, size, partitions = (new_family(n) for n in (
        "seglog_log_dir_online", "seglog_log_dir_size_bytes", "seglog_log_dir_partitions"))
    for log_dir in stats.log_dirs:
        online.add_metric([log_dir.path], 1 if log_dir.online else 0)
        size.add_metric([log_dir.path], log_dir.size_bytes)
        partitions.add_metric([log_dir.path], log_dir.partition_count)
    yield from (online, size, partitions)


def _flush_family(observer: MetricsObserver) -> Metric:
    """Log flushes since start, as the observer counted them: a sum over the live logs' statistics
    would fall when a topic is deleted, which Prometheus reads as a counter reset."""
    flushes = new_family("seglog_log_flushes")
    flushes.add_metric([], observer.flush_count())
    return flushes


def _index_rebuild_family(stats: Any, observer: MetricsObserver) -> Metric:
    """Offset indexes rebuilt after a read found them lying, by log directory: a series for every
    directory from the start (0 until one is found), so the first rebuild is an increase an alert
    sees, and for any directory counted that the statistics no longer list (its count stays)."""
    counts = observer.index_rebuilds()
    family = new_family("seglog_log_dir_offset_index_rebuilds")
    for path in sorted({log_dir.path for log_dir in stats.log_dirs} | set(counts)):
        family.add_metric([path], counts.get(path, 0))
    return family


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
    marker = new_family("seglog_log_dir_clean_shutdown")
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


# The states a listed group may be in (groups/coordinator.py; "Dead" is never listed).
_GROUP_STATES = ("Stable", "Reconciling", "Empty")


def _group_families(servicer: Any, cap: int) -> Iterator[Metric]:
    """The consumer groups (``servicer.group_metrics(cap)``, exported when the servicer offers
    it): lag in records and in seconds per committed (group, topic, partition), members, state
    and rebalances per group, each family the first ``cap`` series in name order."""
    method = getattr(servicer, "group_metrics", None)
    if method is None:
        return
    figures = method(cap)
    lag = new_family("seglog_consumer_group_lag")
    for (group, topic, partition), value in figures.lags.items():
        lag.add_metric([group, topic, str(partition)], value)
    yield lag
    seconds = new_family("seglog_consumer_group_lag_seconds")
    for (group, topic, partition), value in figures.lag_seconds.items():
        seconds.add_metric([group, topic, str(partition)], value)
    yield seconds
    members = new_family("seglog_consumer_group_members")
    for group, count in figures.members.items():
        members.add_metric([group], count)
    yield members
    state = new_family("seglog_consumer_group_state")
    for group, current in figures.states.items():
        for name in _GROUP_STATES:
            state.add_metric([group, name], 1 if name == current else 0)
    yield state
    rebalances = new_family("seglog_consumer_group_rebalances")
    for group, count in figures.rebalances.items():
        rebalances.add_metric([group], count)
    yield rebalances


def _cleaner_families(manager: Any) -> Iterator[Metric]:
    """Hook for the offline cleaner: ``manager.cleaner_statistics()`` with ``dirty_ratios``
    ({(topic, partition): ratio}), ``bytes_reclaimed_total``, ``last_commit_time_ms``,
    ``offset_map_utilization`` and ``offset_map_collision_ratio``. Exported when offered."""
    method = getattr(manager, "cleaner_statistics", None)
    if method is None:
        return
    stats = method()
    dirty = new_family("seglog_cleaner_dirty_ratio")
    for (topic, partition), ratio in sorted(getattr(stats, "dirty_ratios", {}).items()):
        dirty.add_metric([topic, str(partition)], ratio)
    yield dirty
    reclaimed = new_family("seglog_cleaner_bytes_reclaimed")
    reclaimed.add_metric([], getattr(stats, "bytes_reclaimed_total", 0))
    yield reclaimed
    yield _gauge("seglog_cleaner_last_run_timestamp_seconds",
                 getattr(stats, "last_commit_time_ms", 0) / 1000)
    yield _gauge("seglog_cleaner_offset_map_utilization_ratio",
                 getattr(stats, "offset_map_utilization", 0.0))
    yield _gauge("seglog_cleaner_offset_map_collision_ratio",
                 getattr(stats, "offset_map_collision_ratio", 0.0))
    yield _gauge("seglog_cleaner_partitions_skipped", getattr(stats, "skipped_partition_count", 0))


def _remote_families(manager: Any) -> Iterator[Metric]:
    """The remote tier: ``manager.remote_statistics()`` (zeros without a store), every store
    operation with a series, so expressions over them always find one."""
    method = getattr(manager, "remote_statistics", None)
    if method is None:
        return
    stats = method()
    for name, value in (
        ("seglog_remote_uploaded_segments", stats.uploaded_segment_count),
        ("seglog_remote_uploaded_bytes", stats.uploaded_bytes),
        ("seglog_remote_fetches", stats.fetch_count),
        ("seglog_remote_fetch_bytes", stats.fetch_bytes),
        ("seglog_remote_fetch_seconds", stats.fetch_seconds),
        ("seglog_remote_cache_hits", stats.cache_hit_count),
        ("seglog_remote_cache_misses", stats.cache_miss_count),
        ("seglog_remote_orphans_deleted", stats.orphans_deleted),
    ):
        family = new_family(name)
        family.add_metric([], value)
        yield family
    yield _gauge("seglog_remote_upload_lag_bytes", stats.upload_lag_bytes)
    yield _gauge("seglog_remote_upload_lag_seconds", stats.upload_lag_seconds)
    errors = new_family("seglog_remote_store_errors")
    for operation, count in sorted((stats.store_error_counts or {}).items()):
        errors.add_metric([operation], count)
    yield errors
