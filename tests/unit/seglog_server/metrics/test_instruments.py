"""instruments.py: histograms cumulative with +Inf last; the storage's stopwatches count their laps
and page faults straight into the MetricsObserver the collector exports."""

from __future__ import annotations

from seglog_server.metrics.instruments import Histogram, MetricsObserver
from seglog_server.storage.base.observer import install_observer, stopwatch


def test_histogram_buckets_are_cumulative_with_inf_last():
    histogram = Histogram((1, 2, 4))
    for value in (0, 1, 1.5, 3, 100):
        histogram.observe(value)
    assert histogram.buckets() == [("1.0", 2), ("2.0", 3), ("4.0", 4), ("+Inf", 5)]
    assert histogram.total == 105.5


def test_stopwatch_counts_laps_and_faults_into_the_metrics_observer():
    """The stopwatch's inline path (the observer's phase_histograms) lands every lap in the
    same histogram the collector exports, and lap_faults reports exactly the faults getrusage saw
    between its marks, to the path named."""
    import mmap
    import resource

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
    observer = MetricsObserver()
    previous = install_observer(observer)
    try:
        watch = stopwatch("offsets_for_times")
        watch.lap_each("index_search", 250)
    finally:
        install_observer(previous)
    histogram = observer.phases.by_labels["offsets_for_times", "index_search"]
    assert sum(histogram.counts) == 250 and histogram.total >= 0
