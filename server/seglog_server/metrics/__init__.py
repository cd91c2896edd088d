"""Every Prometheus metric seglog exports, in one package of five parts, read bottom-up:

- ``families``: the declared table of families (name -> type, labels, help); nothing else names
  a metric.
- ``instruments``: what is observed per operation (RPC latency, the storage's phases, index
  lookups, page faults, read age, fetched traffic); ``MetricsObserver`` is what the storage calls.
- ``page_residency`` and ``residency``: mincore over a file, and the rate-limited sample of every
  partition's index residency.
- ``collector``: the scrape-time collector over ``statistics()`` snapshots and the instruments;
  ``text``: the exposition writer (a fast path for families of many series).
- ``service_metrics``: ``Metrics``, the one object the app wires in; ``server``: the HTTP endpoint.

The public names below are what the app, the tests and bench/ import.
"""

from seglog_server.metrics.collector import OTHER_TOPIC, PARTITION_SERIES_MAX_DEFAULT, SeglogCollector
from seglog_server.metrics.families import FAMILIES, family_names
from seglog_server.metrics.instruments import LATENCY_BUCKETS_SECONDS, MetricsObserver
from seglog_server.metrics.residency import RESIDENCY_FILES_MAX, RESIDENCY_INTERVAL_S
from seglog_server.metrics.service_metrics import Metrics

__all__ = [
    "FAMILIES",
    "LATENCY_BUCKETS_SECONDS",
    "OTHER_TOPIC",
    "PARTITION_SERIES_MAX_DEFAULT",
    "RESIDENCY_FILES_MAX",
    "RESIDENCY_INTERVAL_S",
    "Metrics",
    "MetricsObserver",
    "SeglogCollector",
    "family_names",
]
