"""``seglog groups delete`` and ``seglog groups reset-offsets`` end to end: the real CLI in a
subprocess against a real service. Deletion and a reset are refused while the group has a member
(Kafka's NON_EMPTY_GROUP / "inactive" rule) and work once it left; a reset is a dry run unless
--execute; every target (earliest, latest, offset clamped, datetime, shift-by) as Kafka's tool."""

from __future__ import annotations

import json

import grpc
import pytest

from seglog import Admin, Producer
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration
T0_MS = 1_700_000_000_000


def committed(address: str, group: str) -> dict[int, int]:
    with Admin(address) as admin:
        return {p.partition: p.committed_offset for p in admin.describe_group(group).partitions}


def test_delete_refuses_a_group_with_members_then_deletes_it_empty(run_cli, make_topic, seglog_service):
    topic = make_topic(partitions=1)
    with grpc.insecure_channel(seglog_service.address) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        joined = stub.Heartbeat(pb.HeartbeatRequest(group="del-g", member_epoch=0, subscribed_topics=[topic]), timeout=10)
        stub.CommitOffsets(pb.CommitOffsetsRequest(group="del-g", member_id=joined.member_id,
                                                   member_epoch=joined.member_epoch,
                                                   offsets=[pb.OffsetToCommit(topic=topic, partition=0, offset=0)]),
                           timeout=10)
        refused = run_cli("groups", "delete", "del-g")
        assert refused.returncode == 1 and refused.stdout == ""
        assert "group 'del-g' has 1 active members" in refused.stderr
        reset = run_cli("groups", "reset-offsets", "del-g", "--topic", topic, "--to-latest", "--execute")
        assert reset.returncode == 1 and "inactive, but its state is Stable (1 members)" in reset.stderr
        stub.Heartbeat(pb.HeartbeatRequest(group="del-g", member_id=joined.member_id, member_epoch=-1), timeout=10)
    deleted = run_cli("groups", "delete", "del-g")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == "deleted group del-g (1 committed offsets)\n"
    assert run_cli("groups", "describe", "del-g").stdout.splitlines()[0].split()[3] == "Dead"
    again = run_cli("groups", "delete", "del-g")
    assert again.returncode == 1 and "group 'del-g' does not exist" in again.stderr


def test_reset_offsets_dry_run_then_each_target(run_cli, make_topic, seglog_service):
    # Records stamped in 2023 are past any time retention: the service's first retention pass (30 s
    # after it started) would delete them and move the log start to the log end, which a loaded
    # run reached mid-test (--to-earliest then gave 10). Kept for good (retention.ms -1).
    topic = make_topic(partitions=2, configs={"retention.ms": "-1"})
    with Producer(seglog_service.address) as producer:
        for i in range(10):
            producer.send(topic, b"r", partition=0, timestamp_ms=T0_MS + i * 1000)
        for i in range(4):
            producer.send(topic, b"r", partition=1, timestamp_ms=T0_MS + i * 1000)
        producer.flush()
    group, address = "reset-g", seglog_service.address

    def reset(*target: str) -> list[list[str]]:
        done = run_cli("groups", "reset-offsets", group, "--topic", topic, *target)
        assert done.returncode == 0, done.stderr
        return [line.split() for line in done.stdout.splitlines() if line]

    dry = reset("--to-latest")
    assert dry == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [group, topic, "0", "10"], [group, topic, "1", "4"],
                   ["dry", "run:", "nothing", "committed", "(add", "--execute", "to", "commit", "these", "offsets)"]]
    assert committed(address, group) == {}  # a dry run commits nothing: the group is still unknown
    reset("--to-latest", "--execute")
    assert committed(address, group) == {0: 10, 1: 4}
    reset("--to-earliest", "--partition", "0", "--execute")
    assert committed(address, group) == {0: 0, 1: 4}
    reset("--to-offset", "7", "--execute")  # kept within [log start, log end], as Kafka
    assert committed(address, group) == {0: 7, 1: 4}
    reset("--shift-by", "-5", "--execute")
    assert committed(address, group) == {0: 2, 1: 0}
    moment = "2023-11-14T22:13:25.500+00:00"  # T0 + 5.5 s: the first record at or after is offset 6
    as_json = json.loads(run_cli("groups", "reset-offsets", group, "--topic", topic, "--to-datetime", moment,
                                 "--execute", "--format", "json").stdout)
    assert as_json == {"executed": True, "offsets": [{"topic": topic, "partition": 0, "offset": 6},
                                                     {"topic": topic, "partition": 1, "offset": 4}]}
    assert committed(address, group) == {0: 6, 1: 4}


def test_reset_offsets_bad_input_is_one_line(run_cli, make_topic):
    topic = make_topic(partitions=1)
    both = run_cli("groups", "reset-offsets", "g", "--topic", topic, "--to-earliest", "--to-latest")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    none = run_cli("groups", "reset-offsets", "g", "--topic", topic)
    assert none.returncode == 2 and "one of the arguments" in none.stderr
    bad_time = run_cli("groups", "reset-offsets", "g", "--topic", topic, "--to-datetime", "yesterday")
    assert bad_time.returncode == 1 and "'yesterday' is not an ISO 8601 time" in bad_time.stderr
    no_commit = run_cli("groups", "reset-offsets", "never-committed", "--topic", topic, "--shift-by", "1")
    assert no_commit.returncode == 2 and "no committed offset for" in no_commit.stderr
