"""A committed offset reaches the coordinator's map (FetchOffsets, lag, DescribeGroup, the member a
partition is handed to) only once its record is durable, as Kafka applies a commit to its cache once
the append completed: against the real storage engine through the fault-injecting ``fs`` seam.

- appended and not yet flushed: no fetch, lag or describe shows it; flushed: all do;
- its flush fails with the partition online (EMFILE: no descriptor for the flush's open) or takes
  the directory offline (EIO on fdatasync): the committer gets the flush's error and the map stays
  as it was (should a later flush make the record durable after all, it shows then);
- DeleteGroup tombstones a commit appended and not yet durable too;
- any run of commits with flushes failing at random: after every step the map equals the replay of
  the durable prefix of the log (below its recovery point); after a restart (EIO took the
  directory offline) the replay of what the files hold, which the load made durable first.
"""

from __future__ import annotations

import contextlib
import errno

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.fault_fs import FaultFs

from seglog.records import iter_batches
from seglog_server.groups.coordinator import GroupCoordinator, OffsetCommit
from seglog_server.groups.offsets_log import OFFSETS_TOPIC
from seglog_server.groups.offsets_state import OffsetsState
from seglog_server.storage import FakeClock, LogManager
from seglog_server.storage.base.errors import LogDirOfflineError, StorageError, TooManyOpenFilesError

PARTITIONS = 2
GROUPS = ("g", "h", "i")  # g and i share an offsets partition


def offsets_log_file(path: str) -> bool:
    return f"{OFFSETS_TOPIC}-" in path and path.endswith(".log")


@contextlib.contextmanager
def coordinator_in(directory: str, clock: FakeClock, fs: FaultFs, *, create: bool = False):
    manager = LogManager([directory], clock=clock, fs=fs)
    manager.startup()
    if create:
        manager.create_topic("t", 3, {})
    coordinator = GroupCoordinator(manager, clock, partitions=PARTITIONS)
    coordinator.start()
    try:
        yield manager, coordinator
    finally:
        manager.shutdown()


def durable(manager: LogManager, appended) -> None:
    """What CommitOffsets does before answering: the flush up to the commit (its error raised)."""
    if appended is None:
        return
    try:
        appended.log.flush(appended.end_offset)
    except LogDirOfflineError as exc:
        manager.handle_log_failure(appended.log, exc)
        raise


def seen(coordinator: GroupCoordinator) -> dict:
    """Every committed offset a fetch shows, per group."""
    return {group: {tp: value.offset for tp, value in coordinator.fetch(group)} for group in GROUPS}


def durable_replay(manager: LogManager, *, whole: bool = False) -> dict:
    """The offsets a replay of each offsets partition's durable prefix (below its recovery point;
    ``whole``: everything its files hold, as a load replays them) gives, per group."""
    replayed: dict = {group: {} for group in GROUPS}
    for partition in range(PARTITIONS):
        state = OffsetsState()
        log = manager.get_log(OFFSETS_TOPIC, partition)
        for batch in iter_batches(log.read(log.log_start_offset, 1 << 24).records):
            for record in batch.records():
                if whole or record.offset < log.recovery_point:
                    state.apply(record.key, record.value, offset=record.offset)
        for group in set(state.groups()) & set(GROUPS):
            replayed[group] |= {tp: value.offset for tp, value in state.group_offsets(group).items()}
    return replayed


def test_a_commit_is_fetched_lagged_and_described_only_once_durable(tmp_path):
    clock, fs = FakeClock(), FaultFs()
    with coordinator_in(str(tmp_path), clock, fs, create=True) as (manager, coordinator):
        appended = coordinator.commit("g", "", 0, [OffsetCommit("t", 0, 5)])
        assert coordinator.fetch("g") == [] and coordinator.fetch("g", [("t", 0)]) == [(("t", 0), None)]
        assert coordinator.describe("g").offsets == {} and coordinator.metrics(100).lags == {}
        durable(manager, appended)
        assert [(tp, value.offset) for tp, value in coordinator.fetch("g")] == [(("t", 0), 5)]
        assert coordinator.describe("g").offsets[("t", 0)].offset == 5
        assert coordinator.metrics(100).lags == {("g", "t", 0): -5}  # t-0 is empty: Kafka's lag may be < 0


def test_a_commit_whose_flush_finds_no_descriptor_answers_its_error_and_leaves_the_map(tmp_path):
    clock, fs = FakeClock(), FaultFs()
    with coordinator_in(str(tmp_path), clock, fs, create=True) as (manager, coordinator):
        durable(manager, coordinator.commit("g", "", 0, [OffsetCommit("t", 0, 5)]))
        before = seen(coordinator)
        rule = fs.fail("open", errno.EMFILE, path=offsets_log_file)
        with pytest.raises(TooManyOpenFilesError):
            durable(manager, coordinator.commit("g", "", 0, [OffsetCommit("t", 0, 6), OffsetCommit("t", 1, 1)]))
        assert rule.hits == 1
        assert seen(coordinator) == before == durable_replay(manager)
        # The partition stays online: the next commit's flush covers the earlier record too, which
        # shows then (the map is the replay of what is durable, whatever its committer was told).
        durable(manager, coordinator.commit("g", "", 0, [OffsetCommit("t", 2, 3)]))
        assert seen(coordinator)["g"] == {("t", 0): 6, ("t", 1): 1, ("t", 2): 3} == durable_replay(manager)["g"]


def test_a_commit_whose_flush_takes_the_directory_offline_is_never_applied(tmp_path):
    clock, fs = FakeClock(), FaultFs()
    with coordinator_in(str(tmp_path), clock, fs, create=True) as (manager, coordinator):
        durable(manager, coordinator.commit("g", "", 0, [OffsetCommit("t", 0, 5)]))
        rule = fs.fail("fdatasync", errno.EIO, path=offsets_log_file)
        with pytest.raises(LogDirOfflineError):
            durable(manager, coordinator.commit("g", "", 0, [OffsetCommit("t", 0, 6)]))
        assert rule.hits == 1
        assert seen(coordinator)["g"] == {("t", 0): 5}


def test_delete_group_tombstones_a_commit_not_yet_durable(tmp_path):
    clock, fs = FakeClock(), FaultFs()
    directory = str(tmp_path / "d")
    with coordinator_in(directory, clock, fs, create=True) as (manager, coordinator):
        durable(manager, coordinator.commit("g", "", 0, [OffsetCommit("t", 0, 5)]))
        coordinator.commit("g", "", 0, [OffsetCommit("t", 1, 2)])  # appended only
        assert coordinator.delete_group("g") == 2
        assert coordinator.fetch("g") == [] and durable_replay(manager)["g"] == {}
    with coordinator_in(directory, clock, fs) as (_, replayed):
        assert replayed.fetch("g") == []


steps = st.lists(st.tuples(
    st.sampled_from(GROUPS), st.dictionaries(st.integers(0, 2), st.integers(0, 1000), min_size=1, max_size=2),
    st.sampled_from([None, None, "skip", "emfile", "eio"]),
), max_size=12)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps)
def test_commits_with_failing_flushes_leave_the_map_equal_to_the_replay_of_what_is_durable(tmp_path_factory, steps):
    """Each step commits; its flush succeeds, is left for later ("skip"), finds no descriptor
    (the partition stays online) or meets EIO (the directory goes offline: a restart follows)."""
    directory = str(tmp_path_factory.mktemp("commits"))
    clock, fs = FakeClock(), FaultFs()
    stack = contextlib.ExitStack()
    manager, coordinator = stack.enter_context(coordinator_in(directory, clock, fs, create=True))
    durable(manager, coordinator.commit("z", "", 0, [OffsetCommit("t", 0, 0)]))  # the topic made, unfaulted
    try:
        for group, offsets, fault in steps:
            before = seen(coordinator)
            if fault == "emfile":
                fs.fail("open", errno.EMFILE, path=offsets_log_file)
            elif fault == "eio":
                fs.fail("fdatasync", errno.EIO, path=offsets_log_file)
            try:
                appended = coordinator.commit(group, "", 0, [OffsetCommit("t", p, o) for p, o in offsets.items()])
                if fault != "skip":
                    durable(manager, appended)
            except StorageError:
                assert seen(coordinator) == before  # the committer got the error: nothing applied
            fs.heal()
            if manager.statistics().log_dirs[0].online:
                assert seen(coordinator) == durable_replay(manager)
            else:  # EIO took the directory offline: a restart replays what the files hold
                stack.close()
                stack = contextlib.ExitStack()
                manager, coordinator = stack.enter_context(coordinator_in(directory, clock, fs))
                assert seen(coordinator) == durable_replay(manager) == durable_replay(manager, whole=True)
    finally:
        stack.close()


def test_delete_group_and_expiry_whose_flush_fails_answer_its_error_and_keep_the_offsets(tmp_path):
    """The tombstones are appended; their flush finds no descriptor: DeleteGroup raises it and the
    offsets stay readable until a flush makes the tombstones durable. The expiry's tombstones the
    same, their flush failing with the directory offline (EIO)."""
    clock, fs = FakeClock(), FaultFs()
    with coordinator_in(str(tmp_path), clock, fs, create=True) as (manager, coordinator):
        durable(manager, coordinator.commit("g", "", 0, [OffsetCommit("t", 0, 5)]))
        durable(manager, coordinator.commit("h", "", 0, [OffsetCommit("t", 0, 6)]))
        fs.fail("open", errno.EMFILE, path=offsets_log_file)
        with pytest.raises(TooManyOpenFilesError):
            coordinator.delete_group("g")
        assert seen(coordinator)["g"] == {("t", 0): 5} == durable_replay(manager)["g"]
        log = manager.get_log(OFFSETS_TOPIC, coordinator.offsets_partition_of("g"))
        log.flush(log.log_end_offset)
        assert seen(coordinator)["g"] == {} == durable_replay(manager)["g"]
        clock.advance(8 * 24 * 3600 * 1000)  # past offsets.retention.minutes
        fs.fail("fdatasync", errno.EIO, path=offsets_log_file)
        with pytest.raises(LogDirOfflineError):
            coordinator.expire_offsets()
        assert seen(coordinator)["h"] == {("t", 0): 6}
        assert not manager.statistics().log_dirs[0].online
