"""The coordinator's operator side against the real storage engine: the metrics a scrape reads
(lag in records and in seconds from the batch headers, members, state, rebalances, each capped)
and deleting a group (only an empty one, tombstones that a restart's replay honours)."""

from __future__ import annotations

import contextlib

import pytest

from seglog.records import RecordBatchBuilder
from seglog_server.groups.coordinator import GroupCoordinator, OffsetCommit
from seglog_server.groups.errors import GroupNotEmptyError, GroupNotFoundError
from seglog_server.groups.lag_age import batch_timestamp
from seglog_server.storage import FakeClock, LogManager

NOW_MS = 1_700_000_000_000


@contextlib.contextmanager
def coordinator_in(directory: str, clock: FakeClock):
    manager = LogManager([directory], clock=clock)
    manager.startup()
    coordinator = GroupCoordinator(manager, clock, partitions=3, session_timeout_ms=10_000)
    coordinator.start()
    try:
        yield manager, coordinator
    finally:
        manager.shutdown()


def commit(coordinator: GroupCoordinator, group: str, member: str, epoch: int, offsets: list[OffsetCommit]) -> None:
    """What CommitOffsets does: appended, then answered once flushed (only then in the map)."""
    appended = coordinator.commit(group, member, epoch, offsets)
    if appended is not None:
        appended.log.flush(appended.end_offset)


def produce(manager: LogManager, topic: str, partition: int, stamps: list[list[int]]) -> None:
    """One batch per inner list, a record per timestamp."""
    for batch in stamps:
        builder = RecordBatchBuilder()
        for stamp in batch:
            builder.append(b"v", timestamp_ms=stamp)
        manager.get_log(topic, partition).append(builder.build())


def test_lag_in_records_and_seconds_from_the_batch_holding_the_first_uncommitted_record(tmp_path):
    clock = FakeClock(NOW_MS)
    with coordinator_in(str(tmp_path), clock) as (manager, coordinator):
        manager.create_topic("t", 2)
        produce(manager, "t", 0, [[NOW_MS - 600_000], [NOW_MS - 300_000, NOW_MS - 290_000], [NOW_MS - 10_000]])
        produce(manager, "t", 1, [[NOW_MS - 50_000]])
        commit(coordinator, "g", "", 0, [OffsetCommit("t", 0, 1), OffsetCommit("t", 1, 1)])
        figures = coordinator.metrics(100)
        assert figures.lags == {("g", "t", 0): 3, ("g", "t", 1): 0}
        # offset 1 opens the second batch: its first timestamp, 300 s ago; no lag is 0 s.
        assert figures.lag_seconds == {("g", "t", 0): 300.0, ("g", "t", 1): 0.0}
        assert figures.members == {"g": 0} and figures.states == {"g": "Empty"} and figures.rebalances == {"g": 0}
        # Mid-batch: the batch's first timestamp (within the batch's span of the record's own).
        commit(coordinator, "g", "", 0, [OffsetCommit("t", 0, 2)])
        assert coordinator.metrics(100).lag_seconds[("g", "t", 0)] == 300.0
        commit(coordinator, "g", "", 0, [OffsetCommit("t", 0, 3)])
        clock.advance(5_000)
        assert coordinator.metrics(100).lag_seconds[("g", "t", 0)] == 15.0


def test_a_commit_that_did_not_move_costs_no_read_and_the_reads_are_capped(tmp_path):
    clock = FakeClock(NOW_MS)
    with coordinator_in(str(tmp_path), clock) as (manager, coordinator):
        manager.create_topic("t", 4)
        for partition in range(4):
            produce(manager, "t", partition, [[NOW_MS - 1000], [NOW_MS - 500]])
        for group in ("a", "b"):
            commit(coordinator, group, "", 0, [OffsetCommit("t", p, 0) for p in range(4)])
        timestamps = coordinator._timestamps
        assert len(coordinator.metrics(100).lag_seconds) == 8 and timestamps.reads == 8
        coordinator.metrics(100)
        assert timestamps.reads == 8  # remembered per (topic, partition, offset)
        commit(coordinator, "a", "", 0, [OffsetCommit("t", 0, 1)])
        coordinator.metrics(100)
        assert timestamps.reads == 9
        capped = coordinator.metrics(3)
        assert list(capped.lags) == [("a", "t", 0), ("a", "t", 1), ("a", "t", 2)]
        assert list(capped.lag_seconds) == list(capped.lags)
        assert list(capped.members) == ["a", "b"] and len(coordinator.metrics(1).states) == 1


def test_a_partition_gone_is_left_out(tmp_path):
    clock = FakeClock(NOW_MS)
    with coordinator_in(str(tmp_path), clock) as (manager, coordinator):
        manager.create_topic("t", 1)
        produce(manager, "t", 0, [[NOW_MS - 1000]])
        commit(coordinator, "g", "", 0, [OffsetCommit("t", 0, 0)])
        manager.delete_topic("t")
        figures = coordinator.metrics(100)
        assert figures.lags == {} and figures.lag_seconds == {} and figures.states == {"g": "Empty"}


def test_members_state_and_rebalances_follow_joins_leaves_and_timeouts(tmp_path):
    clock = FakeClock(NOW_MS)
    with coordinator_in(str(tmp_path), clock) as (manager, coordinator):
        manager.create_topic("t", 2)
        first = coordinator.heartbeat("g", "", 0, subscription={"t"})
        figures = coordinator.metrics(100)
        assert figures.members == {"g": 1} and figures.rebalances == {"g": 1}
        second = coordinator.heartbeat("g", "", 0, subscription={"t"})
        figures = coordinator.metrics(100)
        assert figures.members == {"g": 2} and figures.rebalances == {"g": 2}
        assert figures.states == {"g": "Reconciling"}  # the first still owns what moves to the second
        coordinator.heartbeat("g", first.member_id, first.member_epoch, subscription={"t"},
                              owned=first.assignment)
        clock.advance(20_000)  # both sessions run out
        coordinator.expire_sessions()
        figures = coordinator.metrics(100)
        assert second.member_id and figures.members == {} and figures.rebalances == {}  # no offsets: not listed
        commit(coordinator, "g", "", 0, [OffsetCommit("t", 0, 0)])
        figures = coordinator.metrics(100)
        assert figures.states == {"g": "Empty"} and figures.rebalances["g"] >= 4  # 2 joins, 2 removals


def test_delete_group_only_when_empty_and_its_tombstones_survive_a_restart(tmp_path):
    clock = FakeClock(NOW_MS)
    with coordinator_in(str(tmp_path), clock) as (manager, coordinator):
        manager.create_topic("t", 1)
        with pytest.raises(GroupNotFoundError, match="'g' does not exist"):
            coordinator.delete_group("g")  # the offsets topic does not exist yet
        member = coordinator.heartbeat("g", "", 0, subscription={"t"})
        commit(coordinator, "g", member.member_id, member.member_epoch, [OffsetCommit("t", 0, 0)])
        with pytest.raises(GroupNotEmptyError, match="1 active members"):
            coordinator.delete_group("g")
        coordinator.heartbeat("g", member.member_id, -1, subscription=None)
        commit(coordinator, "other", "", 0, [OffsetCommit("t", 0, 0)])
        assert coordinator.delete_group("g") == 1
        assert coordinator.fetch("g") == [] and coordinator.list_groups() == ["other"]
        with pytest.raises(GroupNotFoundError):
            coordinator.delete_group("g")
    with coordinator_in(str(tmp_path), clock) as (manager, coordinator):
        assert coordinator.list_groups() == ["other"] and coordinator.fetch("g") == []


def test_batch_timestamp_reads_the_header_fields():
    builder = RecordBatchBuilder()
    builder.append(b"a", timestamp_ms=5)
    builder.append(b"b", timestamp_ms=9)
    batch = bytearray(builder.build())
    assert batch_timestamp(bytes(batch)) == (0, 5)
    batch[22] |= 0x08  # LogAppendTime: the batch's one timestamp is its max
    assert batch_timestamp(bytes(batch)) == (0, 9)
    assert batch_timestamp(bytes(batch[:60])) is None
