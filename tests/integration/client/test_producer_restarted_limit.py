"""A request limit is the word of the stream that announced it, and only while that stream
lives: a service restarted at the same address with a larger ``--request-bytes-max`` takes a
record the old one refused. The producer's stream to the old service ended with it; its limit
(2 MiB) stayed on the ended stream and failed every larger record unsent, which nothing reopened
the stream to correct (the record is failed before anything is written). Real services on
loopback, one after the other on one port."""

from __future__ import annotations

from pathlib import Path

from tests.support.integration_helpers import ServiceProcess, values_to_end, wait_until

from seglog import Admin, Producer
from seglog.structs import TopicPartition
from tests.support.ports import free_port as _free_port

OLD_LIMIT = 2 << 20
NEW_LIMIT = 8 << 20
RECORD = b"r" * (3 << 20)  # above the old service's limit, within the new one's


def _service(workdir: Path, port: int, limit: int) -> ServiceProcess:
    return ServiceProcess(
        workdir, [workdir / "data"], ["--listen", f"127.0.0.1:{port}", "--request-bytes-max", str(limit)],
    ).start()


def test_a_record_above_an_ended_streams_limit_lands_on_the_restarted_service(tmp_path: Path) -> None:
    """The first stream announced 2 MiB; its service stops and one announcing 8 MiB starts at the
    same address. With nothing sent in between (no small record reopening the stream first), a
    3 MiB record lands (it failed RecordTooLargeError, unsent, on every try)."""
    port = _free_port()
    service = _service(tmp_path, port, OLD_LIMIT)
    try:
        with Admin(service.address) as admin:
            admin.create_topic("t", 1, {})
        with Producer(
            service.address, max_request_bytes=NEW_LIMIT, linger_ms=0, retries=3, retry_backoff_ms=10,
        ) as producer:
            producer.send("t", b"first", partition=0).result()
            stream = producer._async._sender._connection_for(TopicPartition("t", 0)).produce_stream()
            assert stream.request_bytes_max == OLD_LIMIT
            assert service.stop() == 0, service.log()
            wait_until(lambda: stream._call is None, "the producer's stream to end with its service")
            service = _service(tmp_path, port, NEW_LIMIT)
            with Admin(service.address) as admin:  # the topic's limit may now be above the old request limit
                admin.alter_topic_configs("t", {"max.message.bytes": str(6 << 20)})
            future = producer.send("t", RECORD, partition=0)
            producer.flush()
            assert future.exception(0) is None
        assert values_to_end(service.address, "t", 2) == [b"first", RECORD]
    finally:
        assert service.stop() == 0, service.log()
