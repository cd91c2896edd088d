"""The shared services keep records stamped long ago: time retention runs only where a test sets it.

Tests stamp records at fixed times (2023) to assert them; past the stock 7-day retention.ms, the
service's first retention pass (30 s after it started) deleted them from a module slow under load.
The pass cannot be forced in a service process, so the pass runs here in a LogManager built from
the very settings the shared services start with (``keeping_records``), every job due at once.
"""

from __future__ import annotations

import pytest
from tests.support.integration_helpers import KEEP_RECORDS_ARGS, keeping_records

from seglog.records import RecordBatchBuilder
from seglog.v1 import log_service_pb2 as pb
from seglog_server.config import load_config
from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals

LONG_AGO_MS = 1_700_000_000_000  # 2023-11-14, as the integration tests stamp their records
EVERY_PASS = MaintenanceIntervals(initial_delay_ms=0, retention_check_ms=0, flush_check_ms=0,
                                  recovery_point_checkpoint_ms=0, log_start_offset_checkpoint_ms=0,
                                  producer_expiry_check_ms=0)


def _start_after_a_retention_pass(tmp_path, args: list[str]) -> int:
    """The log start offset of a 2023-stamped record's partition after a retention pass, in a
    LogManager with the topic defaults a service started with ``args`` has."""
    config = load_config(["--data-dir", str(tmp_path / "data"), *args], environ={})
    manager = LogManager([str(tmp_path / "data")], default_config=config.log_config, intervals=EVERY_PASS)
    manager.startup()
    try:
        manager.create_topic("long-ago", 1, {})
        log = manager.get_log("long-ago", 0)
        for index in range(3):
            builder = RecordBatchBuilder()
            builder.append(b"v%d" % index, timestamp_ms=LONG_AGO_MS + index)
            log.append(builder.build())
        log.roll()  # retention deletes closed segments (and rolls the active one when all expired)
        manager.run_maintenance()
        assert manager.statistics().retention_check_count == 1
        return log.log_start_offset
    finally:
        manager.shutdown()


def test_a_shared_service_keeps_a_2023_record_past_a_retention_pass(tmp_path):
    assert _start_after_a_retention_pass(tmp_path, keeping_records()) == 0


def test_the_stock_retention_deletes_it_so_the_shared_services_turn_it_off(tmp_path):
    """The contrast: without the shared services' settings the same pass deletes the records."""
    assert _start_after_a_retention_pass(tmp_path, []) == 3


@pytest.mark.parametrize("args", [["--topic-default", "retention.ms=5000"], ["--config", "seglog.toml"]],
                         ids=["retention-flag", "config-file"])
def test_a_service_that_configures_retention_keeps_its_own(args):
    assert keeping_records(args) == args


def test_the_shared_service_describes_its_topics_with_retention_off(stub, topic):
    configs = stub.DescribeTopic(pb.DescribeTopicRequest(topic=topic)).configs
    assert configs["retention.ms"] == KEEP_RECORDS_ARGS[1].split("=")[1] == "-1"
