"""A shutdown's final flush covers everything the logs acknowledged: a change that arrives
between a log's flush and its close (a call the drain cut, still running on the pool) is refused
"shutting down" (LogDirOfflineError, UNAVAILABLE), so the recovery points and the clean-shutdown
marker the shutdown writes are honest."""

from __future__ import annotations

import os
import threading

import pytest
from tests.support.fault_fs import FaultFs
from tests.support.log_test_support import NOW_MS

from seglog.records import RecordBatchBuilder
from seglog_server.storage.format.checkpoint import RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from seglog_server.storage.format.clean_shutdown import CLEAN_SHUTDOWN_FILE_NAME
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import LogDirOfflineError
from seglog_server.storage.manager.log_manager import LogManager
from seglog_server.storage.base.topic_partition import TopicPartition


class FlushHookFs(FaultFs):
    """The real file system, running ``hook`` in another thread (and waiting for it) at the
    first fdatasync of a ``.log`` once armed: that thread acts while a shutdown flushes."""

    def __init__(self) -> None:
        super().__init__()
        self.hook = None

    def fdatasync(self, fd):
        hook, path = self.hook, self._path_of(fd)
        if hook is not None and path.endswith(".log"):
            self.hook = None
            worker = threading.Thread(target=hook)
            worker.start()
            worker.join()
        super().fdatasync(fd)


def batch(value: bytes) -> bytes:
    builder = RecordBatchBuilder()
    builder.append(value, timestamp_ms=NOW_MS)
    return builder.build()


CHANGES = {
    "append": lambda log: log.append(batch(b"late")),
    "roll": lambda log: log.roll(),
    "delete_records": lambda log: log.delete_records(1),
    "truncate_to": lambda log: log.truncate_to(1),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_during_the_final_flush_is_refused_and_the_marker_is_honest(tmp_path, change):
    fs = FlushHookFs()
    log_dir = str(tmp_path / "d0")
    manager = LogManager([log_dir], clock=FakeClock(NOW_MS), fs=fs)
    manager.startup()
    manager.create_topic("t", 1)
    log = manager.get_log("t", 0)
    for value in (b"a", b"b", b"c"):
        log.append(batch(value))
    outcome: list[BaseException | object] = []

    def late_change() -> None:
        try:
            outcome.append(CHANGES[change](log))
        except BaseException as exc:  # noqa: BLE001 - the outcome is what the test checks
            outcome.append(exc)

    fs.hook = late_change
    manager.shutdown()
    [refused] = outcome
    assert isinstance(refused, LogDirOfflineError)
    assert "shutting down" in str(refused)
    assert manager.stopped_cleanly
    # What the shutdown wrote covers every acknowledged record: the next start recovers nothing.
    assert os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE_NAME))
    points = OffsetCheckpointFile(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT)).read()
    assert points[TopicPartition("t", 0)] == 3
    manager = LogManager([log_dir], clock=FakeClock(NOW_MS))
    manager.startup()
    restarted = manager.get_log("t", 0)
    assert (restarted.log_start_offset, restarted.log_end_offset) == (0, 3)
    assert restarted.recovery_point == 3
    manager.shutdown()


def test_reads_and_flush_go_on_after_changes_stop(tmp_path):
    manager = LogManager([str(tmp_path / "d0")], clock=FakeClock(NOW_MS))
    manager.startup()
    manager.create_topic("t", 1)
    log = manager.get_log("t", 0)
    log.append(batch(b"a"))
    log.stop_changes()
    with pytest.raises(LogDirOfflineError, match="shutting down"):
        log.append(batch(b"b"))
    assert log.read(0, 1 << 20).records
    log.flush()
    assert log.recovery_point == 1
    manager.shutdown()
