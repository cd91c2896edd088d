"""A /metrics scrape never fails because one partition or one section of it did: faults are
injected into the storage through fault_fs.FaultFs; the scrape is parsed by Prometheus's
parser and must hold everything else, the skipped part counted."""

from __future__ import annotations

import errno

import pytest
from tests.support.fault_fs import FaultFs
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from seglog.records import RecordBatchBuilder
from seglog_server.metrics import Metrics
from seglog_server.storage import FakeClock, LogManager
from seglog_server.storage.format.checkpoint import CLEANER_OFFSET_CHECKPOINT

NOW_MS = 1_700_000_000_000
COMPACT = {"cleanup.policy": "compact", "min.compaction.lag.ms": "1"}


def samples_of(metrics: Metrics) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def keyed(key: bytes) -> bytes:
    builder = RecordBatchBuilder()
    builder.append(b"v", key=key, timestamp_ms=NOW_MS)
    return builder.build()


@pytest.fixture
def restarted(tmp_path):
    """Compacted partitions a-0 and b-0 with closed segments, after a restart (their figures
    are read again, through the seam, on first use)."""
    fs, clock = FaultFs(), FakeClock(NOW_MS)
    manager = LogManager([str(tmp_path / "d")], clock=clock, fs=fs)
    manager.startup()
    for name in ("a", "b"):
        manager.create_topic(name, 1, COMPACT)
        log = manager.get_log(name, 0)
        for round_ in range(2):
            log.append(keyed(b"k%d" % round_))
            log.roll()
    manager.shutdown()
    clock.advance(1000)
    manager = LogManager([str(tmp_path / "d")], clock=clock, fs=fs)
    manager.startup()
    metrics = Metrics()
    metrics.manager = manager
    yield metrics, fs
    fs.heal()
    manager.shutdown()


@pytest.mark.parametrize("error", [errno.EMFILE, errno.EIO])
def test_a_partition_whose_cleanable_listing_raises_leaves_the_scrape_whole(restarted, error):
    metrics, fs = restarted
    log_a = metrics.manager.get_log("a", 0)
    rule = fs.fail("open", error, path="a-0", times=None)
    samples = samples_of(metrics)
    assert rule.hits >= 1
    assert samples["seglog_metrics_collect_errors_total"][0].value == 0  # no section lost
    # The partition figures: a-0's size cannot be read (first use after the restart).
    assert {s.labels["topic"] for s in samples["seglog_log_end_offset"]} == {"b"}
    assert samples["seglog_partitions_skipped"][0].value == 1
    # The cleaner's: a-0 left out, b-0 still described.
    assert {s.labels["topic"] for s in samples["seglog_cleaner_dirty_ratio"]} == {"b"}
    if error == errno.EMFILE:  # retriable: skipped and counted
        assert samples["seglog_cleaner_partitions_skipped"][0].value == 1
    else:  # a failed disk: the log went offline (its directory follows at the next pass)
        assert log_a.is_offline and samples["seglog_cleaner_partitions_skipped"][0].value == 0


def test_a_section_that_raises_is_left_out_and_counted(restarted):
    metrics, fs = restarted
    fs.fail("open", errno.EMFILE, path=CLEANER_OFFSET_CHECKPOINT, times=None)
    samples = samples_of(metrics)
    assert "seglog_cleaner_dirty_ratio" not in samples  # the cleaner's section, left out
    assert samples["seglog_metrics_collect_errors_total"][0].value == 1
    assert {s.labels["topic"] for s in samples["seglog_log_end_offset"]} == {"a", "b"}  # the rest is there
    fs.heal()
    samples = samples_of(metrics)
    assert {s.labels["topic"] for s in samples["seglog_cleaner_dirty_ratio"]} == {"a", "b"}
    assert samples["seglog_metrics_collect_errors_total"][0].value == 1  # a counter: stays
