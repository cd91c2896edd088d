"""Consumer groups in cluster mode, against a real etcd (conftest.py) and real service processes:
one coordinator per group, the owner of the group's __consumer_offsets partition. Every other
instance refuses the group's calls with the owner's hint, and the clients (group consumer, Admin)
follow it, so a group bootstrapped at any instance works."""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import subprocess
import sys
import urllib.request

import grpc
import pytest

from seglog import Admin, Producer
from seglog.errors import ServiceUnavailableError
from seglog.group_consumer import GroupConsumer
from seglog.structs import TopicPartition
from seglog_server.cluster import ClusterKeys, EtcdGateway
from seglog_server.cluster.ownership import change_owner, read_owner
from tests.integration.cluster.test_cluster_client_routing import _holds
from tests.integration.cluster.test_service_cluster import _cluster_args, _start, _until, services
from tests.support.integration_helpers import error_class, service_environment
from seglog.v1 import log_service_pb2 as pb

__all__ = ["services"]  # the fixture, shared with test_service_cluster.py

pytestmark = pytest.mark.integration

_names = itertools.count()
OFFSETS_PARTITIONS = 4  # few, so a group coordinated by a given instance is found in a few tries
PARTITIONS = 4
RECORDS_PER_PARTITION = 5
GROUP_ARGS = ["--offsets-topic-partitions", str(OFFSETS_PARTITIONS), "--group-heartbeat-interval-ms", "200",
              "--group-session-timeout-ms", "10000"]


def _trailing(error: grpc.RpcError) -> dict[str, str]:
    return {key: value for key, value in (error.trailing_metadata() or ())}


def _two_instances(tmp_path, etcd, services, group_args=GROUP_ARGS):
    cluster = f"groups{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a") + group_args)
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b") + group_args)
    services.append(b)
    with Admin(a.address) as admin:
        _until(lambda: {i.instance_id for i in admin.metadata().instances if i.alive} == {"a", "b"}, what="a sees b")
    return a, b


def _group_coordinated_by(asked, coordinator_id: str) -> tuple[str, grpc.RpcError]:
    """A group name whose coordinator is ``coordinator``, found by asking ``asked`` (the first ask
    creates the offsets topic in the cluster); with ``asked``'s refusal of it."""
    for number in range(64):
        group = f"group-{number}"
        try:
            asked.stub.DescribeGroup(pb.DescribeGroupRequest(group=group), timeout=10)
        except grpc.RpcError as error:
            if _trailing(error).get("seglog-owner-id") == coordinator_id:
                return group, error
            raise
    raise AssertionError("no group coordinated by the other instance among 64 names")


def _produce_all(address: str, topic: str) -> None:
    with Producer(address) as producer:
        futures = [producer.send(topic, f"{p}-{i}".encode(), partition=p)
                   for i in range(RECORDS_PER_PARTITION) for p in range(PARTITIONS)]
        for future in futures:
            future.result(timeout=30)


def _read_balanced(consumers, wanted: int) -> set[tuple[int, int]]:
    """Polls every member until their assignments are disjoint and cover every partition and
    ``wanted`` distinct records were read (a partition moved in a rebalance is read again from
    the start, as nothing is committed yet); returns the records read."""
    seen: set[tuple[int, int]] = set()

    def done() -> bool:
        for consumer in consumers:
            seen.update((r.partition, r.offset) for r in consumer.poll(timeout_ms=50))
        owned = [set(c.assignment()) for c in consumers]
        balanced = all(owned) and not owned[0] & owned[1] and len(owned[0] | owned[1]) == PARTITIONS
        return balanced and len(seen) >= wanted

    _until(done, what="disjoint assignments covering all partitions, every record read")
    return seen


@pytest.mark.slow  # two service processes: ~15 s
def test_a_group_whose_coordinator_is_b_works_through_a(tmp_path, etcd, services):
    a, b = _two_instances(tmp_path, etcd, services)
    with Admin(a.address) as admin:
        admin.create_topic("events", partitions=PARTITIONS)
    _until(lambda: _holds(b, "events"), what="b holding the topic")
    _produce_all(a.address, "events")
    group, refusal = _group_coordinated_by(a, "b")
    # a refuses the group's calls with b's hint, machine-readable as a partition request's.
    assert refusal.code() == grpc.StatusCode.FAILED_PRECONDITION, refusal.details()
    assert error_class(refusal) == "NotPartitionOwnerError"
    assert _trailing(refusal)["seglog-owner-address"] == b.address
    assert _trailing(refusal)["seglog-epoch"] == "0"
    assert f"group {group!r} is coordinated by the owner of __consumer_offsets-" in refusal.details()
    for method, request in [
        (a.stub.Heartbeat, pb.HeartbeatRequest(group=group, member_epoch=0, subscribed_topics=["events"])),
        (a.stub.CommitOffsets, pb.CommitOffsetsRequest(group=group, offsets=[
            pb.OffsetToCommit(topic="events", partition=0, offset=1)])),
        (a.stub.FetchOffsets, pb.FetchOffsetsRequest(group=group)),
        (a.stub.DeleteGroup, pb.DeleteGroupRequest(group=group)),
    ]:
        with pytest.raises(grpc.RpcError) as refused:
            method(request, timeout=10)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, (method, refused.value.details())
        assert _trailing(refused.value)["seglog-owner-id"] == "b"

    # Two members bootstrapped at a: disjoint assignments covering every partition, all records read.
    consumers = [GroupConsumer(a.address, group_id=group, topics=["events"], auto_offset_reset="earliest",
                               enable_auto_commit=False, session_timeout_ms=10_000) for _ in range(2)]
    try:
        seen = _read_balanced(consumers, PARTITIONS * RECORDS_PER_PARTITION)
        assert sorted(seen) == [(p, i) for p in range(PARTITIONS) for i in range(RECORDS_PER_PARTITION)]
        for consumer in consumers:
            consumer.commit({tp: RECORDS_PER_PARTITION for tp in consumer.assignment()})

        # The commits are stored at b, the coordinator; a holds none of them.
        stored = b.stub.FetchOffsets(pb.FetchOffsetsRequest(group=group), timeout=10)
        assert sorted((o.topic, o.partition, o.offset) for o in stored.offsets) == \
            [("events", p, RECORDS_PER_PARTITION) for p in range(PARTITIONS)]
        assert group not in {g.group for g in a.stub.ListGroups(pb.ListGroupsRequest(), timeout=10).groups}

        with Admin(a.address) as admin:
            description = admin.describe_group(group)
            assert len(description.members) == 2 and description.state in ("Stable", "Reconciling")
            assert sorted((p.partition, p.committed_offset) for p in description.partitions) == \
                [(p, RECORDS_PER_PARTITION) for p in range(PARTITIONS)]
            assert {g.group: g.member_count for g in admin.list_groups()} == {group: 2}
        # The CLI, through the same client, bootstrapped at a.
        assert [(g["group"], g["member_count"]) for g in json.loads(_cli(a, "groups", "list", "--format", "json"))] \
            == [(group, 2)]
        described = json.loads(_cli(a, "groups", "describe", group, "--format", "json"))
        assert [(p["partition"], p["committed_offset"]) for p in described["partitions"]] == \
            [(p, RECORDS_PER_PARTITION) for p in range(PARTITIONS)]
    finally:
        for consumer in consumers:
            consumer.close()
    with Admin(a.address) as admin:
        assert admin.delete_group(group) == PARTITIONS
        assert admin.list_groups() == []
    assert list(b.stub.FetchOffsets(pb.FetchOffsetsRequest(group=group), timeout=10).offsets) == []


@pytest.mark.slow  # two service processes and a restart: ~20 s
def test_the_coordinator_restarting_keeps_the_commits_and_its_members_rejoin_there(tmp_path, etcd, services):
    a, b = _two_instances(tmp_path, etcd, services)
    with Admin(a.address) as admin:
        admin.create_topic("events", partitions=PARTITIONS)
    _until(lambda: _holds(b, "events"), what="b holding the topic")
    _produce_all(a.address, "events")
    group, _ = _group_coordinated_by(a, "b")
    consumer = GroupConsumer(a.address, group_id=group, topics=["events"], auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=10_000)
    try:
        _until(lambda: not consumer.poll(timeout_ms=50) and len(consumer.assignment()) == PARTITIONS,
               what="the one member owning every partition")
        committed = {TopicPartition("events", p): 2 + p % 2 for p in range(PARTITIONS)}
        consumer.commit(committed)
        member = consumer._async.member_id

        b.signal(signal.SIGKILL)
        b.wait()
        with Admin(a.address) as admin:  # its lease expires a TTL after its last renewal
            _until(lambda: not any(i.instance_id == "b" and i.alive for i in admin.metadata().instances),
                   what="a seeing b gone")
        # While b is away, a answers the group UNAVAILABLE with b's hint (nothing moves its partitions).
        with pytest.raises(grpc.RpcError) as gone:
            a.stub.FetchOffsets(pb.FetchOffsetsRequest(group=group), timeout=10)
        assert gone.value.code() == grpc.StatusCode.UNAVAILABLE, gone.value.details()
        assert error_class(gone.value) == "PartitionOwnerGoneError"
        assert _trailing(gone.value)["seglog-owner-id"] == "b"

        b.start()  # same data dir and instance id, a new port
        with Admin(a.address) as admin:
            _until(lambda: any(i.instance_id == "b" and i.alive and i.address == b.address
                               for i in admin.metadata().instances), what="b registered again")

            # The member rejoins, at b (found through a), and keeps its id; the commits survived.
            def rejoined() -> bool:
                # Heartbeats failing while b was away are retried by the member; a read of a
                # partition b owns still reaches poll as UNAVAILABLE (retriable) while b is away.
                with contextlib.suppress(ServiceUnavailableError):
                    consumer.poll(timeout_ms=50)
                described = admin.describe_group(group)
                return [m.member_id for m in described.members] == [member]

            _until(rejoined, what="the member back in the group at b")
            assert consumer.committed([TopicPartition("events", p) for p in range(PARTITIONS)]) == committed
        stored = b.stub.FetchOffsets(pb.FetchOffsetsRequest(group=group), timeout=10)
        assert {TopicPartition(o.topic, o.partition): o.offset for o in stored.offsets} == committed
    finally:
        consumer.close()


@pytest.mark.slow  # two service processes: ~15 s
def test_an_offsets_partition_changing_hands_moves_its_groups_and_the_old_coordinator_refuses_them(
        tmp_path, etcd, services):
    """The owner record of the group's offsets partition changes from b to a in etcd (what a
    partition move commits): b unloads the partition and refuses the group's calls, commits
    included, with a's hint; a loads it and coordinates the group, where its member rejoins.
    The services' session timeout is longer than the test waits: b drops the member because it
    lost the partition, not because the member went silent."""
    a, b = _two_instances(tmp_path, etcd, services, GROUP_ARGS[:-1] + ["120000"])
    cluster = _cluster_name(a)
    with Admin(a.address) as admin:
        admin.create_topic("events", partitions=PARTITIONS)
    _until(lambda: _holds(b, "events"), what="b holding the topic")
    group, refusal = _group_coordinated_by(a, "b")
    offsets_partition = int(refusal.details().split("__consumer_offsets-")[1].split(":")[0])
    consumer = GroupConsumer(a.address, group_id=group, topics=["events"], auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=10_000)
    try:
        _until(lambda: not consumer.poll(timeout_ms=50) and len(consumer.assignment()) == PARTITIONS,
               what="the one member owning every partition")
        member = consumer._async.member_id
        assert f'seglog_consumer_group_members{{group="{group}"}} 1' in _metrics(b)
        keys, gateway = ClusterKeys(cluster), EtcdGateway((etcd.endpoint,), timeout_s=5)
        change_owner(gateway, keys, "__consumer_offsets", offsets_partition, "a",
                     read_owner(gateway, keys, "__consumer_offsets", offsets_partition))

        def refused_with_a_hint() -> bool:
            try:
                b.stub.CommitOffsets(pb.CommitOffsetsRequest(group=group, offsets=[
                    pb.OffsetToCommit(topic="events", partition=0, offset=1)]), timeout=10)
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error.details()
                return _trailing(error).get("seglog-owner-id") == "a"
            raise AssertionError("b acknowledged a commit of a group whose offsets partition it lost")

        _until(refused_with_a_hint, what="b refusing the group with a's hint")
        assert _trailing_of(b.stub.FetchOffsets, pb.FetchOffsetsRequest(group=group))["seglog-epoch"] == "1"
        # b's timer unloaded the partition: the group and its member are gone from b's memory
        # (no series of it in b's metrics), and it is not listed there.
        _until(lambda: f'group="{group}"' not in _metrics(b), what="b dropping the group's member")
        assert group not in {g.group for g in b.stub.ListGroups(pb.ListGroupsRequest(), timeout=10).groups}

        # The member follows to a, its new coordinator (a's copy of the partition is empty: the
        # owner record moved without the data, which a real move carries first).
        def at_a() -> bool:
            consumer.poll(timeout_ms=50)  # the coordinator moving is retried, never raised
            described = a.stub.DescribeGroup(pb.DescribeGroupRequest(group=group), timeout=10)
            return [m.member_id for m in described.members] == [member]

        _until(at_a, what="the member rejoined at a")
        assert group in {g.group for g in a.stub.ListGroups(pb.ListGroupsRequest(), timeout=10).groups}
    finally:
        consumer.close()


def _cli(service, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "seglog_cli", "--server", service.address, *args],
                          capture_output=True, text=True, timeout=60, env=service_environment())
    assert done.returncode == 0, done.stderr
    return done.stdout


def _metrics(service) -> str:
    with urllib.request.urlopen(f"http://{service.metrics_address}/metrics", timeout=10) as answer:
        return answer.read().decode()


def _cluster_name(service) -> str:
    return service.args[service.args.index("--cluster-name") + 1]


def _trailing_of(method, request) -> dict[str, str]:
    with pytest.raises(grpc.RpcError) as refused:
        method(request, timeout=10)
    return _trailing(refused.value)
