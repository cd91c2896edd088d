"""Producer ids from the log manager: unique across restarts (blocks reserved on disk first), a
damaged block file not trusted, unique when log directories fail, are offline at a start or leave
``log_dirs`` (JBOD), none handed out without a durable block, and idle producers expired by the
maintenance pass."""

from __future__ import annotations

import errno
import os

import pytest
from tests.support.fault_fs import FaultFs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import NOW_MS

from seglog.records import RecordBatchBuilder
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import LogDirFullError, LogDirOfflineError
from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals
from seglog_server.storage.producers.producer_ids import BLOCK_SIZE, PRODUCER_ID_BLOCK_FILE, ProducerIdManager

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


# -- JBOD: a directory that fails, is offline at a start, or leaves log_dirs ------------------
def in_block_file_of(directory: str):
    """A FaultFs path test: the producer-id block file (or its tmp) of one directory."""
    prefix = os.path.abspath(directory) + os.sep
    return lambda path: path.startswith(prefix) and PRODUCER_ID_BLOCK_FILE in path


def start_with(dirs: list[str], clock: FakeClock, fs: FaultFs) -> LogManager:
    manager = LogManager(dirs, clock=clock, intervals=EVERY_PASS, fs=fs)
    manager.startup()
    return manager


def draw(manager: LogManager, count: int) -> list[int]:
    return [manager.init_producer_id()[0] for _ in range(count)]


def test_a_directory_failing_its_block_write_goes_offline_and_ids_go_on(tmp_path):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    fs = FaultFs()
    manager = start_with(dirs, FakeClock(NOW_MS), fs)
    given = draw(manager, 1)
    fs.fail("fsync", errno.EIO, path=in_block_file_of(dirs[0]))
    given += draw(manager, BLOCK_SIZE)  # the second block: d0 fails, d1 holds it
    assert len(set(given)) == len(given)
    assert [d.online for d in manager.statistics().log_dirs] == [False, True]
    manager.shutdown()


def test_a_restart_with_only_the_failed_directory_never_reissues_its_missed_block(tmp_path):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    fs = FaultFs()
    manager = start_with(dirs, FakeClock(NOW_MS), fs)
    given = draw(manager, 1)
    fs.fail("fsync", errno.EIO, path=in_block_file_of(dirs[0]))
    given += draw(manager, BLOCK_SIZE + 1)  # blocks 2 and 3 only in d1
    manager.shutdown()
    fs.heal()
    clock = FakeClock(NOW_MS + 10_000)
    manager = start_with(dirs[:1], clock, fs)  # d1 is gone: d0 holds block 1 only
    assert not set(draw(manager, BLOCK_SIZE + 1)) & set(given)
    manager.shutdown()


def test_a_directory_offline_at_start_cannot_hide_the_newest_block(tmp_path):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    fs = FaultFs()
    manager = start_with(dirs, FakeClock(NOW_MS), fs)
    given = draw(manager, 1)  # block 1 in both
    manager.shutdown()
    fs.fail("open", errno.EIO, path=os.path.join(os.path.abspath(dirs[1]), ".lock"))
    manager = start_with(dirs, FakeClock(NOW_MS + 10_000), fs)  # d1 offline: block 2 in d0 only
    given += draw(manager, BLOCK_SIZE)
    manager.shutdown()
    fs.heal()
    fs.fail("open", errno.EIO, path=os.path.join(os.path.abspath(dirs[0]), ".lock"))
    manager = start_with(dirs, FakeClock(NOW_MS + 20_000), fs)  # d0 offline, d1 back with block 1
    assert not set(draw(manager, BLOCK_SIZE)) & set(given)
    manager.shutdown()


def test_a_restart_trusts_a_block_whose_every_holder_is_back(tmp_path):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    fs = FaultFs()
    manager = start_with(dirs, FakeClock(NOW_MS), fs)
    fs.fail("fsync_dir", errno.EIO, path=os.path.abspath(dirs[0]))
    first = draw(manager, 1)[0]  # d0 is taken offline, d1 alone holds block 1
    manager.shutdown()
    fs.heal()
    manager = start_with(dirs[1:], FakeClock(NOW_MS), fs)
    assert draw(manager, 1) == [first + BLOCK_SIZE]  # no jump to the wall clock
    manager.shutdown()


@pytest.mark.parametrize(
    ("error", "refused"), [(errno.EIO, LogDirOfflineError), (errno.ENOSPC, LogDirFullError)]
)
def test_no_id_is_handed_out_without_a_durable_block(tmp_path, error, refused):
    dirs = [str(tmp_path / "d0")]
    fs = FaultFs()
    manager = start_with(dirs, FakeClock(NOW_MS), fs)
    fs.fail("fsync", error, path=in_block_file_of(dirs[0]), times=None)
    with pytest.raises(refused):
        manager.init_producer_id()
    assert manager.statistics().log_dirs[0].online == (error == errno.ENOSPC)
    fs.heal()
    if error == errno.ENOSPC:  # space is back: the same directory takes the block
        assert draw(manager, 1) == [NOW_MS * BLOCK_SIZE]
    manager.shutdown()


def test_a_block_missing_every_previous_holder_jumps_to_the_wall_clock(tmp_path):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    fs = FaultFs()
    manager = start_with(dirs, FakeClock(NOW_MS), fs)
    fs.fail("fsync", errno.ENOSPC, path=in_block_file_of(dirs[0]))
    given = draw(manager, 1)  # block 1 held by d1 alone (d0 full, still online)
    fs.fail("fsync", errno.ENOSPC, path=in_block_file_of(dirs[1]))
    given += draw(manager, BLOCK_SIZE)  # block 2 reaches d0 alone
    assert given[-1] >= NOW_MS * BLOCK_SIZE
    manager.shutdown()
    fs.heal()
    manager = start_with(dirs[1:], FakeClock(NOW_MS), fs)  # d1 alone, holding block 1
    assert not set(draw(manager, BLOCK_SIZE)) & set(given)
    manager.shutdown()


def test_a_directory_without_a_block_file_is_not_trusted_alone(tmp_path):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    fs = FaultFs()
    fs.fail("open", errno.EIO, path=os.path.join(os.path.abspath(dirs[1]), ".lock"))
    manager = start_with(dirs, FakeClock(NOW_MS), fs)  # d1 offline all along: d0 holds the block
    given = draw(manager, BLOCK_SIZE + 1)
    manager.shutdown()
    fs.heal()
    manager = start_with(dirs[1:], FakeClock(NOW_MS + 10_000), fs)  # d0 gone: no file anywhere
    assert not set(draw(manager, BLOCK_SIZE)) & set(given)
    manager.shutdown()


# -- a property over failures and restarts ------------------------------------------------------
_DIR_COUNT = 3
_operations = st.lists(
    st.one_of(
        st.tuples(st.just("draw"), st.integers(1, 2 * BLOCK_SIZE + 1)),
        st.tuples(
            st.just("fail"),
            st.integers(0, _DIR_COUNT - 1),
            st.sampled_from(["open", "fsync", "replace", "fsync_dir"]),
            st.sampled_from([errno.EIO, errno.ENOSPC]),
        ),
        st.tuples(
            st.just("restart"),
            st.sets(st.integers(0, _DIR_COUNT - 1), min_size=1),  # configured
            st.sets(st.integers(0, _DIR_COUNT - 1)),  # of those, offline at the start
        ),
    ),
    max_size=12,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=_operations)
def test_no_id_is_handed_out_twice_whatever_directories_fail(tmp_path_factory, operations):
    root = tmp_path_factory.mktemp("jbod")
    paths = [os.path.abspath(root / f"d{i}") for i in range(_DIR_COUNT)]
    for path in paths:
        os.makedirs(path)
    fs = FaultFs()
    clock = FakeClock(NOW_MS)
    online: list[str] = []

    def dir_failed(path: str, exc: OSError) -> None:
        if exc.errno != errno.ENOSPC:
            online.remove(path)  # as the manager takes it offline

    def restart(configured: set[int], offline: set[int]) -> ProducerIdManager:
        online[:] = [paths[i] for i in sorted(configured - offline)]
        return ProducerIdManager(fs, lambda: list(online), clock.time_ms, on_dir_error=dir_failed)

    ids = restart(set(range(_DIR_COUNT)), set())
    given: set[int] = set()
    for operation in operations:
        if operation[0] == "draw":
            for _ in range(operation[1]):
                clock.advance(1)  # fewer than BLOCK_SIZE ids a millisecond (the floor's premise)
                try:
                    producer_id = ids.next_id()
                except OSError:
                    continue
                assert producer_id not in given
                given.add(producer_id)
        elif operation[0] == "fail":
            _, index, step, error = operation
            prefix = paths[index] + os.sep
            fs.fail(step, error, path=lambda p, prefix=prefix: p.startswith(prefix) or p == prefix[:-1])
        else:
            fs.heal()
            clock.advance(1)
            ids = restart(operation[1], operation[2])


class _Unreachable(Exception):
    pass


def test_given_blocks_replace_the_local_files_and_a_failed_reservation_is_retried(tmp_path):
    # Cluster mode: the blocks come from the service's allocator (an etcd counter), not the files.
    manager = start([str(tmp_path)], FakeClock(NOW_MS))
    answers: list[int | BaseException] = [_Unreachable("etcd down"), 7 * BLOCK_SIZE, 3 * BLOCK_SIZE]

    def reserve_block() -> int:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    manager.use_producer_id_blocks(reserve_block)
    with pytest.raises(_Unreachable):  # as raised: the service maps it (UNAVAILABLE)
        manager.init_producer_id()
    given = [manager.init_producer_id()[0] for _ in range(BLOCK_SIZE + 2)]
    assert given == [*range(7 * BLOCK_SIZE, 8 * BLOCK_SIZE), 3 * BLOCK_SIZE, 3 * BLOCK_SIZE + 1]
    assert not (tmp_path / PRODUCER_ID_BLOCK_FILE).exists()
    manager.shutdown()
