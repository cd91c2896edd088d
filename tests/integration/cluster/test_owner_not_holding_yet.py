"""An owner that does not hold its new partition yet answers UNAVAILABLE (retriable), and a
Producer sending there retries until it does: a real etcd (conftest.py), two real processes.

b's copy of a topic created at a is kept from being made (its held-topics record cannot be
written: a directory where the record's temporary file goes), so b owns a partition it does not
hold for as long as the test likes. Before, b answered NOT_FOUND, which a producer does not retry
(Kafka answers a partition its leader does not know yet with a retriable error).
"""

from __future__ import annotations

import grpc
import pytest

from seglog import Producer
from seglog.v1 import log_service_pb2 as pb
from seglog_server.cluster.topic_records import HELD_TOPICS_FILE_NAME
from tests.integration.cluster.test_service_cluster import _cluster_args, _metadata, _names, _start, _until, services
from tests.support.integration_helpers import error_class, make_batch, records_of

__all__ = ["services"]
TOPIC = "fresh"


@pytest.mark.slow  # two service processes: ~8 s
def test_a_producer_retries_an_owner_not_holding_its_new_partition_until_it_does(tmp_path, etcd, services):
    cluster = f"notyet{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"))
    services.append(b)
    _until(lambda: {i.instance_id for i in _metadata(a).instances if i.alive} == {"a", "b"}, what="a sees b")
    blocker = b.data_dirs[0] / (HELD_TOPICS_FILE_NAME + ".tmp")
    blocker.mkdir()  # b's record of the new topic cannot be written, so its copy is not made

    a.stub.CreateTopic(pb.CreateTopicRequest(topic=TOPIC, partitions=2), timeout=10)
    b_partition = next(p.partition for p in _metadata(a, TOPIC).partitions if p.owner_id == "b")
    _until(lambda: any(p.topic == TOPIC for p in _metadata(b, TOPIC).partitions), what="b's view showing the topic")
    for _ in range(3):  # the materializer tries again every 0.2 s, and fails each time
        with pytest.raises(grpc.RpcError) as refused:
            b.stub.Produce(pb.ProduceRequest(topic=TOPIC, partition=b_partition, records=make_batch([b"x"])),
                           timeout=10)
        assert (refused.value.code(), error_class(refused.value)) == \
            (grpc.StatusCode.UNAVAILABLE, "TopicGenerationError"), refused.value.details()
        assert "not held here yet" in refused.value.details()

    with Producer(a.address, linger_ms=1, retries=1000, retry_backoff_ms=50) as producer:
        sent = producer.send(TOPIC, b"first", partition=b_partition)
        _until(lambda: producer.statistics().retries > 0, what="the producer retrying at b")
        assert not sent.done()
        blocker.rmdir()
        assert sent.result(timeout=60).offset == 0
    fetched = b.stub.Fetch(pb.FetchRequest(topic=TOPIC, partition=b_partition, offset=0), timeout=10)
    assert [record.value for record in records_of(fetched)] == [b"first"]
