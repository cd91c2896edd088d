"""Per-principal quotas against a real service: a byte rate throttles one principal while another
keeps its rate; refusals carry retry-after-ms, which the client honours; concurrency caps."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from tests.support.integration_helpers import ServiceProcess, make_batch

from seglog import Producer
from seglog.v1 import log_service_pb2 as pb
from seglog_server.security.token_file import create_token, format_entry

pytestmark = pytest.mark.integration

SLOW_PRODUCE_BYTES_PER_S = 200_000
BATCH = make_batch([b"q" * 1000] * 64)  # ~64 KB


def _start(tmp_path, principals, quotas_toml: str, extra_args=()):
    tokens, lines = {}, []
    for name in principals:
        tokens[name], entry = create_token(name)
        lines.append(format_entry(entry))
    (tmp_path / "tokens").write_text("".join(lines))
    (tmp_path / "quotas.toml").write_text(quotas_toml)
    service = ServiceProcess(tmp_path, [tmp_path / "data"], [
        "--auth-tokens", str(tmp_path / "tokens"), "--quotas", str(tmp_path / "quotas.toml"),
        *extra_args,
    ]).start()
    service.tokens = tokens
    return service


def _md(service, name):
    return (("authorization", f"Bearer {service.tokens[name]}"),)


def _produce_for(service, name, topic, duration_s, out):
    """Produces BATCH back to back for duration_s; records bytes acknowledged and errors."""
    acknowledged = errors = 0
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline:
        try:
            service.stub.Produce(pb.ProduceRequest(topic=topic, partition=0, records=BATCH),
                                 timeout=30, metadata=_md(service, name))
            acknowledged += len(BATCH)
        except grpc.RpcError as error:
            errors += 1
            out.setdefault("codes", []).append(error.code())
    out[name] = (acknowledged, errors)


def test_a_produce_quota_throttles_one_principal_while_another_keeps_its_rate(tmp_path):
    service = _start(tmp_path, ["slow", "fast"],
                     f"[principals.slow]\nproduce_bytes_per_s = {SLOW_PRODUCE_BYTES_PER_S}\n")
    try:
        service.stub.CreateTopic(pb.CreateTopicRequest(topic="quota", partitions=1), timeout=10,
                                 metadata=_md(service, "fast"))
        results: dict = {}
        threads = [threading.Thread(target=_produce_for, args=(service, name, "quota", 3.0, results))
                   for name in ("slow", "fast")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        (slow_bytes, slow_errors), (fast_bytes, fast_errors) = results["slow"], results["fast"]
        # Throttled by delays, never refused or disconnected (a sequential client pays its debt
        # before it asks again), and far below the unthrottled principal in the same run.
        assert slow_errors == 0 and fast_errors == 0, results.get("codes")
        assert slow_bytes > 0
        assert fast_bytes >= 4 * slow_bytes, results
    finally:
        assert service.stop() == 0, service.log()


def test_over_the_delay_bound_calls_are_refused_with_a_retry_hint_the_producer_honours(tmp_path):
    service = _start(tmp_path, ["bursty"],
                     "[principals.bursty]\nproduce_bytes_per_s = 100000\n",
                     ["--quota-delay-ms-max", "0"])
    try:
        md = _md(service, "bursty")
        service.stub.CreateTopic(pb.CreateTopicRequest(topic="burst", partitions=1), timeout=10, metadata=md)
        request = pb.ProduceRequest(topic="burst", partition=0, records=make_batch([b"b" * 1000] * 150))
        service.stub.Produce(request, timeout=10, metadata=md)  # the burst credit, then debt
        with pytest.raises(grpc.RpcError) as info:
            service.stub.Produce(request, timeout=10, metadata=md)
        error = info.value
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        trailing = dict(error.trailing_metadata())
        assert trailing["seglog-error"] == "QuotaExceededError"
        assert int(trailing["retry-after-ms"]) > 0
        service.stub.ListTopics(pb.ListTopicsRequest(), timeout=10, metadata=md)  # connection kept

        with Producer(service.address, token=service.tokens["bursty"], retries=20,
                      retry_backoff_ms=1) as producer:
            metadata = producer.send_batch("burst", 0, make_batch([b"c" * 1000] * 150))
            assert metadata.base_offset > 0
            assert producer.statistics().retries >= 1  # waited for the hint, not 1 ms spins
            assert producer.statistics().retries <= 5
    finally:
        assert service.stop() == 0, service.log()


def test_a_stream_cap_limits_one_principal_and_not_another(tmp_path):
    service = _start(tmp_path, ["greedy", "polite"], "[principals.greedy]\nstreams_max = 1\n")
    try:
        md = _md(service, "greedy")
        service.stub.CreateTopic(pb.CreateTopicRequest(topic="streams", partitions=1), timeout=10, metadata=md)
        service.stub.Produce(pb.ProduceRequest(topic="streams", partition=0, records=make_batch([b"s"])),
                             timeout=10, metadata=md)
        request = pb.ConsumeRequest(topic="streams", partition=0, position=pb.START_POSITION_EARLIEST)
        first = service.stub.Consume(request, timeout=30, metadata=md)
        next(first)
        second = service.stub.Consume(request, timeout=30, metadata=md)
        with pytest.raises(grpc.RpcError) as info:
            next(second)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "streams" in info.value.details()
        assert dict(info.value.trailing_metadata())["retry-after-ms"] == "100"
        polite = service.stub.Consume(request, timeout=30, metadata=_md(service, "polite"))
        next(polite)  # another principal is not affected
        first.cancel()
        polite.cancel()
        # The slot is freed when the stream ends: greedy may stream again.
        deadline = time.monotonic() + 10
        while True:
            again = service.stub.Consume(request, timeout=30, metadata=md)
            try:
                next(again)
                again.cancel()
                break
            except grpc.RpcError:
                assert time.monotonic() < deadline
                time.sleep(0.05)  # the cancelled stream's handler ends asynchronously
    finally:
        assert service.stop() == 0, service.log()


def test_the_consumer_waits_out_fetch_quota_refusals_and_reads_everything(tmp_path):
    service = _start(tmp_path, ["reader"], "[principals.reader]\nfetch_bytes_per_s = 100000\n",
                     ["--quota-delay-ms-max", "0"])
    try:
        md = _md(service, "reader")
        service.stub.CreateTopic(pb.CreateTopicRequest(topic="fq", partitions=1), timeout=10, metadata=md)
        for _ in range(4):  # 4 x ~64 KB: more than the 100 KB the window banks
            service.stub.Produce(pb.ProduceRequest(topic="fq", partition=0, records=BATCH),
                                 timeout=10, metadata=md)
        from seglog import Consumer

        with Consumer(service.address, "fq", 0, start="earliest", token=service.tokens["reader"],
                      fetch_max_bytes=70_000) as consumer:
            records = []
            while len(records) < 4 * 64:
                records.extend(consumer.poll(timeout_ms=1000))
            assert consumer.statistics().quota_waits >= 1
        assert [r.offset for r in records] == list(range(4 * 64))
    finally:
        assert service.stop() == 0, service.log()


def test_a_produce_stream_message_over_the_quota_is_refused_with_a_hint_and_the_stream_goes_on(tmp_path):
    service = _start(tmp_path, ["bursty"], "[principals.bursty]\nproduce_bytes_per_s = 100000\n",
                     ["--quota-delay-ms-max", "0"])
    try:
        md = _md(service, "bursty")
        service.stub.CreateTopic(pb.CreateTopicRequest(topic="burst", partitions=1), timeout=10, metadata=md)
        produce = pb.ProduceRequest(topic="burst", partition=0, records=make_batch([b"b" * 1000] * 150))
        answers: list = []
        hint: list[float] = []

        def messages():
            yield pb.ProduceStreamRequest(correlation_id=1, produce=produce)  # the burst credit
            yield pb.ProduceStreamRequest(correlation_id=2, produce=produce)  # then debt: refused
            while len(answers) < 2:
                time.sleep(0.01)
            time.sleep(hint[0] / 1000 + 0.05)  # waits out the hint, on the same stream
            yield pb.ProduceStreamRequest(correlation_id=3, produce=produce)

        for answer in service.stub.ProduceStream(messages(), timeout=60, metadata=md):
            answers.append(answer)
            if answer.HasField("error"):
                hint.append(answer.error.retry_after_ms)
        assert [a.correlation_id for a in answers] == [1, 2, 3]
        refused = answers[1].error
        assert refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        assert refused.error_class == "QuotaExceededError" and refused.retry_after_ms > 0
        assert not answers[0].HasField("error") and not answers[2].HasField("error")
        assert answers[2].produce.base_offset == 150
    finally:
        assert service.stop() == 0, service.log()
