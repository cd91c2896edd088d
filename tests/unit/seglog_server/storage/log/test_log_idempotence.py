"""Idempotent appends on a real Log: duplicates answered with their original offsets, snapshots
at roll and close, the state rebuilt after a clean or unclean restart (damaged snapshots
included), snapshots removed with their segments, truncation, expiry; and a property: any
interleaving of new batches, retries, rolls and restarts writes every record exactly once."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import NOW_MS, batch, config, open_log, values_of

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import OutOfOrderSequenceError
from seglog_server.storage.base.fs import REAL_FS, FileSystem
from seglog_server.storage.log.unified_log import Log
from seglog_server.storage.producers.producer_snapshot import read_snapshot, snapshot_path
from seglog_server.storage.producers.producer_state_loader import SNAPSHOTS_RETAINED, list_snapshot_offsets

PID = 4000


def idem(sequence: int, *values: bytes, pid: int = PID, epoch: int = 0) -> bytes:
    return batch(*(values or (b"v%d" % sequence,)), producer_id=pid, producer_epoch=epoch, base_sequence=sequence)


def snapshots(log: Log) -> list[int]:
    return list_snapshot_offsets(REAL_FS, log.dir)


def crash(log: Log, clock: FakeClock) -> Log:
    """Drops the log as kill -9 would (no close, no snapshot) and loads it with recovery."""
    log.close_handlers()
    return open_log(log.dir, clock, log.config, had_clean_shutdown=False, recovery_point=0,
                    log_start_offset=log.log_start_offset)


def restart(log: Log, clock: FakeClock) -> Log:
    log.flush()
    log.close()
    return open_log(log.dir, clock, log.config, had_clean_shutdown=True, recovery_point=log.recovery_point,
                    log_start_offset=log.log_start_offset)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW_MS)


def test_a_retried_batch_gets_its_original_offsets_and_nothing_is_appended(tmp_path, clock):
    log = open_log(tmp_path, clock)
    first = log.append(idem(0, b"a", b"b"))
    log.append(idem(2, b"c"))
    retried = log.append(idem(0, b"a", b"b"))
    assert (retried.base_offset, retried.last_offset) == (first.base_offset, first.last_offset) == (0, 1)
    assert (retried.record_count, retried.size_bytes) == (0, 0)
    assert log.log_end_offset == 3
    assert values_of(log.read(0, 10_000).records) == [b"a", b"b", b"c"]
    assert log.producer_state_statistics().duplicate_count == 1


def test_out_of_order_batches_are_refused_and_nothing_is_written(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(idem(0))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idem(5))
    assert log.log_end_offset == 1


def test_plain_batches_pass_untouched_beside_idempotent_ones(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"x"))
    log.append(batch(b"x"))
    log.append(idem(0))
    assert log.log_end_offset == 3


def test_roll_writes_a_kafka_snapshot_named_by_the_new_base_offset(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(idem(0, b"a", b"b"))
    base = log.roll()
    assert base == 2 and snapshots(log) == [2]
    entries = read_snapshot(REAL_FS, snapshot_path(log.dir, 2), 2)
    assert [(e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.offset_delta) for e in entries] == [
        (PID, 0, 1, 1, 1)
    ]


def test_close_writes_a_snapshot_at_the_log_end_offset(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(idem(0))
    log.close()
    assert list_snapshot_offsets(REAL_FS, str(tmp_path)) == [1]


def test_clean_restart_loads_the_state_from_the_snapshot(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(idem(0))
    second = log.append(idem(1, b"a", b"b"))
    log = restart(log, clock)
    retried = log.append(idem(1, b"a", b"b"))
    assert (retried.base_offset, retried.last_offset) == (second.base_offset, second.last_offset)
    assert log.log_end_offset == 3
    log.append(idem(3))


def test_crash_rebuilds_the_state_by_replaying_batches_after_the_last_snapshot(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(idem(0))
    log.roll()  # snapshot at 1
    after = log.append(idem(1, b"a", b"b"))  # only in the log
    log = crash(log, clock)
    retried = log.append(idem(1, b"a", b"b"))
    assert (retried.base_offset, retried.last_offset) == (after.base_offset, after.last_offset)
    assert log.log_end_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idem(7))


def test_a_damaged_newest_snapshot_is_deleted_and_an_older_one_plus_the_log_used(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(idem(0))
    log.roll()  # snapshot 1
    log.append(idem(1))
    log.roll()  # snapshot 2
    last = log.append(idem(2))
    log.close()  # snapshot 3
    with open(snapshot_path(str(tmp_path), 3), "r+b") as f:
        f.seek(20)
        f.write(b"\xff\xff")
    log = open_log(tmp_path, clock, had_clean_shutdown=True)
    assert snapshots(log) == [1, 2]
    retried = log.append(idem(2))
    assert retried.base_offset == last.base_offset and log.log_end_offset == 3


def test_every_snapshot_damaged_rebuilds_from_the_whole_log(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(idem(0))
    log.roll()
    log.append(idem(1))
    log.close()
    for offset in list_snapshot_offsets(REAL_FS, str(tmp_path)):
        with open(snapshot_path(str(tmp_path), offset), "wb") as f:
            f.write(b"\x00\x01garbage")
    log = open_log(tmp_path, clock, had_clean_shutdown=True)
    assert snapshots(log) == []
    assert log.append(idem(1)).base_offset == 1  # the duplicate, found by the replay
    assert log.log_end_offset == 2


def test_a_snapshot_above_the_log_end_is_deleted_on_load(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(idem(0))
    log.close()
    stray = snapshot_path(str(tmp_path), 50)
    os.link(snapshot_path(str(tmp_path), 1), stray)
    log = open_log(tmp_path, clock, had_clean_shutdown=True)
    assert not os.path.exists(stray)


def test_only_the_newest_snapshots_are_kept(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for sequence in range(SNAPSHOTS_RETAINED + 3):
        log.append(idem(sequence))
        log.roll()
    assert snapshots(log) == list(range(4, SNAPSHOTS_RETAINED + 4))


def test_retention_deletes_the_snapshots_below_the_new_log_start(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(idem(0))
    log.roll()
    log.append(idem(1))
    log.roll()
    assert snapshots(log) == [1, 2]
    log.delete_records(2)
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == 2 and snapshots(log) == [2]


def test_truncation_rebuilds_the_state_below_the_cut(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(idem(0))
    log.roll()
    log.append(idem(1))
    log.truncate_to(1)
    # The cut batch is gone from the log and from the state: sequence 1 is new again.
    assert log.append(idem(1, b"again")).base_offset == 1
    assert values_of(log.read(1, 10_000).records) == [b"again"]


def test_idle_producers_expire_after_producer_id_expiration_ms(tmp_path, clock):
    log = open_log(tmp_path, clock, config(producer_id_expiration_ms=1000))
    log.append(idem(0, b"a"))
    assert log.remove_expired_producers() == 0
    clock.advance(1000)
    assert log.remove_expired_producers() == 1
    # Forgotten: the partition now takes any sequence from this producer id (Kafka's rule).
    log.append(idem(9))
    assert log.producer_state_statistics().producer_count == 1


def test_expired_producers_are_left_out_when_a_snapshot_is_loaded(tmp_path, clock):
    log = open_log(tmp_path, clock, config(producer_id_expiration_ms=1000))
    log.append(idem(0))
    log.close()
    clock.advance(5000)
    log = open_log(tmp_path, clock, config(producer_id_expiration_ms=1000), had_clean_shutdown=True)
    assert log.producer_state_statistics().producer_count == 0


# -- the property ------------------------------------------------------------------------------

_ACTION = st.one_of(
    st.tuples(st.just("new"), st.integers(0, 2)),  # producer 0..2 sends its next batch
    st.tuples(st.just("retry"), st.integers(0, 2), st.integers(0, 7)),  # ... resends one it sent
    st.tuples(st.just("roll")),
    st.tuples(st.just("restart"), st.booleans()),  # clean, or a crash
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_ACTION, min_size=1, max_size=40), st.lists(st.integers(1, 3), min_size=8, max_size=8))
def test_any_interleaving_of_resends_writes_each_record_once_in_order(tmp_path_factory, actions, sizes):
    clock = FakeClock(NOW_MS)
    log = open_log(tmp_path_factory.mktemp("log"), clock)
    sent: dict[int, list[tuple[bytes, tuple[int, int]]]] = {0: [], 1: [], 2: []}  # producer -> (batch, offsets)
    next_sequence = {0: 0, 1: 0, 2: 0}
    expected: list[bytes] = []
    for action in actions:
        if action[0] == "new":
            producer = action[1]
            count = sizes[len(sent[producer]) % len(sizes)]
            values = [b"p%d-s%d" % (producer, next_sequence[producer] + i) for i in range(count)]
            data = idem(next_sequence[producer], *values, pid=100 + producer)
            info = log.append(data)
            assert info.record_count == count  # a new batch is always written
            sent[producer].append((data, (info.base_offset, info.last_offset)))
            next_sequence[producer] += count
            expected += values
        elif action[0] == "retry":
            history = sent[action[1]]
            if not history:
                continue
            data, original = history[-1 - action[2] % len(history)]
            end = log.log_end_offset
            try:
                info = log.append(data)
            except OutOfOrderSequenceError:
                pass  # too old to be recognised: refused, never written again
            else:
                assert (info.base_offset, info.last_offset) == original
            assert log.log_end_offset == end
        elif action[0] == "roll":
            log.roll()
        else:
            log = restart(log, clock) if action[1] else crash(log, clock)
    stored: list[bytes | None] = []
    while len(stored) < log.log_end_offset:  # a read returns one segment's batches
        stored += values_of(log.read(len(stored), 10_000_000).records)
    assert stored == expected
    log.close()


def test_expiry_measures_idleness_by_the_service_clock_not_record_timestamps(tmp_path, clock):
    # Records stamped in 1970 (CreateTime): Kafka would expire their producer at the next check.
    log = open_log(tmp_path, clock, config(producer_id_expiration_ms=1000))
    log.append(batch(b"old", timestamps=5, producer_id=PID, producer_epoch=0, base_sequence=0))
    assert log.remove_expired_producers() == 0
    assert log.append(batch(b"old", timestamps=5, producer_id=PID, producer_epoch=0, base_sequence=0)).record_count == 0


class _CountingFs(FileSystem):
    def __init__(self) -> None:
        self.listdir_count = 0

    def listdir(self, path: str) -> list[str]:
        self.listdir_count += 1
        return super().listdir(path)


def test_rolls_and_retention_keep_snapshots_without_listing_the_directory(tmp_path, clock):
    # A listing per roll grows with the directory: 10,000 tiny segments made start-up benches
    # quadratic. The snapshot offsets are kept in memory instead.
    fs = _CountingFs()
    log = open_log(tmp_path, clock, fs=fs)
    listed = fs.listdir_count
    for sequence in range(20):
        log.append(idem(sequence))
        log.roll()
    log.delete_records(18)
    log.delete_old_segments()
    assert fs.listdir_count == listed
    assert snapshots(log) == [18, 19, 20]


def test_a_restart_without_appends_keeps_the_snapshot_file_as_it_is(tmp_path, clock):
    # Rewriting it (truncate + write) costs an ext4 flush per partition per restart.
    log = open_log(tmp_path, clock)
    log.append(idem(0))
    log = restart(log, clock)
    before = os.stat(snapshot_path(str(tmp_path), 1))
    log = restart(log, clock)
    log.close()
    after = os.stat(snapshot_path(str(tmp_path), 1))
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
