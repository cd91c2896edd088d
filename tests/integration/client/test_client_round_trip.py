"""Producer -> service -> Consumer, synchronous clients, against a real service process."""

from __future__ import annotations

import pytest

from seglog import Admin, Consumer, ConsumerRecord, Producer, RecordMetadata, partition_for_key
from seglog.records import RecordBatch

pytestmark = pytest.mark.integration

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


def consume_all(address: str, topic: str, partition=None, expected: int | None = None, **options) -> list[ConsumerRecord]:
    """Everything from the earliest offset up to the end offsets seen at start."""
    with Consumer(address, topic, partition, start="earliest", **options) as consumer:
        ends = consumer.end_offsets()
        records: list[ConsumerRecord] = []
        while any(consumer.position(p) < end for p, end in ends.items()):
            records.extend(consumer.poll(timeout_ms=2000))
        return records


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_records_come_back_exactly_as_produced(seglog_service, make_topic, compression):
    topic = make_topic(partitions=1)
    with Producer(seglog_service.address, compression=compression, linger_ms=1) as producer:
        futures = [
            producer.send(topic, f"value-{i}".encode() * (i % 7 + 1), key=f"k{i}".encode(), partition=0,
                          timestamp_ms=1_700_000_000_000 + i, headers={"n": str(i), "empty": None})
            for i in range(200)
        ]
        producer.send(topic, None, key=b"tombstone", partition=0, timestamp_ms=1_700_000_001_000)
        producer.flush()
        metadata = [f.result() for f in futures]
    assert [m.offset for m in metadata] == list(range(200))
    assert metadata[5] == RecordMetadata(topic, 0, 5, 1_700_000_000_005)
    records = consume_all(seglog_service.address, topic)
    assert len(records) == 201
    assert records[7] == ConsumerRecord(topic, 0, 7, 1_700_000_000_007, b"k7", b"value-7", (("n", b"7"), ("empty", None)))
    assert [r.value for r in records[:200]] == [f"value-{i}".encode() * (i % 7 + 1) for i in range(200)]
    assert records[200].value is None and records[200].key == b"tombstone"


def test_linger_and_batch_size_put_many_records_in_few_batches(seglog_service, make_topic):
    topic = make_topic()
    with Producer(seglog_service.address, linger_ms=50, batch_size=64 * 1024) as producer:
        for i in range(500):
            producer.send(topic, b"x" * 50, partition=0)
        producer.flush()
        stats = producer.statistics()
    assert stats.records_sent == 500 and stats.records_failed == 0
    assert stats.batches_sent < 50  # ~40 KB in 64 KiB batches: a handful, not 500
    assert stats.records_queued == 0 and stats.buffered_bytes == 0


def test_small_batch_size_splits_records_into_several_requests_in_order(seglog_service, make_topic):
    topic = make_topic()
    with Producer(seglog_service.address, linger_ms=1000, batch_size=1024) as producer:
        futures = [producer.send(topic, f"{i:05d}".encode() * 20, partition=0) for i in range(100)]
        producer.flush()
        assert producer.statistics().batches_sent >= 10
    assert [f.result().offset for f in futures] == list(range(100))
    assert [r.value for r in consume_all(seglog_service.address, topic)] == [f"{i:05d}".encode() * 20 for i in range(100)]


def test_keyed_records_land_where_kafkas_partitioner_puts_them(seglog_service, make_topic):
    topic = make_topic(partitions=5)
    keys = [f"customer-{i}".encode() for i in range(40)]
    with Producer(seglog_service.address) as producer:
        futures = [producer.send(topic, b"v", key=key) for key in keys]
        producer.flush()
        assert producer.partitions_for(topic) == {0, 1, 2, 3, 4}
    for key, future in zip(keys, futures, strict=True):
        assert future.result().partition == partition_for_key(key, 5)
    records = consume_all(seglog_service.address, topic)
    assert sorted(r.key for r in records) == sorted(keys)
    assert all(r.partition == partition_for_key(r.key, 5) for r in records)


def test_keyless_records_fill_sticky_partitions(seglog_service, make_topic):
    topic = make_topic(partitions=3)
    with Producer(seglog_service.address, batch_size=1024) as producer:
        futures = [producer.send(topic, b"y" * 100) for _ in range(60)]
        producer.flush()
    partitions = [f.result().partition for f in futures]
    switches = sum(1 for a, b in zip(partitions, partitions[1:]) if a != b)
    assert switches < 20  # about one switch per 1 KiB, not round-robin per record


def test_acks_fsynced_acknowledges_after_the_records_are_on_disk(seglog_service, make_topic):
    topic = make_topic()
    with Producer(seglog_service.address, acks="fsynced") as producer:
        metadata = producer.send_and_wait(topic, b"durable", partition=0)
    assert metadata.offset == 0
    assert [r.value for r in consume_all(seglog_service.address, topic)] == [b"durable"]


def test_send_batch_appends_a_ready_made_kafka_batch(seglog_service, make_topic):
    from seglog.records import RecordBatchBuilder

    topic = make_topic()
    builder = RecordBatchBuilder()
    for i in range(3):
        builder.append(f"r{i}".encode(), timestamp_ms=10 + i)
    with Producer(seglog_service.address) as producer:
        producer.send(topic, b"first", partition=0).result()
        result = producer.send_batch(topic, 0, builder.build())
    assert (result.base_offset, result.last_offset, result.log_append_time_ms) == (1, 3, -1)
    assert [r.value for r in consume_all(seglog_service.address, topic)] == [b"first", b"r0", b"r1", b"r2"]


@pytest.mark.parametrize("mode", ["fetch", "stream"])
def test_consumer_reads_every_partition_in_both_modes(seglog_service, make_topic, mode):
    topic = make_topic(partitions=3)
    with Producer(seglog_service.address) as producer:
        for p in range(3):
            for i in range(30):
                producer.send(topic, f"{p}-{i}".encode(), partition=p)
    records = consume_all(seglog_service.address, topic, mode=mode, max_poll_records=7)
    for p in range(3):
        assert [r.value for r in records if r.partition == p] == [f"{p}-{i}".encode() for i in range(30)]


@pytest.mark.parametrize("mode", ["fetch", "stream"])
def test_consumer_starts_at_an_offset_inside_a_batch(seglog_service, make_topic, mode):
    topic = make_topic()
    with Producer(seglog_service.address, linger_ms=1000) as producer:
        for i in range(10):
            producer.send(topic, str(i).encode(), partition=0)  # one batch of ten
    with Consumer(seglog_service.address, topic, 0, start=6, mode=mode) as consumer:
        assert consumer.position() == 6
        records = consumer.poll(timeout_ms=5000)
    assert [r.offset for r in records] == [6, 7, 8, 9]


def test_consumer_start_latest_sees_only_records_produced_after_it(seglog_service, make_topic):
    topic = make_topic()
    with Producer(seglog_service.address) as producer:
        producer.send(topic, b"old", partition=0).result()
        with Consumer(seglog_service.address, topic, 0, start="latest") as consumer:
            assert consumer.position() == 1
            assert consumer.poll(timeout_ms=0) == []
            producer.send(topic, b"new", partition=0).result()
            records = consumer.poll(timeout_ms=5000)
    assert [r.value for r in records] == [b"new"]


def test_consumer_seeks_to_a_timestamp_and_to_the_ends(seglog_service, make_topic):
    topic = make_topic()
    with Producer(seglog_service.address) as producer:
        for i, ts in enumerate([1000, 2000, 3000, 4000]):
            producer.send(topic, f"at-{ts}".encode(), partition=0, timestamp_ms=ts)
    with Consumer(seglog_service.address, topic, 0, start="earliest") as consumer:
        consumer.seek_to_timestamp(2500)
        assert consumer.position() == 2
        assert [r.value for r in consumer.poll(timeout_ms=5000)] == [b"at-3000", b"at-4000"]
        consumer.seek_to_timestamp(9999)  # nothing at or after: the end
        assert consumer.position() == 4
        consumer.seek_to_beginning()
        assert consumer.position() == 0
        consumer.seek(3)
        assert [r.offset for r in consumer.poll(timeout_ms=5000)] == [3]
        consumer.seek_to_end()
        assert consumer.position() == 4
        assert consumer.highwater() == 4
        assert consumer.offsets_for_times(1500)[0].offset == 1


def test_consumer_start_at_a_datetime(seglog_service, make_topic):
    from datetime import datetime, timezone

    topic = make_topic()
    with Producer(seglog_service.address) as producer:
        producer.send(topic, b"a", partition=0, timestamp_ms=1_767_225_599_000)  # 2025-12-31T23:59:59Z
        producer.send(topic, b"b", partition=0, timestamp_ms=1_767_225_600_000)  # 2026-01-01T00:00:00Z
    with Consumer(seglog_service.address, topic, 0, start=datetime(2026, 1, 1, tzinfo=timezone.utc)) as consumer:
        assert [r.value for r in consumer.poll(timeout_ms=5000)] == [b"b"]


def test_iteration_stops_after_consumer_timeout(seglog_service, make_topic):
    topic = make_topic()
    with Producer(seglog_service.address) as producer:
        for i in range(5):
            producer.send(topic, str(i).encode(), partition=0)
    with Consumer(seglog_service.address, topic, 0, start="earliest", consumer_timeout_ms=300) as consumer:
        assert [r.value for r in consumer] == [b"0", b"1", b"2", b"3", b"4"]
        stats = consumer.statistics()
    assert stats.records_consumed == 5 and stats.positions == {0: 5} and stats.lag == {0: 0}


def test_records_deleted_below_the_log_start_are_skipped_by_earliest(seglog_service, make_topic):
    topic = make_topic()
    with Producer(seglog_service.address) as producer:
        for i in range(6):
            producer.send(topic, str(i).encode(), partition=0).result()  # one batch each
    with Admin(seglog_service.address) as admin:
        from seglog import TopicPartition

        assert admin.delete_records({TopicPartition(topic, 0): 4}) == {TopicPartition(topic, 0): 4}
    assert [r.value for r in consume_all(seglog_service.address, topic)] == [b"4", b"5"]


def test_consumer_resets_to_earliest_when_its_offset_falls_out_of_the_log(seglog_service, make_topic):
    from seglog import TopicPartition

    topic = make_topic()
    with Producer(seglog_service.address) as producer:
        for i in range(4):
            producer.send(topic, str(i).encode(), partition=0).result()
    with Admin(seglog_service.address) as admin:
        admin.delete_records({TopicPartition(topic, 0): 2})
    with Consumer(seglog_service.address, topic, 0, start=0, auto_offset_reset="earliest") as consumer:
        records = []
        while len(records) < 2:
            records.extend(consumer.poll(timeout_ms=2000))
    assert [r.offset for r in records] == [2, 3]


def test_several_threads_share_one_sync_producer(seglog_service, make_topic):
    import threading

    topic = make_topic()
    with Producer(seglog_service.address) as producer:
        def work(n: int) -> None:
            for i in range(100):
                producer.send(topic, f"{n}-{i}".encode(), partition=0)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        producer.flush()
        assert producer.statistics().records_sent == 400
    values = [r.value.decode() for r in consume_all(seglog_service.address, topic)]
    assert len(values) == 400
    for n in range(4):  # each thread's records stay in its send order
        mine = [v for v in values if v.startswith(f"{n}-")]
        assert mine == [f"{n}-{i}" for i in range(100)]


def _produce_in_batches(address: str, topic: str, batches: int, per_batch: int) -> None:
    with Producer(address, linger_ms=1000) as producer:
        for b in range(batches):
            for i in range(per_batch):
                producer.send(topic, f"v{b}-{i}".encode(), key=f"k{i}".encode(), partition=0,
                              headers={"b": str(b)} if i == 0 else None)
            producer.flush()  # one batch per flush


@pytest.mark.parametrize("mode", ["fetch", "stream"])
def test_poll_batches_reads_the_same_records_as_poll_as_columns(seglog_service, make_topic, mode):
    topic = make_topic()
    _produce_in_batches(seglog_service.address, topic, batches=4, per_batch=25)
    expected = consume_all(seglog_service.address, topic)
    with Consumer(seglog_service.address, topic, 0, start=3, mode=mode, max_poll_records=30) as consumer:
        views = []
        while sum(len(view) for view in views) < 97:
            views += consumer.poll_batches(timeout_ms=5000)
        assert consumer.position() == 100
    assert all(len(view) <= 30 for view in views)
    assert [record for view in views for record in view] == expected[3:]
    first = views[0]
    assert first.offsets[0] == 3 and first.values[0] == b"v0-3" and first.keys[0] == b"k3"
    assert [o for view in views for o in view.offsets] == list(range(3, 100))
    assert [h for view in views for h in view.headers][22] == (("b", b"1"),)  # offset 25 opens batch 1


def test_poll_raw_returns_whole_batches_undecoded_with_the_position_inside(seglog_service, make_topic):
    topic = make_topic()
    _produce_in_batches(seglog_service.address, topic, batches=3, per_batch=10)
    with Consumer(seglog_service.address, topic, 0, start=4) as consumer:
        assert [r.offset for r in consumer.poll(timeout_ms=5000, max_records=2)] == [4, 5]
        raw = []
        while not raw or raw[-1].last_offset < 29:
            raw += consumer.poll_raw(timeout_ms=5000)
        assert consumer.position() == 30
    assert [(b.base_offset, b.last_offset, b.position) for b in raw] == [(0, 9, 6), (10, 19, 10), (20, 29, 20)]
    decoded = [r for b in raw for r in RecordBatch(b.records).records() if r.offset >= b.position]
    assert [(r.offset, r.value) for r in decoded] == [(i, f"v{i // 10}-{i % 10}".encode()) for i in range(6, 30)]
