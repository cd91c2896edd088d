"""Changing a topic's configs after creation (LogManager.alter_topic_configs): Kafka's SET and
DELETE, the same validation as CreateTopic, the change on the live logs, on disk, across a restart,
and a crash at every step of the write (or a kill -9 between two partitions' files) leaving every
partition's file old or every one new after the next start (the change's intent completed)."""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.records import RecordBatchBuilder
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import (
    InvalidConfigError,
    LogDirOfflineError,
    LogDirStateError,
    ResourceExhaustedError,
    UnknownTopicOrPartitionError,
)
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.base.log_config import LogConfig
from seglog_server.storage.format.topic_metadata import (
    TOPIC_METADATA_FILE_NAME,
    format_topic_metadata,
    read_topic_metadata,
)
from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals
from seglog_server.storage.manager.topic_config_change import CHANGE_INTENT_FILE_NAME

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


def _halted_topic(directory, partition_count: int) -> None:
    """Topic t of ``partition_count`` partitions at retention.ms 1000, left as a crash leaves it."""
    first = _manager(directory)
    first.create_topic("t", partition_count, {"retention.ms": "1000"})
    first.halt()


@contextlib.contextmanager
def _restarted(directory):
    """The manager of the next start on ``directory`` (no faults), shut down after the block."""
    again = _manager(directory)
    try:
        yield again
    finally:
        again.shutdown()


def _started_over_an_intent(directory, partition_count: int, intent_in: int, operation: str, error: int, **rule):
    """Topic t of ``partition_count`` partitions halted with the intent of a change to
    retention.ms 5 left in t-``intent_in``, started on a FaultFs whose ``operation`` fails with
    ``error`` (``rule``: FaultFs.fail's path, skip, times): the manager, its FaultFs and the rule."""
    _halted_topic(directory, partition_count)
    _leave_intent(directory, intent_in, {"retention.ms": "5"})
    fs = FaultFs()
    made = fs.fail(operation, error, **rule)
    return _manager(directory, fs=fs), fs, made


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
    with _restarted(tmp_path) as again:
        assert again.describe_topic("t").config == config
        assert again.get_log("t", 0).config == config


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
    with _restarted(tmp_path) as again:
        assert _files(again, "t") == [{"retention.ms": "1000"}] * 3
        assert again.describe_topic("t").config.retention_ms == 1000


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


def test_a_crash_at_every_step_leaves_every_partition_old_or_every_partition_new(tmp_path):
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
        try:  # refused, or made when every file was written before the crash (its intent left)
            made = manager.alter_topic_configs("t", {"retention.ms": "5"}).retention_ms == 5
        except LogDirOfflineError:
            made = False
        manager.halt()
        with _restarted(directory) as again:
            files = _files(again, "t")
            assert files in ([old] * 3, [new] * 3), (step, files)  # one config, never a mix
            assert again.describe_topic("t").config.retention_ms == int(files[0]["retention.ms"]), step
            assert [again.get_log("t", p).config.retention_ms for p in range(3)] == [int(files[0]["retention.ms"])] * 3
            assert not list(directory.glob(f"t-*/{CHANGE_INTENT_FILE_NAME}")), step  # completed or dropped
            assert not made or files == [new] * 3, step  # a change answered made stays made
            outcomes.append(sum(f == new for f in files))
            # A topic.properties.tmp the crash left is overwritten by the next change.
            again.alter_topic_configs("t", {"retention.ms": "7"})
            assert _files(again, "t") == [{"retention.ms": "7"}] * 3, step
    # Old until the change's intent is written, new from then on (completed at the start).
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


_KILLED_CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path[:0] = {paths!r}
    from seglog_server.storage.base.fs import FileSystem
    from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals

    class KilledAtSecondRename(FileSystem):
        renames = 0
        def replace(self, src, dst):
            if os.path.basename(dst) == "topic.properties":
                self.renames += 1
                if self.renames == 2:  # partition 0's file is new, the others old: kill -9 here
                    os.kill(os.getpid(), signal.SIGKILL)
            super().replace(src, dst)

    manager = LogManager(sys.argv[1:], intervals=MaintenanceIntervals(0, 0, 0, 0, 0))
    manager.startup()
    manager.create_topic("t", 4, {{"retention.ms": "1000"}})
    manager.shutdown()
    manager = LogManager(sys.argv[1:], intervals=MaintenanceIntervals(0, 0, 0, 0, 0), fs=KilledAtSecondRename())
    manager.startup()
    manager.alter_topic_configs("t", {{"retention.ms": "5"}})
    print("not killed")
""")


def test_a_kill_between_two_partitions_files_is_completed_at_the_next_start(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]  # the topic's partitions spread over two log dirs
    root = pathlib.Path(__file__).resolve().parents[5]
    script = _KILLED_CHILD.format(paths=[str(root / "server"), str(root / "client"), str(root)])
    ran = subprocess.run([sys.executable, "-c", script, *map(str, dirs)], capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == -signal.SIGKILL, (ran.returncode, ran.stdout, ran.stderr)
    files = {path.parent.name: read_topic_metadata(str(path.parent)).overrides
             for path in tmp_path.glob("*/t-*/topic.properties")}
    assert sorted(files.values(), key=str) == [{"retention.ms": "1000"}] * 3 + [{"retention.ms": "5"}], files
    assert {path.parent.name for path in tmp_path.glob("*/t-*")} == {"a", "b"}

    manager = LogManager([str(d) for d in dirs], clock=FakeClock(NOW_MS), intervals=EVERY_PASS)
    manager.startup()
    try:
        assert _files(manager, "t") == [{"retention.ms": "5"}] * 4
        assert manager.describe_topic("t").config.retention_ms == 5
        assert [manager.get_log("t", p).config.retention_ms for p in range(4)] == [5] * 4
        assert not list(tmp_path.glob(f"*/t-*/{CHANGE_INTENT_FILE_NAME}"))
    finally:
        manager.shutdown()


def _leave_intent(directory, partition: int, overrides: dict[str, str], topic_id: str | None = None) -> None:
    """The intent a change interrupted before any partition's file was rewritten leaves."""
    current = read_topic_metadata(str(directory / f"t-{partition}"))
    intent = replace(current, overrides=overrides, topic_id=topic_id or current.topic_id)
    (directory / f"t-{partition}" / CHANGE_INTENT_FILE_NAME).write_bytes(format_topic_metadata(intent))


def test_a_start_that_cannot_complete_a_change_keeps_its_intent_for_the_next(tmp_path):
    failed, fs, rule = _started_over_an_intent(tmp_path, 3, 1, "replace", errno.EIO,
                                               path=TOPIC_METADATA_FILE_NAME + ".tmp", skip=1)
    try:
        assert rule.hits == 1
        assert (tmp_path / "t-1" / CHANGE_INTENT_FILE_NAME).exists()
        assert failed.describe_topic("t").config.retention_ms == 1000  # as loaded: serving
        assert failed.get_log("t", 2).config.retention_ms == 1000
    finally:
        failed.halt()
    with _restarted(tmp_path) as again:
        assert _files(again, "t") == [{"retention.ms": "5"}] * 3
        assert [again.get_log("t", p).config.retention_ms for p in range(3)] == [5] * 3
        assert not (tmp_path / "t-1" / CHANGE_INTENT_FILE_NAME).exists()


def test_an_intent_of_another_topic_id_is_dropped_and_changes_nothing(tmp_path):
    first = _manager(tmp_path)
    first.create_topic("t", 2, {"retention.ms": "1000"})
    first.shutdown()
    _leave_intent(tmp_path, 0, {"retention.ms": "5"}, topic_id="0" * 32)
    with _restarted(tmp_path) as again:
        assert _files(again, "t") == [{"retention.ms": "1000"}] * 2
        assert again.describe_topic("t").config.retention_ms == 1000
        assert not (tmp_path / "t-0" / CHANGE_INTENT_FILE_NAME).exists()


def test_a_change_removes_an_intent_a_start_left_in_another_partition(tmp_path):
    manager = _manager(tmp_path)
    try:
        manager.create_topic("t", 3, {"retention.ms": "1000"})
        _leave_intent(tmp_path, 2, {"retention.ms": "2000"})  # kept by a start that could not complete it
        manager.alter_topic_configs("t", {"retention.ms": "5"})  # its own intent goes into t-0
        assert not list(tmp_path.glob(f"t-*/{CHANGE_INTENT_FILE_NAME}"))
    finally:
        manager.halt()
    with _restarted(tmp_path) as again:
        assert _files(again, "t") == [{"retention.ms": "5"}] * 3  # the older intent did not undo it
        assert again.describe_topic("t").config.retention_ms == 5


def _is_intent_of(partition: str):
    """Matches the intent's path in the partition's directory, while it exists (a change first
    removes leftover intents: that unlink of an absent file is let through)."""
    suffix = os.path.join(partition, CHANGE_INTENT_FILE_NAME)
    return lambda path: path.endswith(suffix) and os.path.exists(path)


@pytest.mark.parametrize(("operation", "error", "path", "skip"), [
    # fsync_dir of t-0: the intent's write (1), t-0's file (2), the intent's removal (3)
    ("fsync_dir", errno.EMFILE, lambda path: path.endswith("t-0"), 2),
    ("fsync_dir", errno.EIO, lambda path: path.endswith("t-0"), 2),
    ("unlink", errno.EIO, _is_intent_of("t-0"), 0),
    ("unlink", errno.EMFILE, _is_intent_of("t-0"), 0),
])
def test_a_change_written_to_every_file_is_made_when_its_intent_is_not_removed(tmp_path, operation, error,
                                                                               path, skip):
    fs = FaultFs()
    manager = _manager(tmp_path, fs=fs)
    try:
        manager.create_topic("t", 2, {"retention.ms": "1000"})
        rule = fs.fail(operation, error, path=path, skip=skip)
        assert manager.alter_topic_configs("t", {"retention.ms": "5"}).retention_ms == 5
        assert rule.hits == 1
        fs.heal()
        assert manager.describe_topic("t").config.retention_ms == 5
        assert [manager.get_log("t", p).config.retention_ms for p in range(2)] == [5, 5]
        assert _files(manager, "t") == [{"retention.ms": "5"}] * 2
        # The intent left behind is removed by the next change before it writes its own.
        manager.alter_topic_configs("t", {"retention.ms": "7"})
        assert not list(tmp_path.glob(f"t-*/{CHANGE_INTENT_FILE_NAME}"))
    finally:
        manager.halt()
    with _restarted(tmp_path) as again:
        assert again.describe_topic("t").config.retention_ms == 7


def test_a_start_completing_a_change_applies_it_when_its_intent_is_not_removed(tmp_path):
    # fsync_dir of t-1: its file's write (1), the intent's removal (2)
    started, fs, rule = _started_over_an_intent(tmp_path, 3, 1, "fsync_dir", errno.EIO,
                                                path=lambda path: path.endswith("t-1"), skip=1)
    try:
        assert rule.hits == 1
        assert started.describe_topic("t").config.retention_ms == 5
        assert [started.get_log("t", p).config.retention_ms for p in range(3)] == [5] * 3
        assert _files(started, "t") == [{"retention.ms": "5"}] * 3
    finally:
        started.shutdown()
    with _restarted(tmp_path) as again:
        assert again.describe_topic("t").config.retention_ms == 5
        assert not (tmp_path / "t-1" / CHANGE_INTENT_FILE_NAME).exists()


def _two_dir_manager(tmp_path, fs=None):
    manager = LogManager([str(tmp_path / "d0"), str(tmp_path / "d1")], clock=FakeClock(NOW_MS),
                         intervals=EVERY_PASS, **({"fs": fs} if fs is not None else {}))
    manager.startup()
    return manager


def _intent_left_in_t0(tmp_path, overrides):
    """Topics t and u of two partitions over two log dirs, halted with an intent in t-0's dir;
    returns t-0's directory and a partition on the other log dir."""
    first = _two_dir_manager(tmp_path)
    first.create_topic("t", 2, {"retention.ms": "1000"})
    first.create_topic("u", 2)
    t0 = pathlib.Path(first.partition_dir("t", 0))
    elsewhere = next((topic, p) for topic in "tu" for p in range(2)
                     if pathlib.Path(first.partition_dir(topic, p)).parent != t0.parent)
    first.halt()
    current = read_topic_metadata(str(t0))
    (t0 / CHANGE_INTENT_FILE_NAME).write_bytes(format_topic_metadata(replace(current, overrides=overrides)))
    return t0, elsewhere


@pytest.mark.parametrize("operation", ["open", "pread"])
def test_an_intent_failing_to_read_takes_its_directory_offline_and_the_rest_serves(tmp_path, operation):
    t0, elsewhere = _intent_left_in_t0(tmp_path, {"retention.ms": "5"})
    fs = FaultFs()
    rule = fs.fail(operation, errno.EIO, path=_is_intent_of("t-0"), times=None)
    manager = _two_dir_manager(tmp_path, fs)
    try:
        assert rule.hits == 1
        with pytest.raises(LogDirOfflineError):
            manager.get_log("t", 0)
        assert manager.get_log(*elsewhere).log_end_offset == 0  # the other directory serves
        assert (t0 / CHANGE_INTENT_FILE_NAME).exists()
    finally:
        manager.shutdown()
    again = _two_dir_manager(tmp_path)
    try:  # the disk back: the change is completed
        assert again.describe_topic("t").config.retention_ms == 5
        assert _files(again, "t") == [{"retention.ms": "5"}] * 2
    finally:
        again.shutdown()


def test_an_intent_out_of_descriptors_leaves_the_topic_as_loaded_for_the_next_start(tmp_path):
    t0, _ = _intent_left_in_t0(tmp_path, {"retention.ms": "5"})
    fs = FaultFs()
    rule = fs.fail("open", errno.EMFILE, path=_is_intent_of("t-0"))
    manager = _two_dir_manager(tmp_path, fs)
    try:
        assert rule.hits == 1
        assert [manager.get_log("t", p).config.retention_ms for p in range(2)] == [1000, 1000]
        assert (t0 / CHANGE_INTENT_FILE_NAME).exists()
    finally:
        manager.shutdown()
    again = _two_dir_manager(tmp_path)
    try:
        assert again.describe_topic("t").config.retention_ms == 5
    finally:
        again.shutdown()


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_something_named_like_an_intent_that_is_no_file_is_ignored(tmp_path, kind):
    _halted_topic(tmp_path, 2)
    odd = tmp_path / "t-0" / CHANGE_INTENT_FILE_NAME
    if kind == "directory":
        odd.mkdir()
    else:
        os.mkfifo(odd)
    _leave_intent(tmp_path, 1, {"retention.ms": "5"})  # a real intent beside it is completed
    manager = _manager(tmp_path)
    try:
        assert [manager.get_log("t", p).config.retention_ms for p in range(2)] == [5, 5]
        assert _files(manager, "t") == [{"retention.ms": "5"}] * 2
        assert not (tmp_path / "t-1" / CHANGE_INTENT_FILE_NAME).exists()
    finally:
        manager.shutdown()


def _write_intent(directory, partition: int, **changes) -> None:
    current = read_topic_metadata(str(directory / f"t-{partition}"))
    (directory / f"t-{partition}" / CHANGE_INTENT_FILE_NAME).write_bytes(
        format_topic_metadata(replace(current, **changes)))


@pytest.mark.parametrize("changes", [
    {"overrides": {"retention.ms": "soon"}},
    {"overrides": {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}},
    {"overrides": {"remote.storage.enable": "true"}},  # fixed at creation
    {"partition_count": 3, "overrides": {"retention.ms": "5"}},  # not this topic's file
])
def test_an_invalid_intent_is_dropped_before_anything_is_written(tmp_path, changes):
    _halted_topic(tmp_path, 2)
    _write_intent(tmp_path, 1, **changes)
    manager = _manager(tmp_path)
    try:
        assert _files(manager, "t") == [{"retention.ms": "1000"}] * 2
        assert {read_topic_metadata(str(tmp_path / f"t-{p}")).partition_count for p in range(2)} == {2}
        assert [manager.get_log("t", p).config.retention_ms for p in range(2)] == [1000, 1000]
        assert not (tmp_path / "t-1" / CHANGE_INTENT_FILE_NAME).exists()
    finally:
        manager.shutdown()
    with _restarted(tmp_path) as again:
        assert [again.get_log("t", p).config.retention_ms for p in range(2)] == [1000, 1000]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(overrides=st.dictionaries(_NAMES, _VALUES, max_size=3))
def test_any_intent_is_completed_whole_or_dropped_and_every_partition_loads_again(tmp_path_factory, overrides):
    directory = tmp_path_factory.mktemp("intent")
    _halted_topic(directory, 2)
    try:
        _write_intent(directory, 1, overrides=overrides)
    except (AssertionError, ValueError):
        return  # not a file a change could write
    for start in range(2):  # the start that finds the intent, and the one after it
        manager = _manager(directory)
        try:
            files = _files(manager, "t")
            assert files[0] == files[1] in ({"retention.ms": "1000"}, overrides), (start, files)
            config = LogConfig.from_properties(files[0])
            assert [manager.get_log("t", p).config for p in range(2)] == [config] * 2, start
            assert not list(directory.glob(f"t-*/{CHANGE_INTENT_FILE_NAME}")), start
        finally:
            manager.shutdown()


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_something_named_like_an_intent_that_is_no_file_never_takes_a_change_offline(tmp_path, kind):
    first = _manager(tmp_path)
    first.create_topic("t", 2, {"retention.ms": "1000"})
    first.create_topic("u", 1)
    first.halt()
    odd = tmp_path / "t-0" / CHANGE_INTENT_FILE_NAME  # where the change's own intent would go
    if kind == "directory":
        odd.mkdir()
    else:
        os.mkfifo(odd)
    manager = _manager(tmp_path)
    try:
        assert manager.alter_topic_configs("t", {"retention.ms": "7"}).retention_ms == 7
        assert [manager.get_log("t", p).config.retention_ms for p in range(2)] == [7, 7]
        assert manager.get_log("u", 0).log_end_offset == 0  # its directory still online
        assert _files(manager, "t") == [{"retention.ms": "7"}] * 2
        assert odd.is_dir() if kind == "directory" else odd.is_fifo()  # left where it is
        assert not (tmp_path / "t-1" / CHANGE_INTENT_FILE_NAME).exists()  # the change's own, removed
    finally:
        manager.shutdown()
    with _restarted(tmp_path) as again:
        assert [again.get_log("t", p).config.retention_ms for p in range(2)] == [7, 7]


def test_a_change_with_no_partition_free_for_its_intent_is_refused_and_everything_serves(tmp_path):
    _halted_topic(tmp_path, 1)
    odd = tmp_path / "t-0" / CHANGE_INTENT_FILE_NAME
    odd.mkdir()
    manager = _manager(tmp_path)
    try:
        with pytest.raises(LogDirStateError, match=f"{CHANGE_INTENT_FILE_NAME}.*not a regular file"):
            manager.alter_topic_configs("t", {"retention.ms": "7"})
        assert manager.get_log("t", 0).config.retention_ms == 1000
        assert _files(manager, "t") == [{"retention.ms": "1000"}]
        odd.rmdir()  # the operator clears the name: the change goes through
        assert manager.alter_topic_configs("t", {"retention.ms": "7"}).retention_ms == 7
    finally:
        manager.shutdown()

def test_a_change_whose_look_at_the_intent_name_fails_writes_there_as_usual(tmp_path):
    fs = FaultFs()
    manager = _manager(tmp_path, fs=fs)
    try:
        manager.create_topic("t", 2, {"retention.ms": "1000"})
        rule = fs.fail("is_regular_file", errno.EMFILE, path=lambda path: path.endswith(
            os.path.join("t-0", CHANGE_INTENT_FILE_NAME)))
        assert manager.alter_topic_configs("t", {"retention.ms": "7"}).retention_ms == 7
        assert rule.hits == 1
        assert _files(manager, "t") == [{"retention.ms": "7"}] * 2
        assert not list(tmp_path.glob(f"t-*/{CHANGE_INTENT_FILE_NAME}"))
    finally:
        manager.shutdown()


@pytest.mark.parametrize("change_fails_at", ["intent", 0, 1, 2])
@pytest.mark.parametrize("start_fails_at", [0, 1, 2])
def test_a_failed_change_after_an_interrupted_start_leaves_every_partition_one_config(
        tmp_path, start_fails_at, change_fails_at):
    # The start completes the change into the partitions before one and fails on that one: the
    # files mixed, the intent kept.
    manager, fs, started = _started_over_an_intent(tmp_path, 3, 2, "replace", errno.EIO,
                                                   path=TOPIC_METADATA_FILE_NAME + ".tmp", skip=start_fails_at)
    try:
        assert started.hits == 1
        assert _files(manager, "t") == ([{"retention.ms": "5"}] * start_fails_at
                                        + [{"retention.ms": "1000"}] * (3 - start_fails_at))
        # A change then fails, not on an I/O error: on its intent (in t-0) or on a partition's file.
        name = CHANGE_INTENT_FILE_NAME if change_fails_at == "intent" else TOPIC_METADATA_FILE_NAME
        where = os.path.join("t-0" if change_fails_at == "intent" else f"t-{change_fails_at}", name + ".tmp")
        changed = fs.fail("replace", errno.EMFILE, path=lambda path: path.endswith(where))
        with pytest.raises(ResourceExhaustedError):
            manager.alter_topic_configs("t", {"retention.ms": "7"})
        assert changed.hits == 1
        assert _files(manager, "t") == [{"retention.ms": "1000"}] * 3  # as the topic serves
        assert [manager.get_log("t", p).config.retention_ms for p in range(3)] == [1000] * 3
        assert not list(tmp_path.glob(f"t-*/{CHANGE_INTENT_FILE_NAME}"))
    finally:
        manager.halt()
    with _restarted(tmp_path) as again:
        assert [again.get_log("t", p).config.retention_ms for p in range(3)] == [1000] * 3


def test_a_failed_change_after_an_interrupted_start_that_cannot_put_back_keeps_its_intent(tmp_path):
    manager, fs, _ = _started_over_an_intent(tmp_path, 3, 2, "replace", errno.EIO,
                                             path=TOPIC_METADATA_FILE_NAME + ".tmp", skip=2)  # t-0, t-1 take it
    try:
        changed = fs.fail("replace", errno.EMFILE, path=lambda path: path.endswith(
            os.path.join("t-0", TOPIC_METADATA_FILE_NAME + ".tmp")))
        put_back = fs.fail("replace", errno.EIO, path=lambda path: path.endswith(
            os.path.join("t-1", TOPIC_METADATA_FILE_NAME + ".tmp")))
        with pytest.raises(ResourceExhaustedError):
            manager.alter_topic_configs("t", {"retention.ms": "7"})
        assert (changed.hits, put_back.hits) == (1, 1)
        assert (tmp_path / "t-0" / CHANGE_INTENT_FILE_NAME).exists()  # the change's own
    finally:
        manager.halt()
    # The next start completes the change the intent holds: every partition one config.
    with _restarted(tmp_path) as again:
        assert _files(again, "t") == [{"retention.ms": "7"}] * 3
        assert [again.get_log("t", p).config.retention_ms for p in range(3)] == [7] * 3
