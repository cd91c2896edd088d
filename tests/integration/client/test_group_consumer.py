"""Group consumers against a real service: two members of a group over a 4-partition topic read
every record exactly once between them, across one member closing (which commits and leaves, so
the other resumes right after its commits); a restarted member resumes at the group's offsets."""

from __future__ import annotations

import time

import pytest

from seglog import GroupConsumer, Producer, TopicPartition
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration
GROUP_ARGS = ["--offsets-topic-partitions", "3", "--group-session-timeout-ms", "3000",
              "--group-heartbeat-interval-ms", "200"]
BOUND_S = 30  # a bound on a hang, not a speed assertion


def produce(address, topic, values):
    with Producer(address) as producer:
        for index, value in enumerate(values):
            producer.send(topic, value, partition=index % 4)
        producer.flush()


def drain(consumers, seen, want):
    deadline = time.monotonic() + BOUND_S
    while len(seen) < want:
        assert time.monotonic() < deadline, f"{len(seen)} of {want} records after {BOUND_S} s"
        for name, consumer in consumers.items():
            for record in consumer.poll(timeout_ms=50):
                seen.append((name, record.topic, record.partition, record.offset, record.value))


def test_two_members_read_each_record_once_across_a_member_leaving(start_service):
    service = start_service(GROUP_ARGS)
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="work", partitions=4), timeout=10)
    produce(service.address, "work", [b"a%d" % i for i in range(40)])
    assigned, revoked = [], []
    first = GroupConsumer(service.address, group_id="workers", topics=["work"], auto_offset_reset="earliest",
                          on_assign=assigned.append, on_revoke=revoked.append)
    second = GroupConsumer(service.address, group_id="workers", topics=["work"], auto_offset_reset="earliest")
    seen: list = []
    try:
        drain({"first": first, "second": second}, seen, 40)
        # Both ended up with two partitions each (first gave two up once second joined).
        deadline = time.monotonic() + BOUND_S
        while not (len(first.assignment()) == 2 and len(second.assignment()) == 2):
            assert time.monotonic() < deadline
            first.poll(timeout_ms=50), second.poll(timeout_ms=50)
        assert not set(first.assignment()) & set(second.assignment())
        assert revoked and assigned
        first.commit()
        second.close()  # commits and leaves: first takes its partitions from its commits
        produce(service.address, "work", [b"b%d" % i for i in range(40)])
        drain({"first": first}, seen, 80)
        assert sorted(first.assignment()) == [TopicPartition("work", p) for p in range(4)]
    finally:
        second.close()
        first.close()
    keys = [(t, p, o) for _, t, p, o, _ in seen]
    assert len(keys) == len(set(keys)) == 80  # every record once, no duplicates
    assert {v for *_, v in seen} == {b"a%d" % i for i in range(40)} | {b"b%d" % i for i in range(40)}
    with GroupConsumer(service.address, group_id="workers", topics=["work"]) as again:
        assert again.committed([TopicPartition("work", p) for p in range(4)]) == {
            TopicPartition("work", p): 20 for p in range(4)}
        assert again.poll(timeout_ms=200) == []  # resumes after the commits: nothing new


def test_a_deleted_topic_costs_the_member_only_its_partitions_not_its_others_or_commits(start_service):
    service = start_service(GROUP_ARGS)
    for topic, count in (("kept", 2), ("dropped", 2)):
        service.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=count), timeout=10)
    with Producer(service.address) as producer:
        for i in range(10):
            producer.send("kept", b"k%d" % i, partition=i % 2)
            producer.send("dropped", b"d%d" % i, partition=i % 2)
        producer.flush()
    revoked: list = []
    member = GroupConsumer(service.address, group_id="deleted-topic", topics=["kept", "dropped"],
                           auto_offset_reset="earliest", auto_commit_interval_ms=100,
                           on_revoke=revoked.extend)
    seen: list = []
    try:
        drain({"m": member}, seen, 20)
        member.commit()
        service.stub.DeleteTopic(pb.DeleteTopicRequest(topic="dropped"), timeout=10)
        deadline = time.monotonic() + BOUND_S
        while {tp.topic for tp in member.assignment()} != {"kept"}:  # the heartbeat revokes "dropped"
            assert time.monotonic() < deadline, member.assignment()
            member.poll(timeout_ms=50)
        with Producer(service.address) as producer:
            for i in range(10, 14):
                producer.send("kept", b"k%d" % i, partition=i % 2)
            producer.flush()
        drain({"m": member}, seen, 24)
        for _ in range(10):  # several heartbeats and auto-commits after the deletion
            member.poll(timeout_ms=50)
        member.commit()
        # Only the deleted topic's partitions were revoked: no rejoin gave up (and re-read) "kept".
        assert {tp.topic for tp in revoked} == {"dropped"}, revoked
        assert sorted(member.assignment()) == [TopicPartition("kept", 0), TopicPartition("kept", 1)]
        assert member.committed([TopicPartition("kept", p) for p in range(2)]) == {
            TopicPartition("kept", p): 7 for p in range(2)}
    finally:
        member.close()
    kept = [(p, o) for _, t, p, o, _ in seen if t == "kept"]
    assert len(kept) == len(set(kept)) == 14  # no record of "kept" read twice
