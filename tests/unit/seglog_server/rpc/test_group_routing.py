"""Cluster mode's group routing (rpc/group_routing.py) against the real storage engine and group
coordinator, the cluster's answers coming from an in-memory stand-in of the watched cache (the
seam ClusterRouting reads owners and instances through; tests/integration/cluster/
test_cluster_groups.py drives the same paths with etcd and service processes)."""

from __future__ import annotations

import threading

import pytest

from seglog_server.cluster.metadata_cache import CacheStatistics, InstanceInfo
from seglog_server.cluster.ownership import PartitionOwner as OwnerRecord
from seglog_server.groups.coordinator import GroupCoordinator, OffsetCommit
from seglog_server.groups.offsets_log import OFFSETS_TOPIC
from seglog.records import iter_batches
from seglog_server.rpc.cluster_routing import (
    ClusterRouting,
    InstanceFencedError,
    NotPartitionOwnerError,
    PartitionMovingError,
    PartitionOwnerGoneError,
)
from seglog_server.rpc.errors import CoordinatorNotAvailableError
from seglog_server.rpc.group_routing import GroupRouting
from seglog_server.storage import FakeClock, LogManager
from seglog_server.storage.base.errors import FencedLeaderEpochError, TopicExistsError

OFFSETS_PARTITIONS = 3
HERE, THERE = "b", "a"


class Cache:
    """Owners and instances as the watched cache holds them, changed by the test."""

    def __init__(self) -> None:
        self.owners: dict[tuple[str, int], OwnerRecord] = {}
        self.moves: dict[tuple[str, int], dict] = {}  # move records, as etcd's /moves/ holds them
        self.alive = {HERE: True, THERE: True}
        self.changed = threading.Condition()

    def owner_of(self, topic: str, partition: int) -> OwnerRecord | None:
        return self.owners.get((topic, partition))

    def move_of(self, topic: str, partition: int) -> dict | None:
        return self.moves.get((topic, partition))

    def instances(self) -> dict[str, InstanceInfo]:
        return {name: InstanceInfo(name, f"{name}:1", alive, None if alive else 1_700_000_000_000)
                for name, alive in self.alive.items()}

    def statistics(self) -> CacheStatistics:
        return CacheStatistics(True, 1, 1, 0)

    def wait_until(self, predicate, timeout_s: float) -> bool:
        return predicate(self)  # nothing changes it behind the test's back

    def place(self, partition: int, owner: str, epoch: int = 0) -> None:
        self.owners[(OFFSETS_TOPIC, partition)] = OwnerRecord(owner, epoch, 0)


class Membership:
    def __init__(self) -> None:
        self.renewed = True
        self.registered_at = 1  # the Cache's revision: its view includes the registration

    def may_acknowledge(self) -> bool:
        return self.renewed

    def registration_revision(self) -> int:
        return self.registered_at

    def statistics(self):
        return type("Stats", (), {"renewed_at": None})()


@pytest.fixture
def clock():
    return FakeClock(1_700_000_000_000)


@pytest.fixture
def manager(tmp_path, clock):
    manager = LogManager([str(tmp_path)], clock=clock)
    manager.startup()
    yield manager
    manager.shutdown()


@pytest.fixture
def world(manager, clock):
    coordinator = GroupCoordinator(manager, clock, partitions=OFFSETS_PARTITIONS, session_timeout_ms=10_000)
    coordinator.start()
    manager.create_topic("t", 2)
    cache, membership = Cache(), Membership()
    creates: list[str] = []

    def create_topic(topic, partition_count, configs):  # cluster_node.create_topic's shape
        creates.append(topic)
        if any(t == topic for t, _ in cache.owners):
            raise TopicExistsError(f"topic {topic!r} already exists in the cluster")
        for partition in range(partition_count):
            cache.place(partition, HERE if partition % 2 == 0 else THERE)
        manager.create_topic(topic, partition_count, dict(configs))

    routing = ClusterRouting("c", HERE, f"{HERE}:1", membership, cache, 5.0, create_topic=create_topic)
    return GroupRouting(routing, coordinator), coordinator, cache, membership, creates


def _group_at(coordinator: GroupCoordinator, partition: int) -> str:
    return next(g for g in (f"g{n}" for n in range(1000)) if coordinator.offsets_partition_of(g) == partition)


def test_the_first_group_call_creates_the_offsets_topic_in_the_cluster_once(world):
    groups, coordinator, cache, _, creates = world
    group = _group_at(coordinator, 0)
    assert groups.before(group) == 0
    assert groups.before(_group_at(coordinator, 2)) == 0
    assert creates == [OFFSETS_TOPIC]


def _durable(appended) -> None:
    """What CommitOffsets waits for before answering: the commit flushed (in the map only then)."""
    appended.log.flush(appended.end_offset)


def test_a_create_that_lost_the_race_uses_the_topic_the_cluster_holds(world):
    groups, coordinator, cache, _, creates = world
    for partition in range(OFFSETS_PARTITIONS):  # another instance created it; not held here yet
        cache.place(partition, HERE)
    cache.owners.pop((OFFSETS_TOPIC, 1))  # this instance's view lags for partition 1
    group = _group_at(coordinator, 1)
    with pytest.raises(CoordinatorNotAvailableError, match="no owner for partition 1 yet"):
        groups.before(group)
    assert creates == [OFFSETS_TOPIC]  # refused ALREADY_EXISTS, which is fine
    cache.place(1, HERE)
    groups.before(group)  # loads the partition, holding the topic locally first
    _durable(coordinator.commit(group, "", 0, [OffsetCommit("t", 0, 5)]))
    assert [(tp, value.offset) for tp, value in coordinator.fetch(group)] == [(("t", 0), 5)]


def test_a_group_coordinated_elsewhere_is_refused_with_the_owners_hint(world):
    groups, coordinator, cache, _, _ = world
    group = _group_at(coordinator, 1)
    with pytest.raises(NotPartitionOwnerError) as refused:
        groups.before(group)
    assert (refused.value.owner_id, refused.value.owner_address, refused.value.epoch) == (THERE, f"{THERE}:1", 0)
    assert f"group {group!r} is coordinated by the owner of {OFFSETS_TOPIC}-1" in str(refused.value)
    assert not groups.coordinates(group)
    cache.alive[THERE] = False
    with pytest.raises(PartitionOwnerGoneError) as gone:
        groups.before(group)
    assert gone.value.owner_id == THERE and "not registered since" in str(gone.value)


def test_a_partition_lost_while_the_call_ran_refuses_it_with_the_new_owners_hint(world):
    groups, coordinator, cache, _, _ = world
    group = _group_at(coordinator, 0)
    epoch = groups.before(group, write=True)
    coordinator.commit(group, "", 0, [OffsetCommit("t", 1, 7)])  # appended, not yet answered
    cache.place(0, THERE, epoch=1)  # moved meanwhile
    with pytest.raises(NotPartitionOwnerError) as refused:
        groups.after(group, epoch, write=True)
    assert (refused.value.owner_id, refused.value.epoch) == (THERE, 1)


def test_a_partition_that_left_and_came_back_is_reloaded_not_answered_from_the_old_map(world):
    groups, coordinator, cache, _, _ = world
    group = _group_at(coordinator, 0)
    epoch = groups.before(group)
    _durable(coordinator.commit(group, "", 0, [OffsetCommit("t", 0, 4)]))
    coordinator.heartbeat(group, "m", 0, subscription={"t"})
    coordinator.unload_offsets_partition(0)  # as the timer does once it sees the partition gone
    cache.place(0, HERE, epoch=2)  # away and back: a new ownership epoch
    with pytest.raises(CoordinatorNotAvailableError, match="changed ownership epoch"):
        groups.after(group, epoch)
    assert coordinator.describe(group).members == {} and coordinator.fetch(group) == []
    assert groups.before(group) == 2  # replayed: the offsets and the member back from the records
    assert [(tp, value.offset) for tp, value in coordinator.fetch(group)] == [(("t", 0), 4)]
    assert set(coordinator.describe(group).members) == {"m"}


def test_a_write_is_refused_while_the_lease_is_not_renewed(world):
    groups, coordinator, _, membership, _ = world
    group = _group_at(coordinator, 0)
    epoch = groups.before(group, write=True)
    membership.renewed = False
    with pytest.raises(InstanceFencedError):
        groups.after(group, epoch, write=True)
    with pytest.raises(InstanceFencedError):
        groups.before(group, write=True)
    groups.before(group)  # reads go on


def test_the_timer_unloads_the_partitions_owned_elsewhere_and_the_ones_lost(world):
    groups, coordinator, cache, _, _ = world
    mine = _group_at(coordinator, 0)
    groups.before(mine)
    coordinator.commit(mine, "", 0, [OffsetCommit("t", 1, 3)])
    coordinator.heartbeat(mine, "m", 0, subscription={"t"})
    assert groups.sync() == [1]  # first pass: the one the start replayed but another instance owns
    assert groups.sync() == []
    assert coordinator.list_groups() == [mine]
    cache.place(0, THERE, epoch=1)
    assert groups.sync() == [0]
    assert coordinator.list_groups() == [] and coordinator.describe(mine).members == {}


@pytest.mark.parametrize("state", ["final", "copying"])
def test_a_group_write_is_refused_while_its_offsets_partition_is_in_its_moves_final_catch_up(world, state):
    groups, coordinator, cache, _, _ = world
    group = _group_at(coordinator, 0)
    epoch = groups.before(group, write=True)
    coordinator.commit(group, "", 0, [OffsetCommit("t", 0, 7)])  # appended, not yet answered
    cache.moves[(OFFSETS_TOPIC, 0)] = {"state": state, "source": HERE, "target": THERE}
    if state != "final":  # the bulk copy: writes go on (the final catch-up copies them)
        groups.after(group, epoch, write=True)
        assert groups.before(group, write=True) == epoch
        return
    # The final copy may have been read past this commit: it is not acknowledged here.
    with pytest.raises(PartitionMovingError, match=f"group {group!r}: its writes are refused"):
        groups.after(group, epoch, write=True)
    with pytest.raises(PartitionMovingError):
        groups.before(group, write=True)
    assert groups.before(group) == epoch  # reads go on
    cache.moves[(OFFSETS_TOPIC, 0)]["source"] = THERE  # another instance's move: not this one's to refuse
    groups.before(group, write=True)


def test_the_offsets_partitions_appends_carry_the_ownership_epoch_stamped_and_fenced(world, manager):
    groups, coordinator, cache, _, _ = world
    group = _group_at(coordinator, 0)
    groups.before(group)  # creates the topic: partition 0 here, epoch 0
    cache.place(0, HERE, epoch=3)  # away and back: loaded again under epoch 3
    assert groups.before(group, write=True) == 3
    _durable(coordinator.commit(group, "", 0, [OffsetCommit("t", 0, 7)]))
    log = manager.get_log(OFFSETS_TOPIC, 0)
    fetched = log.read(0, 1 << 20)
    assert [batch.partition_leader_epoch for batch in iter_batches(fetched.records)] == [3]
    assert log.leader_epoch == 3
    log.advance_leader_epoch(4)  # the partition's epoch moved on under the loaded coordinator
    with pytest.raises(FencedLeaderEpochError):
        coordinator.commit(group, "", 0, [OffsetCommit("t", 0, 8)])
    assert [(tp, value.offset) for tp, value in coordinator.fetch(group)] == [(("t", 0), 7)]
