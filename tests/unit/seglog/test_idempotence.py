"""The producer's idempotence hook: sequences per partition in send order, a failed batch retires
the producer id, and a service without InitProducerId (UNIMPLEMENTED) gets plain batches.

The last one runs a real gRPC server on loopback that implements only DescribeTopic and Produce,
as a seglog service older than idempotent produce does."""

from __future__ import annotations

import asyncio
import logging

import grpc
import grpc.aio
import pytest

from seglog import AsyncProducer, TopicPartition
from seglog._idempotence import NO_PRODUCER_FIELDS, SEQUENCE_MAX, Idempotence, next_sequence
from seglog.errors import ServiceUnavailableError
from seglog.records import iter_batches
from seglog.v1 import log_service_pb2 as pb

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _issuer(start: int = 50):
    ids = iter(range(start, start + 100))
    calls = []

    async def init(request):
        calls.append(request)
        return pb.InitProducerIdResponse(producer_id=next(ids), producer_epoch=0)

    return init, calls


def test_sequences_wrap_after_int32_max():
    assert next_sequence(SEQUENCE_MAX, 1) == 0
    assert next_sequence(SEQUENCE_MAX - 1, 4) == 2
    assert next_sequence(7, 3) == 10


async def test_each_partition_counts_its_records_from_zero_with_one_producer_id():
    init, calls = _issuer()
    idempotence = Idempotence(True, init)
    assert await idempotence.fields_for(TP0, 3) == (50, 0, 0)
    assert await idempotence.fields_for(TP1, 2) == (50, 0, 0)
    assert await idempotence.fields_for(TP0, 1) == (50, 0, 3)
    assert len(calls) == 1


async def test_batches_waiting_for_the_producer_id_keep_their_order():
    init, _ = _issuer()
    idempotence = Idempotence(True, init)
    results = await asyncio.gather(*(idempotence.fields_for(TP0, 2) for _ in range(4)))
    assert [fields[2] for fields in results] == [0, 2, 4, 6]


async def test_a_failed_batch_retires_the_producer_id_and_restarts_every_partition():
    init, calls = _issuer()
    idempotence = Idempotence(True, init)
    failed = await idempotence.fields_for(TP0, 2)
    await idempotence.fields_for(TP1, 2)
    idempotence.batch_failed(failed)
    assert await idempotence.fields_for(TP1, 1) == (51, 0, 0)
    idempotence.batch_failed(failed)  # a late failure of the old id changes nothing now
    assert await idempotence.fields_for(TP1, 1) == (51, 0, 1)
    assert len(calls) == 2


async def test_an_unresolvable_sequence_retires_the_producer_id_only_while_it_is_current():
    init, calls = _issuer()
    idempotence = Idempotence(True, init)
    refused = await idempotence.fields_for(TP0, 2)
    idempotence.sequence_refused(refused)
    assert idempotence.needs_producer_id
    assert await idempotence.fields_for(TP0, 1) == (51, 0, 0)
    idempotence.sequence_refused(refused)  # the old id's: the new one stays
    assert await idempotence.fields_for(TP0, 1) == (51, 0, 1) and len(calls) == 2


async def test_renumbering_gives_back_the_sequences_of_the_current_id_first():
    """The sender numbers a window afresh: the batches of the current id it holds were the last
    given on the partition, so they are numbered again from where the first of them began."""
    init, _ = _issuer()
    idempotence = Idempotence(True, init)
    await idempotence.fields_for(TP0, 4)  # written before
    await idempotence.fields_for(TP0, 3)  # held, to be numbered again with those before it
    idempotence.renumbering(TP0, 3)
    assert idempotence.fields_now(TP0, 5) == (50, 0, 4)
    idempotence.renumbering(TP1, 0)  # nothing given there: nothing to give back
    assert idempotence.fields_now(TP1, 1) == (50, 0, 0)


async def test_disabled_gives_plain_fields_without_asking():
    init, calls = _issuer()
    idempotence = Idempotence(False, init)
    assert await idempotence.fields_for(TP0, 5) == NO_PRODUCER_FIELDS
    assert calls == []


async def test_an_unavailable_service_fails_the_batch_and_a_later_one_asks_again():
    attempts = []

    async def init(request):
        attempts.append(request)
        if len(attempts) == 1:
            raise ServiceUnavailableError("down", code=grpc.StatusCode.UNAVAILABLE)
        return pb.InitProducerIdResponse(producer_id=9, producer_epoch=0)

    idempotence = Idempotence(True, init)
    with pytest.raises(ServiceUnavailableError):
        await idempotence.fields_for(TP0, 1)
    assert await idempotence.fields_for(TP0, 1) == (9, 0, 0)


class _OlderService:
    """DescribeTopic and Produce only: gRPC answers UNIMPLEMENTED for every other method."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []

    async def DescribeTopic(self, request, context):
        return pb.DescribeTopicResponse(topic=request.topic, partition_count=1)

    async def Produce(self, request, context):
        offset = sum(batch.last_offset_delta + 1 for data in self.batches for batch in iter_batches(data))
        self.batches.append(request.records)
        count = next(iter_batches(request.records)).last_offset_delta + 1
        return pb.ProduceResponse(base_offset=offset, last_offset=offset + count - 1, log_append_time_ms=-1)


async def test_a_service_without_init_producer_id_gets_plain_batches_and_one_warning(caplog):
    servicer = _OlderService()
    server = grpc.aio.server()
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name),
            request_deserializer=getattr(pb, f"{name}Request").FromString,
            response_serializer=lambda response: response.SerializeToString(),
        )
        for name in ("DescribeTopic", "Produce")
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("seglog.v1.LogService", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        with caplog.at_level(logging.WARNING, logger="seglog.producer"):
            async with AsyncProducer(f"127.0.0.1:{port}") as producer:
                first = await producer.send_and_wait("t", b"a", partition=0)
                second = await producer.send_and_wait("t", b"b", partition=0)
    finally:
        await server.stop(None)
    assert (first.offset, second.offset) == (0, 1)
    stored = [batch for data in servicer.batches for batch in iter_batches(data)]
    assert [(b.producer_id, b.producer_epoch, b.base_sequence) for b in stored] == [(-1, -1, -1)] * 2
    warnings = [r for r in caplog.records if r.name == "seglog.producer" and "InitProducerId" in r.getMessage()]
    assert len(warnings) == 1
