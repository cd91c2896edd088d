"""seglog: its own server process, driven through its own client (Producer, Consumer, Admin)."""

from __future__ import annotations

import asyncio
import pathlib
import struct
import threading
import time

from bench import bench_service
from bench.peers.common import latency_ms, paced
from seglog import Admin, AsyncAdmin, Consumer, Producer, TopicPartition

TOPIC = "peers"
# send_many slices: how a bulk loader hands a list of records to the client.
SEND_SLICE = 10_000
# A producer tuned for throughput, as Kafka users tune theirs (batch.size in the hundreds of KiB,
# linger.ms 5): half of the 1 MiB request limit per batch.
PRODUCE_BATCH_BYTES = 512 * 1024
PRODUCE_LINGER_MS = 5
READ_FETCH_BYTES = 2 * 1024 * 1024
READ_POLL_RECORDS = 100_000
# Timestamps per call in the batched-lookup workload (Admin.offsets_for_times_many), as Redis
# pipelines 100 XRANGEs.
LOOKUP_BATCH = 100
# The small-batch log of the batched-lookup workload: a producer whose batch_size holds about 100
# of these records (a Kafka producer's default 16 KiB holds about 120), beside the large batches
# of the bulk producer (send_many with 512 KiB batches: about 3,400 records).
SMALL_TOPIC = "peers-small"
SMALL_BATCH_BYTES = 100 * 131
# Produce and read with the client's defaults (a harness that configures nothing).
DEFAULTS_TOPIC = "peers-defaults"
POLL_TIMEOUT_MS = 2000
LATENCY_JOIN_TIMEOUT_S = 60
# Kafka's v2 batch header, only the fields counted here: baseOffset, batchLength (the bytes after
# this field), and recordsCount at byte 57.
_BATCH_LENGTH = struct.Struct(">qi")
_RECORDS_COUNT = struct.Struct(">i")
_RECORDS_COUNT_AT = 57

DESCRIPTION = {
    "server": "python -m seglog_server (this checkout)",
    "durability": "topic flush.ms=1000: fdatasync at most 1 s after a write",
    "client": f"seglog Producer.send_many (batch_size {PRODUCE_BATCH_BYTES:,} bytes unless --seglog-batch-bytes "
              f"says otherwise, linger_ms {PRODUCE_LINGER_MS}), Consumer.poll, Admin",
    "lookup": "AsyncAdmin.offsets_for_times, one call per lookup (one message on the open LookupStream)",
    "batched lookup": f"Admin.offsets_for_times_many with {LOOKUP_BATCH} timestamps per call, on the bulk "
                      f"producer's large batches and on a second topic of about 100-record batches",
    "latency": "Producer(linger_ms=0).send per record, Consumer mode=stream",
}


class SeglogSystem:
    name = "seglog"
    binary = None
    description = DESCRIPTION

    def __init__(self, root: pathlib.Path, batch_bytes: int = PRODUCE_BATCH_BYTES) -> None:
        self._batch_bytes = batch_bytes
        self.service = bench_service.Service(root, "seglog", ["--topic-default", "flush.ms=1000"])
        self.address = self.service.address
        self.pid = self.service.process.pid
        self.data = root / "seglog" / "data"
        self._admin = Admin(self.address)  # kept open: the batched lookups' stream is warm
        # The single lookups' loop, for the system's life: grpc.aio's poller outlives a loop
        # closed under it (one asyncio.run per workload) and complains at exit.
        self._loop = asyncio.new_event_loop()
        self._admin.create_topic(TOPIC, 1)
        self._time_range = (0, 0)

    def produce(self, keys: list[bytes], values: list[bytes]) -> None:
        first_ms = int(time.time() * 1000)
        self._produce(TOPIC, self._batch_bytes, keys, values)
        newest = self._admin.max_timestamp_offsets(TOPIC)[0]
        self._admin.offsets_for_times_many([(TopicPartition(TOPIC, 0), first_ms)])  # opens the LookupStream
        self._time_range = (first_ms, newest.timestamp_ms)

    def _produce(self, topic: str, batch_bytes: int, keys: list[bytes], values: list[bytes]) -> None:
        with Producer(self.address, linger_ms=PRODUCE_LINGER_MS, batch_size=batch_bytes) as producer:
            for start in range(0, len(values), SEND_SLICE):
                end = start + SEND_SLICE
                producer.send_many(topic, values[start:end], keys[start:end], partition=0)
            producer.flush()

    def produce_small_batches(self, keys: list[bytes], values: list[bytes]) -> tuple[int, int]:
        """The same records into a second topic in about 100-record batches; its time range."""
        self._admin.create_topic(SMALL_TOPIC, 1)
        first_ms = int(time.time() * 1000)
        self._produce(SMALL_TOPIC, SMALL_BATCH_BYTES, keys, values)
        return first_ms, self._admin.max_timestamp_offsets(SMALL_TOPIC)[0].timestamp_ms

    def produce_defaults(self, keys: list[bytes], values: list[bytes]) -> None:
        """The same records through a Producer with every default (batch_size 16 KiB: about
        120 of these records a batch), as a harness that configures nothing writes them."""
        self._admin.create_topic(DEFAULTS_TOPIC, 1)
        with Producer(self.address) as producer:
            for start in range(0, len(values), SEND_SLICE):
                end = start + SEND_SLICE
                producer.send_many(DEFAULTS_TOPIC, values[start:end], keys[start:end], partition=0)
            producer.flush()

    def read_defaults(self, count: int) -> int:
        """That topic read back by a Consumer with every default, through poll_batches (the fast
        way the client offers: one RecordBatchView per batch)."""
        read = 0
        with Consumer(self.address, DEFAULTS_TOPIC, partition=0, start="earliest") as consumer:
            while read < count:
                views = consumer.poll_batches(timeout_ms=POLL_TIMEOUT_MS)
                if not views:
                    break
                read += sum(len(view) for view in views)
        return read

    def read_all(self, count: int) -> int:
        read = 0
        with Consumer(self.address, TOPIC, partition=0, start="earliest", fetch_max_bytes=READ_FETCH_BYTES,
                      max_poll_records=READ_POLL_RECORDS) as consumer:
            while read < count:
                records = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
                if not records:
                    break
                read += len(records)
        return read

    def time_range(self) -> tuple[int, int]:
        return self._time_range

    def lookups(self, times_ms: list[int]) -> list[float]:
        async def run() -> list[float]:
            partition = TopicPartition(TOPIC, 0)
            latencies = []
            async with AsyncAdmin(self.address) as admin:
                await admin.offsets_for_times({partition: times_ms[0]})  # the LookupStream opens
                for timestamp_ms in times_ms:
                    started = time.perf_counter()
                    found = await admin.offsets_for_times({partition: timestamp_ms})
                    latencies.append((time.perf_counter() - started) * 1000)
                    assert found[partition] is not None, timestamp_ms
            return latencies

        return self._loop.run_until_complete(run())

    def batched_lookups(self, times_ms: list[int], topic: str = TOPIC) -> None:
        partition = TopicPartition(topic, 0)
        for start in range(0, len(times_ms), LOOKUP_BATCH):
            found = self._admin.offsets_for_times_many([(partition, t) for t in times_ms[start : start + LOOKUP_BATCH]])
            assert all(one is not None for one in found)

    def batched_lookups_small_batches(self, times_ms: list[int]) -> None:
        self.batched_lookups(times_ms, SMALL_TOPIC)

    def latency(self, count: int) -> tuple[list[float], list[float], float]:
        """Producer(linger_ms=0).send per record at 2,000/s, a Consumer in stream mode in a second
        thread. (AsyncProducer and AsyncConsumer on one event loop, paced by steady_ticks, did
        worse on this 2-CPU machine: p50 5.4-6.0 ms against 3.9-4.6 ms here, at load 7.8.)"""
        topic = f"latency-{time.monotonic_ns()}"
        self._admin.create_topic(topic, 1)
        latencies: list[float] = []
        subscribed = threading.Event()

        def consume() -> None:
            with Consumer(self.address, topic, partition=0, start="earliest", mode="stream") as consumer:
                subscribed.set()
                deadline = time.monotonic() + count / 1000 + LATENCY_JOIN_TIMEOUT_S
                while len(latencies) < count and time.monotonic() < deadline:
                    latencies.extend(latency_ms(r.value) for r in consumer.poll(timeout_ms=POLL_TIMEOUT_MS // 2))

        reader = threading.Thread(target=consume, name="seglog-latency-reader")
        reader.start()
        subscribed.wait(LATENCY_JOIN_TIMEOUT_S)
        acks: list[float] = []

        def send(payload: bytes) -> None:
            started = time.perf_counter()
            future = producer.send(topic, payload, partition=0)
            future.add_done_callback(lambda _done: acks.append((time.perf_counter() - started) * 1000))

        with Producer(self.address, linger_ms=0) as producer:
            rate = paced(count, send)
            producer.flush()
        reader.join()
        return latencies, acks, rate

    def stop(self) -> None:
        self._admin.close()
        self._loop.close()
        self.service.stop()

    def on_disk(self) -> dict[str, float]:
        """After stop: batches in the benchmark topic's log and their mean record count (a time
        lookup walks the records of the batch it lands in)."""
        batches = records = 0
        for path in sorted(self.data.glob(f"{TOPIC}-0/*.log")):
            with open(path, "rb") as log:
                size, position = path.stat().st_size, 0
                while position + _RECORDS_COUNT_AT + _RECORDS_COUNT.size <= size:
                    log.seek(position)
                    head = log.read(_RECORDS_COUNT_AT + _RECORDS_COUNT.size)
                    batches += 1
                    records += _RECORDS_COUNT.unpack_from(head, _RECORDS_COUNT_AT)[0]
                    position += _BATCH_LENGTH.size + _BATCH_LENGTH.unpack_from(head)[1]
        return {"log_batches": batches, "records_per_batch": records / batches if batches else 0.0}
