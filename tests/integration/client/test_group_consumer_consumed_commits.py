"""Auto-commit commits what the application has consumed, never records it may still be processing
(Kafka's rule): the positions as of the start of the latest poll. Records a poll returned are
committed once the application calls poll again, not by the background timer while it holds
them, nor by a revocation: a partition the service takes away while the latest poll's records of
it are out is kept (and reported owned) until the next poll, which commits it and calls
``on_revoke``. The service is real; the transport is wrapped only to count the commits sent."""

from __future__ import annotations

import time

import pytest

from seglog import Consumer, GroupConsumer, Producer, TopicPartition
from seglog.group_consumer import AsyncGroupConsumer
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration
AUTO_COMMIT_MS = 50
GROUP_ARGS = ["--offsets-topic-partitions", "1", "--group-session-timeout-ms", "30000",
              "--group-heartbeat-interval-ms", "100"]
BOUND_S = 30  # a bound on a hang, not a speed assertion
COMMITS_WAITED = 5  # auto-commits sent while the application holds its records


class CountingTransport:
    """The real transport; every CommitOffsets sent is recorded as (group, {(topic, partition): offset}),
    every Heartbeat as ("heartbeat", (partitions owned, partitions the answer assigns))."""

    def __init__(self, real, sent: list) -> None:
        self._real, self._sent = real, sent

    def __getattr__(self, name):
        return getattr(self._real, name)

    async def commit_offsets(self, request):
        answer = await self._real.commit_offsets(request)
        self._sent.append((request.group, {(o.topic, o.partition): o.offset for o in request.offsets}))
        return answer

    async def heartbeat(self, request):
        answer = await self._real.heartbeat(request)
        self._sent.append(("heartbeat", (len(request.owned_partitions), len(answer.assignment))))
        return answer


@pytest.fixture
def sent(monkeypatch):
    """Commits every group consumer of the test sent (the seam ``_open_transport`` wrapped)."""
    commits: list = []
    real = AsyncGroupConsumer._open_transport
    monkeypatch.setattr(AsyncGroupConsumer, "_open_transport",
                        lambda self: CountingTransport(real(self), commits))
    return commits


def wait_until(condition, what: str):
    deadline = time.monotonic() + BOUND_S
    while not (value := condition()):
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)
    return value


def produce(address: str, topic: str, partitions: int, count: int) -> None:
    with Producer(address) as producer:
        for partition in range(partitions):
            for n in range(count):
                producer.send(topic, b"p%d-r%d" % (partition, n), partition=partition)
        producer.flush()


def committed(stub, group: str) -> dict[int, int]:
    answer = stub.FetchOffsets(pb.FetchOffsetsRequest(group=group), timeout=10)
    return {o.partition: o.offset for o in answer.offsets if o.offset >= 0}


def commits_after(sent: list, group: str, mark: int) -> list[dict]:
    return [offsets for name, offsets in sent[mark:] if name == group]


def poll_until(consumer, want: int, max_records: int | None = None) -> list:
    got: list = []
    wait_until(lambda: got.extend(consumer.poll(50, max_records=max_records)) or len(got) >= want, f"{want} records")
    return got


@pytest.mark.parametrize("kind", ["GroupConsumer", "Consumer(group_id=)"])
def test_the_timer_commits_only_records_returned_before_the_latest_poll(start_service, sent, kind):
    service = start_service(GROUP_ARGS)
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="held", partitions=1), timeout=10)
    produce(service.address, "held", 1, 10)
    group = f"g-held-{len(kind)}"
    make = GroupConsumer if kind == "GroupConsumer" else Consumer
    with make(service.address, group_id=group, topics=["held"], auto_offset_reset="earliest",
              auto_commit_interval_ms=AUTO_COMMIT_MS) as consumer:
        assert [r.offset for r in poll_until(consumer, 5, max_records=5)] == list(range(5))
        assert [r.offset for r in poll_until(consumer, 5, max_records=5)] == list(range(5, 10))
        # The application holds 5..9 and does not poll: the timer commits 5 (what the second poll
        # started from), interval after interval, never 10.
        mark = len(sent)
        wait_until(lambda: len(commits_after(sent, group, mark)) >= COMMITS_WAITED, "auto-commits")
        assert {offsets[("held", 0)] for offsets in commits_after(sent, group, mark)} == {5}
        assert committed(service.stub, group) == {0: 5}
        # Polling again says 5..9 are processed: the next auto-commit covers them.
        assert consumer.poll(0) == []
        wait_until(lambda: committed(service.stub, group) == {0: 10}, "the commit of the ten records")


def test_a_revocation_waits_for_the_next_poll_when_its_records_are_out(start_service, sent):
    service = start_service(GROUP_ARGS)
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="moving", partitions=2), timeout=10)
    produce(service.address, "moving", 2, 10)
    revoked: list = []
    first = GroupConsumer(service.address, group_id="g-moving", topics=["moving"], auto_offset_reset="earliest",
                          auto_commit_interval_ms=AUTO_COMMIT_MS, on_revoke=revoked.extend)
    second = None
    try:
        poll_until(first, 20)
        assert first.poll(0) == []  # 0..9 of both processed: consumed 10, 10
        wait_until(lambda: committed(service.stub, "g-moving") == {0: 10, 1: 10}, "the consumed positions")
        produce(service.address, "moving", 2, 1)
        wait_until(lambda: all(first.highwater("moving", p) == 11 for p in range(2)), "both records fetched")
        assert sorted((r.partition, r.offset) for r in first.poll(0)) == [(0, 10), (1, 10)]  # held
        second = GroupConsumer(service.address, group_id="g-moving", topics=["moving"],
                               auto_offset_reset="earliest", auto_commit_interval_ms=AUTO_COMMIT_MS)
        # The service tells first to give one partition up; first holds its record, so it keeps the
        # partition (its heartbeats report it owned) and commits nothing past what it consumed.
        wait_until(lambda: ("heartbeat", (2, 1)) in sent, "the answer telling first to give one up")
        mark = len(sent)
        wait_until(lambda: len(commits_after(sent, "g-moving", mark)) >= COMMITS_WAITED, "auto-commits")
        assert revoked == [] and len(first.assignment()) == 2
        assert second.poll(50) == [] and second.assignment() == []
        assert committed(service.stub, "g-moving") == {0: 10, 1: 10}
        # The next poll completes the revocation: the partition's record committed, on_revoke called.
        assert first.poll(0) == []
        assert len(revoked) == 1 and first.assignment() == [TopicPartition("moving", 1 - revoked[0].partition)]
        assert committed(service.stub, "g-moving")[revoked[0].partition] == 11
        wait_until(lambda: second.assignment() == revoked, "the partition handed to the second member")
        for _ in range(5):  # the second member resumes after the commit: nothing read twice
            assert second.poll(50) == []
    finally:
        if second is not None:
            second.close()
        first.close()
