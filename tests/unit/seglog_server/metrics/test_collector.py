"""collector.py over a real LogManager: per-partition series capped, the rest counted; per-topic
series capped into _other; the text passes Prometheus's parser."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from seglog.records import RecordBatchBuilder
from seglog_server.metrics import OTHER_TOPIC, Metrics
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


def test_per_partition_series_are_capped_and_the_rest_counted(tmp_path):
    manager = LogManager([str(tmp_path / "d")], clock=FakeClock())
    manager.startup()
    try:
        for topic in ("a", "b", "c"):
            manager.create_topic(topic, 4, {})
            manager.get_log(topic, 0).append(batch(b"x"))
        metrics = Metrics(partition_series_max=5)
        metrics.manager = manager
        samples = samples_of(metrics)
        assert len(samples["seglog_log_end_offset"]) == 5
        assert samples["seglog_partition_series_omitted"][0].value == 12 - 5
        assert samples["seglog_partitions"][0].value == 12
        produced = {s.labels["topic"]: s.value for s in samples["seglog_produced_records_total"]}
        assert produced == {"a": 1, "b": 1, "c": 1}  # 3 topics, cap 5: none folded

        metrics = Metrics(partition_series_max=2)
        metrics.manager = manager
        samples = samples_of(metrics)
        produced = {s.labels["topic"]: s.value for s in samples["seglog_produced_records_total"]}
        assert produced == {"a": 1, "b": 1, OTHER_TOPIC: 1}
        assert "seglog_log_end_offset" not in samples or len(samples["seglog_log_end_offset"]) == 2
    finally:
        manager.shutdown()


def test_partition_series_off(tmp_path):
    manager = LogManager([str(tmp_path / "d")], clock=FakeClock())
    manager.startup()
    try:
        manager.create_topic("t", 3, {})
        metrics = Metrics(partition_series_max=0)
        metrics.manager = manager
        samples = samples_of(metrics)
        assert "seglog_log_end_offset" not in samples
        assert samples["seglog_partition_series_omitted"][0].value == 3
    finally:
        manager.shutdown()
