"""A real seglog service with --remote-storage against a real S3-compatible server (weed) on
loopback, through gRPC: Fetch and Consume below the local log start answer the bytes they did
while the segments were local; with the store frozen (SIGSTOP) a remote read answers UNAVAILABLE
within the remote read deadline (not the uploader's), while produce and local reads go on; after
SIGCONT reads and uploads resume."""

from __future__ import annotations

import re
import time
import urllib.request
import uuid

import grpc
import pytest
from tests.support.integration_helpers import ServiceProcess, make_batch, records_of
from tests.support.s3_server import CREDENTIALS_ENV

from seglog import Admin, Consumer, ServiceUnavailableError, TopicPartition
from seglog.v1 import log_service_pb2 as pb

from tests.integration.remote.conftest import BUCKET

pytestmark = pytest.mark.integration

TIERED = {"remote.storage.enable": "true", "segment.bytes": "2048", "local.retention.bytes": "1"}
# One store call of a remote read: 2 s, far below the uploader's 3 x (2 + 10) s, so an answer
# within the test's call deadline shows the read deadline is the read's own.
READ_TIMEOUT_MS = 2_000
CALL_TIMEOUT_S = 15
# How long the uploader thread may take to copy and delete on a loaded 2-core machine.
SETTLE_S = 60.0
# OffsetsForTimes' special targets (Kafka's ListOffsets).
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
NOT_LISTED = "is not loaded yet: the object store has not answered"


@pytest.fixture(scope="module")
def weed(private_weed):
    """A weed of this module's own (conftest's private_weed), not the session's:
    its tests freeze the store."""
    return private_weed


def start_service(tmp_path, weed, *extra: str) -> ServiceProcess:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    prefix = f"svc-{uuid.uuid4().hex[:10]}"
    return ServiceProcess(tmp_path, [data], [
        "--remote-storage", f"s3://{BUCKET}/{prefix}", "--s3-endpoint", weed.endpoint,
        "--remote-read-timeout-ms", str(READ_TIMEOUT_MS), *extra], env=CREDENTIALS_ENV).start()


def local_log_files(service: ServiceProcess, topic: str) -> list[str]:
    return sorted(p.name for p in (service.data_dirs[0] / f"{topic}-0").glob("*.log"))


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + SETTLE_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {SETTLE_S} s: {what}"
        time.sleep(0.1)


def produce(stub, topic: str, count: int, start: int = 0) -> None:
    for index in range(start, start + count):
        stub.Produce(pb.ProduceRequest(topic=topic, records=make_batch(
            [b"v%05d" % index + b"." * 400], keys=[b"k%d" % index])),
            timeout=CALL_TIMEOUT_S)


def fetch_each(stub, topic: str, offsets) -> dict[int, pb.FetchResponse]:
    return {offset: stub.Fetch(pb.FetchRequest(topic=topic, offset=offset), timeout=CALL_TIMEOUT_S)
            for offset in offsets}


def consume_all(stub, topic: str, end: int) -> list[bytes]:
    """Every Consume answer's raw batches from offset 0 up to ``end``."""
    answers = []
    stream = stub.Consume(pb.ConsumeRequest(topic=topic, offset=0), timeout=CALL_TIMEOUT_S)
    for answer in stream:
        if answer.records:
            answers.append(answer.records)
        if answer.next_offset >= end:
            stream.cancel()
            break
    return answers


def scrape(service: ServiceProcess) -> dict[str, float]:
    """The service's /metrics as {series: value} (series with their labels)."""
    with urllib.request.urlopen(f"http://{service.metrics_address}/metrics", timeout=CALL_TIMEOUT_S) as answer:
        text = answer.read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(seglog_remote_\S+) (\S+)$", text, re.M)}


def fully_tiered(service: ServiceProcess, topic: str) -> bool:
    return len(local_log_files(service, topic)) == 1


def test_fetch_and_consume_below_the_local_start_answer_the_bytes_of_the_local_log(weed, tmp_path):
    service = start_service(tmp_path, weed)
    topic = "tiered-reads"
    try:
        service.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1, configs=TIERED))
        weed.pause()  # nothing uploads (so nothing local goes) while the local answers are taken
        try:
            produce(service.stub, topic, 30)
            assert len(local_log_files(service, topic)) > 3
            local = fetch_each(service.stub, topic, range(30))
            local_consumed = consume_all(service.stub, topic, 30)
        finally:
            weed.resume()
        wait_until(lambda: fully_tiered(service, topic), "closed segments uploaded and deleted locally")
        remote = fetch_each(service.stub, topic, range(30))
        first_local = min(int(name.split(".")[0]) for name in local_log_files(service, topic))
        assert first_local > 20  # the answers below come from the store
        for offset in range(30):
            assert remote[offset].records == local[offset].records, offset
            assert remote[offset].next_offset == local[offset].next_offset
            assert remote[offset].log_start_offset == 0
        assert consume_all(service.stub, topic, 30) == local_consumed
        figures = scrape(service)
        assert figures["seglog_remote_fetches_total"] >= 1 and figures["seglog_remote_fetch_bytes_total"] > 0
        assert figures["seglog_remote_cache_misses_total"] >= 1 and figures["seglog_remote_cache_hits_total"] >= 1
        assert figures["seglog_remote_upload_lag_bytes"] == 0 and figures["seglog_remote_fetch_seconds_total"] > 0
        assert [r.offset for answer in local_consumed
                for r in records_of(pb.FetchResponse(records=answer))] == list(range(30))
    finally:
        service.stop()


def test_a_frozen_store_answers_remote_reads_unavailable_and_nothing_else_waits(weed, tmp_path):
    service = start_service(tmp_path, weed)
    topic = "tiered-frozen"
    try:
        service.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1, configs=TIERED))
        produce(service.stub, topic, 20)
        wait_until(lambda: fully_tiered(service, topic), "closed segments uploaded and deleted locally")
        weed.pause()
        try:
            for call in (lambda: service.stub.Fetch(pb.FetchRequest(topic=topic, offset=0), timeout=CALL_TIMEOUT_S),
                         lambda: next(iter(service.stub.Consume(pb.ConsumeRequest(topic=topic, offset=1),
                                                                timeout=CALL_TIMEOUT_S)))):
                with pytest.raises(grpc.RpcError) as info:
                    call()
                assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value.details()
                details = info.value.details()
                assert "below the local log start" in details and "object store" in details, details
            figures = scrape(service)  # the metrics say what failed, and what was done before
            assert figures['seglog_remote_store_errors_total{operation="GET"}'] >= 1
            assert figures["seglog_remote_uploaded_segments_total"] >= 1
            assert figures["seglog_remote_uploaded_bytes_total"] > 0
            produce(service.stub, topic, 5, start=20)  # produce goes on
            end = service.stub.Fetch(pb.FetchRequest(topic=topic, offset=24), timeout=CALL_TIMEOUT_S)
            assert [r.offset for r in records_of(end)][-1] == 24  # and local reads
        finally:
            weed.resume()
        again = service.stub.Fetch(pb.FetchRequest(topic=topic, offset=0), timeout=CALL_TIMEOUT_S)
        assert records_of(again)[0].offset == 0 and records_of(again)[0].key == b"k0"
        produce(service.stub, topic, 20, start=25)
        wait_until(lambda: fully_tiered(service, topic) and int(local_log_files(service, topic)[0][:20]) > 30,
                   "uploads resumed after the store came back")
    finally:
        service.stop()


def test_a_start_with_the_store_frozen_is_ready_at_once_and_lists_it_once_it_answers(weed, tmp_path):
    """Three tiered topics, the store frozen (SIGSTOP) across a restart: the service is ready
    without a store call per log (each would wait the uploader's 36 s deadline, past the
    helper's 30 s start timeout), produce and local reads work, reads below the local start
    answer UNAVAILABLE; after SIGCONT they answer the bytes."""
    service = start_service(tmp_path, weed)
    topics = ["frozen-start-a", "frozen-start-b", "frozen-start-c"]
    try:
        for topic in topics:
            service.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1, configs=TIERED))
            produce(service.stub, topic, 20)
        wait_until(lambda: all(fully_tiered(service, t) for t in topics),
                   "closed segments uploaded and deleted locally")
        before = {t: fetch_each(service.stub, t, [0])[0].records for t in topics}
        assert service.stop() == 0, service.log()
        weed.pause()
        try:
            service.start()
            for topic in topics:
                with pytest.raises(grpc.RpcError) as info:
                    service.stub.Fetch(pb.FetchRequest(topic=topic, offset=0), timeout=CALL_TIMEOUT_S)
                assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value.details()
                assert "object store" in info.value.details(), info.value.details()
                produce(service.stub, topic, 1, start=20)  # produce goes on
                end = service.stub.Fetch(pb.FetchRequest(topic=topic, offset=20), timeout=CALL_TIMEOUT_S)
                assert [r.offset for r in records_of(end)] == [20]  # and local reads
            local_start = check_start_answers_wait(service, topics[0])
            with Consumer(service.address, topics[0], 0, start="earliest") as consumer:
                with pytest.raises(ServiceUnavailableError, match=NOT_LISTED) as info:
                    consumer.poll(1_000)
                assert info.value.retriable  # the start stays pending: the next poll asks again
        finally:
            weed.resume()

        def remote_reads_answer() -> bool:
            try:
                return all(fetch_each(service.stub, t, [0])[0].records == before[t] for t in topics)
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
                return False

        wait_until(remote_reads_answer, "the remote segments listed once the store answers")
        assert local_start > 0 and [r.offset for r in offsets_for(service, topics[0], [EARLIEST])] == [0]
        with Admin(service.address) as admin:
            assert admin.describe_topic(topics[0]).partitions[0].log_start_offset == 0
            assert admin.earliest_offsets(topics[0]) == {0: 0}
        with Consumer(service.address, topics[0], 0, start="earliest") as consumer:
            assert consumer.poll(CALL_TIMEOUT_S * 1000, max_records=1)[0].offset == 0
            consumer.seek_to_beginning()
            assert consumer.position() == 0
    finally:
        service.stop()


def offsets_for(service: ServiceProcess, topic: str, targets: list[int]) -> list[pb.PartitionOffset]:
    return list(service.stub.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic=topic, partition=0, timestamp_ms=t) for t in targets]),
        timeout=CALL_TIMEOUT_S).results)


def check_start_answers_wait(service: ServiceProcess, topic: str) -> int:
    """With ``topic``'s remote segments not listed since the start: every answer naming its log
    start is a retriable UNAVAILABLE saying why (OffsetsForTimes per target, Consume from the
    earliest, DeleteRecords, the clients' earliest offsets and seek to the beginning);
    DescribeTopic says the log start is unknown (-1) and the local one; LATEST answers. Returns
    the local log start."""
    now_ms = int(time.time() * 1000)
    results = offsets_for(service, topic, [EARLIEST, MAX_TIMESTAMP, 0, now_ms, LATEST])
    for result in results[:4]:
        assert result.offset == -1 and result.error.code == grpc.StatusCode.UNAVAILABLE.value[0], result
        assert NOT_LISTED in result.error.message, result.error.message
    assert results[4].offset == 21 and not results[4].HasField("error")
    for call in (lambda: next(iter(service.stub.Consume(pb.ConsumeRequest(
                     topic=topic, position=pb.START_POSITION_EARLIEST), timeout=CALL_TIMEOUT_S))),
                 lambda: service.stub.DeleteRecords(pb.DeleteRecordsRequest(topic=topic, partition=0, offset=1),
                                                    timeout=CALL_TIMEOUT_S)):
        with pytest.raises(grpc.RpcError) as info:
            call()
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE and NOT_LISTED in info.value.details()
    with Admin(service.address) as admin:
        described = admin.describe_topic(topic).partitions[0]
        local_start = described.local_log_start_offset
        assert described.log_start_offset == -1 and 0 < local_start < 21
        for call in (lambda: admin.earliest_offsets(topic),
                     lambda: admin.delete_records({TopicPartition(topic, 0): 1})):
            with pytest.raises(ServiceUnavailableError, match=NOT_LISTED) as info:
                call()
            assert info.value.retriable
    with Consumer(service.address, topic, 0, start="latest") as consumer:
        consumer.seek_to_beginning()
        with pytest.raises(ServiceUnavailableError, match=NOT_LISTED):
            consumer.position()
    return local_start
