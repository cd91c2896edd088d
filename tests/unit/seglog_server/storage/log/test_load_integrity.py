"""Loading after a clean stop trusts no file: torn and overgrown active segments, indexes that
disagree with their logs, partitions that cannot load, logs that cannot close. Real files under
tmp_path, a LogManager, damage done with plain file operations."""

from __future__ import annotations

import errno
import logging
import os
import struct

import pytest
from tests.support.load_fault_support import (
    append_bytes,
    batch_ranges,
    offsets_in_files,
    produce,
    read_values,
    segment_files,
    start,
    truncate_by,
    value,
)

from seglog_server.storage.format.clean_shutdown import CLEAN_SHUTDOWN_FILE_NAME
from seglog_server.storage.base.errors import LogDirOfflineError
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.manager.log_manager_statistics import RecoveryStatistics

SMALL_SEGMENTS = {"segment.bytes": "65536"}


def partition_dir(manager, topic: str, partition: int) -> str:
    return manager.get_log(topic, partition).dir


def restart(manager, dirs, **kwargs):
    manager.shutdown()
    assert manager.stopped_cleanly
    return start(dirs, **kwargs)


# -- item: a torn active segment after a clean stop ------------------------------------------
@pytest.mark.parametrize("cut_bytes", [30, 5000], ids=["inside-last-batch", "past-index-entries"])
def test_torn_active_segment_after_a_clean_stop_never_reuses_an_offset(tmp_path, cut_bytes):
    dirs = [str(tmp_path / "d0")]
    manager = start(dirs)
    manager.create_topic("t", 1, SMALL_SEGMENTS)
    acknowledged = produce(manager.get_log("t", 0), 0, 20_000)
    assert acknowledged == list(range(20_000))
    path = partition_dir(manager, "t", 0)
    manager.shutdown()
    active_log = segment_files(path, ".log")[-1]
    truncate_by(active_log, cut_bytes)
    surviving = {last for _, end, last in batch_ranges(active_log) if end <= os.path.getsize(active_log)}
    greatest_in_files = offsets_in_files(path)

    manager = start(dirs)
    log = manager.get_log("t", 0)
    assert log.log_end_offset == greatest_in_files + 1 == max(surviving) + 1
    recovery = manager.statistics().recovery
    assert recovery.marker_found and recovery.logs_recovered == 1 and recovery.segments_recovered == 1
    assert recovery.bytes_truncated > 0
    assert read_values(log) == [(i, value(i)) for i in range(log.log_end_offset)]

    next_offsets = produce(log, 20_000, 1)
    assert next_offsets[0] > greatest_in_files
    assert offsets_in_files(path) == next_offsets[0]
    manager = restart(manager, dirs)
    manager = restart(manager, dirs)  # no later restart deletes what was acknowledged after
    log = manager.get_log("t", 0)
    assert read_values(log)[-1] == (next_offsets[0], value(20_000))
    assert manager.statistics().recovery.segments_recovered == 0
    manager.shutdown()


def test_garbage_appended_after_a_clean_stop_is_cut_and_nothing_acknowledged_is_lost(tmp_path):
    dirs = [str(tmp_path / "d0")]
    manager = start(dirs)
    manager.create_topic("t", 3, SMALL_SEGMENTS)
    for partition in range(3):
        produce(manager.get_log("t", partition), 0, 3000)
    bad = partition_dir(manager, "t", 1)
    manager.shutdown()
    append_bytes(segment_files(bad, ".log")[-1], os.urandom(777))

    manager = start(dirs)
    for partition in range(3):
        log = manager.get_log("t", partition)
        assert read_values(log) == [(i, value(i)) for i in range(3000)]
    stats = manager.statistics().log_dirs[0].recovery
    assert (stats.logs_recovered, stats.segments_recovered, stats.bytes_truncated) == (1, 1, 777)
    assert produce(manager.get_log("t", 1), 3000, 1) == [3000]
    manager.shutdown()


# -- item: index sanity on open ---------------------------------------------------------------
def _rewrite_last_entry(path: str, entry: struct.Struct, make) -> None:
    data = bytearray(open(path, "rb").read())
    count = len(data) // entry.size
    previous = entry.unpack_from(data, (count - 2) * entry.size)
    entry.pack_into(data, (count - 1) * entry.size, *make(previous))
    open(path, "wb").write(bytes(data))


OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
INDEX_DAMAGE = {
    "offset-index-partial-entry": lambda p: append_bytes(p + ".index", b"\x00\x00\x01"),
    "offset-index-offset-not-increasing": lambda p: _rewrite_last_entry(
        p + ".index", OFFSET_ENTRY, lambda prev: (prev[0], prev[1] + 1)
    ),
    "offset-index-position-past-log": lambda p: _rewrite_last_entry(
        p + ".index", OFFSET_ENTRY, lambda prev: (prev[0] + 5, 10**8)
    ),
    "offset-index-offset-in-next-segment": lambda p: _rewrite_last_entry(
        p + ".index", OFFSET_ENTRY, lambda prev: (10**6, prev[1] + 1)
    ),
    "offset-index-zero-filled-tail": lambda p: append_bytes(p + ".index", bytes(8 * 4)),
    "time-index-partial-entry": lambda p: append_bytes(p + ".timeindex", b"\x01"),
    "time-index-timestamp-going-back": lambda p: _rewrite_last_entry(
        p + ".timeindex", TIME_ENTRY, lambda prev: (prev[0] - 1, prev[1] + 1)
    ),
    "time-index-zero-filled-tail": lambda p: append_bytes(p + ".timeindex", bytes(12 * 3)),
}


@pytest.mark.parametrize("damage", sorted(INDEX_DAMAGE))
@pytest.mark.parametrize("segment", ["old", "active"])
def test_an_index_that_fails_its_sanity_check_is_rebuilt_from_the_log(tmp_path, damage, segment):
    dirs = [str(tmp_path / "d0")]
    manager = start(dirs)
    manager.create_topic("t", 1, {"segment.bytes": "65536", "index.interval.bytes": "512"})
    log = manager.get_log("t", 0)
    produce(log, 0, 6000)
    path = log.dir
    manager.shutdown()
    logs = segment_files(path, ".log")
    assert len(logs) >= 3
    target = logs[0] if segment == "old" else logs[-1]
    INDEX_DAMAGE[damage](target[: -len(".log")])

    manager = start(dirs)
    log = manager.get_log("t", 0)
    figures = manager.statistics().recovery
    # The last segment is checked at load (its tail sets the log end); the others on first use.
    expected = (1, 0) if segment == "active" else (0, 0)
    assert (figures.segments_recovered, figures.bytes_truncated) == expected
    assert read_values(log) == [(i, value(i)) for i in range(6000)]
    if segment == "old":
        assert log.segments_snapshot()[0].repaired_on_first_use
    for offset in (0, 1, 777, 2999, 5999):  # lookups go through the rebuilt index
        first = next(iter(read_values_at(log, offset)))
        assert first <= offset
    found = log.offset_for_timestamp(1_700_000_000_000 + 1234)
    assert found is not None and found.offset == 1234
    manager.shutdown()


def read_values_at(log, offset):
    from seglog.records import iter_batches

    for batch in iter_batches(log.read(offset, 4096).records):
        yield batch.base_offset


# -- item: one bad partition does not stop the others -----------------------------------------
class FailingLoadFs(FileSystem):
    """Raises a non-I/O error (a file breaking a rule the loader relies on) when a directory
    under ``poison`` is listed, ``failures_left`` times."""

    def __init__(self, poison: str, failures_left: int) -> None:
        self.poison = poison
        self.failures_left = failures_left

    def listdir(self, path):
        if path.startswith(self.poison) and self.failures_left > 0:
            self.failures_left -= 1
            raise ValueError(f"{path}: a file no loader pass expects")
        return super().listdir(path)


class ExhaustedLoadFs(FileSystem):
    """Runs out of a resource (``error``: EMFILE, ENOSPC) whenever a directory under ``poison``
    is listed: the descriptors or the space one partition's load needs."""

    def __init__(self, poison: str, error: int) -> None:
        self.poison = poison
        self.error = error
        self.failures = 0

    def listdir(self, path):
        if path.startswith(self.poison):
            self.failures += 1
            raise OSError(self.error, f"injected: {os.strerror(self.error)}")
        return super().listdir(path)


def _three_partitions(dirs) -> tuple[str, list[str]]:
    manager = start(dirs)
    manager.create_topic("t", 3)
    for partition in range(3):
        produce(manager.get_log("t", partition), 0, 100)
    paths = [partition_dir(manager, "t", p) for p in range(3)]
    manager.shutdown()
    return paths[1], paths


def test_a_partition_that_fails_to_load_is_loaded_again_with_recovery(tmp_path, caplog):
    dirs = [str(tmp_path / "d0")]
    bad, _ = _three_partitions(dirs)
    manager = start(dirs, fs=FailingLoadFs(bad, failures_left=1))
    for partition in range(3):
        assert len(read_values(manager.get_log("t", partition))) == 100
    figures = manager.statistics().recovery
    assert figures.logs_reloaded_with_recovery == 1 and figures.logs_offline == 0
    assert "failed to load" in caplog.text and "t-1" in caplog.text
    manager.shutdown()


def test_a_partition_that_cannot_load_stays_offline_alone_while_the_others_serve(tmp_path, caplog):
    dirs = [str(tmp_path / "d0")]
    bad, _ = _three_partitions(dirs)
    manager = start(dirs, fs=FailingLoadFs(bad, failures_left=2))
    for partition in (0, 2):
        assert len(read_values(manager.get_log("t", partition))) == 100
        produce(manager.get_log("t", partition), 100, 1)
    with pytest.raises(LogDirOfflineError, match="t-1 is offline"):
        manager.get_log("t", 1)
    figures = manager.statistics().log_dirs[0].recovery
    assert figures == RecoveryStatistics(
        marker_found=True,
        logs_loaded=2,
        logs_recovered=0,
        segments_recovered=0,
        bytes_truncated=0,
        logs_reloaded_with_recovery=1,
        logs_offline=1,
        duration_s=figures.duration_s,
    )
    assert "stays offline, every other partition serves" in caplog.text
    manager.shutdown()
    # KAFKA-15375: the directory was clean last time and the offline partition's files were not
    # touched, so the marker stays true; the partition's own checks run again at the next start.
    assert manager.stopped_cleanly

    manager = start(dirs)
    for partition in range(3):
        assert len(read_values(manager.get_log("t", partition))) == (100 if partition == 1 else 101)
    manager.shutdown()


# -- item: a log that fails to close leaves no marker ----------------------------------------
def test_a_log_that_fails_to_close_leaves_no_clean_shutdown_marker(tmp_path, monkeypatch, caplog):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    manager = start(dirs)
    manager.create_topic("t", 2)
    produce(manager.get_log("t", 0), 0, 10)
    broken = manager.get_log("t", 0)
    broken_dir = os.path.dirname(broken.dir)

    def fail_close():
        raise RuntimeError("the time index refused its final entry")

    monkeypatch.setattr(broken, "close", fail_close)
    manager.shutdown()
    assert not manager.stopped_cleanly and manager.unclean_dirs == [broken_dir]
    assert not os.path.exists(os.path.join(broken_dir, CLEAN_SHUTDOWN_FILE_NAME))
    other_dir = next(d for d in dirs if d != broken_dir)
    assert os.path.exists(os.path.join(other_dir, CLEAN_SHUTDOWN_FILE_NAME))
    assert "no clean-shutdown marker" in caplog.text

    manager = start(dirs)
    assert [d.recovery.marker_found for d in manager.statistics().log_dirs] == [d != broken_dir for d in dirs]
    assert [v for _, v in read_values(manager.get_log("t", 0))] == [value(i) for i in range(10)]
    manager.shutdown()


def test_start_up_logs_say_whether_the_marker_was_found_and_what_recovery_did(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="seglog_server.storage")
    dirs = [str(tmp_path / "d0")]
    manager = start(dirs)
    manager.create_topic("t", 1)
    produce(manager.get_log("t", 0), 0, 50)
    manager.halt()  # a crash: no marker
    caplog.clear()
    manager = start(dirs)
    assert "no clean-shutdown marker; recovering 1 logs from their recovery points" in caplog.text
    assert "recovery ran on 1 logs (1 segments, 0 bytes cut)" in caplog.text
    figures = manager.statistics().recovery
    assert not figures.marker_found and figures.logs_recovered == 1 and figures.duration_s >= 0
    caplog.clear()
    manager = restart(manager, dirs)
    assert "clean-shutdown marker found; loading 1 logs without recovery" in caplog.text
    assert "recovery ran on 0 logs (0 segments, 0 bytes cut)" in caplog.text
    manager.shutdown()


@pytest.mark.parametrize("error", [errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.EDQUOT])
def test_a_resource_running_out_while_loading_keeps_only_that_partition_offline(tmp_path, caplog, error):
    """Out of descriptors or space is not a failed disk: the directory stays online and every
    other partition serves; the partition loads at the next start, once the resource is back."""
    dirs = [str(tmp_path / "d0")]
    bad, _ = _three_partitions(dirs)
    fs = ExhaustedLoadFs(bad, error)
    manager = start(dirs, fs=fs)
    assert fs.failures >= 1
    for partition in (0, 2):
        assert len(read_values(manager.get_log("t", partition))) == 100
        produce(manager.get_log("t", partition), 100, 1)
    with pytest.raises(LogDirOfflineError, match="t-1 is offline"):
        manager.get_log("t", 1)
    statistics = manager.statistics()
    assert statistics.log_dirs[0].online and statistics.offline_log_dir_count == 0
    assert statistics.log_dirs[0].recovery.logs_offline == 1
    assert os.strerror(error) in caplog.text and "ran out" in caplog.text
    manager.shutdown()

    manager = start(dirs)
    assert [len(read_values(manager.get_log("t", partition))) for partition in range(3)] == [101, 100, 101]
    manager.shutdown()
