"""Records in a real etcd that seglog never writes (an operator's etcdctl, another tool), written
under a running instance's cluster prefix: the instance keeps applying the good records that come
after them, refuses what a bad record names with a specific status naming the key, counts them
(seglog_cluster_malformed_records_total), and starts again with them present."""

from __future__ import annotations

import json

import grpc
import pytest

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import moves_pb2 as mpb
from seglog.v1 import moves_pb2_grpc as mpb_grpc
from seglog_server.cluster import ClusterKeys, EtcdGateway, change_owner, read_owner
from seglog_server.cluster.etcd_gateway import b64
from seglog_server.storage.base.topic_partition import PARTITION_COUNT_MAX
from tests.integration.cluster.test_cluster_metrics import scrape, value
from tests.integration.cluster.test_service_cluster import _cluster_args, _metadata, _produce, _start, _until, services

__all__ = ["services"]  # the fixture, shared from test_service_cluster

pytestmark = pytest.mark.integration


def _put(gateway: EtcdGateway, key: bytes | str, value: bytes) -> None:
    gateway.txn([], [{"request_put": {"key": b64(key), "value": b64(value)}}])


def _owners(service, *topics: str) -> dict[tuple[str, int], str]:
    return {(p.topic, p.partition): p.owner_id for p in _metadata(service, *topics).partitions}


def _epochs(service, *topics: str) -> dict[tuple[str, int], int]:
    return {(p.topic, p.partition): p.epoch for p in _metadata(service, *topics).partitions}


def _refusal(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value


def test_bad_records_under_a_running_instance_are_skipped_counted_refused_by_name_and_survive_a_restart(
        tmp_path, etcd, services):
    cluster = "malformed"
    keys = ClusterKeys(cluster)
    services.append(a := _start(tmp_path, "a", _cluster_args(etcd, cluster, "a")))
    for topic in ("poisoned", "cfg", "moving"):
        a.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1), timeout=10)
    assert _produce(a, "poisoned", 0).base_offset == 0  # kept through all that follows
    writer = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        # What the audit fed the watch: each one ended the cache's thread, so nothing after it applied.
        _put(writer, keys.instance("x"), b"[1]")
        _put(writer, keys.topic("inf"), b'{"partitions": Infinity}')
        _put(writer, keys.topic("huge"), b'{"partitions": 1000000000000}')
        _put(writer, keys.prefix + "owners/moving/\u00b2", b'{"owner": "a", "epoch": 0}')
        _put(writer, keys.prefix.encode() + b"topics/\xff", b"{}")
        _put(writer, keys.move("moving", 0), b"[" * 100_000)
        _put(writer, keys.owner("poisoned", 0), b'{"owner": "a", "epoch": 1e400}')
        _put(writer, keys.topic("cfg"), json.dumps({"partitions": 1, "configs": [1]}).encode())
        _put(writer, keys.producer_id_block(), b"12\xd9\xa3")
        _put(writer, keys.offset_ceiling("moving", 0), b'{"epoch": 0, "ceiling": ' + b"9" * 5000 + b"}")
        # A good change after them all is applied.
        a.stub.CreateTopic(pb.CreateTopicRequest(topic="later", partitions=2), timeout=10)
        _until(lambda: _owners(a, "later") == {("later", 0): "a", ("later", 1): "a"}, what="the later topic seen")
        # (Metadata lists a local topic the view lacks as this instance's at epoch 0: an epoch
        # written after the bad records shows that the view itself took it.)
        _put(writer, keys.owner("later", 1), b'{"epoch": 1, "owner": "a"}')
        _until(lambda: _epochs(a, "later") == {("later", 0): 0, ("later", 1): 1}, what="the later epoch seen")
        assert _metadata(a).current
        assert _produce(a, "later", 1).base_offset == 0
        _until(lambda: value(scrape(a), "seglog_cluster_malformed_records_total") >= 8, what="bad records counted")
        # The 8 the watched cache reads (the producer-id counter and the ceiling are read elsewhere).
        assert value(scrape(a), "seglog_cluster_malformed_records_held") == 8
        assert value(scrape(a), "seglog_cluster_metadata_current") == 1
        assert value(scrape(a), "seglog_cluster_metadata_errors_total") == 0

        _check_refusals(a, keys)
        # A count above the cap every record is decoded against is never written to etcd.
        refused = _refusal(lambda: a.stub.CreateTopic(pb.CreateTopicRequest(
            topic="toomany", partitions=PARTITION_COUNT_MAX + 1), timeout=10))
        assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT and str(PARTITION_COUNT_MAX) in refused.details()
        assert writer.get(keys.topic("toomany")) is None

        # A restart with every bad record present: starts, current, and serves as before.
        a.stop()
        a.start()
        _until(lambda: _epochs(a, "later") == {("later", 0): 0, ("later", 1): 1}, what="the view reloaded")
        assert _metadata(a).current and _produce(a, "later", 0).base_offset == 0
        # Held from the first scrape (an alert on the total's increase never saw them here).
        assert value(scrape(a), "seglog_cluster_malformed_records_held") == 8
        _check_refusals(a, keys)
        # The record written again as seglog writes it: the partition is served again.
        _put(writer, keys.owner("poisoned", 0), b'{"epoch": 0, "owner": "a"}')
        _until(lambda: _produce_or_code(a, "poisoned") == grpc.StatusCode.OK, what="the repaired owner served")
        assert _produce(a, "poisoned", 0).base_offset == 2  # the record before the bad one was never dropped
        assert value(scrape(a), "seglog_cluster_malformed_records_held") == 7  # the repaired one no longer
    finally:
        writer.close()
    assert "Traceback" not in a.log()


def _produce_or_code(service, topic: str, partition: int = 0) -> grpc.StatusCode:
    try:
        _produce(service, topic, partition)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def _check_refusals(a, keys: ClusterKeys) -> None:
    # An owner record seglog cannot read: no instance serves the partition (not "no owner": that
    # would be served by whoever holds a copy).
    refused = _refusal(lambda: _produce(a, "poisoned", 0))
    assert refused.code() == grpc.StatusCode.UNAVAILABLE and "unreadable owner record" in refused.details()
    moves = mpb_grpc.PartitionMoveServiceStub(a.channel)
    for call in (lambda: moves.TakeOverPartition(mpb.TakeOverPartitionRequest(topic="poisoned", partition=0,
                                                                              unclean=True), timeout=10),
                 lambda: moves.MovePartition(mpb.MovePartitionRequest(topic="poisoned", partition=0, to_instance="a"),
                                             timeout=10)):
        refused = _refusal(call)
        assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION, refused.details()
        assert keys.owner("poisoned", 0) in refused.details()
        assert "never delete it" in refused.details() and '"owner": "<instance id>"' in refused.details()
    refused = _refusal(lambda: moves.AbortMove(mpb.AbortMoveRequest(topic="moving", partition=0), timeout=10))
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION and keys.move("moving", 0) in refused.details()
    assert "delete it (what AbortMove does" in refused.details()
    refused = _refusal(lambda: a.stub.AlterTopicConfigs(pb.AlterTopicConfigsRequest(
        topic="cfg", set_configs={"retention.ms": "1000"}), timeout=10))
    assert refused.code() == grpc.StatusCode.UNAVAILABLE and keys.topic("cfg") in refused.details()
    assert "never delete it: that deletes the topic" in refused.details()
    refused = _refusal(lambda: a.stub.InitProducerId(pb.InitProducerIdRequest(), timeout=10))
    assert refused.code() == grpc.StatusCode.UNAVAILABLE and keys.producer_id_block() in refused.details()
    assert "never lower it or delete it" in refused.details()


def test_a_topic_created_with_padded_configs_and_one_an_earlier_seglog_wrote_are_served_everywhere(
        tmp_path, etcd, services):
    """Configs as a client sends them (LogConfig strips the padding) once went into the topic
    record as sent, past the reader's old 4,096-character cap: every instance counted the record
    malformed and the other instance never held the topic. Now CreateTopic writes them canonical,
    and a record an earlier seglog wrote that way is read as written."""
    cluster = "padded"
    keys = ClusterKeys(cluster)
    services.append(a := _start(tmp_path, "a", _cluster_args(etcd, cluster, "a")))
    services.append(b := _start(tmp_path, "b", _cluster_args(etcd, cluster, "b")))
    _until(lambda: {i.instance_id for i in _metadata(a).instances if i.alive} == {"a", "b"}, what="both registered")
    padded = " " * 5000 + "604800000"
    a.stub.CreateTopic(pb.CreateTopicRequest(topic="padded", partitions=4, configs={"retention.ms": padded}),
                       timeout=10)
    writer = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        assert json.loads(writer.get(keys.topic("padded")).value)["configs"] == {"retention.ms": "604800000"}
        # As a seglog before this one wrote it: the configs as sent, the owners at epoch 0.
        writer.txn([], [{"request_put": {"key": b64(keys.topic("legacy")), "value": b64(json.dumps(
            {"partitions": 2, "configs": {"retention.ms": padded}, "topic_id": "0" * 32}).encode())}}] + [
            {"request_put": {"key": b64(keys.owner("legacy", p)), "value": b64(json.dumps(
                {"owner": owner, "epoch": 0}).encode())}} for p, owner in enumerate(("a", "b"))])
    finally:
        writer.close()
    for service in (a, b):
        _until(lambda: {t.topic for t in service.stub.ListTopics(pb.ListTopicsRequest()).topics} >= {"padded", "legacy"},
               what=f"both topics held by {service}")
    owners = _owners(a, "padded", "legacy")
    by_id = {"a": a, "b": b}
    for (topic, partition), owner in owners.items():
        _until(lambda: _produce_or_code(by_id[owner], topic, partition) == grpc.StatusCode.OK,
               what=f"{topic}-{partition} served by {owner}")
    assert {owner for (topic, _), owner in owners.items() if topic == "padded"} == {"a", "b"}
    for service in (a, b):
        assert value(scrape(service), "seglog_cluster_malformed_records_total") == 0
        described = service.stub.DescribeTopic(pb.DescribeTopicRequest(topic="legacy"), timeout=10)
        assert dict(described.configs)["retention.ms"] == "604800000"


def test_a_partition_whose_topic_record_is_malformed_at_a_start_still_gets_its_epochs(tmp_path, etcd, services):
    """The topic record malformed when the instance starts (no good one seen): the topic is not in
    the view's topic list, yet its owner serves it by its owner record. The epochs of that record
    must still reach the log (push_epochs walked the topic list: they never did), and the log
    announces a new one: a read parked at the tail ends with the refusal naming the new owner
    instead of waiting out its max_wait_ms (the RPC's deadline here)."""
    cluster = "epochs-bad-topic"
    keys = ClusterKeys(cluster)
    services.append(a := _start(tmp_path, "a", _cluster_args(etcd, cluster, "a")))
    a.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1), timeout=10)
    writer = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        _put(writer, keys.topic("t"), b'{"partitions": "1"}')
        a.stop()
        a.start()
        _until(lambda: _metadata(a).current and _owner_epoch(a) == 0, what="the view reloaded")
        assert _produce(a, "t", 0).base_offset == 0  # served by its owner record
        parked = a.stub.Fetch.future(pb.FetchRequest(topic="t", partition=0, offset=1, max_bytes=1 << 20,
                                                     max_wait_ms=600_000, min_bytes=1), timeout=60)
        lease = writer.grant(60)
        writer.txn([], [{"request_put": {"key": b64(keys.instance("b")), "value": b64(json.dumps(
            {"id": "b", "address": "127.0.0.1:1", "data_dirs": [], "capacity": {}}).encode()), "lease": lease}}])
        _until(lambda: _metadata(a).current and any(i.instance_id == "b" and i.alive for i in _metadata(a).instances),
               what="b registered")
        change_owner(writer, keys, "t", 0, "b", read_owner(writer, keys, "t", 0))
        with pytest.raises(grpc.RpcError) as ended:
            parked.result()
        assert ended.value.code() != grpc.StatusCode.DEADLINE_EXCEEDED, "the parked read was never woken"
        assert "b" in dict(ended.value.trailing_metadata() or ()).get("seglog-owner-id", ""), ended.value.details()
        writer.revoke(lease)
    finally:
        writer.close()


def _owner_epoch(service) -> int:
    """t-0's epoch in the instance's view (DescribeTopic: Metadata shows a topic missing from the
    view's list as this instance's at epoch 0)."""
    (partition,) = service.stub.DescribeTopic(pb.DescribeTopicRequest(topic="t"), timeout=10).partitions
    return partition.owner_epoch


def test_a_create_is_checked_and_written_over_the_instance_topic_defaults(tmp_path, etcd, services):
    """With --topic-default retention.ms=-1 a local retention of ten days is valid, as a standalone
    instance accepts it; the cluster's write once parsed the configs again over Kafka's defaults
    (retention.ms 7 days) and refused the create INVALID_ARGUMENT."""
    cluster = "defaults"
    services.append(a := _start(tmp_path, "a", _cluster_args(etcd, cluster, "a") + ["--topic-default",
                                                                                    "retention.ms=-1"]))
    _until(lambda: [i.instance_id for i in _metadata(a).instances if i.alive] == ["a"], what="registered")
    a.stub.CreateTopic(pb.CreateTopicRequest(topic="ten-days", partitions=1,
                                             configs={"local.retention.ms": " 864000000"}), timeout=20)
    reader = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        record = json.loads(reader.get(ClusterKeys(cluster).topic("ten-days")).value)
    finally:
        reader.close()
    assert record["configs"] == {"local.retention.ms": "864000000"}
    configs = dict(a.stub.DescribeTopic(pb.DescribeTopicRequest(topic="ten-days"), timeout=10).configs)
    assert (configs["retention.ms"], configs["local.retention.ms"]) == ("-1", "864000000")
    _until(lambda: _produce_or_code(a, "ten-days") == grpc.StatusCode.OK, what="ten-days served")
    # What the instance's defaults do not allow is still refused, before anything is written.
    refused = _refusal(lambda: a.stub.CreateTopic(pb.CreateTopicRequest(
        topic="too-long", partitions=1, configs={"retention.ms": "1000", "local.retention.ms": "864000000"}),
        timeout=20))
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT and "local.retention.ms" in refused.details()
