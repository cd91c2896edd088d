"""One log directory: lock, clean-shutdown marker consumption, checkpoints, entry scan."""

import os

import pytest

from seglog_server.storage.format.clean_shutdown import CLEAN_SHUTDOWN_FILE_NAME, CleanShutdownFile
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.dirs.log_dir import LOCK_FILE_NAME, LogDir, LogDirStateError, remove_tree
from seglog_server.storage.base.topic_partition import TopicPartition as TP


def test_open_creates_a_missing_directory(tmp_path):
    log_dir = LogDir(str(tmp_path / "a" / "b"))
    log_dir.open()
    assert (tmp_path / "a" / "b" / LOCK_FILE_NAME).exists()
    log_dir.unlock()


def test_a_locked_directory_cannot_be_opened_twice(tmp_path):
    first = LogDir(str(tmp_path))
    first.open()
    with pytest.raises(LogDirStateError, match="another seglog process"):
        LogDir(str(tmp_path)).open()
    first.unlock()
    second = LogDir(str(tmp_path))
    second.open()  # released locks can be taken again
    second.unlock()


def test_open_consumes_the_marker_and_remembers_clean_shutdown(tmp_path):
    CleanShutdownFile(str(tmp_path)).write(5)
    log_dir = LogDir(str(tmp_path))
    log_dir.open()
    assert log_dir.had_clean_shutdown
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE_NAME).exists()
    log_dir.unlock()


def test_open_without_marker_means_unclean(tmp_path):
    log_dir = LogDir(str(tmp_path))
    log_dir.open()
    assert not log_dir.had_clean_shutdown
    log_dir.unlock()


def test_open_reads_both_checkpoints(tmp_path):
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 42\n")
    (tmp_path / "log-start-offset-checkpoint").write_text("0\n1\nt 0 7\n")
    log_dir = LogDir(str(tmp_path))
    log_dir.open()
    assert log_dir.recovery_points == {TP("t", 0): 42}
    assert log_dir.log_start_offsets == {TP("t", 0): 7}
    log_dir.unlock()


def test_a_corrupt_checkpoint_reads_as_empty_and_is_counted(tmp_path):
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n2\nt 0 42\n")
    log_dir = LogDir(str(tmp_path))
    log_dir.open()
    assert log_dir.online
    assert log_dir.recovery_points == {}
    assert log_dir.checkpoint_read_error_count == 1
    log_dir.unlock()


def test_scan_classifies_entries(tmp_path):
    for name in ["orders-0", "orders-1", "my-topic-12", "t-3.0123456789abcdef0123456789abcdef-delete",
                 "t-4.abc-future", "lost+found", "not_a_partition", "t-007"]:
        (tmp_path / name).mkdir()
    for name in ["recovery-point-offset-checkpoint", "meta.properties", "instance.id", "stray.txt", "x-1"]:
        (tmp_path / name).write_text("")
    log_dir = LogDir(str(tmp_path))
    scan = log_dir.scan()
    assert scan.partitions == {
        TP("orders", 0): str(tmp_path / "orders-0"),
        TP("orders", 1): str(tmp_path / "orders-1"),
        TP("my-topic", 12): str(tmp_path / "my-topic-12"),
    }
    assert scan.delete_dirs == [str(tmp_path / "t-3.0123456789abcdef0123456789abcdef-delete")]
    assert sorted(scan.ignored) == sorted(
        ["t-4.abc-future", "lost+found", "not_a_partition", "t-007", "stray.txt", "x-1"]
    )


def test_pending_delete_dirs_are_removed_with_their_files(tmp_path):
    doomed = tmp_path / "t-0.0123456789abcdef0123456789abcdef-delete"
    doomed.mkdir()
    (doomed / "00000000000000000000.log").write_bytes(b"x" * 100)
    (doomed / "sub").mkdir()
    (doomed / "sub" / "f").write_text("y")
    log_dir = LogDir(str(tmp_path))
    log_dir.schedule_delete_dirs([str(doomed)])
    assert log_dir.remove_pending_delete_dirs() == 1
    assert not doomed.exists()
    assert log_dir.pending_delete_dirs == []


class _NoUnlinkFs(FileSystem):
    def unlink(self, path):
        raise PermissionError(13, "Permission denied", path)


def test_a_delete_dir_that_cannot_be_removed_stays_pending(tmp_path):
    doomed = tmp_path / "t-0.0123456789abcdef0123456789abcdef-delete"
    doomed.mkdir()
    (doomed / "f").write_text("x")
    log_dir = LogDir(str(tmp_path), fs=_NoUnlinkFs())
    log_dir.schedule_delete_dirs([str(doomed)])
    assert log_dir.remove_pending_delete_dirs() == 0
    assert log_dir.pending_delete_dirs == [str(doomed)]
    assert doomed.exists()


def test_remove_tree_does_not_follow_symlinks(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("precious")
    doomed = tmp_path / "doomed"
    doomed.mkdir()
    os.symlink(outside, doomed / "link")
    remove_tree(str(doomed), FileSystem())
    assert not doomed.exists()
    assert (outside / "keep").read_text() == "precious"


def test_take_offline_releases_the_lock(tmp_path):
    log_dir = LogDir(str(tmp_path))
    log_dir.open()
    log_dir.take_offline("disk gone")
    assert not log_dir.online and log_dir.offline_reason == "disk gone"
    other = LogDir(str(tmp_path))
    other.open()
    other.unlock()
