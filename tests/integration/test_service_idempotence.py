"""Idempotent produce end to end: real ``python -m seglog_server`` processes on loopback, the
client's AsyncProducer, and faults injected between an append and its acknowledgement
(``SEGLOG_TEST_FAULT_AFTER_APPEND``, rpc/fault_seams.py):

- the acknowledgement held past the client's deadline: the producer retries a batch that was
  written (DEADLINE_EXCEEDED);
- the service SIGKILLed after the append: the producer retries against the restarted service,
  which rebuilt its producer state from the log.

Each has a control with idempotence off, which must write the batch twice: it shows the fault
really made the producer resend a written batch.
"""

from __future__ import annotations

import asyncio
import signal
import time

import grpc
import pytest
from tests.support.integration_helpers import rpc_error

from seglog import AsyncProducer, RecordTooLargeError
from seglog.records import iter_batches
from seglog.v1 import log_service_pb2 as pb
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

FAULT_ENV = "SEGLOG_TEST_FAULT_AFTER_APPEND"
# Reconnect quickly to a restarted service (gRPC's default backoff starts at 1 s and grows).
FAST_RECONNECT = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 500),
                  ("grpc.min_reconnect_backoff_ms", 100)]


def stored_batches(stub, topic: str) -> list:
    """Every stored batch of partition 0, CRC-checked, in offset order."""
    batches, offset = [], 0
    while True:
        response = stub.Fetch(pb.FetchRequest(topic=topic, partition=0, offset=offset, max_bytes=1 << 20), timeout=10)
        found = list(iter_batches(response.records))
        if not found:
            return batches
        for batch in found:
            batch.ensure_valid()
        batches += found
        offset = found[-1].last_offset + 1


def stored_values(stub, topic: str) -> list[bytes]:
    return [record.value for batch in stored_batches(stub, topic) for record in batch.records()]


def test_init_producer_id_gives_unique_ids_at_epoch_zero_across_restarts(start_service):
    service = start_service()
    first = [service.stub.InitProducerId(pb.InitProducerIdRequest(), timeout=10) for _ in range(3)]
    assert [r.producer_epoch for r in first] == [0, 0, 0]
    assert len({r.producer_id for r in first}) == 3
    assert service.stop() == 0
    service.start()
    again = service.stub.InitProducerId(pb.InitProducerIdRequest(), timeout=10)
    assert again.producer_id > max(r.producer_id for r in first)


def test_init_producer_id_refuses_a_transactional_id(start_service):
    service = start_service()
    rpc_error(service.stub.InitProducerId, pb.InitProducerIdRequest(transactional_id="tx"),
              grpc.StatusCode.INVALID_ARGUMENT, "no transactions")


def test_produce_answers_a_resent_batch_with_its_original_offsets(start_service):
    service = start_service()
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1), timeout=10)
    pid = stub.InitProducerId(pb.InitProducerIdRequest(), timeout=10).producer_id
    data = _idempotent_batch([b"a", b"b"], pid, 0)
    first = stub.Produce(pb.ProduceRequest(topic="t", partition=0, records=data), timeout=10)
    again = stub.Produce(pb.ProduceRequest(topic="t", partition=0, records=data), timeout=10)
    assert (again.base_offset, again.last_offset) == (first.base_offset, first.last_offset) == (0, 1)
    error = rpc_error(stub.Produce, pb.ProduceRequest(topic="t", partition=0, records=_idempotent_batch([b"c"], pid, 5)),
                      grpc.StatusCode.FAILED_PRECONDITION, "out of order")
    assert dict(error.trailing_metadata())["seglog-error"] == "OutOfOrderSequenceError"
    transactional = _idempotent_batch([b"c"], pid, 2, is_transactional=True)
    rpc_error(stub.Produce, pb.ProduceRequest(topic="t", partition=0, records=transactional),
              grpc.StatusCode.INVALID_ARGUMENT, "transactional batches are not supported")
    assert stored_values(stub, "t") == [b"a", b"b"]


def _idempotent_batch(values, pid, sequence, **kwargs) -> bytes:
    from seglog.records import RecordBatchBuilder

    builder = RecordBatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=sequence, **kwargs)
    for value in values:
        builder.append(value)
    return builder.build()


async def _produce_all(address: str, topic: str, values: list[bytes], **options) -> list:
    async with AsyncProducer(address, **options) as producer:
        group = await producer.send_many(topic, values, partition=0)
        await producer.flush()
        metadata = await group
        return [m.offset for m in metadata], producer.statistics()


def test_the_producer_numbers_its_batches_by_default(start_service):
    service = start_service()
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1), timeout=10)
    values = [b"%d" % i for i in range(300)]
    offsets, _ = asyncio.run(_produce_all(service.address, "t", values, batch_size=1024))
    assert offsets == list(range(300))
    batches = stored_batches(service.stub, "t")
    assert len(batches) > 1 and len({b.producer_id for b in batches}) == 1 and batches[0].producer_id >= 0
    sequences = [(b.base_sequence, b.base_sequence + b.last_offset_delta) for b in batches]
    assert sequences[0][0] == 0
    assert all(after[0] == before[1] + 1 for before, after in zip(sequences, sequences[1:]))


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_deadline_exceeded_retry_of_a_written_batch_is_not_written_twice(start_service, idempotent):
    # The first appended batch's answer is held 6 s; the client gives up after 2.5 s and resends
    # (wide margins: the append itself must land before the deadline on a loaded machine).
    service = start_service(env={FAULT_ENV: "delay_ms:6000:1"})
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1), timeout=10)
    values = [b"r%d" % i for i in range(5)]
    offsets, stats = asyncio.run(_produce_all(
        service.address, "t", values, request_timeout_ms=2500, retries=5, retry_backoff_ms=50,
        enable_idempotence=idempotent,
    ))
    assert stats.retries >= 1  # the fault did make the producer resend
    stored = stored_values(service.stub, "t")
    if idempotent:
        assert stored == values and offsets == list(range(5))
    else:  # the control: without idempotence the resent batch is written again
        assert stored == values + values


@pytest.mark.parametrize("idempotent", [True, False])
def test_kill_9_between_write_and_ack_then_restart_writes_each_record_once(start_service, idempotent):
    port = free_port()
    listen = ["--listen", f"127.0.0.1:{port}"]
    service = start_service(args=listen, env={FAULT_ENV: "kill:1"})
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1), timeout=10)
    values = [b"k%d" % i for i in range(10)]

    async def scenario() -> list[int]:
        producer = AsyncProducer(
            service.address, retries=200, retry_backoff_ms=100, request_timeout_ms=5000,
            enable_idempotence=idempotent, channel_options=FAST_RECONNECT,
        )
        async with producer:
            group = await producer.send_many("t", values, partition=0)
            await producer.flush_soon()
            # The service kills itself once the first batch is appended; restart it on the same
            # port and data directory, without the fault, while the producer keeps retrying.
            await asyncio.to_thread(_wait_killed, service)
            await asyncio.to_thread(_restart_without_fault, service, listen)
            first = [m.offset for m in await group]
            later = await producer.send_and_wait("t", b"after", partition=0)
            return first + [later.offset]

    offsets = asyncio.run(scenario())
    stored = stored_values(service.stub, "t")
    if idempotent:
        assert stored == values + [b"after"]
        assert offsets == list(range(11))
    else:  # the control: the batch written before the kill is written again by the retry
        assert stored == values + values + [b"after"]


def _wait_killed(service) -> None:
    deadline = time.monotonic() + 30
    while service.process.poll() is None:
        assert time.monotonic() < deadline, "the fault seam did not kill the service"
        time.sleep(0.05)
    assert service.process.returncode == -signal.SIGKILL, service.log()


def _restart_without_fault(service, listen) -> None:
    service.env.pop(FAULT_ENV)
    service.args = listen
    service.start()


def test_a_record_refused_as_too_large_leaves_no_gap_and_the_producer_keeps_its_id(start_service):
    """The service writes nothing of a batch it refuses as too large: the producer numbers the
    partition's next batch down past it (Kafka's adjustSequencesDueToFailedBatch) instead of
    retiring its id (a failure that may have left a gap still retires it:
    test_producer_sender_faults.py)."""
    service = start_service()
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1, configs={"max.message.bytes": "2000"}),
                             timeout=10)

    async def scenario() -> None:
        async with AsyncProducer(service.address) as producer:
            await producer.send_and_wait("t", b"small", partition=0)
            first_pid = producer._sender.idempotence.producer_id
            too_big = await producer.send("t", b"x" * 5000, partition=0)
            await producer.flush()
            with pytest.raises(RecordTooLargeError):
                await too_big  # refused by the service, nothing of it written
            await producer.send_and_wait("t", b"next", partition=0)  # the sequence after "small"
            assert producer._sender.idempotence.producer_id == first_pid

    asyncio.run(scenario())
    assert stored_values(service.stub, "t") == [b"small", b"next"]
