"""Changing a topic's configs after creation (LogManager.alter_topic_configs): Kafka's SET and
DELETE, the same validation as CreateTopic, the change on the live logs, on disk, across a restart,
and a crash at every step of the write leaving each partition's file old or new."""

from __future__ import annotations

import errno
import os
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.records import RecordBatchBuilder
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import (
    InvalidConfigError,
    LogDirOfflineError,
    ResourceExhaustedError,
    UnknownTopicOrPartitionError,
)
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.base.log_config import LogConfig
from seglog_server.storage.format.topic_metadata import TOPIC_METADATA_FILE_NAME, read_topic_metadata
from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals

from tests.support.fault_fs import FaultFs

EVERY_PASS = MaintenanceIntervals(0, 0, 0, 0, 0)
NOW_MS = 1_700_000_000_000


def _manager(directory, fs=None, clock=None):
    kwargs = {"fs": fs} if fs is not None else {}
    manager = LogManager([str(directory)], clock=clock or FakeClock(NOW_MS), intervals=EVERY_PASS, **kwargs)
    manager.startup()
    return manager


def _batch(count=1, value=b"v" * 100, timestamp_ms=NOW_MS):
    builder = RecordBatchBuilder()
    for _ in range(count):
        builder.append(value, timestamp_ms=timestamp_ms)
    return builder.build()


def _files(manager, topic):
    return [read_topic_metadata(manager.partition_dir(topic, p)).overrides
            for p in range(dict(manager.list_topics())[topic])]


def test_set_and_delete_change_overrides_described_and_written(tmp_path):
    manager = _manager(tmp_path)
    try:
        manager.create_topic("t", 2, {"retention.ms": "1000", "segment.bytes": "4096"})
        config = manager.alter_topic_configs("t", {"cleanup.policy": "compact", "retention.ms": "5000"},
                                             ["segment.bytes"])
        assert config.to_properties()["retention.ms"] == "5000"
        assert config.to_properties()["segment.bytes"] == LogConfig().to_properties()["segment.bytes"]
        assert manager.describe_topic("t").config == config
        assert manager.get_log("t", 1).config == config
        assert _files(manager, "t") == [{"cleanup.policy": "compact", "retention.ms": "5000"}] * 2
    finally:
        manager.shutdown()
    again = _manager(tmp_path)
    try:
        assert again.describe_topic("t").config == config
        assert again.get_log("t", 0).config == config
    finally:
        again.shutdown()


def test_validate_only_answers_the_result_and_changes_nothing(tmp_path):
    manager = _manager(tmp_path)
    try:
        manager.create_topic("t", 1, {"retention.ms": "1000"})
        config = manager.alter_topic_configs("t", {"retention.ms": "7"}, validate_only=True)
        assert config.retention_ms == 7
        assert manager.describe_topic("t").config.retention_ms == 1000
        assert _files(manager, "t") == [{"retention.ms": "1000"}]
    finally:
        manager.shutdown()


@pytest.mark.parametrize(("set_configs", "delete", "message"), [
    ({"retention.mss": "1"}, [], "unknown topic config 'retention.mss'"),
    ({}, ["no.such"], "unknown topic config 'no.such'"),
    ({"retention.ms": "soon"}, [], "retention.ms must be an integer, found 'soon'"),
    ({"segment.bytes": "1"}, [], "segment.bytes"),
    ({"retention.ms": "1"}, ["retention.ms"], "'retention.ms' is both set and deleted"),
    ({"remote.storage.enable": "true"}, [], "remote.storage.enable is fixed at creation"),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, [], "min.compaction.lag.ms"),
])
def test_refusals_name_the_key_and_change_nothing(tmp_path, set_configs, delete, message):
    manager = _manager(tmp_path)
    try:
        manager.create_topic("t", 1, {"retention.ms": "1000"})
        with pytest.raises(InvalidConfigError, match=message.replace("(", r"\(")):
            manager.alter_topic_configs("t", set_configs, delete)
        assert manager.describe_topic("t").config.retention_ms == 1000
        assert _files(manager, "t") == [{"retention.ms": "1000"}]
    finally:
        manager.shutdown()


def test_unknown_topic_is_refused(tmp_path):
    manager = _manager(tmp_path)
    try:
        with pytest.raises(UnknownTopicOrPartitionError):
            manager.alter_topic_configs("absent", {"retention.ms": "1"})
    finally:
        manager.shutdown()


_NAMES = st.one_of(st.sampled_from([*LogConfig.known_names(), "retention.mss", "x", ""]), st.text(max_size=6))
# Values with line breaks, '=', padding and '#' too: a value is written canonical, never as given.
_VALUES = st.one_of(st.sampled_from(["0", "-1", "1", "14", "1000", "compact", "delete,compact", "true", "x",
                                     "CreateTime", "0.5", "9223372036854775808", "", " 7\n", "compact\r\n"]),
                    st.text(max_size=8))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(set_configs=st.dictionaries(_NAMES, _VALUES, max_size=4), delete=st.lists(_NAMES, max_size=2))
def test_any_change_is_applied_whole_or_refused_leaving_the_configs_unchanged(tmp_path_factory, set_configs,
                                                                               delete):
    directory = tmp_path_factory.mktemp("prop")
    manager = _manager(directory)
    try:
        manager.create_topic("t", 2, {"retention.ms": "1000", "cleanup.policy": "compact"})
        before = manager.describe_topic("t").config
        try:
            after = manager.alter_topic_configs("t", set_configs, delete)
        except InvalidConfigError:
            assert manager.describe_topic("t").config == before
            assert manager.get_log("t", 1).config == before
            assert _files(manager, "t") == [{"cleanup.policy": "compact", "retention.ms": "1000"}] * 2
            return
        expected = {"retention.ms": "1000", "cleanup.policy": "compact"}
        for name in delete:
            expected.pop(name, None)
        expected.update(set_configs)
        assert after == LogConfig.from_properties(expected)
        assert manager.get_log("t", 0).config == after
        assert [LogConfig.from_properties(o) for o in _files(manager, "t")] == [after] * 2
    finally:
        manager.shutdown()


def test_segment_bytes_takes_effect_at_the_next_roll(tmp_path):
    manager = _manager(tmp_path)
    try:
        manager.create_topic("t", 1, {"segment.bytes": "100000"})
        log = manager.get_log("t", 0)
        log.append(_batch(5))
        assert log.segment_count == 1
        manager.alter_topic_configs("t", {"segment.bytes": "1000"})
        log.append(_batch(5))  # the active segment is now past 1000 bytes: the next append rolls
        log.append(_batch(1))
        assert log.segment_count >= 2
    finally:
        manager.shutdown()


def test_retention_ms_takes_effect_at_the_next_retention_pass(tmp_path):
    clock = FakeClock(NOW_MS)
    manager = _manager(tmp_path, clock=clock)
    try:
        manager.create_topic("t", 1, {"segment.bytes": "1000"})
        log = manager.get_log("t", 0)
        for _ in range(4):
            log.append(_batch(5))
        clock.advance(60_000)
        manager.run_maintenance()
        kept = log.log_start_offset
        assert kept == 0  # the default retention (7 days) keeps everything
        manager.alter_topic_configs("t", {"retention.ms": "1000"})
        manager.run_maintenance()
        assert log.log_start_offset > kept
    finally:
        manager.shutdown()


def test_max_message_bytes_takes_effect_at_the_next_append(tmp_path):
    manager = _manager(tmp_path)
    try:
        manager.create_topic("t", 1)
        log = manager.get_log("t", 0)
        log.append(_batch(1, value=b"x" * 2000))
        manager.alter_topic_configs("t", {"max.message.bytes": "1000"})
        with pytest.raises(Exception, match="max.message.bytes|1000"):
            log.append(_batch(1, value=b"x" * 2000))
    finally:
        manager.shutdown()


def test_a_write_error_puts_back_the_files_written_and_takes_the_directory_offline(tmp_path):
    fs = FaultFs()
    manager = _manager(tmp_path, fs=fs)
    try:
        manager.create_topic("t", 3, {"retention.ms": "1000"})
        rule = fs.fail("replace", errno.EIO, path=TOPIC_METADATA_FILE_NAME + ".tmp", skip=1)
        with pytest.raises(LogDirOfflineError, match="changing the configs of topic 't'"):
            manager.alter_topic_configs("t", {"retention.ms": "5"})
        assert rule.hits == 1
        fs.heal()
        with pytest.raises(LogDirOfflineError):
            manager.get_log("t", 0)
    finally:
        manager.halt()
    again = _manager(tmp_path)
    try:
        assert _files(again, "t") == [{"retention.ms": "1000"}] * 3
        assert again.describe_topic("t").config.retention_ms == 1000
    finally:
        again.shutdown()


def test_a_full_disk_refuses_the_change_and_keeps_the_directory(tmp_path):
    fs = FaultFs()
    manager = _manager(tmp_path, fs=fs)
    try:
        manager.create_topic("t", 2, {"retention.ms": "1000"})
        fs.fail("pwrite", errno.ENOSPC, path=TOPIC_METADATA_FILE_NAME + ".tmp", skip=1)
        with pytest.raises(ResourceExhaustedError):
            manager.alter_topic_configs("t", {"retention.ms": "5"})
        fs.heal()
        assert _files(manager, "t") == [{"retention.ms": "1000"}] * 2
        assert manager.get_log("t", 1).config.retention_ms == 1000
        assert manager.alter_topic_configs("t", {"retention.ms": "5"}).retention_ms == 5
    finally:
        manager.shutdown()


class DyingFs(FileSystem):
    """From the ``die_at``-th write-like call of the test thread on, every one raises EIO, as if the
    process had died there (the put-back of the files already written fails too)."""

    def __init__(self) -> None:
        self.count = 0
        self.die_at: int | None = None

    def _step(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self.count += 1
        if self.die_at is not None and self.count >= self.die_at:
            raise OSError(errno.EIO, f"injected crash at step {self.count}")

    def open(self, path, flags, mode=0o644):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            self._step()
        return super().open(path, flags, mode)

    def pwrite(self, fd, data, position):
        self._step()
        return super().pwrite(fd, data, position)

    def fsync(self, fd):
        self._step()
        super().fsync(fd)

    def replace(self, src, dst):
        self._step()
        super().replace(src, dst)

    def fsync_dir(self, path):
        self._step()
        super().fsync_dir(path)


def _prepared(directory, fs):
    manager = _manager(directory, fs=fs)
    manager.create_topic("t", 3, {"retention.ms": "1000"})
    return manager


def test_a_crash_at_every_step_leaves_each_file_old_or_new_and_the_topic_one_of_them(tmp_path):
    reference = DyingFs()
    manager = _prepared(tmp_path / "reference", reference)
    first = reference.count + 1
    manager.alter_topic_configs("t", {"retention.ms": "5"})
    step_count = reference.count - first + 1
    manager.shutdown()
    assert step_count >= 15  # 3 partitions x (open, pwrite, fsync, replace, fsync_dir)
    old, new = {"retention.ms": "1000"}, {"retention.ms": "5"}
    outcomes = []
    for step in range(1, step_count + 1):
        fs = DyingFs()
        directory = tmp_path / f"crash{step}"
        manager = _prepared(directory, fs)
        fs.die_at = fs.count + step
        with pytest.raises(LogDirOfflineError):
            manager.alter_topic_configs("t", {"retention.ms": "5"})
        manager.halt()
        again = _manager(directory)
        try:
            files = _files(again, "t")
            assert all(f in (old, new) for f in files), (step, files)
            assert again.describe_topic("t").config.retention_ms in (1000, 5), step
            outcomes.append(sum(f == new for f in files))
            # A topic.properties.tmp the crash left is overwritten by the next change.
            again.alter_topic_configs("t", {"retention.ms": "7"})
            assert _files(again, "t") == [{"retention.ms": "7"}] * 3, step
        finally:
            again.shutdown()
    # Each partition's file switches once, at its rename, in order.
    assert outcomes == sorted(outcomes) and outcomes[0] == 0 and outcomes[-1] == 3, outcomes


@pytest.mark.parametrize("validate_only", [False, True])
def test_a_partition_on_an_offline_directory_refuses_the_change(tmp_path, validate_only):
    fs = FaultFs()
    manager = LogManager([str(tmp_path / "d0"), str(tmp_path / "d1")], clock=FakeClock(NOW_MS),
                         intervals=EVERY_PASS, fs=fs)
    manager.startup()
    try:
        manager.create_topic("t", 2, {"retention.ms": "1000"})
        fs.fail("replace", errno.EIO, path=str(tmp_path / "d1"), times=None)
        fs.fail("open", errno.EIO, path=lambda path: path.startswith(str(tmp_path / "d1")), times=None)
        manager.run_maintenance()  # a checkpoint write in d1 fails: d1 goes offline
        fs.heal()
        with pytest.raises(LogDirOfflineError, match="its configs can be changed once they are back"):
            manager.alter_topic_configs("t", {"retention.ms": "5"}, validate_only=validate_only)
        assert manager.describe_topic("t").config.retention_ms == 1000
        assert read_topic_metadata(manager.partition_dir("t", 0)).overrides == {"retention.ms": "1000"}
    finally:
        manager.shutdown()


def test_cleanup_policy_takes_effect_at_the_next_cleaner_listing(tmp_path):
    manager = _manager(tmp_path)
    try:
        manager.create_topic("t", 1)
        assert manager.list_cleanable("t") == []
        manager.alter_topic_configs("t", {"cleanup.policy": "compact"})
        assert [(c.topic, c.partition) for c in manager.list_cleanable("t")] == [("t", 0)]
        manager.alter_topic_configs("t", {}, ["cleanup.policy"])
        assert manager.list_cleanable("t") == []
    finally:
        manager.shutdown()


def test_flush_messages_takes_effect_at_once(tmp_path):
    manager = _manager(tmp_path)
    try:
        manager.create_topic("t", 1)
        log = manager.get_log("t", 0)
        log.append(_batch(1))
        assert log.recovery_point == 0  # the default leaves syncing to the OS
        manager.alter_topic_configs("t", {"flush.messages": "1"})
        log.append(_batch(1))
        assert log.recovery_point == log.log_end_offset  # flushed by the append itself
    finally:
        manager.shutdown()
