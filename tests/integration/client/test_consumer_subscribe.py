"""``Consumer(server, group_id=..., topics=[...])`` against a real service: the one consumer class
subscribes through the group (KafkaConsumer.subscribe) and follows the service's assignment, its
async twin too; ``commit_async`` (Kafka's commitAsync) commits in call order and reports a failure
to its future and callback; ``poll_batches`` reads the owned partitions as columns."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import pytest
from tests.support.integration_helpers import ServiceProcess

from seglog import AsyncConsumer, Consumer, NoOffsetForPartitionError, Producer, TopicPartition
from seglog.errors import ClientClosedError, TopicNotFoundError
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration
GROUP_ARGS = ["--offsets-topic-partitions", "3", "--group-session-timeout-ms", "3000",
              "--group-heartbeat-interval-ms", "200"]
BOUND_S = 30  # a bound on a hang, not a speed assertion


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("subscribe")
    process = ServiceProcess(workdir, [workdir / "data0"], GROUP_ARGS).start()
    yield process
    assert process.stop() == 0, process.log()


def topic(service, name, partitions):
    service.stub.CreateTopic(pb.CreateTopicRequest(topic=name, partitions=partitions), timeout=10)
    return name


def produce(address, name, values, partitions):
    with Producer(address) as producer:
        for index, value in enumerate(values):
            producer.send(name, value, partition=index % partitions)
        producer.flush()


def poll_until(consumer, want, poll=None):
    seen = []
    deadline = time.monotonic() + BOUND_S
    while len(seen) < want:
        assert time.monotonic() < deadline, f"{len(seen)} of {want} records after {BOUND_S} s"
        seen += (poll or consumer.poll)(timeout_ms=50)
    return seen


def committed(service, group, partitions):
    answer = service.stub.FetchOffsets(pb.FetchOffsetsRequest(group=group, partitions=[
        pb.GroupPartition(topic=tp.topic, partition=tp.partition) for tp in partitions]), timeout=10)
    return {TopicPartition(o.topic, o.partition): o.offset for o in answer.offsets}


def test_consumer_with_a_group_reads_every_partition_of_its_topics_and_close_commits(service):
    a, b = topic(service, "sub-a", 2), topic(service, "sub-b", 3)
    produce(service.address, a, [b"a%d" % i for i in range(10)], 2)
    produce(service.address, b, [b"b%d" % i for i in range(12)], 3)
    assigned = []
    with Consumer(service.address, group_id="sub-g1", topics=[a, b], auto_offset_reset="earliest",
                  on_assign=assigned.append) as consumer:
        records = poll_until(consumer, 22)
        owned = [TopicPartition(a, p) for p in range(2)] + [TopicPartition(b, p) for p in range(3)]
        assert consumer.assignment() == owned
        assert [tp for batch in assigned for tp in batch] == owned
        assert consumer.position(TopicPartition(b, 1)) == 4
        with pytest.raises(ValueError, match="name a TopicPartition"):
            consumer.position(1)  # two topics subscribed: a number names no partition
        with pytest.raises(ValueError, match="not assigned"):
            consumer.seek(0, TopicPartition(b, 7))
        with pytest.raises(ValueError, match="statistics"):
            consumer.statistics()
    assert sorted(r.value for r in records) == sorted([b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(12)])
    # close() committed the positions (enable_auto_commit is on by default with a group) and left
    assert committed(service, "sub-g1", owned) == {TopicPartition(a, 0): 5, TopicPartition(a, 1): 5,
                                                   TopicPartition(b, 0): 4, TopicPartition(b, 1): 4,
                                                   TopicPartition(b, 2): 4}
    assert not service.stub.DescribeGroup(pb.DescribeGroupRequest(group="sub-g1"), timeout=10).members


def test_a_group_consumer_starts_at_the_log_end_by_default_as_kafka_and_none_refuses(service):
    name = topic(service, "sub-latest", 1)
    produce(service.address, name, [b"old"], 1)
    with Consumer(service.address, group_id="sub-g2", topics=[name]) as consumer:
        assert consumer.poll(timeout_ms=200) == []  # the start (the log end) is resolved now
        produce(service.address, name, [b"new"], 1)
        assert [r.value for r in poll_until(consumer, 1)] == [b"new"]
        assert consumer.position(0) == 2  # one subscribed topic: a partition number names it
        consumer.seek(0, TopicPartition(name, 0))
        assert [r.value for r in poll_until(consumer, 2)] == [b"old", b"new"]
    with Consumer(service.address, group_id="sub-g2-none", topics=[name], auto_offset_reset="none") as consumer:
        with pytest.raises(NoOffsetForPartitionError, match="sub-g2-none"):
            consumer.poll(timeout_ms=200)


def test_a_consumer_without_a_group_has_nothing_to_commit(service):
    name = topic(service, "sub-manual", 1)
    with Consumer(service.address, name, start="earliest") as consumer:
        with pytest.raises(ValueError, match="group_id"):
            consumer.commit()
        with pytest.raises(ValueError, match="group_id"):
            consumer.commit_async()
        with pytest.raises(ValueError, match="group_id"):
            consumer.committed()


def test_async_consumer_with_a_group_polls_batches_and_commits(service):
    name = topic(service, "sub-async", 2)
    produce(service.address, name, [b"v%d" % i for i in range(8)], 2)

    async def main():
        async with AsyncConsumer(service.address, group_id="sub-g3", topics=[name], auto_offset_reset="earliest",
                                 enable_auto_commit=False) as consumer:
            views = []
            deadline = time.monotonic() + BOUND_S
            while sum(len(v) for v in views) < 8:
                assert time.monotonic() < deadline
                views += await consumer.poll_batches(timeout_ms=50)
            assert {(v.topic, v.partition) for v in views} == {(name, 0), (name, 1)}
            await consumer.commit({TopicPartition(name, 0): 3})
            answer = await consumer.committed()
        with pytest.raises(ClientClosedError):
            await consumer.poll_batches()
        with pytest.raises(ClientClosedError):
            consumer.commit_async()
        return answer

    assert asyncio.run(main()) == {TopicPartition(name, 0): 3, TopicPartition(name, 1): None}
    # enable_auto_commit=False: close left partition 1 uncommitted
    assert committed(service, "sub-g3", [TopicPartition(name, 1)]) == {TopicPartition(name, 1): -1}


def test_commit_async_commits_in_call_order_and_reports_each_outcome(service):
    name = topic(service, "sub-commit-async", 1)
    produce(service.address, name, [b"x"] * 5, 1)
    tp = TopicPartition(name, 0)
    outcomes = []
    with Consumer(service.address, group_id="sub-g4", topics=[name], auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        futures = [consumer.commit_async({tp: offset}, callback=lambda o, e: outcomes.append((o, e)))
                   for offset in range(1, 21)]
        assert all(isinstance(f, concurrent.futures.Future) for f in futures)
        assert [f.result(timeout=BOUND_S) for f in futures] == [{tp: offset} for offset in range(1, 21)]
        assert outcomes == [({tp: offset}, None) for offset in range(1, 21)]  # called back in call order
        assert committed(service, "sub-g4", [tp]) == {tp: 20}  # the last call's offset, never an earlier one

        poll_until(consumer, 5)
        assert consumer.commit_async().result(timeout=BOUND_S) == {tp: 5}  # the positions at the call
        assert committed(service, "sub-g4", [tp]) == {tp: 5}


def test_a_failed_commit_async_fails_its_future_and_callback_and_later_commits_go_on(service):
    name = topic(service, "sub-commit-fail", 1)
    tp = TopicPartition(name, 0)
    errors = []
    with Consumer(service.address, group_id="sub-g5", topics=[name], enable_auto_commit=False) as consumer:
        failed = consumer.commit_async({TopicPartition("sub-no-such-topic", 0): 1},
                                       callback=lambda offsets, error: errors.append((offsets, error)))
        after = consumer.commit_async({tp: 0})
        with pytest.raises(TopicNotFoundError):
            failed.result(timeout=BOUND_S)
        assert after.result(timeout=BOUND_S) == {tp: 0}
    [(offsets, error)] = errors
    assert offsets == {TopicPartition("sub-no-such-topic", 0): 1} and isinstance(error, TopicNotFoundError)
    assert committed(service, "sub-g5", [tp]) == {tp: 0}


def test_the_async_commit_async_is_an_awaitable_in_order_and_close_waits_for_it(service):
    name = topic(service, "sub-commit-async-aio", 1)
    tp = TopicPartition(name, 0)

    async def main():
        consumer = AsyncConsumer(service.address, group_id="sub-g6", topics=[name], enable_auto_commit=False)
        await consumer.start()
        first = consumer.commit_async({tp: 7})
        consumer.commit_async({tp: 9})  # nobody awaits it: close() still lets it land
        assert await first == {tp: 7}
        await consumer.close()

    asyncio.run(main())
    assert committed(service, "sub-g6", [tp]) == {tp: 9}
