"""Consumer groups in cluster mode, against a real etcd (conftest.py): refused until the groups are
cluster-aware. Each instance would run its own coordinator over its own __consumer_offsets, so two
members of one group bootstrapped at different instances would each get every partition."""

from __future__ import annotations

import grpc
import pytest

from seglog.v1 import log_service_pb2 as pb
from tests.support.integration_helpers import ServiceProcess, error_class

pytestmark = pytest.mark.integration
REFUSAL = "consumer groups are not yet supported in cluster mode"


@pytest.fixture
def clustered(tmp_path, etcd):
    data = tmp_path / "a" / "data"
    data.mkdir(parents=True)
    service = ServiceProcess(tmp_path / "a", [data], [
        "--etcd", etcd.endpoint, "--cluster-name", "groups", "--instance-id", "a"]).start()
    yield service
    service.stop()


def test_every_group_rpc_is_refused_in_cluster_mode_and_the_service_keeps_serving(clustered):
    stub = clustered.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1), timeout=10)
    calls = [
        (stub.Heartbeat, pb.HeartbeatRequest(group="g", member_epoch=0, subscribed_topics=["t"])),
        (stub.CommitOffsets, pb.CommitOffsetsRequest(group="g", offsets=[
            pb.OffsetToCommit(topic="t", partition=0, offset=1)])),
        (stub.FetchOffsets, pb.FetchOffsetsRequest(group="g")),
        (stub.ListGroups, pb.ListGroupsRequest()),
        (stub.DescribeGroup, pb.DescribeGroupRequest(group="g")),
        (stub.DeleteGroup, pb.DeleteGroupRequest(group="g")),
    ]
    for method, request in calls:
        with pytest.raises(grpc.RpcError) as refused:
            method(request, timeout=10)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, (method, refused.value)
        assert REFUSAL in refused.value.details()
        assert error_class(refused.value) == "GroupsNotInClusterError"
    # Nothing of the groups was created, and the service still serves.
    assert "__consumer_offsets" not in {t.topic for t in stub.ListTopics(pb.ListTopicsRequest(), timeout=10).topics}
