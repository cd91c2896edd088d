"""collector.py over a real LogManager: per-partition series capped, the rest counted; per-topic
series capped into _other; the text passes Prometheus's parser."""

from __future__ import annotations

import pathlib

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from seglog.records import RecordBatchBuilder
from seglog_server.metrics import OTHER_TOPIC, Metrics
from seglog_server.storage import FakeClock, LogManager, install_observer
from tests.support.index_rot import rot_mid_entry


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


def test_a_lying_offset_index_is_counted_by_log_directory_and_the_count_outlives_its_topic(tmp_path):
    """Every log directory has a rebuild series from the start (0); a read over a rotted entry
    counts 1 in its partition's directory, once; deleting the topic does not take it back (a
    fall would read as a counter reset, and increase() would count it again)."""
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    manager = LogManager(dirs, clock=FakeClock())
    manager.startup()
    manager.create_topic("rotted", 1, {"index.interval.bytes": "1"})
    for number in range(200):
        manager.get_log("rotted", 0).append(batch(b"v%03d" % number))
    [summary] = manager.statistics(partition_detail=False).partition_summaries
    manager.shutdown()
    rot_mid_entry(pathlib.Path(summary.log_dir) / "rotted-0")
    manager = LogManager(dirs, clock=FakeClock())
    manager.startup()
    metrics = Metrics()
    metrics.manager = manager
    previous = install_observer(metrics.observer)
    try:
        def rebuilds() -> dict[str, float]:
            return {s.labels["dir"]: s.value for s in samples_of(metrics)["seglog_log_dir_offset_index_rebuilds_total"]}

        assert rebuilds() == {dirs[0]: 0, dirs[1]: 0}
        log = manager.get_log("rotted", 0)
        for offset in range(0, 200, 7):
            assert log.read(offset, 1000).records  # right answers, the index rebuilt once
        other = dirs[1] if summary.log_dir == dirs[0] else dirs[0]
        assert rebuilds() == {summary.log_dir: 1, other: 0}
        manager.delete_topic("rotted")
        assert rebuilds() == {summary.log_dir: 1, other: 0}
    finally:
        install_observer(previous)
        manager.shutdown()


def test_log_flushes_total_does_not_fall_when_a_topic_is_deleted(tmp_path):
    """The flushes are counted as they end, not summed over the live logs: deleting a topic whose
    logs were flushed keeps their flushes in the total (a fall reads as a counter reset)."""
    manager = LogManager([str(tmp_path / "d")], clock=FakeClock())
    manager.startup()
    metrics = Metrics()
    metrics.manager = manager
    previous = install_observer(metrics.observer)
    try:
        def flushes() -> float:
            [sample] = samples_of(metrics)["seglog_log_flushes_total"]
            return sample.value

        assert flushes() == 0
        manager.create_topic("gone", 2, {})
        for partition in (0, 1):
            log = manager.get_log("gone", partition)
            log.append(batch(b"x"))
            log.flush()
        assert flushes() == 2
        manager.delete_topic("gone")
        assert flushes() == 2
    finally:
        install_observer(previous)
        manager.shutdown()
