"""The log manager: directories, placement, topics, restart, clean/unclean shutdown, failures,
deletion and maintenance. Real directories under tmp_path, a FakeClock, faults through the fs
seam."""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from seglog.records import RecordBatchBuilder
from seglog_server.storage.format.clean_shutdown import CLEAN_SHUTDOWN_FILE_NAME, CleanShutdownFile
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import (
    InvalidConfigError,
    InvalidTopicError,
    LogDirOfflineError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.base.log_config import LogConfig
from seglog_server.storage.dirs.log_dir import LogDirStateError
from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals
from seglog_server.storage.format.topic_metadata import TOPIC_METADATA_FILE_NAME
from seglog_server.storage.base.topic_partition import PARTITION_COUNT_MAX

# Every periodic job due on every pass: tests move the clock, not the schedule.
EVERY_PASS = MaintenanceIntervals(
    initial_delay_ms=0,
    retention_check_ms=0,
    flush_check_ms=0,
    recovery_point_checkpoint_ms=0,
    log_start_offset_checkpoint_ms=0,
)


class SimulatedCrash(BaseException):
    """The process dying: not an error anyone may catch and handle."""


class FaultyFs(FileSystem):
    """Fails every operation on paths under ``failing`` with EIO; ``crash_on`` raises
    SimulatedCrash when a path ending so is opened."""

    def __init__(self):
        self.failing: set[str] = set()
        self.crash_on: str | None = None
        self._fd_paths: dict[int, str] = {}

    def fail_under(self, path):
        self.failing.add(os.path.abspath(str(path)))

    def _check(self, path):
        path = os.path.abspath(path)
        for prefix in self.failing:
            if path == prefix or path.startswith(prefix + os.sep):
                raise OSError(errno.EIO, "injected I/O error", path)

    def _check_fd(self, fd):
        if fd in self._fd_paths:
            self._check(self._fd_paths[fd])

    def open(self, path, flags, mode=0o644):
        self._check(path)
        if self.crash_on is not None and path.endswith(self.crash_on):
            raise SimulatedCrash(path)
        fd = super().open(path, flags, mode)
        self._fd_paths[fd] = path
        return fd

    def close(self, fd):
        self._fd_paths.pop(fd, None)
        super().close(fd)

    def pwrite(self, fd, data, position):
        self._check_fd(fd)
        return super().pwrite(fd, data, position)

    def pwritev(self, fd, buffers, position):
        self._check_fd(fd)
        return super().pwritev(fd, buffers, position)

    def fsync(self, fd):
        self._check_fd(fd)
        super().fsync(fd)

    def fdatasync(self, fd):
        self._check_fd(fd)
        super().fdatasync(fd)

    def listdir(self, path):
        self._check(path)
        return super().listdir(path)

    def makedirs(self, path):
        self._check(path)
        super().makedirs(path)

    def replace(self, src, dst):
        self._check(src)
        super().replace(src, dst)

    def fsync_dir(self, path):
        self._check(path)
        super().fsync_dir(path)


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def dirs(tmp_path):
    return [str(tmp_path / name) for name in ("d0", "d1", "d2")]


def start(log_dirs, clock, **kwargs) -> LogManager:
    kwargs.setdefault("intervals", EVERY_PASS)
    manager = LogManager(list(log_dirs), clock=clock, **kwargs)
    manager.startup()
    return manager


def batch(*values: bytes, timestamp_ms: int, key: bytes | None = None) -> bytes:
    builder = RecordBatchBuilder()
    for value in values:
        builder.append(value, key=key, timestamp_ms=timestamp_ms)
    return builder.build()


def read_all(log) -> list[bytes]:
    from seglog.records import iter_batches

    values = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        assert data, f"no data at offset {offset}"
        for record_batch in iter_batches(data):
            for record in record_batch:
                if record.offset >= offset:
                    values.append(record.value)
            offset = record_batch.next_offset
    return values


def dir_of(manager, topic, partition) -> str:
    description = manager.describe_topic(topic)
    return next(p.log_dir for p in description.partitions if p.partition == partition)


# -- start-up ---------------------------------------------------------------------------------
def test_startup_creates_missing_log_dirs_and_serves_no_topics(dirs, clock):
    manager = start(dirs, clock)
    assert all(os.path.isdir(d) for d in dirs)
    assert manager.list_topics() == []
    stats = manager.statistics()
    assert stats.state == "running"
    assert [d.online for d in stats.log_dirs] == [True, True, True]
    manager.shutdown()


def test_duplicate_log_dirs_are_refused(tmp_path, clock):
    with pytest.raises(InvalidConfigError, match="duplicate log directory"):
        LogManager([str(tmp_path / "a"), str(tmp_path / "a" / ".." / "a")], clock=clock)


def test_empty_log_dirs_are_refused(clock):
    with pytest.raises(InvalidConfigError):
        LogManager([], clock=clock)


def test_a_second_manager_cannot_take_locked_dirs(dirs, clock):
    manager = start(dirs, clock)
    with pytest.raises(LogDirStateError, match="another seglog process"):
        LogManager(dirs, clock=clock).startup()
    manager.shutdown()
    start(dirs, clock).shutdown()  # the lock went with the shutdown


def test_startup_twice_is_a_programming_error(dirs, clock):
    manager = start(dirs, clock)
    with pytest.raises(RuntimeError):
        manager.startup()
    manager.shutdown()


# -- create_topic -----------------------------------------------------------------------------
def test_create_topic_makes_one_dir_per_partition_with_metadata(dirs, clock):
    manager = start(dirs[:1], clock)
    manager.create_topic("orders", 2)
    for partition in (0, 1):
        path = os.path.join(dirs[0], f"orders-{partition}")
        assert os.path.isfile(os.path.join(path, TOPIC_METADATA_FILE_NAME))
        assert os.path.isfile(os.path.join(path, "00000000000000000000.log"))
    assert manager.list_topics() == [("orders", 2)]
    manager.shutdown()


def test_create_topic_returns_overrides_applied_over_manager_defaults(dirs, clock):
    defaults = LogConfig(retention_ms=1234)
    manager = start(dirs, clock, default_config=defaults)
    config = manager.create_topic("t", 1, {"segment.bytes": "4096"})
    assert config.segment_bytes == 4096
    assert config.retention_ms == 1234
    assert manager.get_log("t", 0).config == config
    assert manager.describe_topic("t").config == config
    manager.shutdown()


@pytest.mark.parametrize("topic", ["", ".", "..", "../x", "a/b", "x" * 250, "caf\u00e9", "a b"])
def test_create_topic_refuses_illegal_names_and_creates_nothing(dirs, clock, topic):
    manager = start(dirs, clock)
    with pytest.raises(InvalidTopicError):
        manager.create_topic(topic, 1)
    assert manager.list_topics() == []
    assert all(os.listdir(d) == [".lock"] for d in dirs)
    manager.shutdown()


@pytest.mark.parametrize("count", [0, -1, True, 1.5, "1", PARTITION_COUNT_MAX + 1])
def test_create_topic_refuses_bad_partition_counts(dirs, clock, count):
    manager = start(dirs, clock)
    with pytest.raises(InvalidConfigError, match="partition count"):
        manager.create_topic("t", count)
    manager.shutdown()


@pytest.mark.parametrize(
    "configs", [{"no.such.config": "1"}, {"retention.ms": "soon"}, {"segment.bytes": "1"}]
)
def test_create_topic_refuses_bad_configs_and_creates_nothing(dirs, clock, configs):
    manager = start(dirs, clock)
    with pytest.raises(InvalidConfigError):
        manager.create_topic("t", 1, configs)
    assert manager.list_topics() == []
    manager.shutdown()


def test_create_existing_topic_raises_topic_exists(dirs, clock):
    manager = start(dirs, clock)
    manager.create_topic("t", 1)
    with pytest.raises(TopicExistsError):
        manager.create_topic("t", 3)
    assert manager.list_topics() == [("t", 1)]
    manager.shutdown()


def test_topics_differing_only_in_dot_and_underscore_collide(dirs, clock):
    manager = start(dirs, clock)
    manager.create_topic("a.b", 1)
    with pytest.raises(InvalidTopicError, match="collides with existing topic 'a.b'"):
        manager.create_topic("a_b", 1)
    manager.shutdown()


def test_validate_only_checks_everything_and_creates_nothing(dirs, clock):
    manager = start(dirs, clock)
    config = manager.create_topic("t", 3, {"retention.ms": "10"}, validate_only=True)
    assert config.retention_ms == 10
    assert manager.list_topics() == []
    with pytest.raises(InvalidConfigError):
        manager.create_topic("t", 3, {"retention.ms": "x"}, validate_only=True)
    manager.create_topic("u", 1)
    with pytest.raises(TopicExistsError):
        manager.create_topic("u", 1, validate_only=True)
    manager.shutdown()


# -- placement --------------------------------------------------------------------------------
def test_partitions_go_to_the_dir_with_fewest_partitions_ties_by_order(dirs, clock):
    manager = start(dirs, clock)
    manager.create_topic("a", 4)
    assert [dir_of(manager, "a", p) for p in range(4)] == [dirs[0], dirs[1], dirs[2], dirs[0]]
    manager.create_topic("b", 2)
    assert [dir_of(manager, "b", p) for p in range(2)] == [dirs[1], dirs[2]]
    counts = [d.partition_count for d in manager.statistics().log_dirs]
    assert counts == [2, 2, 2]
    manager.shutdown()


def test_placement_counts_partitions_loaded_at_startup(dirs, clock):
    manager = start(dirs[:1], clock)
    manager.create_topic("old", 2)
    manager.shutdown()
    manager = start(dirs[:2], clock)
    manager.create_topic("new", 3)
    assert [dir_of(manager, "new", p) for p in range(3)] == [dirs[1], dirs[1], dirs[0]]
    manager.shutdown()


# -- reading the topic map --------------------------------------------------------------------
def test_list_topics_is_sorted_by_name_with_partition_counts(dirs, clock):
    manager = start(dirs, clock)
    for name, count in [("zeta", 1), ("alpha", 3), ("mid", 2)]:
        manager.create_topic(name, count)
    assert manager.list_topics() == [("alpha", 3), ("mid", 2), ("zeta", 1)]
    manager.shutdown()


def test_describe_topic_reports_offsets_sizes_and_dirs(dirs, clock):
    manager = start(dirs, clock)
    manager.create_topic("t", 2)
    manager.get_log("t", 1).append(batch(b"a", b"b", b"c", timestamp_ms=clock.time_ms()))
    description = manager.describe_topic("t")
    assert description.topic == "t"
    assert description.offline_partitions == {}
    first, second = description.partitions
    assert (first.partition, first.log_start_offset, first.log_end_offset) == (0, 0, 0)
    assert (second.partition, second.log_end_offset, second.high_watermark) == (1, 3, 3)
    assert second.size_bytes > 0 and first.size_bytes == 0
    assert second.segment_count == 1
    assert (first.log_dir, second.log_dir) == (dirs[0], dirs[1])
    manager.shutdown()


def test_get_log_of_unknown_topic_or_partition_raises(dirs, clock):
    manager = start(dirs, clock)
    manager.create_topic("t", 2)
    with pytest.raises(UnknownTopicOrPartitionError, match="does not exist"):
        manager.get_log("nope", 0)
    with pytest.raises(UnknownTopicOrPartitionError, match="0..1"):
        manager.get_log("t", 2)
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.get_log("t", -1)
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.describe_topic("nope")
    manager.shutdown()


def test_get_log_after_shutdown_raises_offline(dirs, clock):
    manager = start(dirs, clock)
    manager.create_topic("t", 1)
    manager.shutdown()
    with pytest.raises(LogDirOfflineError, match="stopped"):
        manager.get_log("t", 0)


# -- restart ----------------------------------------------------------------------------------
def test_restart_keeps_topics_configs_and_data(dirs, clock):
    manager = start(dirs, clock)
    manager.create_topic("t", 2, {"retention.ms": "-1", "cleanup.policy": "compact"})
    manager.create_topic("plain", 1)
    log = manager.get_log("t", 1)
    log.append(batch(b"one", b"two", key=b"k", timestamp_ms=clock.time_ms()))
    log.append(batch(b"three", key=b"k", timestamp_ms=clock.time_ms()))
    manager.shutdown()

    manager = start(dirs, clock)
    assert manager.list_topics() == [("plain", 1), ("t", 2)]
    config = manager.describe_topic("t").config
    assert config.retention_ms == -1 and config.is_compacted
    assert manager.describe_topic("plain").config == LogConfig()
    log = manager.get_log("t", 1)
    assert log.log_end_offset == 3
    assert read_all(log) == [b"one", b"two", b"three"]
    manager.shutdown()


def test_changed_service_defaults_apply_to_topics_without_overrides(dirs, clock):
    manager = start(dirs, clock)
    manager.create_topic("t", 1, {"segment.bytes": "2048"})
    manager.shutdown()
    manager = start(dirs, clock, default_config=LogConfig(retention_ms=5))
    config = manager.get_log("t", 0).config
    assert (config.segment_bytes, config.retention_ms) == (2048, 5)
    manager.shutdown()


def test_a_kafka_partition_dir_without_metadata_loads_with_defaults(dirs, clock):
    manager = start(dirs[:1], clock)
    manager.create_topic("t", 1)
    manager.get_log("t", 0).append(batch(b"x", timestamp_ms=clock.time_ms()))
    manager.shutdown()
    os.unlink(os.path.join(dirs[0], "t-0", TOPIC_METADATA_FILE_NAME))
    manager = start(dirs[:1], clock)
    assert manager.list_topics() == [("t", 1)]
    assert manager.get_log("t", 0).log_end_offset == 1
    manager.shutdown()


def test_a_partition_missing_after_an_interrupted_create_is_recreated(dirs, clock):
    manager = start(dirs[:1], clock)
    manager.create_topic("t", 3)
    manager.shutdown()
    shutil.rmtree(os.path.join(dirs[0], "t-2"))
    manager = start(dirs[:1], clock)
    assert manager.get_log("t", 2).log_end_offset == 0
    assert manager.statistics().logs_created_on_startup_count == 1
    manager.shutdown()


def test_corrupt_topic_metadata_keeps_only_that_partition_offline(dirs, clock):
    manager = start(dirs[:1], clock)
    manager.create_topic("t", 2)
    manager.create_topic("u", 1)
    manager.shutdown()
    with open(os.path.join(dirs[0], "t-1", TOPIC_METADATA_FILE_NAME), "w") as f:
        f.write("garbage\n")
    manager = start(dirs[:1], clock)
    manager.get_log("t", 0)
    manager.get_log("u", 0)
    with pytest.raises(LogDirOfflineError, match="unreadable topic metadata"):
        manager.get_log("t", 1)
    assert list(manager.describe_topic("t").offline_partitions) == [1]
    manager.shutdown()


def test_the_same_partition_in_two_dirs_refuses_to_start(dirs, clock):
    manager = start(dirs[:1], clock)
    manager.create_topic("t", 1)
    manager.shutdown()
    shutil.copytree(os.path.join(dirs[0], "t-0"), os.path.join(dirs[1], "t-0"))
    with pytest.raises(LogDirStateError, match="exists in both"):
        start(dirs[:2], clock)
    start(dirs[:1], clock).shutdown()  # the failed start released its locks


# -- clean and unclean shutdown ---------------------------------------------------------------
def test_shutdown_writes_checkpoints_and_the_marker_in_every_dir(dirs, clock):
    manager = start(dirs[:2], clock)
    manager.create_topic("t", 2)
    manager.get_log("t", 0).append(batch(b"a", b"b", timestamp_ms=clock.time_ms()))
    manager.shutdown()
    with open(os.path.join(dirs[0], "recovery-point-offset-checkpoint")) as f:
        assert f.read() == "0\n1\nt 0 2\n"
    with open(os.path.join(dirs[1], "recovery-point-offset-checkpoint")) as f:
        assert f.read() == "0\n1\nt 1 0\n"
    with open(os.path.join(dirs[0], "log-start-offset-checkpoint")) as f:
        assert f.read() == "0\n0\n"  # no log start above its first segment
    for d in dirs[:2]:
        assert CleanShutdownFile(d).read_broker_epoch() == -1


def test_shutdown_stores_the_broker_epoch_in_the_marker(dirs, clock):
    start(dirs[:1], clock, broker_epoch=42).shutdown()
    assert CleanShutdownFile(dirs[0]).read_broker_epoch() == 42


def test_shutdown_is_idempotent_and_works_before_startup(dirs, clock):
    manager = start(dirs, clock)
    manager.shutdown()
    manager.shutdown()
    LogManager(dirs, clock=clock).shutdown()


def test_startup_deletes_the_marker_before_loading_and_remembers_clean(dirs, clock):
    start(dirs[:1], clock).shutdown()
    assert os.path.exists(os.path.join(dirs[0], CLEAN_SHUTDOWN_FILE_NAME))
    manager = start(dirs[:1], clock)
    assert not os.path.exists(os.path.join(dirs[0], CLEAN_SHUTDOWN_FILE_NAME))
    assert manager.statistics().log_dirs[0].had_clean_shutdown
    manager.shutdown()


def test_a_crash_leaves_no_marker_and_the_next_start_recovers(dirs, clock):
    manager = start(dirs[:1], clock)
    manager.create_topic("t", 1)
    manager.get_log("t", 0).append(batch(b"kept", timestamp_ms=clock.time_ms()))
    manager.halt()  # no flush, no checkpoint, no marker
    assert not os.path.exists(os.path.join(dirs[0], CLEAN_SHUTDOWN_FILE_NAME))
    manager = start(dirs[:1], clock)
    stats = manager.statistics()
    assert not stats.log_dirs[0].had_clean_shutdown
    assert stats.logs_recovered_count == 1
    assert read_all(manager.get_log("t", 0)) == [b"kept"]
    manager.shutdown()


def test_a_crash_during_load_counts_as_unclean_next_time(dirs, clock):
    manager = start(dirs[:1], clock)
    manager.create_topic("t", 1)
    manager.shutdown()
    fs = FaultyFs()
    fs.crash_on = TOPIC_METADATA_FILE_NAME
    with pytest.raises(SimulatedCrash):
        start(dirs[:1], clock, fs=fs)
    assert not os.path.exists(os.path.join(dirs[0], CLEAN_SHUTDOWN_FILE_NAME))
    manager = start(dirs[:1], clock)
    assert not manager.statistics().log_dirs[0].had_clean_shutdown
    manager.shutdown()


def test_an_unclean_dir_with_an_unloaded_partition_gets_no_marker(dirs, clock):
    manager = start(dirs[:1], clock)
    manager.create_topic("t", 1)
    manager.halt()
    with open(os.path.join(dirs[0], "t-0", TOPIC_METADATA_FILE_NAME), "w") as f:
        f.write("garbage\n")
    manager = start(dirs[:1], clock)
    assert not manager.statistics().log_dirs[0].load_completed
    manager.shutdown()
    # t-0 was never recovered, so the directory must not claim to be clean (KAFKA-15375).
    assert not os.path.exists(os.path.join(dirs[0], CLEAN_SHUTDOWN_FILE_NAME))


def test_a_clean_dir_with_an_unloaded_partition_keeps_its_marker(dirs, clock):
    manager = start(dirs[:1], clock)
    manager.create_topic("t", 1)
    manager.shutdown()
    with open(os.path.join(dirs[0], "t-0", TOPIC_METADATA_FILE_NAME), "w") as f:
        f.write("garbage\n")
    start(dirs[:1], clock).shutdown()
    assert os.path.exists(os.path.join(dirs[0], CLEAN_SHUTDOWN_FILE_NAME))
    with open(os.path.join(dirs[0], "recovery-point-offset-checkpoint")) as f:
        assert f.read() == "0\n1\nt 0 0\n"  # the unloaded partition keeps its entry


def test_a_corrupt_recovery_point_checkpoint_reads_as_empty(dirs, clock):
    manager = start(dirs[:1], clock)
    manager.create_topic("t", 1)
    manager.get_log("t", 0).append(batch(b"x", timestamp_ms=clock.time_ms()))
    manager.halt()
    with open(os.path.join(dirs[0], "recovery-point-offset-checkpoint"), "w") as f:
        f.write("0\n5\nt 0 1\n")
    manager = start(dirs[:1], clock)
    stats = manager.statistics()
    assert stats.log_dirs[0].online
    assert stats.log_dirs[0].checkpoint_read_error_count == 1
    assert read_all(manager.get_log("t", 0)) == [b"x"]
    manager.shutdown()


# -- failed directories -----------------------------------------------------------------------
def test_a_dir_failing_at_startup_goes_offline_while_the_others_serve(dirs, clock):
    manager = start(dirs[:2], clock)
    manager.create_topic("t", 2)
    manager.get_log("t", 0).append(batch(b"x", timestamp_ms=clock.time_ms()))
    manager.shutdown()
    untouched = sorted(os.listdir(dirs[1]))
    fs = FaultyFs()
    fs.fail_under(dirs[1])
    manager = start(dirs[:2], clock, fs=fs)
    stats = manager.statistics()
    assert [d.online for d in stats.log_dirs] == [True, False]
    assert "injected I/O error" in stats.log_dirs[1].offline_reason
    assert read_all(manager.get_log("t", 0)) == [b"x"]
    with pytest.raises(LogDirOfflineError):
        manager.get_log("t", 1)
    assert manager.list_topics() == [("t", 2)]
    manager.create_topic("new", 2)
    assert {dir_of(manager, "new", p) for p in range(2)} == {dirs[0]}
    manager.shutdown()
    # Nothing was written to the failed directory: it is exactly as the last shutdown left it.
    assert sorted(os.listdir(dirs[1])) == untouched
    assert os.path.exists(os.path.join(dirs[0], CLEAN_SHUTDOWN_FILE_NAME))


def test_a_dir_failing_while_loading_a_partition_goes_offline(dirs, clock):
    manager = start(dirs[:2], clock)
    manager.create_topic("t", 2)
    manager.shutdown()
    fs = FaultyFs()
    fs.fail_under(os.path.join(dirs[1], "t-1"))
    manager = start(dirs[:2], clock, fs=fs)
    assert [d.online for d in manager.statistics().log_dirs] == [True, False]
    with pytest.raises(LogDirOfflineError, match="loading failed"):
        manager.get_log("t", 1)
    assert manager.describe_topic("t").offline_partitions.keys() == {1}
    assert manager.statistics().remaining_logs_to_load == 0
    manager.shutdown()
    # Its marker went before loading began; with the load cut short none is written back,
    # so the next start-up recovers the directory.
    assert not os.path.exists(os.path.join(dirs[1], CLEAN_SHUTDOWN_FILE_NAME))
    assert os.path.exists(os.path.join(dirs[0], CLEAN_SHUTDOWN_FILE_NAME))


def test_all_dirs_failing_at_startup_raises(dirs, clock):
    fs = FaultyFs()
    for d in dirs:
        fs.fail_under(d)
    with pytest.raises(LogDirOfflineError, match="no log directory is usable"):
        start(dirs, clock, fs=fs)


def test_a_dir_failing_during_maintenance_goes_offline_while_the_other_serves(dirs, clock):
    fs = FaultyFs()
    manager = start(dirs[:2], clock, fs=fs)
    manager.create_topic("t", 2)
    fs.fail_under(dirs[1])
    manager.run_maintenance()  # the checkpoint write in dirs[1] fails
    stats = manager.statistics()
    assert [d.online for d in stats.log_dirs] == [True, False]
    with pytest.raises(LogDirOfflineError):
        manager.get_log("t", 1)
    log = manager.get_log("t", 0)
    log.append(batch(b"still serving", timestamp_ms=clock.time_ms()))
    assert read_all(log) == [b"still serving"]
    manager.shutdown()


def test_creating_a_topic_on_a_failing_dir_leaves_nothing_behind(dirs, clock):
    fs = FaultyFs()
    manager = start(dirs[:2], clock, fs=fs)
    fs.fail_under(os.path.join(dirs[1], "t-1"))
    with pytest.raises(LogDirOfflineError):
        manager.create_topic("t", 2)
    assert manager.list_topics() == []
    assert not os.path.exists(os.path.join(dirs[0], "t-0"))
    manager.create_topic("t", 2)  # everything now goes to the healthy directory
    assert {dir_of(manager, "t", p) for p in range(2)} == {dirs[0]}
    manager.shutdown()


def test_handle_log_dir_failure_takes_the_dir_offline(dirs, clock):
    manager = start(dirs[:2], clock)
    manager.create_topic("t", 2)
    manager.handle_log_dir_failure(dirs[0], OSError(errno.EIO, "append failed"))
    with pytest.raises(LogDirOfflineError, match="append failed"):
        manager.get_log("t", 0)
    manager.get_log("t", 1)
    stats = manager.statistics()
    assert (stats.offline_log_dir_count, stats.offline_partition_count) == (1, 1)
    manager.shutdown()


# -- delete_topic -----------------------------------------------------------------------------
def test_delete_topic_removes_its_dirs_and_forgets_it(dirs, clock):
    manager = start(dirs, clock)
    manager.create_topic("gone", 3)
    manager.create_topic("kept", 1)
    manager.get_log("gone", 0).append(batch(b"x", timestamp_ms=clock.time_ms()))
    manager.delete_topic("gone")
    assert manager.list_topics() == [("kept", 1)]
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.get_log("gone", 0)
    for d in dirs:
        assert not [name for name in os.listdir(d) if name.startswith("gone-")]
    manager.shutdown()
    manager = start(dirs, clock)
    assert manager.list_topics() == [("kept", 1)]
    manager.create_topic("gone", 1)  # the name is free again
    assert manager.get_log("gone", 0).log_end_offset == 0
    manager.shutdown()


def test_delete_topic_rewrites_the_checkpoints_without_it(dirs, clock):
    manager = start(dirs[:1], clock)
    manager.create_topic("gone", 1)
    manager.create_topic("kept", 1)
    manager.delete_topic("gone")
    with open(os.path.join(dirs[0], "recovery-point-offset-checkpoint")) as f:
        assert f.read() == "0\n1\nkept 0 0\n"
    manager.shutdown()


def test_delete_unknown_topic_raises(dirs, clock):
    manager = start(dirs, clock)
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.delete_topic("nope")
    manager.shutdown()


def test_a_leftover_delete_dir_is_removed_at_startup(dirs, clock):
    os.makedirs(dirs[0])
    leftover = os.path.join(dirs[0], "t-0.0123456789abcdef0123456789abcdef-delete")
    os.makedirs(leftover)
    with open(os.path.join(leftover, "00000000000000000000.log"), "wb") as f:
        f.write(b"\0" * 100)
    manager = start(dirs[:1], clock)
    assert not os.path.exists(leftover)
    assert manager.list_topics() == []
    assert manager.statistics().delete_dirs_removed_total == 1
    manager.shutdown()


def test_a_delete_dir_that_cannot_be_removed_is_retried_by_maintenance(dirs, clock):
    class NoUnlink(FileSystem):
        blocked = True

        def unlink(self, path):
            if self.blocked and "-delete" in path:
                raise PermissionError(errno.EACCES, "busy", path)
            super().unlink(path)

    fs = NoUnlink()
    manager = start(dirs[:1], clock, fs=fs)
    manager.create_topic("t", 1)
    manager.delete_topic("t")
    assert manager.statistics().log_dirs[0].pending_delete_dir_count == 1
    fs.blocked = False
    manager.run_maintenance()
    assert manager.statistics().log_dirs[0].pending_delete_dir_count == 0
    assert not [n for n in os.listdir(dirs[0]) if n.startswith("t-")]
    manager.shutdown()


def test_an_interrupted_delete_is_finished_at_startup(dirs, clock):
    manager = start(dirs, clock)
    manager.create_topic("t", 3)
    manager.create_topic("kept", 1)
    manager.shutdown()
    # A crash after the first rename of DeleteTopic: one "-delete" directory, two live ones.
    os.rename(
        os.path.join(dirs[0], "t-0"),
        os.path.join(dirs[0], "t-0.0123456789abcdef0123456789abcdef-delete"),
    )
    manager = start(dirs, clock)
    assert manager.list_topics() == [("kept", 1)]
    for d in dirs:
        assert not [name for name in os.listdir(d) if name.startswith("t-")]
    assert manager.statistics().interrupted_deletes_completed_count == 2
    manager.shutdown()


def test_a_recreated_topic_survives_the_leftover_of_its_predecessor(dirs, clock):
    class NoUnlink(FileSystem):
        def unlink(self, path):
            if "-delete" in path:
                raise PermissionError(errno.EACCES, "busy", path)
            super().unlink(path)

    manager = start(dirs[:1], clock, fs=NoUnlink())
    manager.create_topic("t", 1)
    manager.delete_topic("t")  # the old incarnation's directory stays behind
    manager.create_topic("t", 1)
    manager.get_log("t", 0).append(batch(b"new", timestamp_ms=clock.time_ms()))
    manager.shutdown()
    assert any(name.endswith("-delete") for name in os.listdir(dirs[0]))
    manager = start(dirs[:1], clock)
    assert read_all(manager.get_log("t", 0)) == [b"new"]
    assert not any(name.endswith("-delete") for name in os.listdir(dirs[0]))
    assert manager.statistics().interrupted_deletes_completed_count == 0
    manager.shutdown()


def test_delete_topic_with_a_partition_on_an_offline_dir_is_refused(dirs, clock):
    manager = start(dirs[:2], clock)
    manager.create_topic("t", 2)
    manager.handle_log_dir_failure(dirs[1], "disk pulled")
    with pytest.raises(LogDirOfflineError, match="offline"):
        manager.delete_topic("t")
    assert manager.list_topics() == [("t", 2)]
    manager.get_log("t", 0)
    manager.shutdown()


# -- maintenance ------------------------------------------------------------------------------
def retention_topic(manager, clock, **overrides):
    configs = {"segment.bytes": "200", "retention.ms": "60000", "file.delete.delay.ms": "1000"}
    configs.update(overrides)
    manager.create_topic("r", 1, configs)
    log = manager.get_log("r", 0)
    for i in range(10):
        log.append(batch(b"v%03d" % i + b"x" * 100, timestamp_ms=clock.time_ms()))
    assert log.segment_count >= 3
    return log


def test_maintenance_deletes_segments_older_than_retention_ms(dirs, clock):
    manager = start(dirs[:1], clock)
    log = retention_topic(manager, clock)
    segments_before = log.segment_count
    manager.run_maintenance()
    assert log.segment_count == segments_before  # nothing is old yet
    clock.advance(60_001)
    manager.run_maintenance()
    # Every segment expired, the full active one too: Kafka rolls an empty one at the log
    # end first, so the log keeps an active segment and its offsets.
    assert log.segment_count == 1
    assert log.log_start_offset == log.log_end_offset == 10
    stats = manager.statistics()
    assert stats.segments_deleted_total == segments_before
    assert stats.retention_check_count == 2
    manager.shutdown()


def test_retention_waits_for_the_initial_delay_and_the_check_interval(dirs, clock):
    intervals = MaintenanceIntervals(initial_delay_ms=30_000, retention_check_ms=300_000)
    manager = start(dirs[:1], clock, intervals=intervals)
    log = retention_topic(manager, clock)
    segments_before = log.segment_count
    clock.advance(29_999)
    manager.run_maintenance()
    assert manager.statistics().retention_check_count == 0
    clock.advance(1)
    manager.run_maintenance()  # first check: nothing older than 60 s yet
    assert manager.statistics().retention_check_count == 1
    clock.advance(299_999)
    manager.run_maintenance()
    assert log.segment_count == segments_before  # old enough, but no check is due
    clock.advance(1)
    manager.run_maintenance()
    assert log.segment_count == 1
    manager.shutdown()


def test_maintenance_removes_deleted_segment_files_after_the_delay(dirs, clock):
    manager = start(dirs[:1], clock)
    retention_topic(manager, clock)
    clock.advance(60_001)
    manager.run_maintenance()
    partition_dir = os.path.join(dirs[0], "r-0")
    assert any(name.endswith(".deleted") for name in os.listdir(partition_dir))
    clock.advance(1_000)
    manager.run_maintenance()
    assert not any(name.endswith(".deleted") for name in os.listdir(partition_dir))
    assert manager.statistics().files_deleted_total > 0
    manager.shutdown()


def test_maintenance_flushes_logs_whose_flush_ms_passed(dirs, clock):
    manager = start(dirs[:1], clock)
    manager.create_topic("f", 1, {"flush.ms": "1000"})
    manager.create_topic("lazy", 1)
    flushed, lazy = manager.get_log("f", 0), manager.get_log("lazy", 0)
    for log in (flushed, lazy):
        log.append(batch(b"x", b"y", timestamp_ms=clock.time_ms()))
    manager.run_maintenance()
    assert flushed.recovery_point == 0
    clock.advance(1_000)
    manager.run_maintenance()
    assert flushed.recovery_point == 2
    assert lazy.recovery_point == 0
    assert manager.statistics().flushes_by_time_total == 1
    manager.shutdown()


def test_maintenance_checkpoints_recovery_points_at_the_interval(dirs, clock):
    intervals = MaintenanceIntervals(initial_delay_ms=0, recovery_point_checkpoint_ms=60_000)
    manager = start(dirs[:1], clock, intervals=intervals)
    manager.create_topic("t", 1, {"flush.ms": "0"})
    manager.get_log("t", 0).append(batch(b"x", timestamp_ms=clock.time_ms()))
    path = os.path.join(dirs[0], "recovery-point-offset-checkpoint")
    manager.run_maintenance()  # flush (flush.ms=0) then the first checkpoint
    with open(path) as f:
        assert f.read() == "0\n1\nt 0 1\n"
    manager.get_log("t", 0).append(batch(b"y", timestamp_ms=clock.time_ms()))
    clock.advance(59_999)
    manager.run_maintenance()
    with open(path) as f:
        assert f.read() == "0\n1\nt 0 1\n"  # not due yet
    clock.advance(1)
    manager.run_maintenance()
    with open(path) as f:
        assert f.read() == "0\n1\nt 0 2\n"
    manager.shutdown()


def test_log_start_offset_checkpoint_keeps_delete_records_across_restart(dirs, clock):
    manager = start(dirs[:1], clock)
    manager.create_topic("t", 1)
    log = manager.get_log("t", 0)
    log.append(batch(b"a", b"b", b"c", timestamp_ms=clock.time_ms()))
    assert log.delete_records(2) == 2
    manager.run_maintenance()
    with open(os.path.join(dirs[0], "log-start-offset-checkpoint")) as f:
        assert f.read() == "0\n1\nt 0 2\n"
    manager.halt()
    manager = start(dirs[:1], clock)
    assert manager.get_log("t", 0).log_start_offset == 2
    manager.shutdown()


def test_maintenance_before_startup_and_after_shutdown_does_nothing(dirs, clock):
    manager = LogManager(dirs, clock=clock)
    manager.run_maintenance()
    manager.startup()
    manager.shutdown()
    manager.run_maintenance()
    assert manager.statistics().maintenance_pass_count == 0


# -- statistics -------------------------------------------------------------------------------
def test_statistics_reports_dirs_partitions_and_totals(dirs, clock):
    manager = start(dirs[:2], clock)
    manager.create_topic("t", 3)
    manager.get_log("t", 0).append(batch(b"x" * 50, timestamp_ms=clock.time_ms()))
    stats = manager.statistics()
    assert (stats.topic_count, stats.partition_count, stats.offline_partition_count) == (1, 3, 0)
    assert [p.partition for p in stats.partitions] == [0, 1, 2]
    assert stats.size_bytes == sum(d.size_bytes for d in stats.log_dirs) > 0
    assert stats.segment_count == 3
    assert [d.partition_count for d in stats.log_dirs] == [2, 1]
    assert stats.topics_created_total == 1
    assert stats.remaining_logs_to_load == 0
    assert stats.partitions[0].log is not None
    manager.shutdown()


def test_a_symlinked_log_dir_is_reported_and_matched_as_configured(tmp_path, clock):
    disk = tmp_path / "disk1"
    disk.mkdir()
    alias = str(tmp_path / "data")
    os.symlink(disk, alias)
    manager = start([alias], clock)
    manager.create_topic("t", 1)
    log = manager.get_log("t", 0)
    assert os.path.dirname(log.dir) == alias
    assert manager.describe_topic("t").partitions[0].log_dir == alias
    # The service reports failures by the parent of log.dir; it must find the directory.
    manager.handle_log_dir_failure(os.path.dirname(log.dir), "I/O error")
    with pytest.raises(LogDirOfflineError):
        manager.get_log("t", 0)
    manager.shutdown()


def test_an_append_failing_on_disk_takes_its_dir_offline_at_the_next_get_log(dirs, clock):
    fs = FaultyFs()
    manager = start(dirs[:2], clock, fs=fs)
    manager.create_topic("t", 2)
    fs.fail_under(dirs[1])
    with pytest.raises(LogDirOfflineError):
        manager.get_log("t", 1).append(batch(b"lost", timestamp_ms=clock.time_ms()))
    with pytest.raises(LogDirOfflineError, match="I/O error"):
        manager.get_log("t", 1)
    assert [d.online for d in manager.statistics().log_dirs] == [True, False]
    manager.get_log("t", 0).append(batch(b"fine", timestamp_ms=clock.time_ms()))
    manager.shutdown()


def test_roll_flushes_run_on_the_managers_pool_and_shutdown_drains_it(dirs, clock):
    import threading

    manager = start(dirs[:1], clock)
    manager.create_topic("t", 1, {"segment.bytes": "200"})
    log = manager.get_log("t", 0)
    for i in range(20):
        log.append(batch(b"x" * 120, timestamp_ms=clock.time_ms()))
    assert log.segment_count > 10
    manager.shutdown()
    assert not [t for t in threading.enumerate() if t.name.startswith("seglog-roll-flush")]
    with open(os.path.join(dirs[0], "recovery-point-offset-checkpoint")) as f:
        assert f.read() == "0\n1\nt 0 20\n"


def test_commits_write_the_cleaner_checkpoint_and_a_deleted_topic_leaves_it(dirs, clock):
    from seglog_server.storage.format.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
    from seglog_server.storage.base.topic_partition import TopicPartition

    from tests.support.cleaning_support import hand_clean

    manager = start(dirs[:1], clock)
    checkpoint = OffsetCheckpointFile(os.path.join(dirs[0], CLEANER_OFFSET_CHECKPOINT))
    for topic in ("a", "b"):
        manager.create_topic(topic, 1, {"cleanup.policy": "compact"})
        log = manager.get_log(topic, 0)
        for n in range(3):
            log.append(batch(b"v%d" % n, key=b"k", timestamp_ms=clock.time_ms()))
            log.roll()
    assert checkpoint.read() == {}
    for topic in ("a", "b"):  # the one writer: CommitCleaned, through the cleaner manager
        taken = manager.create_snapshot(topic, 0)
        hand_clean(taken.path)
        manager.commit_cleaned(taken.manifest.snapshot_id)
    assert checkpoint.read() == {TopicPartition("a", 0): 3, TopicPartition("b", 0): 3}
    manager.delete_topic("a")
    assert checkpoint.read() == {TopicPartition("b", 0): 3}
    manager.shutdown()


@pytest.mark.parametrize("bad", [{"retention_check_ms": -1}, {"flush_check_ms": 1.5}])
def test_maintenance_intervals_must_be_non_negative_integers(bad):
    with pytest.raises(InvalidConfigError):
        MaintenanceIntervals(**bad)


def test_concurrent_requests_admin_and_maintenance_keep_the_map_consistent(dirs, clock):
    import threading

    manager = start(dirs, clock)
    manager.create_topic("busy", 3)
    errors: list[BaseException] = []

    def produce_and_read():
        try:
            for _ in range(100):
                for partition in range(3):
                    log = manager.get_log("busy", partition)
                    log.append(batch(b"v", timestamp_ms=clock.time_ms()))
                    log.read(log.log_start_offset, 4096)
                manager.list_topics()
                manager.statistics()
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            errors.append(exc)

    workers = [threading.Thread(target=produce_and_read) for _ in range(3)]
    for worker in workers:
        worker.start()
    try:
        for round_number in range(5):
            name = f"churn{round_number}"
            manager.create_topic(name, 2)
            manager.get_log(name, 1).append(batch(b"c", timestamp_ms=clock.time_ms()))
            manager.run_maintenance()
            manager.describe_topic(name)
            manager.delete_topic(name)
    finally:
        for worker in workers:
            worker.join()
    assert errors == []
    assert manager.list_topics() == [("busy", 3)]
    assert sum(manager.get_log("busy", p).log_end_offset for p in range(3)) == 3 * 100 * 3
    manager.shutdown()
    manager = start(dirs, clock)
    assert sum(manager.get_log("busy", p).log_end_offset for p in range(3)) == 3 * 100 * 3
    manager.shutdown()
