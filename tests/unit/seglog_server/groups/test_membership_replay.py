"""Group membership kept in ``__consumer_offsets`` as KIP-848's records, against the real storage
engine: any run of joins, heartbeats, leaves (dynamic and static), commits and expiries, replayed
from the log (as written, and cleaned by the single-process cleaner), gives the live membership;
a restart keeps members, epochs and assignments and counts every session from the load; a steady
heartbeat writes nothing; static membership and the rebalance timeout on the coordinator."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.records import iter_batches
from seglog_server.groups.coordinator import GroupCoordinator, OffsetCommit
from seglog_server.groups.errors import (
    FencedInstanceIdError,
    FencedMemberError,
    GroupError,
    UnknownMemberError,
    UnreleasedInstanceIdError,
)
from seglog_server.groups.offsets_log import OFFSETS_TOPIC
from seglog_server.groups.partitioning import partition_for
from seglog_server.groups.records import ConsumerGroupCurrentMemberAssignmentKey, decode_key
from seglog_server.storage import FakeClock, LogManager
from seglog_server.storage.base.errors import NotCleanableError
from seglog_spark.cleaner_local import clean_snapshot

PARTITIONS = 3
SESSION_MS = 10_000
TOPICS = {"a": 3, "b": 2}
GROUPS = ("g1", "g2")


@contextlib.contextmanager
def coordinator_in(directory: str, clock: FakeClock, *, create: bool = False):
    manager = LogManager([directory], clock=clock)
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


def snapshots(coordinator: GroupCoordinator) -> dict:
    return {group: coordinator.group_snapshot(group) for group in GROUPS}


def clean_all(manager: LogManager) -> None:
    for partition in range(PARTITIONS):
        manager.get_log(OFFSETS_TOPIC, partition).roll()
        try:
            taken = manager.create_snapshot(OFFSETS_TOPIC, partition)
        except NotCleanableError:
            continue
        clean_snapshot(taken.path, map_bytes=1 << 14)
        manager.commit_cleaned(taken.manifest.snapshot_id)


def record_count(manager: LogManager) -> int:
    total = 0
    for partition in range(PARTITIONS):
        log = manager.get_log(OFFSETS_TOPIC, partition)
        total += sum(b.records_count for b in iter_batches(log.read(log.log_start_offset, 1 << 24).records))
    return total


class Members:
    """The clients' side: each member's last answer, and whether it revokes as told."""

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator
        self.state: dict[tuple[str, int], tuple[int, frozenset]] = {}

    def send(self, group: str, index: int, epoch: int, *, topics=None, owned=frozenset(), static=False,
             rebalance_timeout_ms=None):
        answer = self.coordinator.heartbeat(
            group, f"m{index}", epoch, subscription=topics, owned=owned,
            instance_id=f"i{index}" if static else None, rebalance_timeout_ms=rebalance_timeout_ms,
            client_id=f"consumer-{group}-{index}" if epoch == 0 else None, client_host=f"/10.0.0.{index}")
        self.state[(group, index)] = (answer.member_epoch, answer.assignment)
        return answer

    def beat(self, group: str, index: int, revokes: bool = True):
        epoch, assignment = self.state.get((group, index), (0, frozenset()))
        owned = assignment if revokes else self.coordinator.describe(group).members.get(f"m{index}", assignment)
        return self.send(group, index, epoch, owned=owned)


operations = st.lists(st.one_of(
    st.tuples(st.just("join"), st.sampled_from(GROUPS), st.integers(0, 3),
              st.sets(st.sampled_from(sorted(TOPICS)), min_size=1), st.booleans()),
    st.tuples(st.just("beat"), st.sampled_from(GROUPS), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("leave"), st.sampled_from(GROUPS), st.integers(0, 3), st.sampled_from([-1, -2])),
    st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.integers(0, 3), st.integers(0, 100)),
    st.tuples(st.just("advance"), st.integers(1, 2 * SESSION_MS)),
), max_size=30)


def run(members: Members, clock: FakeClock, operations) -> None:
    coordinator = members.coordinator
    for operation in operations:
        try:
            if operation[0] == "join":
                _, group, index, topics, static = operation
                members.send(group, index, 0, topics=set(topics), static=static, rebalance_timeout_ms=SESSION_MS // 2)
            elif operation[0] == "beat":
                _, group, index, revokes = operation
                members.beat(group, index, revokes)
            elif operation[0] == "leave":
                _, group, index, epoch = operation
                members.send(group, index, epoch, static=epoch == -2)
            elif operation[0] == "commit":
                _, group, index, offset = operation
                epoch, _ = members.state.get((group, index), (0, frozenset()))
                coordinator.commit(group, f"m{index}", epoch, [OffsetCommit("a", 0, offset)])
            else:
                clock.advance(operation[1])
                coordinator.expire_sessions()
        except GroupError:
            pass  # a fenced, unknown or refused member: refused calls change nothing


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=operations)
def test_a_replay_of_the_log_as_written_and_cleaned_gives_the_live_membership(tmp_path_factory, operations):
    directory = str(tmp_path_factory.mktemp("replay"))
    clock = FakeClock()
    with coordinator_in(directory, clock, create=True) as (_, coordinator):
        run(Members(coordinator), clock, operations)
        live = snapshots(coordinator)
    with coordinator_in(directory, clock) as (manager, replayed):
        assert snapshots(replayed) == live
        if replayed.offsets_topic_created:
            clean_all(manager)
    with coordinator_in(directory, clock) as (_, cleaned):
        assert snapshots(cleaned) == live


def test_a_restart_keeps_the_members_who_carry_on_and_times_out_the_others_from_the_load(tmp_path):
    clock = FakeClock()
    with coordinator_in(str(tmp_path), clock, create=True) as (_, coordinator):
        members = Members(coordinator)
        members.send("g1", 0, 0, topics={"a"})
        members.send("g1", 1, 0, topics={"a"})
        for _ in range(3):
            members.beat("g1", 0)
            members.beat("g1", 1)
        before = coordinator.group_snapshot("g1")
        assert before.members["m0"].owned | before.members["m1"].owned == {("a", p) for p in range(3)}
        state = dict(members.state)
    clock.advance(SESSION_MS * 5)  # the service was down a long time: sessions count from the load
    with coordinator_in(str(tmp_path), clock) as (_, coordinator):
        assert coordinator.group_snapshot("g1") == before
        members = Members(coordinator)
        members.state = state
        clock.advance(SESSION_MS - 1)
        assert coordinator.expire_sessions() == []
        answer = members.beat("g1", 0)  # m0 carries on with its epoch, no rejoin
        assert (answer.member_epoch, answer.assignment) == state[("g1", 0)]
        clock.advance(1)
        assert coordinator.expire_sessions() == [("g1", "m1")]  # m1 never came back
        members.beat("g1", 0)
        assert members.beat("g1", 0).assignment == {("a", p) for p in range(3)}


def test_a_steady_heartbeat_writes_nothing(tmp_path):
    clock = FakeClock()
    with coordinator_in(str(tmp_path), clock, create=True) as (manager, coordinator):
        members = Members(coordinator)
        assert members.send("g1", 0, 0, topics={"a", "b"}).written is not None
        members.beat("g1", 0)
        log = manager.get_log(OFFSETS_TOPIC, partition_for("g1", PARTITIONS))
        assert members.beat("g1", 0).written.end_offset == log.log_end_offset  # waits for the pending write
        log.flush(log.log_end_offset)  # durable: nothing left to wait for
        count = record_count(manager)
        for _ in range(20):
            clock.advance(1000)
            assert members.beat("g1", 0).written is None
        assert record_count(manager) == count


def test_a_leave_and_an_expiry_tombstone_the_member_and_an_empty_group_has_no_records(tmp_path):
    clock = FakeClock()
    with coordinator_in(str(tmp_path), clock, create=True) as (manager, coordinator):
        members = Members(coordinator)
        members.send("g1", 0, 0, topics={"a"})
        members.send("g1", 1, 0, topics={"a"})
        members.send("g1", 1, -1)
        state = coordinator._offsets.state_of("g1")
        assert {member for _, member in state.consumer_group_records("g1")} == {"", "m0"}
        clock.advance(SESSION_MS)
        coordinator.expire_sessions()
        assert state.consumer_group_records("g1") == {}
        log = manager.get_log(OFFSETS_TOPIC, partition_for("g1", PARTITIONS))
        tombstoned = {decode_key(r.key) for b in iter_batches(log.read(0, 1 << 20).records)
                      for r in b.records() if r.value is None}
        assert ConsumerGroupCurrentMemberAssignmentKey("g1", "m1") in tombstoned
        assert ConsumerGroupCurrentMemberAssignmentKey("g1", "m0") in tombstoned


# -- static membership ----------------------------------------------------------------------------


def settle(members: Members, group: str, *indexes: int) -> None:
    for _ in range(3):
        for index in indexes:
            members.beat(group, index)


def test_a_static_member_left_with_epoch_minus_2_is_taken_over_with_its_partitions_and_no_rebalance(tmp_path):
    clock = FakeClock()
    with coordinator_in(str(tmp_path), clock, create=True) as (_, coordinator):
        members = Members(coordinator)
        members.send("g1", 0, 0, topics={"a"}, static=True)
        members.send("g1", 1, 0, topics={"a"})
        settle(members, "g1", 0, 1)
        kept = members.state[("g1", 0)][1]
        epoch = coordinator.describe("g1").group_epoch
        assert members.send("g1", 0, -2, static=True).member_epoch == -2
        clock.advance(SESSION_MS - 1)
        coordinator.expire_sessions()
        settle(members, "g1", 1)
        assert members.state[("g1", 1)][1].isdisjoint(kept)  # nothing moved while it was away
        # The same instance id under a new member id (a restarted process) takes the partitions.
        answer = coordinator.heartbeat("g1", "restarted", 0, subscription={"a"}, instance_id="i0")
        assert answer.assignment == kept and coordinator.describe("g1").group_epoch == epoch
        assert coordinator.describe("g1").instance_ids == {"restarted": "i0"}
        # The old member id is fenced by its instance id; a commit of it is unknown.
        with pytest.raises(FencedInstanceIdError, match="is now member 'restarted'"):
            coordinator.heartbeat("g1", "m0", answer.member_epoch, subscription=None, instance_id="i0")
        with pytest.raises(UnknownMemberError):
            coordinator.commit("g1", "m0", answer.member_epoch, [OffsetCommit("a", 0, 1)])


def test_a_static_member_away_longer_than_its_session_is_removed_and_its_partitions_move(tmp_path):
    clock = FakeClock()
    with coordinator_in(str(tmp_path), clock, create=True) as (_, coordinator):
        members = Members(coordinator)
        members.send("g1", 0, 0, topics={"a"}, static=True)
        members.send("g1", 1, 0, topics={"a"})
        settle(members, "g1", 0, 1)
        members.send("g1", 0, -2, static=True)
        clock.advance(SESSION_MS - 1)
        members.beat("g1", 1)
        assert coordinator.expire_sessions() == []
        clock.advance(1)
        assert coordinator.expire_sessions() == [("g1", "m0")]
        settle(members, "g1", 1)
        assert members.state[("g1", 1)][1] == {("a", p) for p in range(3)}


def test_a_second_live_member_with_the_same_instance_id_is_refused(tmp_path):
    clock = FakeClock()
    with coordinator_in(str(tmp_path), clock, create=True) as (_, coordinator):
        members = Members(coordinator)
        members.send("g1", 0, 0, topics={"a"}, static=True)
        with pytest.raises(UnreleasedInstanceIdError, match="held by live member 'm0'"):
            coordinator.heartbeat("g1", "other", 0, subscription={"a"}, instance_id="i0")
        assert coordinator.describe("g1").members.keys() == {"m0"}


def test_a_static_member_taken_over_survives_a_restart_with_its_instance_id(tmp_path):
    clock = FakeClock()
    with coordinator_in(str(tmp_path), clock, create=True) as (_, coordinator):
        members = Members(coordinator)
        members.send("g1", 0, 0, topics={"a"}, static=True)
        settle(members, "g1", 0)
        members.send("g1", 0, -2, static=True)
        before = coordinator.group_snapshot("g1")
    with coordinator_in(str(tmp_path), clock) as (_, coordinator):
        assert coordinator.group_snapshot("g1") == before
        answer = coordinator.heartbeat("g1", "back", 0, subscription={"a"}, instance_id="i0")
        assert answer.assignment == {("a", p) for p in range(3)}


# -- rebalance timeout ----------------------------------------------------------------------------


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_removed(tmp_path):
    clock = FakeClock()
    with coordinator_in(str(tmp_path), clock, create=True) as (_, coordinator):
        members = Members(coordinator)
        members.send("g1", 0, 0, topics={"a"}, rebalance_timeout_ms=3000)
        settle(members, "g1", 0)
        members.send("g1", 1, 0, topics={"a"})
        members.beat("g1", 0, revokes=False)  # told to revoke: its rebalance timeout starts
        for _ in range(2):  # it keeps heartbeating (its session is fine) but never lets go
            clock.advance(1000)
            members.beat("g1", 0, revokes=False)
            members.beat("g1", 1)
            assert coordinator.expire_sessions() == []
        clock.advance(1000)
        assert coordinator.expire_sessions() == [("g1", "m0")]
        with pytest.raises(UnknownMemberError):
            members.beat("g1", 0)
        members.beat("g1", 1)
        assert members.state[("g1", 1)][1] == {("a", p) for p in range(3)}


def test_a_member_that_revokes_in_time_is_kept(tmp_path):
    clock = FakeClock()
    with coordinator_in(str(tmp_path), clock, create=True) as (_, coordinator):
        members = Members(coordinator)
        members.send("g1", 0, 0, topics={"a"}, rebalance_timeout_ms=3000)
        settle(members, "g1", 0)
        members.send("g1", 1, 0, topics={"a"})
        members.beat("g1", 0, revokes=False)
        clock.advance(2999)
        members.beat("g1", 0)  # revokes now
        clock.advance(5000)
        members.beat("g1", 0)
        members.beat("g1", 1)
        assert coordinator.expire_sessions() == []


def test_a_fenced_member_stays_fenced_after_a_restart(tmp_path):
    clock = FakeClock()
    with coordinator_in(str(tmp_path), clock, create=True) as (_, coordinator):
        members = Members(coordinator)
        first = members.send("g1", 0, 0, topics={"a"})
        members.send("g1", 1, 0, topics={"a"})
        settle(members, "g1", 0, 1)
    with coordinator_in(str(tmp_path), clock) as (_, coordinator):
        with pytest.raises(FencedMemberError):
            coordinator.commit("g1", "m0", first.member_epoch - 1, [OffsetCommit("a", 0, 1)])
