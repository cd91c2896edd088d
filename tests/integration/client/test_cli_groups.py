"""``seglog groups list|describe`` end to end: the real CLI in a subprocess against a real service,
a group with a member (raw Heartbeat) and member commits, one with simple commits only, and one
the service does not know; text and JSON output; lag = log end offset - committed offset."""

from __future__ import annotations

import json

import grpc
import pytest

from seglog import Admin, Producer
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration


def test_groups_list_and_describe_show_members_offsets_and_lag(run_cli, make_topic, seglog_service):
    topic = make_topic(partitions=3)
    with Producer(seglog_service.address) as producer:
        for partition, count in ((0, 10), (1, 4)):
            for i in range(count):
                producer.send(topic, f"r{i}".encode(), partition=partition)
        producer.flush()
    with grpc.insecure_channel(seglog_service.address) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        joined = stub.Heartbeat(pb.HeartbeatRequest(group="cli-billing", member_epoch=0, subscribed_topics=[topic],
                                                    client_id="billing-7"), timeout=10)
        member, epoch = joined.member_id, joined.member_epoch
        assert {a.partition for a in joined.assignment} == {0, 1, 2}
        stub.CommitOffsets(pb.CommitOffsetsRequest(group="cli-billing", member_id=member, member_epoch=epoch, offsets=[
            pb.OffsetToCommit(topic=topic, partition=0, offset=6, metadata="host-a"),
            pb.OffsetToCommit(topic=topic, partition=1, offset=4)]), timeout=10)
        stub.CommitOffsets(pb.CommitOffsetsRequest(group="cli-idle", offsets=[
            pb.OffsetToCommit(topic=topic, partition=2, offset=0)]), timeout=10)

        listed = run_cli("groups", "list")
        assert listed.returncode == 0, listed.stderr
        lines = [line.split() for line in listed.stdout.splitlines()]
        assert lines[0] == ["GROUP", "STATE", "MEMBERS"]
        assert ["cli-billing", "Stable", "1"] in lines and ["cli-idle", "Empty", "0"] in lines
        assert {"group": "cli-idle", "state": "Empty", "member_count": 0} in json.loads(
            run_cli("groups", "list", "--format", "json").stdout)

        described = run_cli("groups", "describe", "cli-billing")
        assert described.returncode == 0, described.stderr
        rows = [line.split() for line in described.stdout.splitlines()]
        assert rows[0] == ["group:", "cli-billing", "state:", "Stable", "epoch:", rows[0][5], "members:", "1"]
        assert rows[1] == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER"]
        assert rows[2:5] == [[topic, "0", "6", "10", "4", member], [topic, "1", "4", "4", "0", member],
                             [topic, "2", "-", "0", "-", member]]
        assert rows[6] == ["MEMBER", "EPOCH", "CLIENT-ID", "HOST", "SUBSCRIBED", "ASSIGNMENT"]
        # The client id the heartbeat carried, the host the service saw it from (Kafka's "/addr").
        assert rows[7] == [member, str(epoch), "billing-7", "/127.0.0.1", topic, f"{topic}-0,{topic}-1,{topic}-2"]

        as_json = json.loads(run_cli("groups", "describe", "cli-billing", "--format", "json").stdout)
        assert as_json["state"] == "Stable" and as_json["members"][0]["member_id"] == member
        assert as_json["members"][0]["member_epoch"] == epoch
        assert (as_json["members"][0]["client_id"], as_json["members"][0]["host"]) == ("billing-7", "/127.0.0.1")
        assert [(p["partition"], p["committed_offset"], p["log_end_offset"], p["lag"], p["metadata"])
                for p in as_json["partitions"]] == [(0, 6, 10, 4, "host-a"), (1, 4, 4, 0, ""), (2, -1, 0, -1, "")]

        # The member leaves: the group is Empty, its offsets and lag stay.
        stub.Heartbeat(pb.HeartbeatRequest(group="cli-billing", member_id=member, member_epoch=-1), timeout=10)
    with Admin(seglog_service.address) as admin:
        left = admin.describe_group("cli-billing")
    assert left.state == "Empty" and left.members == ()
    assert [(p.partition, p.lag, p.member_id) for p in left.partitions] == [(0, 4, ""), (1, 0, "")]


def test_describing_an_unknown_group_says_so_and_a_bad_call_is_one_line(run_cli):
    unknown = run_cli("groups", "describe", "cli-never-seen")
    assert unknown.returncode == 0, unknown.stderr
    assert unknown.stdout.splitlines() == [
        "group: cli-never-seen   state: Dead   epoch: 0   members: 0",
        "group cli-never-seen has no members and no committed offsets"]
    empty = run_cli("groups", "describe", "")
    assert empty.returncode == 2 and empty.stderr == "seglog: error: group id is empty\n"
    missing = run_cli("groups")
    assert missing.returncode == 2 and "ACTION" in missing.stderr
