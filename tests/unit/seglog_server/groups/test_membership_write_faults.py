"""A membership write that fails leaves the group as it was, as Kafka's coordinator reverts its
in-memory state to the last committed offset: against the real storage engine through the
fault-injecting ``fs`` seam (tests/support/fault_fs.py).

- the append fails (EIO on the offsets partition's pwritev: the directory goes offline): a join, a
  heartbeat that changes the assignment, a leave, a static leave and a session expiry leave the
  group, its records and its rebalance count unchanged, and a restart replays the same;
- the flush fails with the partition online (no descriptor for the flush's open): ``write_failed``
  puts the group back and appends the records undoing the change, so memory, the log's replay and
  a retried call agree;
- any run of operations with writes and flushes failing at random leaves memory equal to the
  replay of what was written (Hypothesis), the answers waiting as the rpc layer does (and the
  expiry timer's writes flushed before the next step).
"""

from __future__ import annotations

import contextlib
import errno
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.fault_fs import FaultFs

from seglog_server.groups.coordinator import GroupCoordinator, OffsetCommit
from seglog_server.groups.errors import GroupError
from seglog_server.groups.offsets_log import OFFSETS_TOPIC, Appended
from seglog_server.groups.partitioning import partition_for
from seglog_server.groups.reconciliation import GroupReconciliation
from seglog_server.storage import FakeClock, LogManager
from seglog_server.storage.base.errors import LogDirOfflineError, StorageError, TooManyOpenFilesError

PARTITIONS = 2
SESSION_MS = 10_000
TOPICS = {"a": 4, "b": 2}
GROUP = "g"


def offsets_path(path: str) -> bool:
    return f"{OFFSETS_TOPIC}-" in path


def offsets_log_file(path: str) -> bool:
    return f"{OFFSETS_TOPIC}-" in path and path.endswith(".log")


@contextlib.contextmanager
def coordinator_in(directory: str, clock: FakeClock, fs: FaultFs, *, create: bool = False):
    manager = LogManager([directory], clock=clock, fs=fs)
    manager.startup()
    if create:
        for topic, count in TOPICS.items():
            manager.create_topic(topic, count, {})
    coordinator = GroupCoordinator(manager, clock, partitions=PARTITIONS, session_timeout_ms=SESSION_MS)
    coordinator.start()
    try:
        yield manager, coordinator
    finally:
        manager.shutdown()


def view(coordinator: GroupCoordinator) -> tuple:
    """Everything a member or an operator sees of the group."""
    described = coordinator.describe(GROUP)
    return (coordinator.group_snapshot(GROUP), described.state, described.members, described.member_epochs,
            coordinator.list_group_states())


def rebalances(coordinator: GroupCoordinator) -> dict:
    return coordinator.metrics(100).rebalances


def durable(manager: LogManager, coordinator: GroupCoordinator, written) -> None:
    """What rpc/group_rpcs.py does before answering: wait until durable, else put the group back."""
    if written is None:
        return
    try:
        written.log.flush(written.end_offset)
    except LogDirOfflineError as exc:
        manager.handle_log_failure(written.log, exc)
        coordinator.write_failed(written, exc)
        raise
    except StorageError as exc:
        coordinator.write_failed(written, exc)
        raise
    coordinator.check_written(written)


def heartbeat(manager, coordinator, member: int, epoch: int, **kwargs):
    kwargs.setdefault("subscription", None)
    answer = coordinator.heartbeat(GROUP, f"m{member}", epoch, **kwargs)
    durable(manager, coordinator, answer.written)
    return answer


def one_member_then_another(manager, coordinator):
    """m0 owns everything; m1 joined (a new target): m0's next heartbeat revokes, a change."""
    first = heartbeat(manager, coordinator, 0, 0, subscription={"a", "b"}, instance_id="i0")
    settled = heartbeat(manager, coordinator, 0, first.member_epoch, owned=first.assignment, instance_id="i0")
    heartbeat(manager, coordinator, 1, 0, subscription={"a"})
    return settled


def revoked(coordinator, settled) -> frozenset:
    """What m0 owns once it gave up what m1's join took from its target."""
    return settled.assignment & coordinator.group_snapshot(GROUP).target["m0"]


CALLS = {
    "join": lambda m, c, s: c.heartbeat(GROUP, "m2", 0, subscription={"a"}),
    "assignment-changing heartbeat": lambda m, c, s: c.heartbeat(
        GROUP, "m0", s.member_epoch, subscription=None, owned=revoked(c, s), instance_id="i0"),
    "leave": lambda m, c, s: c.heartbeat(GROUP, "m1", -1, subscription=None),
    "static leave": lambda m, c, s: c.heartbeat(GROUP, "m0", -2, subscription=None, instance_id="i0"),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_membership_change_whose_append_fails_leaves_the_group_as_it_was(tmp_path, call):
    clock, fs = FakeClock(), FaultFs()
    directory = str(tmp_path / "d")
    with coordinator_in(directory, clock, fs, create=True) as (manager, coordinator):
        settled = one_member_then_another(manager, coordinator)
        before, counted = view(coordinator), rebalances(coordinator)
        rule = fs.fail("pwritev", errno.EIO, path=offsets_path, times=None)
        with pytest.raises(LogDirOfflineError):
            CALLS[call](manager, coordinator, settled)
        assert rule.hits == 1
        assert view(coordinator) == before and rebalances(coordinator) == counted
        fs.heal()
    with coordinator_in(directory, clock, fs) as (_, replayed):
        assert replayed.group_snapshot(GROUP) == before[0]


def test_a_session_expiry_whose_write_fails_keeps_the_member_until_a_write_succeeds(tmp_path):
    clock, fs = FakeClock(), FaultFs()
    with coordinator_in(str(tmp_path), clock, fs, create=True) as (manager, coordinator):
        one_member_then_another(manager, coordinator)
        before = view(coordinator)
        clock.advance(SESSION_MS)
        rule = fs.fail("pwritev", errno.EIO, path=offsets_path, times=None)
        assert coordinator.expire_sessions() == []  # nothing removed: nothing written
        assert rule.hits == 1
        assert view(coordinator) == before


def test_a_flush_that_fails_with_the_partition_online_puts_the_group_back_and_writes_the_undo(tmp_path):
    clock, fs = FakeClock(), FaultFs()
    directory = str(tmp_path / "d")
    with coordinator_in(directory, clock, fs, create=True) as (manager, coordinator):
        settled = one_member_then_another(manager, coordinator)
        before, counted = view(coordinator), rebalances(coordinator)
        rule = fs.fail("open", errno.EMFILE, path=offsets_log_file)
        with pytest.raises(TooManyOpenFilesError):
            heartbeat(manager, coordinator, 0, settled.member_epoch, owned=revoked(coordinator, settled),
                      instance_id="i0")
        assert rule.hits == 1
        assert view(coordinator) == before and rebalances(coordinator) == counted
        # The member retries with what it sent: the same change, now durable.
        retried = heartbeat(manager, coordinator, 0, settled.member_epoch, owned=revoked(coordinator, settled),
                            instance_id="i0")
        assert retried.assignment < settled.assignment
        after = view(coordinator)
        log = manager.get_log(OFFSETS_TOPIC, partition_for(GROUP, PARTITIONS))
        log.flush(log.log_end_offset)
    with coordinator_in(directory, clock, fs) as (_, replayed):
        assert replayed.group_snapshot(GROUP) == after[0]


def test_a_flush_that_takes_the_directory_offline_puts_the_group_back_in_memory(tmp_path):
    clock, fs = FakeClock(), FaultFs()
    with coordinator_in(str(tmp_path), clock, fs, create=True) as (manager, coordinator):
        one_member_then_another(manager, coordinator)
        before = view(coordinator)
        fs.fail("fdatasync", errno.EIO, path=offsets_log_file)
        with pytest.raises(LogDirOfflineError):
            heartbeat(manager, coordinator, 1, -1)
        assert view(coordinator) == before  # the records could not be undone: memory is set back


def test_a_heartbeat_without_changes_waits_for_the_pending_write_and_shares_its_failure(tmp_path):
    clock, fs = FakeClock(), FaultFs()
    with coordinator_in(str(tmp_path), clock, fs, create=True) as (manager, coordinator):
        one_member_then_another(manager, coordinator)
        before = view(coordinator)
        joined = coordinator.heartbeat(GROUP, "m2", 0, subscription={"b"})  # appended, not yet flushed
        steady = coordinator.heartbeat(GROUP, "m1", view(coordinator)[3]["m1"], subscription=None, owned=frozenset(
            coordinator.describe(GROUP).members["m1"]))
        assert steady.written == joined.written or steady.written.end_offset >= joined.written.end_offset
        fs.fail("open", errno.EMFILE, path=offsets_log_file)
        with pytest.raises(TooManyOpenFilesError):
            durable(manager, coordinator, steady.written)
        assert coordinator.group_snapshot(GROUP) == before[0]  # both calls' changes put back


def flush_all(manager: LogManager) -> None:
    for partition in range(PARTITIONS):
        log = manager.get_log(OFFSETS_TOPIC, partition)
        log.flush(log.log_end_offset)


faults = st.sampled_from([None, None, "append", "flush"])
operations = st.lists(st.one_of(
    st.tuples(st.just("join"), st.integers(0, 3), st.sets(st.sampled_from(sorted(TOPICS)), min_size=1),
              st.booleans(), faults),
    st.tuples(st.just("beat"), st.integers(0, 3), st.booleans(), faults),
    st.tuples(st.just("leave"), st.integers(0, 3), st.sampled_from([-1, -2]), faults),
    st.tuples(st.just("advance"), st.integers(1, 2 * SESSION_MS), faults),
), max_size=25)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=operations)
def test_writes_failing_at_random_leave_memory_equal_to_the_replay_of_what_was_written(tmp_path_factory, operations):
    directory = str(tmp_path_factory.mktemp("faults"))
    clock, fs = FakeClock(), FaultFs()
    answers: dict[int, tuple[int, frozenset]] = {}
    stack = contextlib.ExitStack()
    manager, coordinator = stack.enter_context(coordinator_in(directory, clock, fs, create=True))
    coordinator.heartbeat("other", "w", 0, subscription={"a"})  # the offsets topic made, unfaulted
    coordinator.heartbeat("other", "w", -1, subscription=None)
    try:
        for operation in operations:
            fault = operation[-1]
            before = coordinator.group_snapshot(GROUP)
            rule = None
            if fault == "append":
                rule = fs.fail("pwritev", errno.EIO, path=offsets_path, times=None)
            elif fault == "flush":
                rule = fs.fail("open", errno.EMFILE, path=offsets_log_file, times=None)
            try:
                if operation[0] == "join":
                    _, member, topics, static, _ = operation
                    answer = heartbeat(manager, coordinator, member, 0, subscription=set(topics),
                                       instance_id=f"i{member}" if static else None)
                elif operation[0] == "beat":
                    _, member, revokes, _ = operation
                    epoch, assignment = answers.get(member, (0, frozenset()))
                    owned = assignment if revokes else coordinator.describe(GROUP).members.get(f"m{member}", assignment)
                    answer = heartbeat(manager, coordinator, member, epoch, owned=owned)
                elif operation[0] == "leave":
                    _, member, epoch, _ = operation
                    answer = heartbeat(manager, coordinator, member, epoch,
                                       instance_id=f"i{member}" if epoch == -2 else None)
                else:
                    clock.advance(operation[1])
                    coordinator.expire_sessions()
                    answer = None
                if answer is not None:
                    answers[int(answer.member_id[1:])] = (answer.member_epoch, answer.assignment)
            except (GroupError, StorageError):
                pass  # refused or failed: the member keeps its last answer
            if rule is not None and rule.hits:
                assert coordinator.group_snapshot(GROUP) == before
            fs.heal()
            if fault == "append" and rule.hits:  # the directory is offline: restart on what was written
                stack.close()
                stack = contextlib.ExitStack()
                manager, coordinator = stack.enter_context(coordinator_in(directory, clock, fs))
                assert coordinator.group_snapshot(GROUP) == before
            elif operation[0] == "advance":  # the timer's write made durable before the next step
                flush_all(manager)
        live = coordinator.group_snapshot(GROUP)
        flush_all(manager)
    finally:
        stack.close()
    with coordinator_in(directory, clock, fs) as (_, replayed):
        assert replayed.group_snapshot(GROUP) == live


OTHER = "i"  # a group on the same offsets partition as GROUP


def test_a_failed_flush_puts_back_only_the_writes_it_covered(tmp_path):
    """H1 appends W1 (m2 joins g), H2 appends W2 (x joins i, same partition); W1's flush fails
    retriably (the log stays online), W2's then succeeds: i keeps x in memory and on replay,
    only g goes back."""
    assert partition_for(OTHER, PARTITIONS) == partition_for(GROUP, PARTITIONS)
    clock, fs = FakeClock(), FaultFs()
    directory = str(tmp_path / "d")
    with coordinator_in(directory, clock, fs, create=True) as (manager, coordinator):
        one_member_then_another(manager, coordinator)
        before = coordinator.group_snapshot(GROUP)
        first = coordinator.heartbeat(GROUP, "m2", 0, subscription={"a"})
        second = coordinator.heartbeat(OTHER, "x", 0, subscription={"b"})
        assert first.written.end_offset < second.written.end_offset
        rule = fs.fail("open", errno.EMFILE, path=offsets_log_file)
        with pytest.raises(TooManyOpenFilesError):
            durable(manager, coordinator, first.written)
        assert rule.hits == 1
        durable(manager, coordinator, second.written)
        assert coordinator.group_snapshot(GROUP) == before
        assert coordinator.describe(OTHER).members.keys() == {"x"}
        other = coordinator.group_snapshot(OTHER)
        flush_all(manager)
    with coordinator_in(directory, clock, fs) as (_, replayed):
        assert replayed.group_snapshot(GROUP) == before
        assert replayed.group_snapshot(OTHER) == other


def test_a_failed_flush_of_another_log_instance_puts_back_nothing(tmp_path):
    """A flush that failed on a log the partition no longer is (unloaded and loaded again since)
    leaves the pending writes of the log now in place alone."""
    clock, fs = FakeClock(), FaultFs()
    with coordinator_in(str(tmp_path), clock, fs, create=True) as (manager, coordinator):
        one_member_then_another(manager, coordinator)
        joined = coordinator.heartbeat(GROUP, "m2", 0, subscription={"a"})
        after = coordinator.group_snapshot(GROUP)
        stale = types.SimpleNamespace(partition=joined.written.log.partition, recovery_point=0)
        assert coordinator.write_failed(Appended(stale, joined.written.end_offset + 100)) == []
        assert coordinator.group_snapshot(GROUP) == after
        durable(manager, coordinator, joined.written)
        assert coordinator.group_snapshot(GROUP) == after


def test_a_heartbeat_changing_one_member_copies_that_member_not_the_group(tmp_path, monkeypatch):
    """What a failed write would put back is saved per call under the coordinator's lock: a steady
    heartbeat (or one acknowledging a revocation) keeps a copy of its member only, never of the
    whole group; a join still copies the group (it retargets every member)."""
    clock, fs = FakeClock(), FaultFs()
    with coordinator_in(str(tmp_path), clock, fs, create=True) as (manager, coordinator):
        settled = one_member_then_another(manager, coordinator)
        copies = []
        original = GroupReconciliation.copy
        monkeypatch.setattr(GroupReconciliation, "copy", lambda self: copies.append(self.group) or original(self))
        epochs = coordinator.describe(GROUP).member_epochs
        heartbeat(manager, coordinator, 1, epochs["m1"], owned=coordinator.describe(GROUP).members["m1"])
        heartbeat(manager, coordinator, 0, settled.member_epoch, owned=revoked(coordinator, settled), instance_id="i0")
        assert copies == []
        heartbeat(manager, coordinator, 2, 0, subscription={"a"})
        assert copies == [GROUP]


def test_a_one_member_change_whose_flush_takes_the_directory_offline_sets_back_its_records(tmp_path):
    """The member's own copy (and its records alone) put back, the log taking no writes."""
    clock, fs = FakeClock(), FaultFs()
    directory = str(tmp_path / "d")
    with coordinator_in(directory, clock, fs, create=True) as (manager, coordinator):
        settled = one_member_then_another(manager, coordinator)
        flush_all(manager)
        before = view(coordinator)
        records = coordinator._offsets.state_of(GROUP).consumer_group_records(GROUP)
        fs.fail("fdatasync", errno.EIO, path=offsets_log_file)
        with pytest.raises(LogDirOfflineError):
            heartbeat(manager, coordinator, 0, settled.member_epoch, owned=revoked(coordinator, settled),
                      instance_id="i0")
        assert view(coordinator) == before
        assert coordinator._offsets.state_of(GROUP).consumer_group_records(GROUP) == records


def test_delete_group_waits_for_the_last_members_pending_leave_and_shares_its_failure(tmp_path):
    """DeleteGroup after the last member's leave was appended, not yet durable: the leave's flush
    fails (the log stays online), so the member is back, and so are its offsets (not tombstoned
    on a leave that never counted); once the leave is durable the group is deleted."""
    clock, fs = FakeClock(), FaultFs()
    with coordinator_in(str(tmp_path), clock, fs, create=True) as (manager, coordinator):
        joined = heartbeat(manager, coordinator, 0, 0, subscription={"a"})
        durable(manager, coordinator, coordinator.commit(
            GROUP, "m0", joined.member_epoch, [OffsetCommit("a", 0, 7)]))
        before = view(coordinator)
        coordinator.heartbeat(GROUP, "m0", -1, subscription=None)  # the leave, appended only
        rule = fs.fail("open", errno.EMFILE, path=offsets_log_file)
        with pytest.raises(TooManyOpenFilesError):
            coordinator.delete_group(GROUP)
        assert rule.hits == 1
        assert view(coordinator) == before
        assert [value.offset for _, value in coordinator.fetch(GROUP)] == [7]
        heartbeat(manager, coordinator, 0, -1)
        assert coordinator.delete_group(GROUP) == 1
        assert coordinator.fetch(GROUP) == []


def traceback_frames(error: BaseException) -> list[str]:
    """The functions an exception's traceback passed through below the test."""
    frames, tb = [], error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return [name for name in frames if not name.startswith("test_")]


class _Uncopyable(StorageError):
    def __init__(self, first: str, second: str) -> None:
        super().__init__(f"{first} {second}")


def test_a_flush_error_that_cannot_be_copied_is_answered_as_it_is(tmp_path):
    """An error whose class cannot be rebuilt from its arguments is raised itself to a call
    answering on the write it put back."""
    clock, fs = FakeClock(), FaultFs()
    with coordinator_in(str(tmp_path), clock, fs, create=True) as (manager, coordinator):
        one_member_then_another(manager, coordinator)
        joined = coordinator.heartbeat(GROUP, "m2", 0, subscription={"a"})
        error = _Uncopyable("no", "copy")
        assert coordinator.write_failed(joined.written, error) == [GROUP]
        with pytest.raises(_Uncopyable) as told:
            durable(manager, coordinator, joined.written)
        assert told.value is error


def test_a_write_put_back_by_an_earlier_writes_failed_flush_answers_that_error(tmp_path):
    """Two calls of one group in flight: H1 appends W1 (m2 joins), H2 appends W2 on top of it (m3
    joins). W1's flush fails retriably (the log stays online): both are put back, so H2 answers
    W1's error although its own flush then succeeds, and neither member is in the group, in
    memory or on replay. A no-change heartbeat that waited on W2 answers it too."""
    clock, fs = FakeClock(), FaultFs()
    directory = str(tmp_path / "d")
    with coordinator_in(directory, clock, fs, create=True) as (manager, coordinator):
        one_member_then_another(manager, coordinator)
        flush_all(manager)
        before = coordinator.group_snapshot(GROUP)
        first = coordinator.heartbeat(GROUP, "m2", 0, subscription={"a"})
        second = coordinator.heartbeat(GROUP, "m3", 0, subscription={"b"})
        steady = coordinator.heartbeat(GROUP, "m1", coordinator.describe(GROUP).member_epochs["m1"],
                                       subscription=None, owned=coordinator.describe(GROUP).members["m1"])
        assert first.written.end_offset < second.written.end_offset
        rule = fs.fail("open", errno.EMFILE, path=offsets_log_file)
        with pytest.raises(TooManyOpenFilesError) as failed:
            durable(manager, coordinator, first.written)
        assert rule.hits == 1
        frames = traceback_frames(failed.value)
        for answer in (second, steady, steady):
            with pytest.raises(TooManyOpenFilesError) as told:
                durable(manager, coordinator, answer.written)  # its flush succeeds: still not counted
            # its own copy of the flush's error, whose traceback is its own call's alone
            assert told.value is not failed.value and str(told.value) == str(failed.value)
            assert traceback_frames(told.value) == ["durable", "check_written"]
        assert traceback_frames(failed.value) == frames  # raised by no other caller since
        assert rule.hits == 1
        assert coordinator.group_snapshot(GROUP) == before
        assert set(coordinator.describe(GROUP).members) == {"m0", "m1"}
        flush_all(manager)
    with coordinator_in(directory, clock, fs) as (_, replayed):
        assert replayed.group_snapshot(GROUP) == before



def test_a_heartbeat_changing_one_member_builds_that_members_records_only(tmp_path, monkeypatch):
    """A steady heartbeat that writes (a new client host) compares and writes its member's records
    alone, never the whole group's; a join still builds every member's. The replay agrees."""
    from seglog_server.groups import membership_records

    clock, fs = FakeClock(), FaultFs()
    directory = str(tmp_path / "d")
    with coordinator_in(directory, clock, fs, create=True) as (manager, coordinator):
        settled = one_member_then_another(manager, coordinator)
        built: list[str] = []
        whole, one = membership_records.records_of, membership_records.member_records_of
        monkeypatch.setattr(membership_records, "records_of", lambda s: built.append("group") or whole(s))
        monkeypatch.setattr(membership_records, "member_records_of",
                            lambda *a: built.append(a[0]) or one(*a))
        answer = heartbeat(manager, coordinator, 0, settled.member_epoch, owned=revoked(coordinator, settled),
                           instance_id="i0", client_host="/10.0.0.9")
        assert answer.written is not None and built == ["m0"]
        assert coordinator.describe(GROUP).clients["m0"][1] == "/10.0.0.9"
        heartbeat(manager, coordinator, 2, 0, subscription={"a"})
        assert built[1] == "group"
        live = coordinator.group_snapshot(GROUP)
        flush_all(manager)
    with coordinator_in(directory, clock, fs) as (_, replayed):
        assert replayed.group_snapshot(GROUP) == live


def offsets_end(manager: LogManager) -> int:
    return manager.get_log(OFFSETS_TOPIC, partition_for(GROUP, PARTITIONS)).log_end_offset


def steady_m0(manager, coordinator, settled):
    """m0 heartbeats owning what it owns: asserted to append nothing (a no-change heartbeat)."""
    end = offsets_end(manager)
    answer = coordinator.heartbeat(GROUP, "m0", settled.member_epoch, subscription=None,
                                   owned=settled.assignment, instance_id="i0")
    assert offsets_end(manager) == end
    return answer


def test_a_no_change_heartbeat_answers_its_own_groups_put_back_write_not_a_later_one_of_another_group(tmp_path):
    """Missed error: g's W1 (m1 joins, m0's target shrinks) is pending, then i's W_H lands on the
    same partition, then m0 heartbeats changing nothing. W1's flush fails retriably (g is put
    back) and W_H's succeeds: m0 answers W1's error, not an assignment the restored group's
    target for it contradicts."""
    assert partition_for(OTHER, PARTITIONS) == partition_for(GROUP, PARTITIONS)
    clock, fs = FakeClock(), FaultFs()
    with coordinator_in(str(tmp_path), clock, fs, create=True) as (manager, coordinator):
        first = heartbeat(manager, coordinator, 0, 0, subscription={"a", "b"}, instance_id="i0")
        settled = heartbeat(manager, coordinator, 0, first.member_epoch, owned=first.assignment, instance_id="i0")
        flush_all(manager)
        before = coordinator.group_snapshot(GROUP)
        joined = coordinator.heartbeat(GROUP, "m1", 0, subscription={"a"})  # W1, appended only
        other = coordinator.heartbeat(OTHER, "x", 0, subscription={"b"})  # W_H, appended only
        assert joined.written.end_offset < other.written.end_offset
        steady = steady_m0(manager, coordinator, settled)
        assert steady.assignment < settled.assignment  # told to revoke what W1 gave m1
        rule = fs.fail("open", errno.EMFILE, path=offsets_log_file)
        with pytest.raises(TooManyOpenFilesError):
            durable(manager, coordinator, joined.written)
        assert rule.hits == 1
        durable(manager, coordinator, other.written)  # i's write is durable and kept
        with pytest.raises(TooManyOpenFilesError):
            durable(manager, coordinator, steady.written)
        assert coordinator.group_snapshot(GROUP) == before
        assert coordinator.describe(OTHER).members.keys() == {"x"}


def test_a_no_change_heartbeat_does_not_answer_another_groups_failed_flush(tmp_path):
    """Spurious error: every write of g is durable; i's W_H is pending on the same partition when
    m0 heartbeats changing nothing. W_H's flush fails retriably (i is put back): m0's answer is
    not that error, and g is as it was."""
    clock, fs = FakeClock(), FaultFs()
    with coordinator_in(str(tmp_path), clock, fs, create=True) as (manager, coordinator):
        first = heartbeat(manager, coordinator, 0, 0, subscription={"a", "b"}, instance_id="i0")
        settled = heartbeat(manager, coordinator, 0, first.member_epoch, owned=first.assignment, instance_id="i0")
        flush_all(manager)
        before = view(coordinator)
        other = coordinator.heartbeat(OTHER, "x", 0, subscription={"b"})  # W_H, appended only
        steady = steady_m0(manager, coordinator, settled)
        rule = fs.fail("open", errno.EMFILE, path=offsets_log_file)
        with pytest.raises(TooManyOpenFilesError):
            durable(manager, coordinator, other.written)
        assert rule.hits == 1
        durable(manager, coordinator, steady.written)
        assert steady.assignment == settled.assignment
        assert view(coordinator) == before
        assert coordinator.describe(OTHER).members == {}
