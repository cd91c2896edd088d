"""Ownership against a real etcd: a topic's partitions written in one transaction, and owner
changes that bump the epoch in one transaction compared on the revision read (racing movers: one
wins, the other fails cleanly, epochs strictly increase)."""

from __future__ import annotations

import threading

import pytest

from seglog_server.cluster import (
    INITIAL_EPOCH,
    ClusterKeys,
    EtcdGateway,
    EtcdUnavailableError,
    OwnershipConflictError,
    TopicExistsError,
    UnknownPartitionError,
    change_owner,
    create_topic,
    read_owner,
)
from seglog_server.cluster.etcd_gateway import b64

pytestmark = pytest.mark.integration


@pytest.fixture
def keys(request):
    return ClusterKeys(f"own-{request.node.name[:40]}")


@pytest.fixture
def gateway(etcd):
    gateway = EtcdGateway((etcd.endpoint,), timeout_s=5)
    yield gateway
    gateway.close()


def register(gateway, keys, *instance_ids):
    for instance_id in instance_ids:
        gateway.txn([], [{"request_put": {"key": b64(keys.instance(instance_id)), "value": b64("{}")}}])


def test_creating_a_topic_writes_every_partition_at_epoch_zero_in_one_revision(gateway, keys):
    revision = create_topic(gateway, keys, "orders", ["a", "b", "a"], {"retention.ms": "1000"})
    owners = [read_owner(gateway, keys, "orders", partition) for partition in range(3)]
    assert [(o.owner, o.epoch) for o in owners] == [("a", INITIAL_EPOCH), ("b", INITIAL_EPOCH), ("a", INITIAL_EPOCH)]
    assert {o.mod_revision for o in owners} == {revision}


def test_a_second_create_of_one_topic_fails_and_changes_nothing(gateway, keys):
    create_topic(gateway, keys, "orders", ["a"])
    with pytest.raises(TopicExistsError, match="'orders' already exists"):
        create_topic(gateway, keys, "orders", ["b", "b"])
    assert read_owner(gateway, keys, "orders", 0).owner == "a"
    with pytest.raises(UnknownPartitionError):
        read_owner(gateway, keys, "orders", 1)


def test_changing_the_owner_bumps_the_epoch(gateway, keys):
    register(gateway, keys, "b")
    create_topic(gateway, keys, "orders", ["a"])
    moved = change_owner(gateway, keys, "orders", 0, "b", read_owner(gateway, keys, "orders", 0))
    assert (moved.owner, moved.epoch) == ("b", 1) and read_owner(gateway, keys, "orders", 0) == moved


def test_a_change_from_a_stale_read_loses_cleanly(gateway, keys):
    register(gateway, keys, "b", "c")
    create_topic(gateway, keys, "orders", ["a"])
    stale = read_owner(gateway, keys, "orders", 0)
    change_owner(gateway, keys, "orders", 0, "b", stale)
    with pytest.raises(OwnershipConflictError, match="changed since epoch 0"):
        change_owner(gateway, keys, "orders", 0, "c", stale)
    assert (read_owner(gateway, keys, "orders", 0).owner, read_owner(gateway, keys, "orders", 0).epoch) == ("b", 1)


def test_an_unregistered_target_is_refused(gateway, keys):
    create_topic(gateway, keys, "orders", ["a"])
    with pytest.raises(OwnershipConflictError, match="'ghost' is not registered"):
        change_owner(gateway, keys, "orders", 0, "ghost", read_owner(gateway, keys, "orders", 0))


def test_racing_movers_one_wins_each_round_and_epochs_strictly_increase(etcd, keys):
    setup = EtcdGateway((etcd.endpoint,), timeout_s=5)
    register(setup, keys, "x", "y")
    create_topic(setup, keys, "orders", ["a"])
    rounds, epochs = 15, []
    for _ in range(rounds):
        read = read_owner(setup, keys, "orders", 0)
        barrier, outcomes = threading.Barrier(2), {}

        def move(target):
            gateway = EtcdGateway((etcd.endpoint,), timeout_s=5)
            try:
                barrier.wait(timeout=10)
                outcomes[target] = change_owner(gateway, keys, "orders", 0, target, read)
            except OwnershipConflictError as exc:
                outcomes[target] = exc
            finally:
                gateway.close()

        movers = [threading.Thread(target=move, args=(target,)) for target in ("x", "y")]
        for mover in movers:
            mover.start()
        for mover in movers:
            mover.join(timeout=20)
        winners = [o for o in outcomes.values() if not isinstance(o, Exception)]
        assert len(outcomes) == 2 and len(winners) == 1, outcomes
        assert read_owner(setup, keys, "orders", 0) == winners[0]
        epochs.append(winners[0].epoch)
    setup.close()
    assert epochs == list(range(1, rounds + 1))


def test_an_unreachable_etcd_is_one_error_naming_every_endpoint(etcd):
    from tests.support.etcd_server import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    gateway = EtcdGateway((dead, etcd.endpoint), timeout_s=2)
    assert gateway.get("nothing/here") is None  # the second endpoint answers
    gateway.close()
    with pytest.raises(EtcdUnavailableError, match=f"etcd unavailable at {dead}: ConnectionFailedError"):
        EtcdGateway((dead,), timeout_s=2).get("nothing/here")
