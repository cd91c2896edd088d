"""``Admin.describe_group`` asks a partition's owner for the log end the coordinator could not
tell; where no owner can tell either (the topic deleted after the commit), the row keeps -1 and
the other rows their lag: one failing partition does not fail the description."""

from __future__ import annotations

import grpc
import pytest
from seglog import Admin, Producer
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration


def test_a_partition_no_instance_can_tell_keeps_minus_one_and_the_others_their_lag(seglog_service):
    with Admin(seglog_service.address) as admin:
        admin.create_topic("ends-kept", partitions=1)
        admin.create_topic("ends-gone", partitions=2)
        with Producer(seglog_service.address) as producer:
            for i in range(4):
                producer.send("ends-kept", b"%d" % i, partition=0)
            producer.flush()
        with grpc.insecure_channel(seglog_service.address) as channel:
            pb_grpc.LogServiceStub(channel).CommitOffsets(pb.CommitOffsetsRequest(group="ends", offsets=[
                pb.OffsetToCommit(topic="ends-kept", partition=0, offset=1),
                pb.OffsetToCommit(topic="ends-gone", partition=0, offset=0),
                pb.OffsetToCommit(topic="ends-gone", partition=1, offset=0)]), timeout=10)
        admin.delete_topic("ends-gone")
        described = admin.describe_group("ends")
    assert [(p.topic, p.partition, p.log_end_offset, p.lag) for p in described.partitions] == [
        ("ends-gone", 0, -1, -1), ("ends-gone", 1, -1, -1), ("ends-kept", 0, 4, 3)]
