"""The service's side of offline cleaning through the LogManager: snapshots, ListCleanable,
CommitCleaned (checks, stale and damaged refusals, the cleaner checkpoint), drops, expiry and
start-up. Real directories, a FakeClock, results written by the codec-based hand cleaner."""

from __future__ import annotations

import errno
import json
import os
import threading

import pytest

from seglog.records import RecordBatchBuilder, iter_batches
from seglog_server.storage.format.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.fs import REAL_FS, FileSystem
from seglog_server.storage.base.log_config import LogConfig
from seglog_server.storage.cleaning.log_cleaning_install import install_cleaned
from seglog_server.storage.base.errors import (
    InvalidCleaningResultError,
    InvalidSnapshotIdError,
    LogDirOfflineError,
    NotCleanableError,
    SnapshotNotFoundError,
    StaleCleaningResultError,
)
from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals
from seglog_server.storage.cleaning.log_snapshot import SNAPSHOTS_DIR_NAME
from seglog_server.storage.base.topic_partition import TopicPartition

from tests.support.cleaning_support import hand_clean, read_manifest, write_result

NOW_MS = 1_700_000_000_000
EVERY_PASS = MaintenanceIntervals(0, 0, 0, 0, 0)
COMPACT = {"cleanup.policy": "compact", "file.delete.delay.ms": "0"}


@pytest.fixture
def clock():
    return FakeClock(NOW_MS)


@pytest.fixture
def manager(tmp_path, clock):
    started = LogManager([str(tmp_path / "d0")], clock=clock, intervals=EVERY_PASS, snapshot_ttl_ms=3_600_000)
    started.startup()
    yield started
    started.shutdown()


def keyed(key: bytes, value: bytes | None, timestamp_ms: int = NOW_MS) -> bytes:
    builder = RecordBatchBuilder()
    builder.append(value, key=key, timestamp_ms=timestamp_ms)
    return builder.build()


def fill(log, rounds: int = 3, keys: int = 4, segment_rounds: int = 1) -> list[tuple[bytes, bytes | None]]:
    """``rounds`` overwrites of ``keys`` keys, a roll after every ``segment_rounds`` rounds, then
    one record in a fresh active segment. Returns (key, value) in offset order."""
    written = []
    for round_ in range(rounds):
        for k in range(keys):
            key, value = b"k%d" % k, b"v%d-%d" % (k, round_)
            log.append(keyed(key, value))
            written.append((key, value))
        if (round_ + 1) % segment_rounds == 0:
            log.roll()
    log.append(keyed(b"tail", b"t"))
    written.append((b"tail", b"t"))
    return written


def replay(log) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 2**24).records
        batches = list(iter_batches(data))
        if not batches:
            break
        for one in batches:
            out.extend((r.offset, r.key, r.value) for r in one if r.offset >= offset)
        offset = batches[-1].next_offset
    return out


def latest(pairs) -> dict:
    out = {}
    for key, value in pairs:
        out[key] = value
    return out


def compacted_log(manager, name="c", configs=None):
    manager.create_topic(name, 1, {**COMPACT, **(configs or {})})
    return manager.get_log(name, 0)


def test_snapshot_links_the_closed_segments_and_describes_them(manager, tmp_path):
    log = compacted_log(manager)
    fill(log)
    taken = manager.create_snapshot("c", 0)
    manifest = read_manifest(taken.path)
    assert taken.path == os.path.join(str(tmp_path / "d0"), SNAPSHOTS_DIR_NAME, taken.manifest.snapshot_id)
    assert [s["base_offset"] for s in manifest["segments"]] == [0, 4, 8]
    assert manifest["first_dirty_offset"] == 0 and manifest["first_uncleanable_offset"] == 12
    assert manifest["configs"]["delete.retention.ms"] == 86_400_000
    for segment, live in zip(manifest["segments"], log.segments_snapshot()):
        linked = os.path.join(taken.path, segment["file"])
        assert os.stat(linked).st_ino == os.stat(live.log.path).st_ino
        assert segment["size_bytes"] == live.size_in_bytes
        assert segment["next_offset"] == live.base_offset + 4
    assert sorted(os.listdir(taken.path)) == sorted([s["file"] for s in manifest["segments"]] + ["manifest.json"])


def test_commit_installs_the_cleaned_segments_and_advances_the_checkpoint(manager, tmp_path):
    log = compacted_log(manager)
    written = fill(log)
    taken = manager.create_snapshot("c", 0)
    hand_clean(taken.path)
    before = replay(log)
    outcome = manager.commit_cleaned(taken.manifest.snapshot_id)
    after = replay(log)
    assert latest((k, v) for _, k, v in after) == latest(written)
    kept = {offset for offset, _, _ in after}
    assert kept < {offset for offset, _, _ in before}
    assert [(o, k, v) for o, k, v in before if o in kept] == after  # offsets preserved
    assert outcome.cleaned_up_to_offset == 12 and outcome.bytes_after < outcome.bytes_before
    checkpoint = OffsetCheckpointFile(str(tmp_path / "d0" / CLEANER_OFFSET_CHECKPOINT)).read()
    assert checkpoint == {TopicPartition("c", 0): 12}
    assert not os.path.exists(taken.path)
    cleanable = manager.list_cleanable()[0].to_clean
    assert cleanable.first_dirty_offset == 12 and cleanable.cleanable_bytes == 0


def test_list_cleanable_reports_kafka_dirty_ratio(manager):
    log = compacted_log(manager)
    fill(log)
    sizes = [s.size_in_bytes for s in log.segments_snapshot()]
    [entry] = manager.list_cleanable()
    assert (entry.topic, entry.partition) == ("c", 0)
    assert entry.to_clean.cleanable_bytes == sum(sizes[:3]) and entry.to_clean.clean_bytes == 0
    assert entry.to_clean.dirty_ratio == 1.0 and entry.to_clean.eligible
    taken = manager.create_snapshot("c", 0)
    hand_clean(taken.path)
    manager.commit_cleaned(taken.manifest.snapshot_id)
    for round_ in range(2):
        for k in range(4):
            log.append(keyed(b"k%d" % k, b"w%d" % round_))
    log.roll()
    [entry] = manager.list_cleanable()
    clean = sum(s.size_in_bytes for s in log.segments_snapshot() if s.base_offset < 12)
    dirty = sum(s.size_in_bytes for s in log.segments_snapshot()[:-1] if s.base_offset >= 12)
    assert entry.to_clean.clean_bytes == clean and entry.to_clean.cleanable_bytes == dirty
    assert entry.to_clean.dirty_ratio == pytest.approx(dirty / (clean + dirty))
    assert entry.to_clean.first_dirty_offset == 12


def test_list_cleanable_skips_delete_topics_and_ranks_dirtiest_first(manager):
    manager.create_topic("plain", 1)
    manager.get_log("plain", 0).append(keyed(b"a", b"b"))
    fill(compacted_log(manager, "low", {"min.cleanable.dirty.ratio": "1.0"}))
    fill(compacted_log(manager, "high"))
    names = [(c.topic, c.to_clean.eligible) for c in manager.list_cleanable()]
    assert names == [("high", True), ("low", False)]


def test_min_compaction_lag_keeps_young_segments_out_of_the_range(manager, clock):
    log = compacted_log(manager, configs={"min.compaction.lag.ms": "60000"})
    for round_ in range(3):
        for k in range(4):
            log.append(keyed(b"k%d" % k, b"v", timestamp_ms=clock.time_ms()))
        log.roll()
        clock.advance(40_000)
    # Segment largest timestamps: now-120 s, now-80 s, now-40 s: only the first two are old enough.
    [entry] = manager.list_cleanable()
    assert entry.to_clean.first_uncleanable_offset == 8
    taken = manager.create_snapshot("c", 0)
    assert [s.base_offset for s in taken.manifest.segments] == [0, 4]


def test_max_compaction_lag_makes_a_clean_enough_log_must_clean(manager, clock):
    log = compacted_log(manager, configs={"max.compaction.lag.ms": "1000", "min.cleanable.dirty.ratio": "0.9"})
    for k in range(4):
        log.append(keyed(b"k%d" % k, b"v", timestamp_ms=clock.time_ms()))
    log.roll()
    taken = manager.create_snapshot("c", 0)
    hand_clean(taken.path)
    manager.commit_cleaned(taken.manifest.snapshot_id)
    clock.advance(10)
    log.append(keyed(b"k0", b"w", timestamp_ms=clock.time_ms()))
    log.roll()
    [entry] = manager.list_cleanable()
    assert entry.to_clean.dirty_ratio < 0.9 and not entry.to_clean.must_clean
    clock.advance(5_000)
    [entry] = manager.list_cleanable()
    assert entry.to_clean.must_clean and entry.to_clean.eligible
    # now - max.compaction.lag.ms - the dirty segment's first batch timestamp (NOW + 10)
    assert entry.to_clean.compaction_delay_ms == (NOW_MS + 5_010 - 1_000) - (NOW_MS + 10)


def test_snapshot_refuses_delete_topics_and_empty_ranges(manager):
    manager.create_topic("plain", 1)
    with pytest.raises(NotCleanableError, match="not compacted"):
        manager.create_snapshot("plain", 0)
    log = compacted_log(manager)
    log.append(keyed(b"a", b"b"))
    with pytest.raises(NotCleanableError, match="nothing to clean"):
        manager.create_snapshot("c", 0)
    assert not os.listdir(os.path.join(os.path.dirname(log.dir), SNAPSHOTS_DIR_NAME))


def committed_log_changes_nothing(log, before) -> None:
    assert replay(log) == before


def test_commit_after_appends_and_rolls_keeps_the_new_data(manager):
    log = compacted_log(manager)
    written = fill(log)
    taken = manager.create_snapshot("c", 0)
    hand_clean(taken.path)
    log.append(keyed(b"k1", b"late"))
    log.roll()
    log.append(keyed(b"k2", b"later"))
    manager.commit_cleaned(taken.manifest.snapshot_id)
    records = replay(log)
    assert latest((k, v) for _, k, v in records) == latest(written + [(b"k1", b"late"), (b"k2", b"later")])
    assert [o for o, _, _ in records][-3:] == [12, 13, 14]


def test_commit_after_delete_records_is_refused_and_changes_nothing(manager):
    log = compacted_log(manager)
    fill(log)
    taken = manager.create_snapshot("c", 0)
    hand_clean(taken.path)
    log.delete_records(2)
    before = replay(log)
    with pytest.raises(StaleCleaningResultError, match="log start offset moved from 0 to 2"):
        manager.commit_cleaned(taken.manifest.snapshot_id)
    committed_log_changes_nothing(log, before)
    assert os.path.exists(taken.path)
    assert not [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]


def test_commit_after_retention_deleted_a_segment_is_refused(manager):
    log = compacted_log(manager)
    fill(log)
    taken = manager.create_snapshot("c", 0)
    hand_clean(taken.path)
    log.delete_records(4)
    log.delete_old_segments()
    before = replay(log)
    with pytest.raises(StaleCleaningResultError, match="log start offset moved"):
        manager.commit_cleaned(taken.manifest.snapshot_id)
    committed_log_changes_nothing(log, before)


def test_a_second_commit_and_a_second_cleaning_are_refused(manager):
    log = compacted_log(manager)
    fill(log)
    first = manager.create_snapshot("c", 0)
    second = manager.create_snapshot("c", 0)
    hand_clean(first.path)
    hand_clean(second.path)
    manager.commit_cleaned(first.manifest.snapshot_id)
    with pytest.raises(StaleCleaningResultError, match="already committed"):
        manager.commit_cleaned(first.manifest.snapshot_id)
    before = replay(log)
    with pytest.raises(StaleCleaningResultError, match="segment 0"):
        manager.commit_cleaned(second.manifest.snapshot_id)
    committed_log_changes_nothing(log, before)
    assert manager.cleaner_statistics().commits_refused_count == 2


def test_a_snapshot_from_before_a_restart_is_checked_by_checksums(tmp_path, clock):
    first = LogManager([str(tmp_path / "d0")], clock=clock, intervals=EVERY_PASS)
    first.startup()
    log = compacted_log(first)
    fill(log)
    taken = first.create_snapshot("c", 0)
    hand_clean(taken.path)
    first.shutdown()
    again = LogManager([str(tmp_path / "d0")], clock=clock, intervals=EVERY_PASS)
    again.startup()
    try:
        outcome = again.commit_cleaned(taken.manifest.snapshot_id)
        assert outcome.cleaned_up_to_offset == 12
    finally:
        again.shutdown()


def damage(taken, edit) -> None:
    path = os.path.join(taken.path, "result.json")
    with open(path) as file:
        result = json.load(file)
    edit(result)
    write_result(taken.path, result)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r["output_segments"][0].update(crc32c="00000000"), "is damaged"),
        (lambda r: r.update(dry_run=True), "dry-run"),
        (lambda r: r.update(replaced_segments=[4]), "prefix"),
        (lambda r: r.update(cleaned_up_to_offset=99), "outside"),
        (lambda r: r.update(cleaned_up_to_offset=r["cleaned_up_to_offset"] - 1), "falls short of the end"),
        (lambda r: r["input_segments"][0].update(size_bytes=1), "input_segments differ"),
        (lambda r: r.update(snapshot_id="other"), "not 'c-0"),
        (lambda r: r.pop("output_segments"), "missing"),
        (lambda r: r["output_segments"][0].update(file="../x.log"), "Kafka name"),
    ],
)
def test_a_damaged_result_is_refused_and_changes_nothing(manager, edit, message):
    log = compacted_log(manager)
    fill(log)
    taken = manager.create_snapshot("c", 0)
    hand_clean(taken.path)
    damage(taken, edit)
    before = replay(log)
    with pytest.raises(InvalidCleaningResultError, match=message):
        manager.commit_cleaned(taken.manifest.snapshot_id)
    committed_log_changes_nothing(log, before)


def test_a_result_that_drops_the_last_batch_of_the_range_is_refused(manager):
    log = compacted_log(manager)
    fill(log)
    taken = manager.create_snapshot("c", 0)
    hand_clean(taken.path, keep=lambda offset, key: offset != 11)
    before = replay(log)
    with pytest.raises(InvalidCleaningResultError, match="last batch"):
        manager.commit_cleaned(taken.manifest.snapshot_id)
    committed_log_changes_nothing(log, before)
    assert not [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]


def test_corrupt_output_batches_are_refused(manager):
    log = compacted_log(manager)
    fill(log)
    taken = manager.create_snapshot("c", 0)
    result = hand_clean(taken.path)
    output = result["output_segments"][-1]
    path = os.path.join(taken.path, "cleaned", output["file"])
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF  # the CRC no longer matches; the result's file checksum is made to
    open(path, "wb").write(data)
    from seglog.records import crc32c

    damage(taken, lambda r: r["output_segments"][-1].update(crc32c=f"{crc32c(bytes(data)):08x}"))
    with pytest.raises(InvalidCleaningResultError, match="not valid batches"):
        manager.commit_cleaned(taken.manifest.snapshot_id)


def test_an_empty_first_group_gets_an_empty_segment(manager):
    log = compacted_log(manager)
    written = fill(log)  # segment 0 holds only superseded records
    taken = manager.create_snapshot("c", 0)
    result = hand_clean(taken.path)
    assert result["output_segments"][0]["base_offset"] == 8
    manager.commit_cleaned(taken.manifest.snapshot_id)
    assert [s.base_offset for s in log.segments_snapshot()] == [0, 8, 12]
    assert log.segments_snapshot()[0].size_in_bytes == 0
    assert latest((k, v) for _, k, v in replay(log)) == latest(written)
    assert log.offset_for_timestamp(NOW_MS).offset == 8


def test_a_partial_result_replaces_a_prefix_and_checkpoints_its_end(manager, tmp_path):
    log = compacted_log(manager)
    fill(log)
    taken = manager.create_snapshot("c", 0)
    hand_clean(taken.path, replaced_count=2)
    outcome = manager.commit_cleaned(taken.manifest.snapshot_id)
    assert outcome.cleaned_up_to_offset == 8 and outcome.replaced_segment_count == 2
    assert manager.list_cleanable()[0].to_clean.first_dirty_offset == 8


def test_drop_and_expiry_remove_snapshots(manager, clock):
    log = compacted_log(manager)
    fill(log)
    dropped = manager.create_snapshot("c", 0)
    assert manager.drop_snapshot(dropped.manifest.snapshot_id) is True
    assert manager.drop_snapshot(dropped.manifest.snapshot_id) is False
    assert not os.path.exists(dropped.path)
    with pytest.raises(SnapshotNotFoundError):
        manager.commit_cleaned(dropped.manifest.snapshot_id)
    old = manager.create_snapshot("c", 0)
    manager.run_maintenance()
    assert os.path.exists(old.path)
    clock.advance(3_600_000)
    manager.run_maintenance()
    assert not os.path.exists(old.path)
    stats = manager.cleaner_statistics()
    assert (stats.snapshots_dropped_count, stats.snapshots_expired_count, stats.open_snapshot_count) == (1, 1, 0)


@pytest.mark.parametrize("bad", ["", "..", "../x", "a/b", ".hidden", "x" * 201])
def test_bad_snapshot_ids_are_invalid(manager, bad):
    with pytest.raises(InvalidSnapshotIdError):
        manager.commit_cleaned(bad)


def test_start_up_removes_incomplete_snapshots_and_ignores_the_directory(tmp_path, clock):
    first = LogManager([str(tmp_path / "d0")], clock=clock, intervals=EVERY_PASS)
    first.startup()
    fill(compacted_log(first))
    complete = first.create_snapshot("c", 0)
    first.shutdown()
    root = tmp_path / "d0" / SNAPSHOTS_DIR_NAME
    (root / "c-0-1-abcd").mkdir()
    (root / "c-0-1-abcd" / "00000000000000000000.log").write_bytes(b"x")
    again = LogManager([str(tmp_path / "d0")], clock=clock, intervals=EVERY_PASS)
    again.startup()
    try:
        assert sorted(os.listdir(root)) == [complete.manifest.snapshot_id]
        assert again.statistics().log_dirs[0].ignored_entry_count == 0
        assert again.cleaner_statistics().incomplete_snapshots_removed_count == 1
    finally:
        again.shutdown()


def test_statistics_carry_the_last_run_figures(manager, clock):
    log = compacted_log(manager)
    fill(log)
    taken = manager.create_snapshot("c", 0)
    hand_clean(taken.path)
    outcome = manager.commit_cleaned(taken.manifest.snapshot_id)
    [partition] = manager.cleaner_statistics().partitions
    assert partition.run_count == 1 and partition.last_records_read == 12 and partition.last_records_kept == 4
    assert partition.bytes_reclaimed_total == outcome.bytes_before - outcome.bytes_after
    assert partition.last_map_utilization == 0.25 and partition.last_engine == "test hand_clean"
    assert partition.last_success_time_ms == clock.time_ms()


def test_retention_stays_off_for_compact_only_and_on_for_compact_delete(manager, clock):
    retention = {"retention.ms": "1000", "retention.bytes": "1"}
    compact_only = compacted_log(manager, "only", retention)
    both = compacted_log(manager, "both", {**retention, "cleanup.policy": "compact,delete"})
    for log in (compact_only, both):
        fill(log, rounds=2)
    clock.advance(10_000)
    assert compact_only.delete_old_segments() == 0
    assert both.delete_old_segments() == 3  # every segment, the active one too (a roll first)
    assert compact_only.log_start_offset == 0 and both.log_start_offset == both.log_end_offset


def test_service_wide_figures_for_the_metrics_hook(manager, clock):
    log = compacted_log(manager)
    fill(log)
    assert manager.cleaner_statistics().last_commit_time_ms == 0
    taken = manager.create_snapshot("c", 0)
    hand_clean(taken.path)
    clock.advance(5)
    outcome = manager.commit_cleaned(taken.manifest.snapshot_id)
    stats = manager.cleaner_statistics()
    assert stats.dirty_ratios == {("c", 0): 0.0}
    assert stats.bytes_reclaimed_total == outcome.bytes_before - outcome.bytes_after
    assert stats.last_commit_time_ms == NOW_MS + 5
    assert (stats.offset_map_utilization, stats.offset_map_collision_ratio) == (0.25, 0.0)


def test_deleting_a_topic_drops_its_snapshots(manager):
    fill(compacted_log(manager))
    fill(compacted_log(manager, "other"))
    gone = manager.create_snapshot("c", 0)
    kept = manager.create_snapshot("other", 0)
    manager.delete_topic("c")
    assert not os.path.exists(gone.path) and os.path.exists(kept.path)
    assert manager.cleaner_statistics().open_snapshot_count == 1


def test_an_output_that_is_a_symlink_is_refused(manager):
    log = compacted_log(manager)
    fill(log)
    taken = manager.create_snapshot("c", 0)
    result = hand_clean(taken.path)
    output = os.path.join(taken.path, "cleaned", result["output_segments"][0]["file"])
    os.rename(output, output + ".real")
    os.symlink(output + ".real", output)
    before = replay(log)
    with pytest.raises(InvalidCleaningResultError, match="not a regular file"):
        manager.commit_cleaned(taken.manifest.snapshot_id)
    committed_log_changes_nothing(log, before)


def test_a_result_is_refused_and_its_snapshot_dropped_once_the_topic_is_no_longer_compacted(manager):
    log = compacted_log(manager)
    fill(log)
    taken = manager.create_snapshot("c", 0)
    hand_clean(taken.path)
    manager.alter_topic_configs("c", {"cleanup.policy": "delete"})
    before = replay(log)
    with pytest.raises(StaleCleaningResultError, match="no longer compacted .cleanup.policy=delete."):
        manager.commit_cleaned(taken.manifest.snapshot_id)
    committed_log_changes_nothing(log, before)
    assert len(before) == 13  # every superseded record is still there
    assert not os.path.exists(taken.path)
    assert manager.cleaner_statistics().commits_refused_count == 1
    with pytest.raises(SnapshotNotFoundError):
        manager.commit_cleaned(taken.manifest.snapshot_id)


def test_the_swap_itself_refuses_a_log_no_longer_compacted(manager):
    """The manager's early check and the change can interleave; the swap checks again under the
    log lock that ``update_config`` takes, so a change just before it still wins."""
    log = compacted_log(manager)
    fill(log)
    taken = manager.create_snapshot("c", 0)
    hand_clean(taken.path)
    log.update_config(LogConfig.from_properties({"cleanup.policy": "delete"}))
    before = replay(log)
    with pytest.raises(StaleCleaningResultError, match="no longer compacted"):
        install_cleaned(log, taken.path, taken.manifest, expected_segments=None, fs=REAL_FS)
    committed_log_changes_nothing(log, before)
    assert not [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]


class ResultReadFailsFS(FileSystem):
    """Fails opening result.json with an error no commit path names (an exhausted interpreter's
    MemoryError, a bug's RuntimeError), ``failures`` times."""

    failures = 0
    error: type[BaseException] = MemoryError

    def open(self, path, flags, mode=0o644):
        if path.endswith("result.json") and self.failures:
            self.failures -= 1
            raise self.error("injected while reading result.json")
        return super().open(path, flags, mode)


@pytest.mark.parametrize("error", [MemoryError, RuntimeError])
def test_a_commit_failing_with_any_error_releases_its_snapshot(tmp_path, clock, error):
    """Whatever a commit raises, its claim on the snapshot goes: the next commit and a drop are
    not refused as 'being committed or removed by another call'."""
    fs = ResultReadFailsFS()
    fs.error = error
    started = LogManager([str(tmp_path / "d0")], clock=clock, intervals=EVERY_PASS, fs=fs)
    started.startup()
    try:
        log = compacted_log(started)
        written = fill(log)
        first = started.create_snapshot("c", 0)
        hand_clean(first.path)
        fs.failures = 1
        with pytest.raises(error, match="injected"):
            started.commit_cleaned(first.manifest.snapshot_id)
        assert started.commit_cleaned(first.manifest.snapshot_id).cleaned_up_to_offset == 12
        assert latest((k, v) for _, k, v in replay(log)) == latest(written)
        fill(compacted_log(started, "d"))
        second = started.create_snapshot("d", 0)
        hand_clean(second.path)
        fs.failures = 1
        with pytest.raises(error):
            started.commit_cleaned(second.manifest.snapshot_id)
        assert started.drop_snapshot(second.manifest.snapshot_id)
    finally:
        started.shutdown()


class RemovalFailsThenRacesFS(FileSystem):
    """Fails the first unlink inside the cleaning snapshots with EIO; the directory going offline
    for it then closes the log's descriptors, and at the first of those closes (after the failed
    removal released its claim, before the commit's finally) another call claims the snapshot:
    ``race`` runs a drop in a thread that holds its claim inside its own removal until
    ``let_go`` is set."""

    def __init__(self) -> None:
        self.armed = self.failed = self.raced = False
        self.holding = threading.Event()
        self.let_go = threading.Event()
        self.race = None

    def unlink(self, path):
        if SNAPSHOTS_DIR_NAME in path:
            if self.armed:
                self.armed, self.failed = False, True
                raise OSError(errno.EIO, "injected", path)
            if self.raced and threading.current_thread().name == "racing-drop" and not self.holding.is_set():
                self.holding.set()
                assert self.let_go.wait(30)
        return super().unlink(path)

    def close(self, fd):
        if self.failed and not self.raced:
            self.raced = True
            self.race()
            assert self.holding.wait(30)
        return super().close(fd)


def test_a_commit_never_releases_a_claim_another_call_took_after_its_failed_removal(tmp_path, clock):
    """A commit whose removal fails releases its claim there and takes the directory offline; a
    drop claiming the snapshot meanwhile keeps its claim through the commit's finally, so a third
    call is refused as 'being committed or removed by another call' until the drop is done."""
    fs = RemovalFailsThenRacesFS()
    started = LogManager([str(tmp_path / "d0")], clock=clock, intervals=EVERY_PASS, fs=fs)
    started.startup()
    outcomes: list[object] = []
    racing = threading.Thread(name="racing-drop", target=lambda: outcomes.append(started.drop_snapshot(snapshot_id)))
    try:
        log = compacted_log(started)
        fill(log)
        taken = started.create_snapshot("c", 0)
        snapshot_id = taken.manifest.snapshot_id
        hand_clean(taken.path)
        fs.armed, fs.race = True, racing.start
        with pytest.raises(LogDirOfflineError, match="removing cleaning snapshot"):
            started.commit_cleaned(snapshot_id)
        assert fs.raced and fs.holding.is_set()  # the drop holds its claim inside its removal
        with pytest.raises(StaleCleaningResultError, match="being committed or removed by another call"):
            started.drop_snapshot(snapshot_id)
        fs.let_go.set()
        racing.join(30)
        assert outcomes == [True] and not os.path.exists(taken.path)
        assert not started.drop_snapshot(snapshot_id)
    finally:
        fs.let_go.set()
        if racing.is_alive():
            racing.join(30)
        started.shutdown()
