"""metrics.py over a real LogManager: per-partition series capped, the rest counted; per-topic
series capped into _other; histograms cumulative; the text passes Prometheus's parser."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from seglog.records import RecordBatchBuilder
from seglog_server.metrics import OTHER_TOPIC, Metrics, _Histogram
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


def test_histogram_buckets_are_cumulative_with_inf_last():
    histogram = _Histogram((1, 2, 4))
    for value in (0, 1, 1.5, 3, 100):
        histogram.observe(value)
    assert histogram.buckets() == [("1.0", 2), ("2.0", 3), ("4.0", 4), ("+Inf", 5)]
    assert histogram.total == 105.5


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


def test_stopwatch_counts_laps_and_faults_into_the_metrics_observer():
    """The stopwatch's inline path (the observer's phase_histograms) lands every lap in the
    same histogram the collector exports, and lap_faults reports exactly the faults getrusage saw
    between its marks, to the path named."""
    import mmap
    import resource

    from seglog_server.metrics import MetricsObserver
    from seglog_server.storage.base.observer import install_observer, stopwatch

    observer = MetricsObserver()
    previous = install_observer(observer)
    pages = 64
    region = mmap.mmap(-1, pages * mmap.PAGESIZE)  # anonymous: first touches are minor faults
    try:
        watch = stopwatch("fetch", mark_faults=True)
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        for page in range(pages):
            region[page * mmap.PAGESIZE] = 1
        after = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        watch.lap_faults("index_search", "index_lookup")
        watch.lap("log_scan")
        watch.restart(mark_faults=True)
        watch.lap_faults("log_read", "log_read")
    finally:
        install_observer(previous)
        region.close()
    by_labels = observer.phases.by_labels
    assert sorted(by_labels) == [("fetch", "index_search"), ("fetch", "log_read"), ("fetch", "log_scan")]
    assert all(sum(histogram.counts) == 1 for histogram in by_labels.values())
    assert all(histogram.total >= 0 for histogram in by_labels.values())
    # at least the faults seen around the touches; the getrusage calls' own result objects may add
    assert observer.faults["index_lookup", "minor"] >= after - before >= pages


def test_a_shared_lap_counts_one_observation_a_target_into_the_metrics_observer():
    """Batched OffsetsForTimes times its index searches and scans once for all targets: the
    histogram still counts one observation a target, and its sum is the time taken."""
    from seglog_server.metrics import MetricsObserver
    from seglog_server.storage.base.observer import install_observer, stopwatch

    observer = MetricsObserver()
    previous = install_observer(observer)
    try:
        watch = stopwatch("offsets_for_times")
        watch.lap_each("index_search", 250)
    finally:
        install_observer(previous)
    histogram = observer.phases.by_labels["offsets_for_times", "index_search"]
    assert sum(histogram.counts) == 250 and histogram.total >= 0
