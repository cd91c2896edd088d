"""Lookups by time after a restart, under a small descriptor limit: a real service process with
RLIMIT_NOFILE lowered (soft and hard, as ``ulimit -n`` sets them) loads partitions of many small
segments after a clean stop, answers OffsetsForTimes (MAX_TIMESTAMP included) over all of them,
and still creates a topic afterwards.

After a clean stop every inactive segment is loaded unchecked; its files are checked on first
use (segment_check.py). The first lookup by time asks every segment its largest timestamp, which
runs those checks: each must leave no descriptor behind outside the open-segment budget.
"""

from __future__ import annotations

import signal

from tests.support.integration_helpers import make_batch
from test_service_descriptors import LimitedService

from seglog.v1 import log_service_pb2 as pb

LIMIT = 256  # the descriptor limit the service runs under: the budget is then 16 segments
PARTITION_COUNT = 30
SEGMENT_COUNT = 12  # per partition: 360 inactive segments, more than the limit
BATCHES_PER_SEGMENT = 1
SEGMENT_BYTES = 140  # one of the batches below fills a segment (each is about 130 bytes)
VALUE = b"v" * 64
FIRST_TIMESTAMP_MS = 1_700_000_000_000


def fill_partitions(service: LimitedService, topic: str) -> None:
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=PARTITION_COUNT,
                                           configs={"segment.bytes": str(SEGMENT_BYTES)}), timeout=30)
    requests = [
        pb.ProduceRequest(topic=topic, partition=partition,
                          records=make_batch([VALUE], timestamps=[FIRST_TIMESTAMP_MS + number * 1000]))
        for number in range(SEGMENT_COUNT * BATCHES_PER_SEGMENT) for partition in range(PARTITION_COUNT)
    ]
    for produced in [stub.Produce.future(request, timeout=60) for request in requests]:
        produced.result()


def offsets_for(service: LimitedService, topic: str, timestamp_ms: int) -> list:
    request = pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic=topic, partition=partition, timestamp_ms=timestamp_ms)
        for partition in range(PARTITION_COUNT)])
    return list(service.stub.OffsetsForTimes(request, timeout=60).results)


def test_lookups_by_time_after_a_restart_leave_the_service_able_to_create_topics(tmp_path):
    data_dir = tmp_path / "data"
    first = LimitedService(tmp_path, [data_dir], [], limit=4096, start_timeout_s=30).start()
    try:
        fill_partitions(first, "times")
    finally:
        assert first.stop() == 0, first.log()
    assert len(list((data_dir / "times-0").glob("*.log"))) >= SEGMENT_COUNT

    service = LimitedService(tmp_path, [data_dir], [], limit=LIMIT, start_timeout_s=30).start()
    try:
        middle_ms = FIRST_TIMESTAMP_MS + SEGMENT_COUNT * BATCHES_PER_SEGMENT * 500
        for timestamp_ms in (FIRST_TIMESTAMP_MS, middle_ms, -3):  # -3: MAX_TIMESTAMP
            results = offsets_for(service, "times", timestamp_ms)
            errors = [r.error.message for r in results if r.error.code]
            assert not errors, errors[0]
            assert all(r.offset >= 0 for r in results)
        assert service.open_descriptor_count() < LIMIT
        service.stub.CreateTopic(pb.CreateTopicRequest(topic="after", partitions=4), timeout=30)
        produced = service.stub.Produce(pb.ProduceRequest(topic="after", partition=3,
                                                          records=make_batch([b"x"])), timeout=30)
        assert produced.base_offset == 0
    finally:
        service.channel.close()
        service.channel = None
        service.signal(signal.SIGTERM)
        code = service.wait()
    log = service.log()
    assert code == 0, log
    assert "Too many open files" not in log, log
