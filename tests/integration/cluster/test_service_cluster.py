"""Cluster mode in real service processes against a real etcd (one per module, conftest.py).

Without --etcd nothing of the cluster starts; with it an instance registers, fences produce when
etcd stops answering (before its lease could expire) and resumes, places a new topic's partitions
over the live instances, answers Metadata from its cache, and refuses another instance's
partitions with the owner in trailing metadata.
"""

from __future__ import annotations

import itertools
import time

import grpc
import pytest

from seglog.v1 import cluster_pb2 as cpb
from seglog.v1 import cluster_pb2_grpc as cpb_grpc
from seglog.v1 import log_service_pb2 as pb
from tests.support.integration_helpers import ServiceProcess, error_class, make_batch

# A short lease so the fencing test is quick: fenced after 4 - 2 x 0.8 - 0.4 = 2 s without renewal.
LEASE_TTL_MS = 4000
# How long a change may take to reach the other instance's cache (a watch event, usually ms).
PROPAGATION_TIMEOUT_S = 20.0
_names = itertools.count()


def _start(tmp_path, name: str, args: list[str], env: dict[str, str] | None = None) -> ServiceProcess:
    workdir = tmp_path / name
    data = workdir / "data"
    data.mkdir(parents=True)
    return ServiceProcess(workdir, [data], args, env=env).start()


def _cluster_args(etcd, cluster_name: str, instance_id: str) -> list[str]:
    return ["--etcd", etcd.endpoint, "--cluster-name", cluster_name, "--instance-id", instance_id,
            "--lease-ttl-ms", str(LEASE_TTL_MS)]


def _metadata(service: ServiceProcess, *topics: str) -> cpb.MetadataResponse:
    return cpb_grpc.ClusterServiceStub(service.channel).Metadata(cpb.MetadataRequest(topics=topics), timeout=10)


def _produce(service: ServiceProcess, topic: str, partition: int, value: bytes = b"v") -> pb.ProduceResponse:
    return service.stub.Produce(pb.ProduceRequest(topic=topic, partition=partition, records=make_batch([value])),
                                timeout=10)


def _stream_produce(service: ServiceProcess, topic: str, partition: int) -> pb.ProduceStreamResponse:
    """One ProduceStream message and its answer."""
    request = pb.ProduceStreamRequest(correlation_id=7, produce=pb.ProduceRequest(
        topic=topic, partition=partition, records=make_batch([b"s"])))
    (response,) = list(service.stub.ProduceStream(iter([request]), timeout=10))
    assert response.correlation_id == 7
    return response


def _until(predicate, timeout_s: float = PROPAGATION_TIMEOUT_S, what: str = "the condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        assert time.monotonic() < deadline, f"{what} not reached in {timeout_s} s"
        time.sleep(0.05)


@pytest.fixture
def services():
    started: list[ServiceProcess] = []
    yield started
    for service in started:
        service.stop()


def test_without_etcd_nothing_of_the_cluster_starts_and_metadata_answers_the_one_instance(tmp_path, services):
    service = _start(tmp_path, "single", [])
    services.append(service)
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=3), timeout=10)
    answer = _metadata(service)
    assert not answer.cluster_mode and answer.current
    assert [(i.instance_id, i.address, i.alive) for i in answer.instances] == [("local", service.address, True)]
    assert [(p.topic, p.partition, p.owner_id, p.owner_address, p.epoch) for p in answer.partitions] == \
        [("t", n, "local", service.address, 0) for n in range(3)]
    assert _metadata(service, "other").partitions == []
    # No instance id recorded, no cluster log line, no etcd module loaded (the core logs as seglog_server.cluster).
    assert not (service.data_dirs[0] / "instance.id").exists()
    assert "cluster" not in service.log().lower()
    _produce(service, "t", 2)


@pytest.mark.slow  # waits for the fencing deadline (2 s) and etcd's return: ~8 s
def test_a_frozen_etcd_fences_produce_before_the_lease_can_expire_and_produce_resumes(tmp_path, etcd, services):
    service = _start(tmp_path, "a", _cluster_args(etcd, f"fence{next(_names)}", "a"))
    services.append(service)
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1), timeout=10)
    _produce(service, "t", 0)
    etcd.pause()
    try:
        paused_at = time.monotonic()
        acknowledged = [0]  # offsets acknowledged while etcd was frozen, before the fence

        def refused():
            try:
                acknowledged.append(_produce(service, "t", 0).base_offset)
            except grpc.RpcError as error:
                return error
            return None

        error = _until(refused, timeout_s=LEASE_TTL_MS / 1000 * 3, what="a refused produce")
        refused_by = time.monotonic() - paused_at
        assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
        assert error.details().startswith("instance fenced: lease not renewed since "), error.details()
        assert error_class(error) == "InstanceFencedError"
        # Before etcd could have expired the lease (its TTL counts from the last renewal, which is
        # no later than the pause): no other instance could yet have been given the partition.
        assert refused_by < LEASE_TTL_MS / 1000, refused_by
        streamed = _stream_produce(service, "t", 0)  # ProduceStream's messages likewise
        assert (streamed.error.code, streamed.error.error_class) == \
            (grpc.StatusCode.UNAVAILABLE.value[0], "InstanceFencedError"), streamed
        assert streamed.error.message.startswith("instance fenced: lease not renewed since ")
        # Reads go on while fenced.
        fetched = service.stub.Fetch(pb.FetchRequest(topic="t", partition=0, offset=0), timeout=10)
        # Every acknowledged produce is there, in order; the refused one may be too: a produce
        # admitted before the fence and answered after it is refused UNAVAILABLE once appended
        # (test_fenced_acknowledgement.py), so the log holds at most that one more.
        assert acknowledged == list(range(len(acknowledged)))
        assert fetched.high_watermark in (len(acknowledged), len(acknowledged) + 1), fetched.high_watermark
    finally:
        etcd.resume()

    def accepted():
        try:
            return _produce(service, "t", 0)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
            return None

    assert _until(accepted, what="produce accepted after etcd resumed").base_offset >= 1
    assert "lease renewed again" in service.log() or "registered" in service.log()


@pytest.mark.slow  # two service processes: ~12 s
def test_two_instances_place_a_topic_agree_on_metadata_and_refuse_the_others_partitions(tmp_path, etcd, services):
    cluster = f"two{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"))
    services.append(b)
    _until(lambda: {i.instance_id for i in _metadata(a).instances if i.alive} == {"a", "b"}, what="a sees b")
    a.stub.CreateTopic(pb.CreateTopicRequest(topic="orders", partitions=4, configs={"retention.ms": "3600000"}),
                       timeout=10)

    def owners(service):
        return [(p.topic, p.partition, p.owner_id, p.owner_address, p.epoch, p.owner_alive)
                for p in _metadata(service, "orders").partitions]

    expected = [("orders", n, owner, address, 0, True)
                for n, (owner, address) in enumerate([("a", a.address), ("b", b.address)] * 2)]
    assert owners(a) == expected
    _until(lambda: owners(b) == expected, what="b's metadata agreeing with a's")
    # A second create of the name, from either instance, is refused.
    with pytest.raises(grpc.RpcError) as again:
        b.stub.CreateTopic(pb.CreateTopicRequest(topic="orders", partitions=1), timeout=10)
    assert again.value.code() == grpc.StatusCode.ALREADY_EXISTS

    with pytest.raises(grpc.RpcError) as info:
        _produce(a, "orders", 1)
    error = info.value
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error.details()
    hint = dict(error.trailing_metadata())
    assert (hint["seglog-owner-id"], hint["seglog-owner-address"], hint["seglog-epoch"]) == ("b", b.address, "0")
    assert error_class(error) == "NotPartitionOwnerError" and "'b'" in error.details()
    streamed = _stream_produce(a, "orders", 1)
    assert (streamed.error.code, streamed.error.error_class) == \
        (grpc.StatusCode.FAILED_PRECONDITION.value[0], "NotPartitionOwnerError"), streamed
    assert b.address in streamed.error.message
    with pytest.raises(grpc.RpcError) as fetch:
        a.stub.Fetch(pb.FetchRequest(topic="orders", partition=1, offset=0), timeout=10)
    assert fetch.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert dict(fetch.value.trailing_metadata())["seglog-owner-id"] == "b"

    def produced_on_b():
        try:
            return _produce(b, "orders", 1, b"on b")
        except grpc.RpcError as missing:  # b holds the topic once its cache saw it: until then
            # its owner answers retriable (UNAVAILABLE), not NOT_FOUND, so a producer retries
            assert (missing.code(), error_class(missing)) == \
                (grpc.StatusCode.UNAVAILABLE, "TopicGenerationError"), missing.details()
            return None

    assert _until(produced_on_b, what="b holding orders").base_offset == 0
    assert _produce(a, "orders", 0).base_offset == 0
    described = b.stub.DescribeTopic(pb.DescribeTopicRequest(topic="orders"), timeout=10)
    assert described.configs["retention.ms"] == "3600000"

    # b stops: its lease is revoked, a sees it gone at once, and b's partitions are offline on a,
    # never given to a (that would lose b's records).
    assert b.stop() == 0
    _until(lambda: [i.alive for i in _metadata(a).instances if i.instance_id == "b"] == [False], what="b gone")
    with pytest.raises(grpc.RpcError) as gone:
        _produce(a, "orders", 1)
    assert gone.value.code() == grpc.StatusCode.UNAVAILABLE, gone.value.details()
    assert "'b'" in gone.value.details() and "not registered since" in gone.value.details()
    assert [p.owner_id for p in _metadata(a, "orders").partitions] == ["a", "b", "a", "b"]


def _start_seeded(tmp_path, name: str, args: list[str], producer_id_block: int) -> ServiceProcess:
    """A service whose data dir already holds a producer-id-block file at ``producer_id_block``
    (as two instances restored from one image or backup would)."""
    workdir = tmp_path / name
    data = workdir / "data"
    data.mkdir(parents=True)
    (data / "producer-id-block").write_text(f"1\n{producer_id_block}\n1\n{data}\n")
    return ServiceProcess(workdir, [data], args).start()


def _init_producer_id(service: ServiceProcess) -> int:
    return service.stub.InitProducerId(pb.InitProducerIdRequest(), timeout=10).producer_id


def test_two_instances_never_hand_out_one_producer_id(tmp_path, etcd, services):
    # Local files would give both instances the same ids (same counter, every holder online);
    # the cluster's etcd counter gives each its own blocks.
    cluster = f"pids{next(_names)}"
    seeded = 5_000_000
    a = _start_seeded(tmp_path, "a", _cluster_args(etcd, cluster, "a"), seeded)
    services.append(a)
    b = _start_seeded(tmp_path, "b", _cluster_args(etcd, cluster, "b"), seeded)
    services.append(b)
    ids_a, ids_b = [], []
    for _ in range(20):
        ids_a.append(_init_producer_id(a))
        ids_b.append(_init_producer_id(b))
    assert len(set(ids_a)) == len(ids_a) and len(set(ids_b)) == len(ids_b)
    assert not set(ids_a) & set(ids_b), sorted(set(ids_a) & set(ids_b))[:5]
    # One block each from the one counter: the blocks are adjacent, [F, F + 1000) and the next.
    assert {min(ids_a) // 1000, min(ids_b) // 1000} == {min(ids_a + ids_b) // 1000, min(ids_a + ids_b) // 1000 + 1}


def test_init_producer_id_answers_unavailable_while_etcd_does_not_answer_and_resumes(tmp_path, etcd, services):
    service = _start(tmp_path, "a", _cluster_args(etcd, f"pidsdown{next(_names)}", "a"))
    services.append(service)
    etcd.pause()
    try:
        with pytest.raises(grpc.RpcError) as refused:
            _init_producer_id(service)
    finally:
        etcd.resume()
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value.details()
    assert error_class(refused.value) == "ClusterUnavailableError"
    assert "no producer id reserved: etcd unavailable at" in refused.value.details()
    first = _until(lambda: _try_init_producer_id(service), what="InitProducerId after etcd returned")
    assert _init_producer_id(service) == first + 1


def _try_init_producer_id(service: ServiceProcess) -> int | None:
    try:
        return _init_producer_id(service)
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
        return None
