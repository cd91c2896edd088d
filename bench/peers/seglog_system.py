"""seglog: its own server process, driven through its own client (Producer, Consumer, Admin)."""

from __future__ import annotations

import pathlib
import struct
import threading
import time

from bench import bench_service
from bench.peers.common import latency_ms, paced
from seglog import Admin, Consumer, Producer, TopicPartition
from seglog.v1 import log_service_pb2 as pb

TOPIC = "peers"
# send_many slices: how a bulk loader hands a list of records to the client.
SEND_SLICE = 10_000
# A producer tuned for throughput, as Kafka users tune theirs (batch.size in the hundreds of KiB,
# linger.ms 5): half of the 1 MiB request limit per batch.
PRODUCE_BATCH_BYTES = 512 * 1024
PRODUCE_LINGER_MS = 5
READ_FETCH_BYTES = 2 * 1024 * 1024
READ_POLL_RECORDS = 100_000
# Timestamps per OffsetsForTimes call in the batched-lookup workload. Admin.offsets_for_times
# takes one timestamp per partition, so the batched form goes through the generated stub.
LOOKUP_BATCH = 100
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
    "lookup": "Admin.offsets_for_times, one call per lookup",
    "batched lookup": f"OffsetsForTimes with {LOOKUP_BATCH} timestamps per call (generated stub)",
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
        with Admin(self.address) as admin:
            admin.create_topic(TOPIC, 1)
        self._time_range = (0, 0)

    def produce(self, keys: list[bytes], values: list[bytes]) -> None:
        first_ms = int(time.time() * 1000)
        with Producer(self.address, linger_ms=PRODUCE_LINGER_MS, batch_size=self._batch_bytes) as producer:
            for start in range(0, len(values), SEND_SLICE):
                end = start + SEND_SLICE
                producer.send_many(TOPIC, values[start:end], keys[start:end], partition=0)
            producer.flush()
        with Admin(self.address) as admin:
            newest = admin.max_timestamp_offsets(TOPIC)[0]
        self._time_range = (first_ms, newest.timestamp_ms)

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
        partition = TopicPartition(TOPIC, 0)
        latencies = []
        with Admin(self.address) as admin:
            for timestamp_ms in times_ms:
                started = time.perf_counter()
                found = admin.offsets_for_times({partition: timestamp_ms})
                latencies.append((time.perf_counter() - started) * 1000)
                assert found[partition] is not None, timestamp_ms
        return latencies

    def batched_lookups(self, times_ms: list[int]) -> None:
        for start in range(0, len(times_ms), LOOKUP_BATCH):
            request = pb.OffsetsForTimesRequest(partitions=[
                pb.PartitionTimestamp(topic=TOPIC, partition=0, timestamp_ms=t)
                for t in times_ms[start : start + LOOKUP_BATCH]
            ])
            response = self.service.stub.OffsetsForTimes(request)
            assert all(result.offset >= 0 for result in response.results)

    def latency(self, count: int) -> tuple[list[float], list[float], float]:
        topic = f"latency-{time.monotonic_ns()}"
        with Admin(self.address) as admin:
            admin.create_topic(topic, 1)
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
