"""A Consume stream parked at the tail pushes the batch whose append woke it without reading the
log again (``FetchRpcs._read_appended``), and what it delivers is what the log read delivers: the
same sequence of produces, one stream served from the appends and one with every read from the
log (the shortcut turned off), push the same responses byte for byte (the records as on disk, the
high watermark, log start and end, the next offset, the decoded records). Small and large
batches (one above the inline read bound, so the log read takes its pooled path), a stream whose
max_bytes is below a batch, decoded and raw. Real service on loopback, in this process."""

from __future__ import annotations

import asyncio
import gc

import grpc
import pytest
from tests.support.in_process_service import HANG_S, consume_parked_at_the_tail, in_process_service, until

from seglog.records import Compression, RecordBatchBuilder, TimestampType
from seglog.records.header_patch import set_max_timestamp
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.rpc import fetch_rpcs
from seglog_server.storage.log.unified_log import AppendedBatch

pytestmark = pytest.mark.integration

# Records a produce: one small, many, one above the inline read bound (64 KiB), a few.
_PRODUCES = ((b"a",), tuple(b"r%d" % index for index in range(40)), (b"x" * 100_000,), (b"b", b"c", b"d"))


def _batch(values: tuple[bytes, ...], compression: Compression = Compression.NONE) -> bytes:
    builder = RecordBatchBuilder(compression=compression)
    for value in values:
        builder.append(value, timestamp_ms=1_700_000_000_000)
    return builder.build()


async def _pushes(stub, service, topic: str, max_bytes: int, decode: bool, produces=_PRODUCES,
                  configs: dict[str, str] | None = None) -> list[pb.FetchResponse]:
    """The responses a stream parked at ``topic``'s tail pushes while the produces (batches, or
    the values of one) land one at a time (each pushed before the next is sent), the topic named
    by none of them."""
    await stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1, configs=configs or {}))
    waiting = service.servicer.statistics().waiters.waiting_count
    stream = stub.Consume(pb.ConsumeRequest(topic=topic, partition=0, position=pb.START_POSITION_LATEST,
                                            max_bytes=max_bytes, decode=decode))
    await stream.initial_metadata()
    pushed: list[pb.FetchResponse] = []
    for values in produces:
        await until(lambda: service.servicer.statistics().waiters.waiting_count == waiting + 1)  # parked
        records = values if isinstance(values, bytes) else _batch(values)
        await stub.Produce(pb.ProduceRequest(topic=topic, partition=0, records=records))
        response = await asyncio.wait_for(stream.read(), HANG_S)
        response.topic = ""
        pushed.append(response)
    stream.cancel()
    return pushed


@pytest.mark.parametrize(("max_bytes", "decode"), [(0, False), (100, False), (0, True)])
async def test_a_push_from_the_append_is_the_push_from_the_log(tmp_path, monkeypatch, max_bytes, decode):
    async with in_process_service(tmp_path) as (service, address):
        served_before = _appended_reads(service)
        async with grpc.aio.insecure_channel(address) as channel:
            stub = pb_grpc.LogServiceStub(channel)
            from_appends = await _pushes(stub, service, "appended", max_bytes, decode)
            served = _appended_reads(service) - served_before
            monkeypatch.setattr(fetch_rpcs.FetchRpcs, "_read_appended", lambda self, log, appended, offset: None)
            from_log = await _pushes(stub, service, "read", max_bytes, decode)
        assert served == len(_PRODUCES)  # every push of the first stream from its append
        assert _appended_reads(service) - served_before == served  # none of the second's
    assert [response.SerializeToString() for response in from_appends] == [
        response.SerializeToString() for response in from_log]
    assert [response.next_offset for response in from_appends] == [1, 41, 42, 45]


def _appended_reads(service) -> int:
    return service.servicer.fetch.appended_read_count


async def test_a_batch_above_the_join_bound_is_read_from_the_log(tmp_path, monkeypatch):
    # Its bytes would be joined on the event loop; the log read runs on the pool. The batches
    # around it are pushed from their appends.
    big = (b"y" * (fetch_rpcs.APPENDED_JOIN_BYTES_MAX + 1000),)
    produces = ((b"a",), big, (b"b",))
    configs = {"max.message.bytes": str(4 << 20)}
    async with in_process_service(tmp_path) as (service, address):
        async with grpc.aio.insecure_channel(address, options=[("grpc.max_receive_message_length", 8 << 20)]) as channel:
            stub = pb_grpc.LogServiceStub(channel)
            served_before = _appended_reads(service)
            from_appends = await _pushes(stub, service, "appended", 0, False, produces, configs)
            served = _appended_reads(service) - served_before
            monkeypatch.setattr(fetch_rpcs.FetchRpcs, "_read_appended", lambda self, log, appended, offset: None)
            from_log = await _pushes(stub, service, "read", 0, False, produces, configs)
    assert served == 2  # the small ones
    assert [response.SerializeToString() for response in from_appends] == [
        response.SerializeToString() for response in from_log]


def _max_timestamp_rewritten(values: tuple[bytes, ...], compression: Compression) -> bytes:
    """A CreateTime batch whose header's maxTimestamp is below its records' (the CRC made good):
    the validator writes the right one into a copy before the append, as Kafka does."""
    copy = bytearray(_batch(values, compression))
    set_max_timestamp(copy, TimestampType.CREATE_TIME, 1_600_000_000_000)
    return bytes(copy)


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
@pytest.mark.parametrize("case", ["log_append_time", "max_timestamp_rewritten"])
async def test_a_batch_the_validator_rewrote_is_pushed_as_the_log_holds_it(tmp_path, case, compression):
    # The batch on disk is the validator's copy (stamped LogAppendTime, or its maxTimestamp
    # corrected), not the request's bytes: the push reads it from the log (the append tells no
    # bytes), and what it pushes is what a read of the log answers, byte for byte.
    if case == "log_append_time":
        configs = {"message.timestamp.type": "LogAppendTime"}
        produces = tuple(_batch(values, compression) for values in _PRODUCES)
    else:
        configs = {}
        produces = tuple(_max_timestamp_rewritten(values, compression) for values in _PRODUCES)
    async with in_process_service(tmp_path) as (service, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = pb_grpc.LogServiceStub(channel)
            served_before = _appended_reads(service)
            pushed = await _pushes(stub, service, "rewritten", 0, False, produces, configs)
            assert _appended_reads(service) == served_before  # none from an append
            log = service.servicer.core.storage.get_log("rewritten", 0)
            offsets = [0] + [response.next_offset for response in pushed[:-1]]
            for response, offset, sent in zip(pushed, offsets, produces, strict=True):
                read = log.read(offset, 1)  # one batch: the log's answer at the push's offset
                assert response.records == read.records
                assert response.records[16:] != sent[16:]  # the rewritten batch, not the request's
                assert response.next_offset == read.next_offset


async def test_a_stream_reparked_after_a_truncation_holds_no_appended_batch(tmp_path):
    # The append wakes the stream with its batch; a truncation takes the batch back before the
    # stream runs, so the stream finds itself at the tail again and parks: holding nothing of the
    # batch (nor its request's bytes) until the next change.
    async with in_process_service(tmp_path) as (service, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = pb_grpc.LogServiceStub(channel)
            await stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1))
            stream = await consume_parked_at_the_tail(stub, service, "t")
            log = service.servicer.core.storage.get_log("t", 0)
            woken = service.servicer.statistics().waiters.wake_count
            log.append(_batch((b"taken back",)))  # on the loop: the ticket completes with the batch
            log.truncate_to(0)
            waiters = service.servicer.statistics().waiters
            assert (waiters.wake_count, waiters.watched_partition_count) == (woken + 1, 0)
            # Parked again: it took the partition's next ticket.
            await until(lambda: service.servicer.statistics().waiters.watched_partition_count == 1)
            assert service.servicer.statistics().waiters.waiting_count == 1
            gc.collect()
            assert [one for one in gc.get_objects() if type(one) is AppendedBatch] == []
            await stub.Produce(pb.ProduceRequest(topic="t", partition=0, records=_batch((b"kept",))))
            response = await asyncio.wait_for(stream.read(), HANG_S)
            assert response.next_offset == 1 and response.high_watermark == 1
            stream.cancel()
