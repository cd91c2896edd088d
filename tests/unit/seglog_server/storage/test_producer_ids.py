"""Producer ids from the log manager: unique across restarts (blocks reserved on disk first), a
damaged block file not trusted, and idle producers expired by the maintenance pass."""

from __future__ import annotations

import os

from log_test_support import NOW_MS

from seglog.records import RecordBatchBuilder
from seglog_server.storage.clock import FakeClock
from seglog_server.storage.log_manager import LogManager, MaintenanceIntervals
from seglog_server.storage.producer_ids import BLOCK_SIZE, PRODUCER_ID_BLOCK_FILE

EVERY_PASS = MaintenanceIntervals(
    initial_delay_ms=0, retention_check_ms=0, flush_check_ms=0, recovery_point_checkpoint_ms=0,
    log_start_offset_checkpoint_ms=0, producer_expiry_check_ms=0,
)


def start(dirs: list[str], clock: FakeClock) -> LogManager:
    manager = LogManager(dirs, clock=clock, intervals=EVERY_PASS)
    manager.startup()
    return manager


def test_ids_are_unique_within_a_run_and_start_at_epoch_zero(tmp_path):
    manager = start([str(tmp_path / "d0")], FakeClock(NOW_MS))
    given = [manager.init_producer_id() for _ in range(BLOCK_SIZE + 5)]
    assert {epoch for _, epoch in given} == {0}
    assert len({pid for pid, _ in given}) == BLOCK_SIZE + 5
    manager.shutdown()


def test_a_restart_never_hands_out_an_id_of_a_reserved_block(tmp_path):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    manager = start(dirs, FakeClock(NOW_MS))
    first = manager.init_producer_id()[0]
    manager.halt()  # a crash: the rest of the block is never used
    manager = start(dirs, FakeClock(NOW_MS))
    assert manager.init_producer_id()[0] >= first + BLOCK_SIZE
    manager.shutdown()


def test_the_largest_counter_of_any_directory_wins(tmp_path):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    manager = start(dirs, FakeClock(NOW_MS))
    manager.init_producer_id()
    manager.shutdown()
    with open(os.path.join(dirs[0], PRODUCER_ID_BLOCK_FILE), "w") as f:
        f.write("0\n0\n")  # an older copy
    manager = start(dirs, FakeClock(NOW_MS))
    assert manager.init_producer_id()[0] >= BLOCK_SIZE
    manager.shutdown()


def test_a_damaged_block_file_is_not_trusted(tmp_path):
    dirs = [str(tmp_path / "d0")]
    manager = start(dirs, FakeClock(NOW_MS))
    manager.init_producer_id()
    manager.shutdown()
    with open(os.path.join(dirs[0], PRODUCER_ID_BLOCK_FILE), "w") as f:
        f.write("0\n12x\n")
    manager = start(dirs, FakeClock(NOW_MS))
    assert manager.init_producer_id()[0] >= NOW_MS * BLOCK_SIZE  # above anything handed out before
    manager.shutdown()


def test_maintenance_expires_idle_producers(tmp_path):
    clock = FakeClock(NOW_MS)
    manager = start([str(tmp_path / "d0")], clock)
    manager.create_topic("t", 1, {"producer.id.expiration.ms": "60000"})
    log = manager.get_log("t", 0)
    pid, epoch = manager.init_producer_id()
    builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0)
    builder.append(b"v", timestamp_ms=NOW_MS)
    log.append(builder.build())
    manager.run_maintenance()
    assert log.producer_state_statistics().producer_count == 1
    clock.advance(60_000)
    manager.run_maintenance()
    assert log.producer_state_statistics().producer_count == 0
    manager.shutdown()
