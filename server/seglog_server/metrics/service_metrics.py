"""``Metrics``: the service's metrics as one object the app wires in.

It holds the instruments (the observer the storage reports to, the RPC latency hook, the fetched
traffic), the residency sampler, and the registry whose one collector (collector.py) builds every
family at scrape time. The app sets ``manager`` once the storage has started and ``servicer`` once
the gRPC service serves; the collector reads their ``statistics()`` then.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client.registry import CollectorRegistry

from seglog_server.metrics.collector import PARTITION_SERIES_MAX_DEFAULT, SeglogCollector
from seglog_server.metrics.instruments import (
    LATENCY_BUCKETS_SECONDS,
    Histograms,
    MetricsObserver,
    RowsByLabel,
    TopicTraffic,
)
from seglog_server.metrics.residency import (
    RESIDENCY_FILES_MAX,
    RESIDENCY_INTERVAL_S,
    Ratios,
    ResidencySampler,
)

__all__ = ["Metrics"]

_bisect_left = bisect.bisect_left


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
        self.rpc_durations = Histograms(LATENCY_BUCKETS_SECONDS)
        self._rpc_by_method = RowsByLabel(self.rpc_durations)
        self.traffic = TopicTraffic()
        self.partition_series_max = partition_series_max
        self.residency_sampler = ResidencySampler(
            self._log_of, interval_s=residency_interval_s, files_max=residency_files_max,
            clock=clock)
        # (topic, partition) -> its label block, reused by every scrape (text.py).
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
        traffic = self.traffic  # TopicTraffic.fetched, inline: once per Fetch response
        fetched_bytes, fetched_records = traffic.fetched_bytes, traffic.fetched_records
        fetched_bytes[topic] = fetched_bytes.get(topic, 0) + size_bytes
        fetched_records[topic] = fetched_records.get(topic, 0) + records

    def residency(self, partitions: Sequence[Any]) -> tuple[Ratios, float]:
        """Ratios by (topic, partition, index) and the sample's age in seconds (residency.py)."""
        return self.residency_sampler.ratios(partitions)

    def wait_residency_sampled(self, timeout_s: float | None = None) -> None:
        """Waits for a residency sample under way on its thread (for tests and benchmarks)."""
        self.residency_sampler.wait_sampled(timeout_s)

    def _log_of(self, topic: str, partition: int) -> Any:
        try:
            return self.manager.get_log(topic, partition)
        except Exception:  # noqa: BLE001 - deleted or offline since the statistics were taken
            return None
