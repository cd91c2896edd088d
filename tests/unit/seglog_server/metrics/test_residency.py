"""residency.py: the index residency sample is taken at most once per interval, refreshed on a
thread of its own, and its age goes out with it."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from seglog.records import RecordBatchBuilder
from seglog_server.metrics import Metrics
from seglog_server.storage import FakeClock, LogManager


def samples_of(metrics: Metrics) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def batch(value: bytes) -> bytes:
    builder = RecordBatchBuilder()
    builder.append(value)
    return builder.build()


def test_residency_is_sampled_at_most_once_per_interval(tmp_path):
    now = [0.0]
    manager = LogManager([str(tmp_path / "d")], clock=FakeClock())
    manager.startup()
    try:
        manager.create_topic("t", 1, {"index.interval.bytes": "1"})
        log = manager.get_log("t", 0)
        for number in range(600):
            log.append(batch(b"%d" % number))
        log.read(0, 100)  # materialises the offset index
        metrics = Metrics(residency_interval_s=10, clock=lambda: now[0])
        metrics.manager = manager
        first = samples_of(metrics)["seglog_index_resident_ratio"]
        assert [s.value for s in first if s.labels["index"] == "offset"] == [1.0]
        now[0] = 5.0
        age = samples_of(metrics)["seglog_index_residency_sample_age_seconds"][0].value
        assert age == 5.0  # the same sample, five seconds old
        now[0] = 11.0  # stale: this scrape answers with the old sample and starts a new one
        assert samples_of(metrics)["seglog_index_residency_sample_age_seconds"][0].value == 11.0
        metrics.wait_residency_sampled(timeout_s=30)
        assert samples_of(metrics)["seglog_index_residency_sample_age_seconds"][0].value == 0.0
    finally:
        manager.shutdown()
