"""LeaderEpochCache: Kafka's rules for (epoch, start offset) entries against a simple model, the
file kept equal to the entries, and the load's checks: a bad file is reported and rebuilt from the
partitionLeaderEpoch of the log's own batches."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import NOW_MS, batch, open_log, reopen

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.format.leader_epoch_checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    EpochEntry,
    LeaderEpochCheckpointFile,
    format_epochs,
)
from seglog_server.storage.log.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochCache,
)


def _cache(tmp_path, entries=()) -> LeaderEpochCache:
    return LeaderEpochCache(LeaderEpochCheckpointFile(str(tmp_path)), entries)


# -- Kafka's rules, named ---------------------------------------------------------------------
def test_assign_keeps_the_first_offset_of_an_epoch(tmp_path):
    cache = _cache(tmp_path)
    assert cache.assign(2, 10)
    assert not cache.assign(2, 15)  # a later offset of the latest epoch changes nothing
    assert cache.entries() == [EpochEntry(2, 10)]


def test_assign_of_the_latest_epoch_at_a_lower_offset_moves_its_start(tmp_path):
    cache = _cache(tmp_path, [EpochEntry(1, 0), EpochEntry(2, 10)])
    assert cache.assign(2, 5)
    assert cache.entries() == [EpochEntry(1, 0), EpochEntry(2, 5)]


def test_assign_drops_the_entries_a_new_one_contradicts(tmp_path):
    cache = _cache(tmp_path, [EpochEntry(1, 0), EpochEntry(3, 10), EpochEntry(5, 20)])
    assert cache.assign(4, 15)  # epoch 5 at 20 contradicts it: dropped
    assert cache.entries() == [EpochEntry(1, 0), EpochEntry(3, 10), EpochEntry(4, 15)]
    assert cache.assign(6, 10)  # 3@10 and 4@15 start at or after it
    assert cache.entries() == [EpochEntry(1, 0), EpochEntry(6, 10)]


def test_assign_refuses_negative_values(tmp_path):
    with pytest.raises(ValueError, match="must be >= 0"):
        _cache(tmp_path).assign(-1, 0)


def test_end_offset_for_follows_kafka(tmp_path):
    cache = _cache(tmp_path, [EpochEntry(2, 6), EpochEntry(4, 10), EpochEntry(7, 30)])
    assert cache.end_offset_for(7, 45) == (7, 45)  # the latest epoch ends at the log end
    assert cache.end_offset_for(4, 45) == (4, 30)
    assert cache.end_offset_for(5, 45) == (4, 30)  # an unknown epoch between: the floor's end
    assert cache.end_offset_for(1, 45) == (1, 6)  # below every entry: the first start
    assert cache.end_offset_for(8, 45) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert cache.end_offset_for(UNDEFINED_EPOCH, 45) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert _cache(tmp_path / "x").end_offset_for(1, 5) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_truncate_from_start_keeps_an_entry_at_the_start(tmp_path):
    cache = _cache(tmp_path, [EpochEntry(2, 6), EpochEntry(4, 10)])
    assert not cache.truncate_from_start(6)
    assert cache.truncate_from_start(12)
    assert cache.entries() == [EpochEntry(4, 12)]


# -- against a model ----------------------------------------------------------------------------
class Model:
    """Kafka's rules written as plainly as possible: a dict, whole-map filters."""

    def __init__(self) -> None:
        self.starts: dict[int, int] = {}

    def assign(self, epoch: int, start: int) -> None:
        if self.starts:
            latest = max(self.starts)
            if latest == epoch and start >= self.starts[latest]:
                return
        self.starts = {e: s for e, s in self.starts.items() if e < epoch and s < start}
        self.starts[epoch] = start

    def truncate_from_end(self, end: int) -> None:
        self.starts = {e: s for e, s in self.starts.items() if s < end}

    def truncate_from_start(self, start: int) -> None:
        below = {e: s for e, s in self.starts.items() if s <= start}
        if below:
            self.starts = {e: s for e, s in self.starts.items() if s > start}
            self.starts[max(below)] = start

    def entries(self) -> list[EpochEntry]:
        return [EpochEntry(e, self.starts[e]) for e in sorted(self.starts)]

    def end_offset_for(self, epoch: int, log_end: int) -> tuple[int, int]:
        if not self.starts or epoch == UNDEFINED_EPOCH or epoch > max(self.starts):
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if epoch == max(self.starts):
            return (epoch, log_end)
        higher = min(e for e in self.starts if e > epoch)
        floor = [e for e in self.starts if e <= epoch]
        return (max(floor) if floor else epoch, self.starts[higher])


_operations = st.lists(st.one_of(
    st.tuples(st.just("assign"), st.integers(0, 12), st.integers(0, 60)),
    st.tuples(st.just("end"), st.integers(-1, 60)),
    st.tuples(st.just("start"), st.integers(0, 60)),
), max_size=25)


@settings(max_examples=200, deadline=None)
@given(_operations, st.integers(-1, 13))
def test_the_cache_and_its_file_agree_with_the_model(tmp_path_factory, operations, asked_epoch):
    directory = tmp_path_factory.mktemp("epochs")
    cache, model = _cache(directory), Model()
    for operation in operations:
        if operation[0] == "assign":
            cache.assign(operation[1], operation[2])
            model.assign(operation[1], operation[2])
        elif operation[0] == "end":
            cache.truncate_from_end(operation[1])
            if operation[1] >= 0:
                model.truncate_from_end(operation[1])
        else:
            cache.truncate_from_start(operation[1])
            model.truncate_from_start(operation[1])
        assert cache.entries() == model.entries()
    assert cache.end_offset_for(asked_epoch, 99) == model.end_offset_for(asked_epoch, 99)
    written = LeaderEpochCheckpointFile(str(directory)).read()
    # The file is written whenever the entries change; never written while they never did.
    assert written == cache.entries() or (written == [] and not (directory / LEADER_EPOCH_CHECKPOINT).exists())


# -- in the log: load, truncation, rebuild ----------------------------------------------------
@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW_MS)


def _stamped_log(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for epoch, count in ((0, 3), (2, 2), (5, 4)):
        for _ in range(count):
            log.append(batch(b"a", b"b"), leader_epoch=epoch)
    return log


EXPECTED = [EpochEntry(0, 0), EpochEntry(2, 6), EpochEntry(5, 10)]


def test_appends_record_each_epoch_once_in_the_file(tmp_path, clock):
    log = _stamped_log(tmp_path, clock)
    assert log.leader_epoch_entries() == EXPECTED
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_bytes() == format_epochs(EXPECTED)
    assert log.end_offset_for_epoch(2) == (2, 10)
    assert reopen(log, clock).leader_epoch_entries() == EXPECTED


@pytest.mark.parametrize("content", [
    b"0\n5\n0 0\n",  # count says five
    b"0\n2\n5 10\n2 6\n",  # out of order
    b"garbage\x00\xff",
    b"0\n1\n9 999999999999999999999999\n",
])
def test_a_bad_file_is_reported_and_rebuilt_from_the_batches(tmp_path, clock, caplog, content):
    log = _stamped_log(tmp_path, clock)
    log.flush()
    log.close()
    (tmp_path / LEADER_EPOCH_CHECKPOINT).write_bytes(content)
    with caplog.at_level(logging.WARNING):
        reloaded = open_log(tmp_path, clock)
    assert reloaded.leader_epoch_entries() == EXPECTED
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_bytes() == format_epochs(EXPECTED)
    assert any("rebuilding it from the partitionLeaderEpoch" in r.getMessage() for r in caplog.records)


def test_entries_past_the_log_end_are_cut_at_load(tmp_path, clock):
    log = _stamped_log(tmp_path, clock)
    log.flush()
    log.close()
    # A crash after the checkpoint of epoch 9 and before its first batch reached the log.
    LeaderEpochCheckpointFile(str(tmp_path)).write(EXPECTED + [EpochEntry(9, 18)])
    assert open_log(tmp_path, clock).leader_epoch_entries() == EXPECTED


def test_truncation_and_delete_records_move_the_entries(tmp_path, clock):
    log = _stamped_log(tmp_path, clock)
    log.truncate_to(8)
    assert log.leader_epoch_entries() == [EpochEntry(0, 0), EpochEntry(2, 6)]
    log.delete_records(7)
    assert log.leader_epoch_entries() == [EpochEntry(2, 7)]
    assert LeaderEpochCheckpointFile(str(tmp_path)).read() == [EpochEntry(2, 7)]
    log.truncate_fully_and_start_at(20)
    assert log.leader_epoch_entries() == []


def test_a_single_process_log_writes_no_checkpoint(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a"))
    log.truncate_to(0)
    log.append(batch(b"a"))
    log.delete_records(1)
    assert log.leader_epoch is None and log.leader_epoch_entries() == []
    assert not (tmp_path / LEADER_EPOCH_CHECKPOINT).exists()


# -- the epoch rule in the append (cluster mode) -------------------------------------------------
def _epochs_of_file(path) -> list[int]:
    from seglog.records import iter_batches

    return [b.partition_leader_epoch for b in iter_batches(path.read_bytes())]


def test_the_append_stamps_its_epoch_outside_the_crc_and_single_process_bytes_are_unchanged(tmp_path, clock):
    from seglog.records import iter_batches

    sent = batch(b"a", b"b")
    single = open_log(tmp_path / "single", clock)
    single.append(sent)
    stamped = open_log(tmp_path / "cluster", clock)
    stamped.append(sent, leader_epoch=7)
    single.flush()
    stamped.flush()
    segment = "00000000000000000000.log"
    single_bytes = (tmp_path / "single" / segment).read_bytes()
    stamped_bytes = (tmp_path / "cluster" / segment).read_bytes()
    assert single_bytes == sent  # a single process writes the batch as sent (epoch -1 here)
    assert stamped_bytes[:12] + stamped_bytes[16:] == sent[:12] + sent[16:]  # only bytes 12..16 differ
    assert _epochs_of_file(tmp_path / "single" / segment) == [-1]
    assert _epochs_of_file(tmp_path / "cluster" / segment) == [7]
    for written in iter_batches(stamped_bytes):
        written.ensure_valid()  # the CRC holds without a recompute


def test_an_append_admitted_before_an_epoch_change_cannot_land_after_it(tmp_path, clock):
    import threading

    from seglog_server.storage.base.errors import FencedLeaderEpochError

    log = open_log(tmp_path, clock)
    log.append(batch(b"first"), leader_epoch=0)
    outcome: list[object] = []

    def stale_owner_append() -> None:  # admitted under epoch 0 (the owner check passed then)
        try:
            outcome.append(log.append(batch(b"stale"), leader_epoch=0))
        except FencedLeaderEpochError as exc:
            outcome.append(exc)

    with log._lock:  # an append of epoch 0 queued behind the log's lock, then the epoch moves
        appender = threading.Thread(target=stale_owner_append)
        appender.start()
        assert log.advance_leader_epoch(1) == 1
    appender.join()
    (refused,) = outcome
    assert isinstance(refused, FencedLeaderEpochError)
    assert (refused.admitted_epoch, refused.current_epoch) == (0, 1)
    assert "epoch 0" in str(refused) and "epoch 1" in str(refused)
    assert log.log_end_offset == 1  # nothing written
    with pytest.raises(FencedLeaderEpochError):
        log.append(batch(b"later"), leader_epoch=0)
    assert log.append(batch(b"new owner"), leader_epoch=1).base_offset == 1
    assert log.advance_leader_epoch(0) == 1  # epochs only increase
    assert log.leader_epoch_entries() == [EpochEntry(0, 0), EpochEntry(1, 1)]


def test_a_newer_epoch_admitted_first_fences_the_older_one(tmp_path, clock):
    from seglog_server.storage.base.errors import FencedLeaderEpochError

    log = open_log(tmp_path, clock)
    log.append(batch(b"x"), leader_epoch=4)  # the cache moved before the push reached the log
    assert log.leader_epoch == 4
    with pytest.raises(FencedLeaderEpochError):
        log.append(batch(b"y"), leader_epoch=3)


def test_a_reloaded_log_refuses_an_epoch_below_the_one_it_holds(tmp_path, clock):
    from seglog_server.storage.base.errors import FencedLeaderEpochError

    log = _stamped_log(tmp_path, clock)
    reloaded = reopen(log, clock)
    assert reloaded.leader_epoch == 5
    with pytest.raises(FencedLeaderEpochError):
        reloaded.append(batch(b"z"), leader_epoch=2)
    assert reloaded.leader_epoch_entries() == EXPECTED


def test_a_failed_checkpoint_write_fails_the_append_before_its_batch(tmp_path, clock):
    import errno

    from tests.support.fault_fs import FaultFs

    from seglog_server.storage.base.errors import LogDirFullError

    fs = FaultFs()
    log = open_log(tmp_path, clock, fs=fs)
    log.append(batch(b"a"), leader_epoch=0)
    fs.fail("pwrite", errno.ENOSPC, path=LEADER_EPOCH_CHECKPOINT + ".tmp")
    with pytest.raises(LogDirFullError):
        log.append(batch(b"b"), leader_epoch=1)
    assert log.log_end_offset == 1 and log.leader_epoch_entries() == [EpochEntry(0, 0)]
    fs.heal()
    assert log.append(batch(b"b"), leader_epoch=1).base_offset == 1
    assert LeaderEpochCheckpointFile(str(tmp_path)).read() == [EpochEntry(0, 0), EpochEntry(1, 1)]


def test_a_missing_file_is_rebuilt_only_by_a_load_that_recovers_from_offset_zero(tmp_path, clock):
    # A move installs copied segments without the file and loads them from offset 0, unclean.
    log = _stamped_log(tmp_path, clock)
    log.flush()
    log.close()
    (tmp_path / LEADER_EPOCH_CHECKPOINT).unlink()
    clean = open_log(tmp_path, clock, had_clean_shutdown=True, recovery_point=18)
    assert clean.leader_epoch_entries() == []  # no walk of the log on a clean start
    clean.close()
    recovered = open_log(tmp_path, clock, had_clean_shutdown=False, recovery_point=0)
    assert recovered.leader_epoch_entries() == EXPECTED
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_bytes() == format_epochs(EXPECTED)


def test_a_single_process_log_recovered_from_zero_writes_no_checkpoint(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a"))
    log.flush()
    log.close()
    assert open_log(tmp_path, clock, had_clean_shutdown=False, recovery_point=0).leader_epoch_entries() == []
    assert not (tmp_path / LEADER_EPOCH_CHECKPOINT).exists()


@pytest.mark.parametrize("cut, end, start, kept", [
    (lambda log: log.truncate_to(8), 8, 0, [EpochEntry(0, 0), EpochEntry(2, 6)]),
    (lambda log: log.truncate_fully_and_start_at(20), 20, 20, []),
    (lambda log: log.delete_records(7), 18, 7, [EpochEntry(2, 7), EpochEntry(5, 10)]),
], ids=["truncate_to", "truncate_fully_and_start_at", "delete_records"])
def test_a_failed_checkpoint_write_in_a_cut_leaves_the_offsets_and_entries_at_the_cut(tmp_path, clock, caplog,
                                                                                        cut, end, start, kept):
    import errno

    from tests.support.fault_fs import FaultFs

    fs = FaultFs()
    log = open_log(tmp_path, clock, fs=fs)
    for epoch, count in ((0, 3), (2, 2), (5, 4)):
        for _ in range(count):
            log.append(batch(b"a", b"b"), leader_epoch=epoch)
    rule = fs.fail("pwrite", errno.ENOSPC, path=LEADER_EPOCH_CHECKPOINT + ".tmp")
    with caplog.at_level(logging.WARNING):
        cut(log)  # the segments are cut: the log follows them, whatever the checkpoint write did
    assert rule.hits == 1 and any("leader-epoch checkpoint not rewritten" in r.getMessage() for r in caplog.records)
    assert (log.log_end_offset, log.log_start_offset) == (end, start)
    assert log.leader_epoch_entries() == kept
    assert LeaderEpochCheckpointFile(str(tmp_path)).read() == EXPECTED  # stale until the next assign
    fs.heal()
    # The next append (epoch 5, the partition's) rewrites the stale file before its batch, even
    # when 5 is the latest entry's epoch already (delete_records), when nothing else would.
    assert log.append(batch(b"c"), leader_epoch=5).base_offset == end
    written = LeaderEpochCheckpointFile(str(tmp_path)).read()
    assert written == log.leader_epoch_entries() == (kept if kept and kept[-1].epoch == 5 else kept + [EpochEntry(5, end)])
    assert reopen(log, clock).leader_epoch_entries() == written


def test_a_new_ownership_epoch_is_announced_to_the_change_listener(tmp_path, clock):
    """Readers parked at the tail wake on it and ask who owns the partition now (fetch_rpcs.py)."""
    log = open_log(tmp_path, clock)
    changes: list = []
    log.set_change_listener(lambda topic, partition: changes.append((topic, partition)))
    assert log.advance_leader_epoch(0) == 0  # the first epoch seen
    assert log.advance_leader_epoch(2) == 2
    assert len(changes) == 2 and len(set(changes)) == 1
    assert log.advance_leader_epoch(2) == 2 and log.advance_leader_epoch(1) == 2  # no change: not announced
    assert len(changes) == 2
