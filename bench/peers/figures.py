"""Every figure the benchmark reports: its key in the JSON, its label, unit, which way is better,
and whether the issue's goal (seglog ahead of both peers) covers it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    goal: bool = False


FIGURES = (
    Figure("produce_records_per_s", "produce", "records/s", True, goal=True),
    Figure("read_records_per_s", "catch-up read", "records/s", True, goal=True),
    Figure("lookup_p50_ms", "time lookup p50", "ms", False),
    Figure("lookup_p99_ms", "time lookup p99", "ms", False),
    Figure("batched_lookups_per_s", "batched time lookups", "lookups/s", True),
    Figure("latency_p50_ms", "produce->consume p50 at 2,000/s", "ms", False),
    Figure("latency_p99_ms", "produce->consume p99 at 2,000/s", "ms", False),
    Figure("latency_max_ms", "produce->consume max at 2,000/s", "ms", False),
    Figure("disk_bytes_per_record", "disk bytes per record", "bytes", False, goal=True),
    Figure("server_rss_mb", "server RSS after produce, read, lookups", "MB", False, goal=True),
    Figure("server_peak_rss_mb", "server peak RSS", "MB", False),
    Figure("produce_server_cpu_s", "server CPU, produce", "s", False),
    Figure("read_server_cpu_s", "server CPU, catch-up read", "s", False),
    Figure("server_cpu_s", "server CPU, produce + read + lookups", "s", False),
    Figure("produce_client_cpu_s", "client CPU, produce", "s", False),
    Figure("read_client_cpu_s", "client CPU, catch-up read", "s", False),
)
BY_KEY = {figure.key: figure for figure in FIGURES}
# The system every ratio is taken against.
BASELINE = "seglog"

# Measured alongside the figures, for the bounds: wall times, CPU of the lookup workloads,
# what the latency workload achieved, the server's memory before any work.
SUPPORTING = (
    "produce_wall_s", "read_wall_s", "lookups_server_cpu_s", "lookups_client_cpu_s", "lookups_wall_s",
    "batched_lookups_server_cpu_s", "batched_lookups_client_cpu_s", "latency_ack_p50_ms", "latency_send_rate_per_s",
    "latency_received", "server_rss_idle_mb", "disk_bytes",
    "log_batches", "records_per_batch",  # seglog only
    "batched_lookups_small_batches_per_s", "batched_lookups_small_batches_server_cpu_s",  # seglog only
    "lookup_p50_over_floor", "lookup_p99_over_floor", "latency_p50_over_floor", "latency_p99_over_floor",
    "produce_defaults_records_per_s", "produce_defaults_client_cpu_s", "produce_defaults_server_cpu_s",  # seglog only
    "read_defaults_records_per_s", "read_defaults_client_cpu_s", "read_defaults_server_cpu_s",
)
# Latency distributions (201 quantiles each) the CDF plot draws; the floor's is in the limits.
DISTRIBUTIONS = ("distribution_lookup_ms", "distribution_latency_ms")


def advantage(figure: Figure, seglog: float, peer: float) -> float | None:
    """How many times better seglog's figure is than the peer's (> 1: seglog ahead); None when
    the divisor is zero (a CPU time too small for /proc's 10 ms ticks)."""
    numerator, divisor = (seglog, peer) if figure.higher_is_better else (peer, seglog)
    return numerator / divisor if divisor else None
