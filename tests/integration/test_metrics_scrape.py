"""A scrape of many partitions over the service's own endpoint, as Prometheus asks for it
(OpenMetrics, gzip) and in the plain text format: one series per partition and family, every
value what the storage's full ``Log.statistics()`` says. The speed is bench/bench_metrics_scrape.py's."""

from __future__ import annotations

import gzip
import resource
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from seglog.records import RecordBatchBuilder
from tests.support.fault_fs import NoSyncFs
from seglog_server.metrics import PARTITION_SERIES_MAX_DEFAULT, Metrics
from seglog_server.metrics.server import MetricsServer
from seglog_server.storage import LogManager
from seglog_server.storage.segment.open_segments import open_segments_max_for

pytestmark = pytest.mark.integration

TOPICS = 50
PROMETHEUS_ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
# Family -> the LogStatistics field it must equal.
PER_PARTITION = {
    "seglog_log_start_offset": "log_start_offset",
    "seglog_log_end_offset": "log_end_offset",
    "seglog_log_size_bytes": "size_bytes",
    "seglog_log_segments": "segment_count",
    "seglog_log_unflushed_records": "unflushed_record_count",
}


def batch(count: int) -> bytes:
    builder = RecordBatchBuilder()
    for number in range(count):
        builder.append(b"v%05d" % number)
    return builder.build()


def build(directory: str, partition_count: int) -> LogManager:
    """``partition_count`` partitions over TOPICS topics, no two alike: partition p holds p % 5
    batches of p % 3 + 1 records; every seventh is flushed, every eleventh has records deleted
    below its second batch, every thirteenth rolled a second segment."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # No syncs: a flush still moves the log's recovery point (what the scrape shows); only the
    # fsyncs, most of the build's and the shutdown's time, are skipped.
    manager = LogManager([directory], open_segments_max=open_segments_max_for(hard), fs=NoSyncFs())
    manager.startup()
    per_topic = partition_count // TOPICS
    for topic in range(TOPICS):
        manager.create_topic(f"topic-{topic:02d}", per_topic, {})
        for partition in range(per_topic):
            log = manager.get_log(f"topic-{topic:02d}", partition)
            number = topic * per_topic + partition
            for _ in range(number % 5):
                log.append(batch(number % 3 + 1))
            if number % 13 == 0:
                log.roll()
                log.append(batch(1))
            if number % 7 == 0:
                log.flush()
            if number % 11 == 0 and number % 5 >= 2:
                log.delete_records(number % 3 + 1)
    return manager


@pytest.fixture(scope="module")
def two_hundred_partitions(tmp_path_factory):
    manager = build(str(tmp_path_factory.mktemp("scrape") / "data"), 200)
    yield manager
    manager.shutdown()


def scrape(address: str, accept: str) -> str:
    request = urllib.request.Request(f"http://{address}/metrics",
                                     headers={"Accept": accept, "Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=120) as response:
        body = response.read()
        if response.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
    return body.decode()


def per_partition_values(text: str, openmetrics: bool) -> dict[str, dict[tuple[str, int], float]]:
    families = (parse_openmetrics if openmetrics else parse_text)(text)
    return {family.name: {(s.labels["topic"], int(s.labels["partition"])): s.value for s in family.samples}
            for family in families if family.name in PER_PARTITION}


def check_scrape(manager: LogManager, cap: int) -> None:
    metrics = Metrics(partition_series_max=cap)
    metrics.manager = manager
    server = MetricsServer.start("127.0.0.1:0", metrics)
    try:
        texts = {True: scrape(server.address, PROMETHEUS_ACCEPT), False: scrape(server.address, "text/plain")}
    finally:
        server.stop()
    assert texts[True].endswith("# EOF\n") and texts[True].count("# EOF") == 1
    expected = {}
    for stats in manager.statistics().partitions[:cap]:
        for family, field in PER_PARTITION.items():
            expected.setdefault(family, {})[stats.topic, stats.partition] = getattr(stats.log, field)
    total = manager.statistics(partition_detail=False).partition_count
    for openmetrics, text in texts.items():
        values = per_partition_values(text, openmetrics)
        assert {family: len(series) for family, series in values.items() if series} == (
            {family: min(cap, total) for family in PER_PARTITION} if cap else {})
        assert {family: series for family, series in values.items() if series} == (expected if cap else {})
        omitted = [line for line in text.split("\n") if line.startswith("seglog_partition_series_omitted ")]
        assert [float(line.split()[1]) for line in omitted] == [max(0, total - cap)]


@pytest.mark.parametrize("cap", [200, 70, 0])
def test_a_scrape_shows_each_partition_as_the_storage_does(two_hundred_partitions, cap):
    check_scrape(two_hundred_partitions, cap)


@pytest.mark.slow
def test_a_scrape_of_10000_partitions_shows_each_as_the_storage_does(tmp_path):
    manager = build(str(tmp_path / "data"), 10_000)
    try:
        check_scrape(manager, 10_000)
        check_scrape(manager, PARTITION_SERIES_MAX_DEFAULT)
    finally:
        manager.shutdown()
