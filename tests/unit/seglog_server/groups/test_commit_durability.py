"""A committed offset reaches the coordinator's map (FetchOffsets, lag, DescribeGroup, the member a
partition is handed to) only once its record is durable, as Kafka applies a commit to its cache once
the append completed: against the real storage engine through the fault-injecting ``fs`` seam.

- appended and not yet flushed: no fetch, lag or describe shows it; flushed: all do;
- its flush fails with the partition online (EMFILE: no descriptor for the flush's open) or takes
  the directory offline (EIO on fdatasync): the committer gets the flush's error and the map stays
  as it was (should a later flush make the record durable after all, it shows then);
- DeleteGroup tombstones a commit appended and not yet durable too;
- expiry never tombstones an offset whose commit is appended and not yet durable (the map still
  holds the expired one): its tombstone would land after the commit and delete it once both are
  durable, after the committer was answered;
- any run of commits with flushes failing at random: after every step the map equals the replay of
  the durable prefix of the log (below its recovery point); after a restart (EIO took the
  directory offline) the replay of what the files hold, which the load made durable first; with
  expiry runs and commits answered a step later among them, every answered commit whose retention
  has not run out is still fetched.
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
from seglog_server.groups.offsets_state import OFFSETS_RETENTION_MS, OffsetsState
from seglog_server.storage import FakeClock, LogManager
from seglog_server.storage.base.errors import LogDirOfflineError, StorageError, TooManyOpenFilesError

PARTITIONS = 2
GROUPS = ("g", "h", "i")  # g and i share an offsets partition


def offsets_log_file(path: str) -> bool:
    return f"{OFFSETS_TOPIC}-" in path and path.endswith(".log")


@contextlib.contextmanager
def coordinator_in(directory: str, clock: FakeClock, fs: FaultFs, *, create: bool = False,
                   retention_ms: int = OFFSETS_RETENTION_MS):
    manager = LogManager([directory], clock=clock, fs=fs)
    manager.startup()
    if create:
        manager.create_topic("t", 3, {})
    coordinator = GroupCoordinator(manager, clock, partitions=PARTITIONS, retention_ms=retention_ms)
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


def test_expiry_spares_an_offset_whose_new_commit_is_not_yet_durable(tmp_path):
    """A member-less group's offset is past its retention; a new commit of it is appended and its
    flush under way when expiry runs: the expired offset is kept, and the new commit, answered once
    durable, stays fetched, before and after a restart."""
    clock, fs = FakeClock(), FaultFs()
    directory = str(tmp_path / "d")
    with coordinator_in(directory, clock, fs, create=True, retention_ms=1000) as (manager, coordinator):
        durable(manager, coordinator.commit("g", "", 0, [OffsetCommit("t", 0, 5), OffsetCommit("t", 1, 7)]))
        clock.advance(5000)
        appended = coordinator.commit("g", "", 0, [OffsetCommit("t", 0, 500)])  # its flush under way
        assert coordinator.expire_offsets() == 1  # t-1 only
        durable(manager, appended)  # answered
        assert seen(coordinator)["g"] == {("t", 0): 500} == durable_replay(manager)["g"]
    with coordinator_in(directory, clock, fs, retention_ms=1000) as (_, replayed):
        assert seen(replayed)["g"] == {("t", 0): 500}


RETENTION_MS = 1000
commit_step = st.tuples(
    st.just("commit"), st.sampled_from(("g", "g") + GROUPS),
    st.dictionaries(st.integers(0, 1), st.integers(0, 1000), min_size=1, max_size=2),
    # "later": answered (flushed) once the next step ran, as a flush under way meanwhile;
    # "expiry": answered once an expiry ran meanwhile
    st.sampled_from([None, None, "later", "later", "expiry", "expiry", "skip", "emfile", "eio"]),
    st.sampled_from([0, RETENTION_MS // 2, 2 * RETENTION_MS]),  # the clock's advance before it
)
expire_step = st.tuples(st.just("expire"), st.sampled_from([None, None, "emfile"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.one_of(commit_step, commit_step, expire_step), max_size=12))
def test_commits_with_failing_flushes_leave_the_map_equal_to_the_replay_of_what_is_durable(tmp_path_factory, steps):
    """Each commit step moves the clock on, then commits; its flush succeeds, is left for later
    ("skip"), runs once the next step ran ("later": a flush under way meanwhile) or once an expiry
    ran ("expiry"), finds no descriptor (the partition stays online) or meets EIO (the directory
    goes offline: a restart follows); expiry steps run expiry, its flush finding no descriptor or not. After every step
    the map equals the replay of the durable prefix (a step that failed applied nothing), and every
    answered commit whose retention has not run out (by its own timestamp: these groups have no
    metadata) is fetched, at its offset or at a later commit's of the same partition."""
    directory = str(tmp_path_factory.mktemp("commits"))
    clock, fs = FakeClock(), FaultFs()
    stack = contextlib.ExitStack()
    manager, coordinator = stack.enter_context(
        coordinator_in(directory, clock, fs, create=True, retention_ms=RETENTION_MS))
    durable(manager, coordinator.commit("z", "", 0, [OffsetCommit("t", 0, 0)]))  # the topic made, unfaulted
    appended_offsets: dict = {}  # (group, partition) -> offsets committed, in append order
    answered: dict = {}  # (group, partition) -> (its index in appended_offsets, commit time)

    def answer(appended, keys) -> None:
        with contextlib.suppress(StorageError):
            durable(manager, appended)
            answered.update(keys)

    later = None  # a commit whose answer waits for the next step
    try:
        for step in steps:
            waiting, later = later, None
            before = seen(coordinator)
            if step[0] == "expire":
                if step[1] == "emfile":
                    fs.fail("open", errno.EMFILE, path=offsets_log_file)
                try:
                    coordinator.expire_offsets()
                except StorageError:
                    assert seen(coordinator) == before
            else:
                _, group, offsets, fault, advance_ms = step
                clock.advance(advance_ms)
                if fault == "emfile":
                    fs.fail("open", errno.EMFILE, path=offsets_log_file)
                elif fault == "eio":
                    fs.fail("fdatasync", errno.EIO, path=offsets_log_file)
                keys = {}
                for partition, offset in offsets.items():
                    appended_offsets.setdefault((group, partition), []).append(offset)
                    keys[(group, partition)] = (len(appended_offsets[(group, partition)]) - 1, clock.time_ms())
                try:
                    appended = coordinator.commit(group, "", 0, [OffsetCommit("t", p, o) for p, o in offsets.items()])
                    if fault == "later":
                        later = (appended, keys)
                    elif fault == "expiry":
                        coordinator.expire_offsets()
                        answer(appended, keys)
                    elif fault != "skip":
                        durable(manager, appended)
                        answered.update(keys)
                except StorageError:
                    assert seen(coordinator) == before  # the committer got the error: nothing applied
            fs.heal()
            if waiting is not None and manager.statistics().log_dirs[0].online:
                answer(*waiting)
            if not manager.statistics().log_dirs[0].online:  # EIO: a restart; calls under way failed
                stack.close()
                stack = contextlib.ExitStack()
                manager, coordinator = stack.enter_context(coordinator_in(directory, clock, fs, retention_ms=RETENTION_MS))
                later = None
            fetched = seen(coordinator)
            assert fetched == durable_replay(manager)
            for (group, partition), (index, committed_ms) in answered.items():
                if clock.time_ms() - committed_ms < RETENTION_MS:
                    assert fetched[group].get(("t", partition)) in appended_offsets[(group, partition)][index:], (
                        group, partition)
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
