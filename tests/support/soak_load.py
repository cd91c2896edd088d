"""One load process of the soak (test_service_soak.py): ``python soak_load.py ROLE ADDRESS TOPIC
SECONDS INDEX``; prints one JSON line with what it did (counts, p50/p99 latency in ms).

Roles:
  producer   Produce batches of 50 records of 100 bytes to its own partition (INDEX), acks written
             and, one call in four, acks fsynced; records every acknowledged (offset, value).
  fetcher    long-poll Fetch loop over partition INDEX from offset 0, following the tail.
  streamer   one Consume stream over partition INDEX from the earliest offset.
  admin      OffsetsForTimes, ListTopics, DescribeTopic, and a topic created and deleted.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import grpc

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

RECORDS_PER_BATCH = 50
VALUE_BYTES = 100


def _timed(latencies: list[float], call, *args, **kwargs):
    started = time.perf_counter()
    result = call(*args, **kwargs)
    latencies.append((time.perf_counter() - started) * 1000)
    return result


def producer(stub, topic: str, seconds: float, index: int) -> dict:
    latencies: list[float] = []
    acked = 0
    sequence = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        builder = codec.RecordBatchBuilder()
        for _ in range(RECORDS_PER_BATCH):
            builder.append(b"%08d" % sequence + b"v" * (VALUE_BYTES - 8))
            sequence += 1
        acks = pb.ACKS_FSYNCED if sequence % (4 * RECORDS_PER_BATCH) == 0 else pb.ACKS_WRITTEN
        response = _timed(latencies, stub.Produce, pb.ProduceRequest(
            topic=topic, partition=index, records=builder.build(), acks=acks), timeout=30)
        assert response.last_offset - response.base_offset == RECORDS_PER_BATCH - 1
        acked += RECORDS_PER_BATCH
    return {"records": acked, "latencies_ms": latencies, "end_offset": sequence}


def _count(records: bytes) -> tuple[int, int]:
    """(records, next offset) of raw batches, each CRC-checked."""
    count, next_offset = 0, -1
    for batch in codec.iter_batches(records):
        batch.ensure_valid()
        count += batch.last_offset - batch.base_offset + 1
        next_offset = batch.last_offset + 1
    return count, next_offset


def fetcher(stub, topic: str, seconds: float, index: int) -> dict:
    latencies: list[float] = []
    offset = consumed = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        response = _timed(latencies, stub.Fetch, pb.FetchRequest(
            topic=topic, partition=index, offset=offset, max_wait_ms=200), timeout=30)
        count, next_offset = _count(response.records)
        if count:
            assert next_offset > offset
            consumed += count
            offset = next_offset
    return {"records": consumed, "latencies_ms": latencies, "next_offset": offset}


def streamer(stub, topic: str, seconds: float, index: int) -> dict:
    latencies: list[float] = []
    consumed = offset = 0
    deadline = time.monotonic() + seconds
    stream = stub.Consume(pb.ConsumeRequest(topic=topic, partition=index,
                                            position=pb.START_POSITION_EARLIEST),
                          timeout=seconds + 60)
    last = time.perf_counter()
    # Once the producers stop, a stream at the tail waits for ever: end it at our deadline.
    timer = threading.Timer(seconds, stream.cancel)
    timer.start()
    try:
        for response in stream:
            now = time.perf_counter()
            latencies.append((now - last) * 1000)  # gap between responses
            last = now
            count, next_offset = _count(response.records)
            assert next_offset == -1 or next_offset > offset
            consumed += count
            offset = max(offset, next_offset)
            if time.monotonic() >= deadline:
                break
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.CANCELLED or time.monotonic() < deadline:
            raise
    finally:
        timer.cancel()
        stream.cancel()
    return {"records": consumed, "latencies_ms": latencies, "next_offset": offset}


def admin(stub, topic: str, seconds: float, index: int) -> dict:
    latencies: list[float] = []
    calls = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _timed(latencies, stub.OffsetsForTimes, pb.OffsetsForTimesRequest(partitions=[
            pb.PartitionTimestamp(topic=topic, partition=p, timestamp_ms=t)
            for p in range(3) for t in (-1, -2, -3, int(time.time() * 1000) - 1000)]), timeout=30)
        _timed(latencies, stub.ListTopics, pb.ListTopicsRequest(), timeout=30)
        _timed(latencies, stub.DescribeTopic, pb.DescribeTopicRequest(topic=topic), timeout=30)
        scratch = f"soak-scratch-{index}-{calls}"
        _timed(latencies, stub.CreateTopic, pb.CreateTopicRequest(topic=scratch, partitions=2),
               timeout=30)
        _timed(latencies, stub.DeleteTopic, pb.DeleteTopicRequest(topic=scratch), timeout=30)
        calls += 5
        time.sleep(0.05)  # an operator's pace, not a flood
    return {"records": 0, "calls": calls, "latencies_ms": latencies}


ROLES = {"producer": producer, "fetcher": fetcher, "streamer": streamer, "admin": admin}


def main() -> None:
    role, address, topic, seconds, index = sys.argv[1:6]
    options = [("grpc.max_receive_message_length", 64 << 20)]
    with grpc.insecure_channel(address, options=options) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        result = ROLES[role](stub, topic, float(seconds), int(index))
    latencies = sorted(result.pop("latencies_ms"))
    result.update(role=role, index=int(index), call_count=len(latencies),
                  p50_ms=_percentile(latencies, 50), p99_ms=_percentile(latencies, 99))
    print(json.dumps(result))


def _percentile(ordered: list[float], percent: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * percent / 100))] if ordered else 0.0


if __name__ == "__main__":
    main()
