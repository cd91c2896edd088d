"""A producer with every default fills batches up to its default batch_size, and a service with
every default takes them: each record comes back once, in order, in batches no larger than the
default size and more than three quarters of it (the producer closes a batch by a bound that
counts each record at its largest encoding, so a full batch ends somewhat short of the size)."""

from __future__ import annotations

from seglog import Consumer, Producer
from seglog._producer_config import BATCH_SIZE_DEFAULT
from seglog.records import RecordBatch

VALUE_BYTES = 100
BATCHES = 4
POLL_TIMEOUT_MS = 2000


def test_default_producer_batches_fill_to_the_default_batch_size_and_are_taken(seglog_service, make_topic):
    topic = make_topic()
    count = BATCHES * BATCH_SIZE_DEFAULT // VALUE_BYTES
    values = [i.to_bytes(4, "big") * (VALUE_BYTES // 4) for i in range(count)]
    with Producer(seglog_service.address) as producer:
        producer.send_many(topic, values, partition=0)
        producer.flush()
        assert producer.statistics().records_failed == 0
    sizes: list[int] = []
    read: list[bytes | None] = []
    with Consumer(seglog_service.address, topic, partition=0, start="earliest") as consumer:
        while len(read) < count:
            raws = consumer.poll_raw(timeout_ms=POLL_TIMEOUT_MS)
            assert raws, f"read {len(read)} of {count} records"
            for raw in raws:
                batch = RecordBatch(raw.records)
                sizes.append(batch.size_in_bytes)
                read += [record.value for record in batch]
    assert read == values
    full = sizes[:-1]  # the last batch holds what was left
    assert full and all(BATCH_SIZE_DEFAULT * 3 // 4 < size <= BATCH_SIZE_DEFAULT for size in full), sizes


def test_a_default_producer_delivers_everything_to_a_topic_whose_message_limit_is_64_kib(seglog_service, make_topic):
    """A full default batch fits a topic whose max.message.bytes is 64 KiB (an operator's common
    lowering): no batch is refused and split on the way (a split costs a refused request and the
    resend of the batches behind it: test_producer_split_batches.py)."""
    topic = make_topic(configs={"max.message.bytes": str(64 * 1024)})
    count = 2_000
    values = [i.to_bytes(4, "big") * (VALUE_BYTES // 4) for i in range(count)]
    with Producer(seglog_service.address) as producer:
        producer.send_many(topic, values, partition=0)
        producer.flush()
        assert producer.statistics().records_failed == 0
        assert producer.statistics().batches_split == 0
    read: list[bytes | None] = []
    with Consumer(seglog_service.address, topic, partition=0, start="earliest") as consumer:
        while len(read) < count:
            records = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
            assert records, f"read {len(read)} of {count} records"
            read += [record.value for record in records]
    assert read == values
