"""The seglog.v1.LogService servicer: each RPC is convert -> one storage call -> convert.

Errors are not handled here: they propagate to ``boundary.py``, which maps them through the one
table in ``status.py``. Long polls wait on ``AppendWaiters``, which the storage tells of every
append, truncation and deletion itself (the manager's change listener). Where each storage call
runs (inline or on the pool) is ``StorageCalls``'s decision, by the bytes the call moves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.config import RESPONSE_OVERHEAD_BYTES
from seglog_server.metrics.page_residency import resident_pages
from seglog_server.security import Operation
from seglog_server.storage.base.errors import LogDirOfflineError

from . import conversions, validation
from .admission import Admission, AdmissionLimits, AdmissionStatistics, client_of
from .append_waiters import AppendWaiters, AppendWaitersStatistics
from .boundary import RpcCounters, RpcStatistics, stream_rpc, unary_rpc
from .call_gate import CallGate, current_call
from .cleaning_rpcs import CleaningRpcs
from .consume_buffer import ConsumeBuffer, ConsumeBufferStatistics, Reservation
from .errors import InvalidRequestError, ResponseTooLargeError, ServiceStoppingError
from .fault_seams import AfterAppendFault
from .log_dir_names import LogDirNames
from .group_commit import GroupCommit, GroupCommitStatistics
from .status import status_for
from .storage_calls import StorageCalls, StorageCallsStatistics
from .storage_port import PartitionLog, StoragePort
from .streams import StreamRpcs

__all__ = [
    "START_OFFSET_METADATA_KEY",
    "LogServicer",
    "LogServicerLimits",
    "LogServicerStatistics",
]

# Initial metadata of a Consume stream: the offset it starts from, once resolved.
START_OFFSET_METADATA_KEY = "seglog-start-offset"


@dataclass(frozen=True)
class LogServicerLimits:
    fetch_bytes_max: int  # records per response; a request's max_bytes 0 means this
    fetch_wait_ms_max: int  # longer max_wait_ms are cut to this
    response_bytes_max: int  # the gRPC send limit, for decoded responses
    message_bytes_max: int  # the largest max.message.bytes a topic may have
    batch_records_max: int = 131_072  # most records a produced batch may declare (config.py)
    consume_buffer_bytes_max: int = 256 * 1024 * 1024  # Consume responses held, all streams (config.py)
    consume_response_bytes_min: int = 64 * 1024  # a Consume response when that budget is short

    def __post_init__(self) -> None:
        assert 0 < self.fetch_bytes_max < self.response_bytes_max
        assert 0 < self.consume_response_bytes_min <= self.consume_buffer_bytes_max
        assert self.batch_records_max > 0
        assert self.fetch_wait_ms_max >= 0
        assert self.message_bytes_max > 0


# The service's defaults (config.py); app.py passes the configured ones.
_DEFAULT_ADMISSION = AdmissionLimits(
    request_max=1000, waiter_max=10_000, waiter_per_client_max=2_000,
    stream_max=10_000, stream_per_client_max=2_000,
)


@dataclass(frozen=True)
class LogServicerStatistics:
    rpc: RpcStatistics
    waiters: AppendWaitersStatistics
    storage_calls: StorageCallsStatistics
    group_commit: GroupCommitStatistics
    admission: AdmissionStatistics
    consume_stream_count: int
    consume_buffer: ConsumeBufferStatistics
    stopping: bool


class LogServicer(CleaningRpcs, StreamRpcs, pb_grpc.LogServiceServicer):
    def __init__(
        self, manager: StoragePort, calls: StorageCalls, limits: LogServicerLimits,
        admission: AdmissionLimits = _DEFAULT_ADMISSION,
        log_dir_names: LogDirNames | None = None,
        gate: CallGate | None = None,
        *,
        metrics: Any = None,
    ) -> None:
        # ``metrics``: rpc_finished(method, code, seconds) after each unary call (boundary.py)
        # and fetched(topic, records, bytes) per response sent; None when metrics are off.
        self.metrics = metrics
        self.gate = gate if gate is not None else CallGate()
        self._manager = manager
        self.admission = Admission(admission)
        self.log_dir_names = log_dir_names if log_dir_names is not None else LogDirNames(())
        self._calls = calls
        self._limits = limits
        self._waiters = AppendWaiters()
        manager.set_change_listener(self._waiters.storage_changed)
        self._group_commit = GroupCommit(calls)
        self._consume_stream_count = 0
        self.consume_buffer = ConsumeBuffer(limits.consume_buffer_bytes_max, limits.consume_response_bytes_min)
        self.counters = RpcCounters()
        self.init_streams()
        self._after_append = AfterAppendFault.from_environ()  # tests only (fault_seams.py)

    # -- life cycle ---------------------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self._waiters.closed

    def begin_shutdown(self) -> None:
        """Long polls answer now with what they have; Consume streams end with UNAVAILABLE;
        produce and lookup streams answer what they read, then end with UNAVAILABLE."""
        self._waiters.close()
        self.stop_streams()

    async def drain(self, grace_s: float) -> int:
        """Shutdown: new calls answer UNAVAILABLE, calls in progress get ``grace_s`` to finish,
        the rest are cut with UNAVAILABLE (admission.py). Returns the count cut."""
        self.begin_shutdown()
        return await self.admission.drain(grace_s)

    def statistics(self) -> LogServicerStatistics:
        return LogServicerStatistics(
            rpc=self.counters.snapshot(),
            waiters=self._waiters.statistics(),
            storage_calls=self._calls.statistics(),
            group_commit=self._group_commit.statistics(),
            admission=self.admission.statistics(),
            consume_stream_count=self._consume_stream_count,
            consume_buffer=self.consume_buffer.statistics(),
            stopping=self.stopping,
        )

    # -- admin --------------------------------------------------------------------------------
    @unary_rpc
    async def CreateTopic(self, request: pb.CreateTopicRequest, context: Any) -> Any:
        if not request.topic:
            raise InvalidRequestError("topic is empty")
        if request.partitions < 1:
            raise InvalidRequestError(f"partitions must be >= 1, found {request.partitions}")
        configs = dict(request.configs)
        self._check_message_bytes(configs)
        config = await self._calls.blocking(
            self._manager.create_topic, request.topic, request.partitions, configs,
            validate_only=request.validate_only,
        )
        return conversions.create_topic_response(request.topic, request.partitions, config)

    @unary_rpc
    async def DeleteTopic(self, request: pb.DeleteTopicRequest, context: Any) -> Any:
        if not request.topic:
            raise InvalidRequestError("topic is empty")
        await self._calls.blocking(self._manager.delete_topic, request.topic)
        return pb.DeleteTopicResponse()

    @unary_rpc
    async def ListTopics(self, request: pb.ListTopicsRequest, context: Any) -> Any:
        topics = self._manager.list_topics()
        call = current_call()
        if call is not None:  # only what the caller may describe
            topics = [entry for entry in topics if call.may(Operation.DESCRIBE, entry[0])]
        return conversions.list_topics_response(topics)

    @unary_rpc
    async def DescribeTopic(self, request: pb.DescribeTopicRequest, context: Any) -> Any:
        if not request.topic:
            raise InvalidRequestError("topic is empty")
        description = await self._calls.blocking(self._manager.describe_topic, request.topic)
        return conversions.describe_topic_response(description, self.log_dir_names.label)

    def _check_message_bytes(self, configs: dict[str, str]) -> None:
        """A topic's batches must fit one gRPC request; the storage does not know that limit."""
        text = configs.get("max.message.bytes")
        if text is None:
            return
        try:
            value = int(text)
        except ValueError:
            return  # the storage refuses it with a message naming the key and the value
        if value > self._limits.message_bytes_max:
            raise InvalidRequestError(
                f"max.message.bytes {value} is above {self._limits.message_bytes_max}, the "
                "largest batch a ProduceRequest can carry (request_bytes_max minus overhead)"
            )

    # -- produce ------------------------------------------------------------------------------
    @unary_rpc
    async def Produce(self, request: pb.ProduceRequest, context: Any) -> Any:
        log, info, acks = await self._append(request)
        if acks == pb.ACKS_FSYNCED:
            await self._durable(log, info.last_offset + 1)
        return conversions.produce_response(info)

    async def _append(self, request: pb.ProduceRequest) -> tuple[PartitionLog, Any, int]:
        """Produce's append (ProduceStream's too): the log, the append's info and the acks."""
        topic, partition = validation.check_partition_ref(request.topic, request.partition)
        acks = validation.check_acks(request.acks)
        batch = self._produced_batch(request)
        # From the header alone, before any record is decompressed or decoded (config.py).
        conversions.check_record_count(conversions.declared_record_count(batch), self._limits.batch_records_max)
        log = self._manager.get_log(topic, partition)
        # An append that may fsync (flush.messages) or decompress to validate: never on the loop.
        io_bytes = _BLOCKING if self._manager.append_may_block(log, batch) else len(batch)
        info = await self._log_call(log, io_bytes, log.append, batch)
        if self._after_append.active:  # tests only: a fault between the write and the ack
            await self._after_append.after_append()
        return log, info, acks

    async def _durable(self, log: PartitionLog, end_offset: int) -> None:
        """Group commit (group_commit.py), with _log_call's offline-directory handling."""
        try:
            await self._group_commit.wait_durable(log, end_offset)
        except LogDirOfflineError as exc:
            await self._calls.blocking(self._manager.handle_log_failure, log, exc)
            raise

    def _produced_batch(self, request: pb.ProduceRequest) -> bytes:
        if request.records:
            if len(request.plain_records):
                raise InvalidRequestError("set records or plain_records, not both")
            return request.records
        conversions.check_record_count(len(request.plain_records), self._limits.batch_records_max)
        compression = conversions.compression_from_proto(request.compression)
        return conversions.batch_from_plain_records(request.plain_records, compression)

    # -- fetch --------------------------------------------------------------------------------
    @unary_rpc
    async def Fetch(self, request: pb.FetchRequest, context: Any) -> Any:
        topic, partition = validation.check_partition_ref(request.topic, request.partition)
        max_bytes = self._fetch_bytes(request.max_bytes)
        wait_s = self._wait_seconds(request.max_wait_ms)
        min_bytes = validation.check_non_negative("min_bytes", request.min_bytes)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        # An unknown partition answers NOT_FOUND before any ticket is taken.
        self._manager.get_log(topic, partition)
        while True:
            ticket = self._waiters.ticket(topic, partition) if wait_s > 0 else None
            data = await self._ticketed_read(ticket, topic, partition, request.offset, max_bytes)
            if ticket is None or _enough(data, min_bytes, max_bytes) or self.stopping:
                break
            # Waiting holds a waiter slot, not a request slot (admission.py).
            with self.admission.waiting(client_of(context)):
                woken = await self._waiters.wait_ticket(ticket, deadline - loop.time())
            if not woken:
                break
        response = await self._fetch_response(topic, partition, request.offset, data, request.decode)
        return response[0]

    @stream_rpc
    async def Consume(self, request: pb.ConsumeRequest, context: Any) -> None:
        topic, partition = validation.check_partition_ref(request.topic, request.partition)
        max_bytes = self._fetch_bytes(request.max_bytes)
        wait_s = self._wait_seconds(request.max_wait_ms)
        min_bytes = validation.check_non_negative("min_bytes", request.min_bytes)
        offset = await self._start_offset(topic, partition, request)
        # The client learns where the stream starts before any data (and that it has started).
        await context.send_initial_metadata(((START_OFFSET_METADATA_KEY, str(offset)),))
        call = current_call()
        self._consume_stream_count += 1
        try:
            while True:
                # No local keeps the chunk: _send_chunk drops the records once they are copied.
                offset = await self._send_chunk(
                    topic, partition, offset,
                    await self._next_chunk(topic, partition, offset, max_bytes, min_bytes, wait_s),
                    request.decode, call, context,
                )
        finally:
            self._consume_stream_count -= 1

    async def _send_chunk(
        self, topic: str, partition: int, offset: int, chunk: tuple[Any, Reservation], decode: bool,
        call: Any, context: Any,
    ) -> int:
        """Builds and writes one Consume response; returns its next offset. Flow control: the
        write returns once the transport took the response (the client's HTTP/2 window), and
        only then is the next chunk read; until then the response holds its reservation of the
        consume buffer (consume_buffer.py), and nothing else of it stays referenced."""
        data, reservation = chunk
        del chunk
        try:
            response, offset = await self._fetch_response(topic, partition, offset, data, decode)
            del data  # the records are copied into the response: keep one copy while it waits
            reservation.resize(len(response))
            if call is not None:  # the principal's fetch quota paces the stream
                await call.before_stream_write(len(response))
            await context.write(response)
        finally:
            reservation.release()
        return offset

    async def _next_chunk(
        self, topic: str, partition: int, offset: int, max_bytes: int, min_bytes: int,
        wait_s: float,
    ) -> tuple[Any, Reservation]:
        """The next non-empty read: min_bytes or more, or less once ``wait_s`` has passed; with
        its reservation of the consume buffer (at most ``max_bytes``, less when the service's
        budget is short). A stream waiting at the tail holds no reservation."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            if self.stopping:
                raise ServiceStoppingError("seglog is shutting down; reconnect to resume")
            self._manager.get_log(topic, partition)  # NOT_FOUND before taking a ticket
            ticket = self._waiters.ticket(topic, partition)
            reservation = self.consume_buffer.reserve(max_bytes)
            try:
                data = await self._ticketed_read(ticket, topic, partition, offset, reservation.size_bytes)
            except BaseException:
                reservation.release()
                raise
            remaining_s = deadline - loop.time()
            if data.records and (_enough(data, min_bytes, reservation.size_bytes) or remaining_s <= 0):
                reservation.resize(len(data.records))  # a whole batch may exceed the grant
                return data, reservation
            reservation.release()
            # Nothing at all: wait for the next append however long it takes (until cancelled,
            # or a reload revokes the stream's rights: CallGate.recheck, via AdmittedCall.park).
            timeout_s = remaining_s if data.records else None
            wait = self._waiters.wait_ticket(ticket, timeout_s)
            call = current_call()
            await (call.park(wait) if call is not None else wait)

    async def _ticketed_read(
        self, ticket: Any, topic: str, partition: int, offset: int, max_bytes: int
    ) -> Any:
        """``_read`` after taking ``ticket`` (or None): a failed read leaves no ticket behind."""
        try:
            return await self._read(topic, partition, offset, max_bytes)
        except Exception:
            if ticket is not None:
                self._waiters.discard(topic, partition)
            raise

    async def _start_offset(self, topic: str, partition: int, request: pb.ConsumeRequest) -> int:
        position = validation.check_start_position(request.position)
        log = self._manager.get_log(topic, partition)
        if position == pb.START_POSITION_EARLIEST:
            return log.log_start_offset
        if position == pb.START_POSITION_LATEST:
            return log.log_end_offset
        if request.HasField("timestamp_ms"):
            target = validation.check_target_timestamp(request.timestamp_ms)
            # Index lookups: inline (microseconds), through _log_call for LogDirOfflineError.
            found = await self._log_call(log, 0, log.offset_for_timestamp, target)
            return log.log_end_offset if found is None else found.offset
        return request.offset

    async def _read(self, topic: str, partition: int, offset: int, max_bytes: int) -> Any:
        """Reads inline when the answer is small, on the pool when it is large.

        Most reads are at or near the tail (long polls, streams keeping up) and return a few
        batches, whatever max_bytes says; a catch-up read returns max_bytes. So a read first
        asks for at most ``inline_io_bytes_max`` inline; when that reaches the high watermark it
        is the whole answer, otherwise the full read runs on the pool (re-reading at most the
        probe's bytes: a few percent of a catch-up read).
        """
        # Looked up on each read: a topic deleted during a long poll answers NOT_FOUND.
        log = self._manager.get_log(topic, partition)
        probe_bytes = self._calls.inline_io_bytes_max
        if max_bytes <= probe_bytes or probe_bytes == 0:
            return await self._log_call(log, max_bytes, log.read, offset, max_bytes)
        data = await self._log_call(log, 0, self._probe, log, offset, probe_bytes)
        if conversions.fetch_next_offset(data, offset) >= data.high_watermark:
            return data
        return await self._log_call(log, _BLOCKING, log.read, offset, max_bytes)

    @staticmethod
    def _probe(log: PartitionLog, offset: int, probe_bytes: int) -> Any:
        # Not even one batch above probe_bytes: a large first batch means a large answer.
        return log.read(offset, probe_bytes, min_one_batch=False)

    async def _log_call(self, log: PartitionLog, io_bytes: int, method: Callable[..., Any], *args: Any) -> Any:
        """One call of a Log method, inline or pooled by ``io_bytes`` (``_BLOCKING``: pooled).

        A Log that meets an I/O error raises LogDirOfflineError; the whole directory is then
        suspect (Kafka takes it offline), so the manager is told before the error is answered.
        """
        try:
            if io_bytes == _BLOCKING:
                return await self._calls.blocking(method, *args)
            return await self._calls.sized(io_bytes, method, *args, lock=self._manager.inline_lock(log))
        except LogDirOfflineError as exc:
            await self._calls.blocking(self._manager.handle_log_failure, log, exc)
            raise

    async def _fetch_response(
        self, topic: str, partition: int, offset: int, data: Any, decode: bool
    ) -> tuple[bytes, int]:
        """The serialized FetchResponse (sent as is, see registration.py) and its next offset.

        Decoding (decompression included) is CPU work proportional to the records: above
        ``inline_io_bytes_max`` raw bytes, or for any compressed batch (a few KiB may expand to
        the decompression cap), it runs on the pool, not on the event loop.
        """
        if not decode:
            return self._fetched(topic, offset, conversions.fetch_response_wire(topic, partition, offset, data),
                                 len(data.records))
        budget_bytes = self._limits.response_bytes_max - RESPONSE_OVERHEAD_BYTES
        if len(data.records) > self._calls.inline_io_bytes_max or conversions.holds_compressed(data.records):
            decoded, kept_bytes = await self._calls.blocking(
                conversions.decode_batches, data.records, offset, budget_bytes
            )
        else:
            decoded, kept_bytes = conversions.decode_batches(data.records, offset, budget_bytes)
        # All of the read kept: its next offset is the one the read's checking walk found.
        records = None if kept_bytes == len(data.records) else memoryview(data.records)[:kept_bytes]
        return self._fetched(topic, offset, conversions.fetch_response_wire(
            topic, partition, offset, data, records, decoded), kept_bytes)

    def _fetched(self, topic: str, offset: int, response: tuple[bytes, int], size_bytes: int) -> tuple[bytes, int]:
        """Counts the records a response sends, from the next offset it carries (one walk of
        the batches for the response and the metrics both)."""
        if self.metrics is not None and size_bytes:
            self.metrics.fetched(topic, response[1] - offset, size_bytes)
        return response

    def _fetch_bytes(self, max_bytes: int) -> int:
        validation.check_non_negative("max_bytes", max_bytes)
        if max_bytes == 0:
            return self._limits.fetch_bytes_max
        return min(max_bytes, self._limits.fetch_bytes_max)

    def _wait_seconds(self, max_wait_ms: int) -> float:
        validation.check_non_negative("max_wait_ms", max_wait_ms)
        return min(max_wait_ms, self._limits.fetch_wait_ms_max) / 1000

    # -- offsets ------------------------------------------------------------------------------
    @unary_rpc
    async def OffsetsForTimes(self, request: pb.OffsetsForTimesRequest, context: Any) -> Any:
        return await self._offsets_for_times(request)

    async def _offsets_for_times(
        self, request: pb.OffsetsForTimesRequest, response: pb.OffsetsForTimesResponse | None = None
    ) -> pb.OffsetsForTimesResponse:
        """OffsetsForTimes's answer, built in ``response`` when given (LookupStream's).

        The targets are grouped by partition: one ``get_log`` and one storage call (one take of
        the log's lock, the targets searched together: ``Log.offsets_for_timestamps``) a
        partition, the answers in the request's order. Each target keeps its own outcome, as
        Kafka answers per partition: a bad partition or timestamp, an unknown partition, or a
        storage error answers only the targets it concerns. When a partition's lookup fails, its
        targets are asked again one by one (``_offset_for_time``), so each gets the error or the
        answer its own search gives: a corrupt batch fails only the targets whose scan reaches
        it. (After an I/O error the log is offline, and each target is told so.)
        """
        if response is None:
            response = pb.OffsetsForTimesResponse()
        targets = request.partitions
        if len(targets) == 1:  # the single lookup: the same answer, without the grouping
            answers: list[Any] = [await self._one_offset_for_time(targets[0])]
        else:
            answers = [None] * len(targets)  # a storage TimestampAndOffset, None, or an error
            by_partition: dict[tuple[str, int], list[int]] = {}
            for number, target in enumerate(targets):
                key = (target.topic, target.partition)
                numbers = by_partition.get(key)
                if numbers is None:
                    by_partition[key] = [number]
                else:
                    numbers.append(number)
            for (topic, partition), numbers in by_partition.items():
                await self._partition_offsets_for_times(topic, partition, targets, numbers, answers)
        results = response.results
        for target, answer in zip(targets, answers):
            if isinstance(answer, Exception):
                status = status_for(answer)
                if not status.expected:
                    raise answer  # a bug: the boundary answers INTERNAL and logs it
                message = self.log_dir_names.redact(status.message)
                results.append(conversions.partition_offset_error(target, status, message))
            else:
                conversions.add_partition_offset(results, target.topic, target.partition, answer)
        # Many targets (each answer may carry an error message) can make an answer larger than
        # gRPC may send: refused here with the limit named, not failed inside gRPC.
        if len(targets) > _INLINE_LOOKUPS_MAX and response.ByteSize() > self._limits.response_bytes_max:
            raise ResponseTooLargeError(
                f"the answer to {len(targets)} targets is {response.ByteSize()} bytes, above "
                f"response_bytes_max ({self._limits.response_bytes_max}): ask for fewer targets per request"
            )
        return response

    async def _partition_offsets_for_times(
        self, topic: str, partition: int, targets: Any, numbers: list[int], answers: list[Any]
    ) -> None:
        """Answers ``targets[n]`` for each of ``numbers`` (all of partition ``topic``-``partition``)
        into ``answers[n]``: a storage answer, or the error that target meets."""
        try:
            validation.check_partition_ref(topic, partition)
        except InvalidRequestError as exc:
            for number in numbers:
                answers[number] = exc
            return
        searched = []
        for number in numbers:
            try:
                validation.check_target_timestamp(targets[number].timestamp_ms)
                searched.append(number)
            except InvalidRequestError as exc:
                answers[number] = exc
        if not searched:
            return
        try:
            log = self._manager.get_log(topic, partition)
            # A handful of lookups runs inline (microseconds each); more go to the pool, or one
            # request of a few MiB of targets would hold the event loop for seconds. So does a
            # log's first lookup by time after a restart: it checks every segment on first use.
            timestamps_ms = [targets[number].timestamp_ms for number in searched]
            inline = len(searched) <= _INLINE_LOOKUPS_MAX and not self._manager.timestamp_lookup_may_block(
                log, timestamps_ms)
            found = await self._log_call(log, 0 if inline else _BLOCKING, log.offsets_for_timestamps, timestamps_ms)
        except Exception as exc:  # noqa: BLE001 - answered per target, as Kafka does
            if len(searched) == 1 or not status_for(exc).expected:
                found = [exc] * len(searched)
            else:
                found = [await self._offset_for_time(topic, partition, targets[number]) for number in searched]
        for number, answer in zip(searched, found):
            answers[number] = answer

    async def _one_offset_for_time(self, target: pb.PartitionTimestamp) -> Any:
        """A request's only target: what ``_partition_offsets_for_times`` answers for a
        partition with one target (its checks, then the per-target search), with none of the
        grouping a request of many needs."""
        try:
            topic, partition = validation.check_partition_ref(target.topic, target.partition)
            validation.check_target_timestamp(target.timestamp_ms)
        except InvalidRequestError as exc:
            return exc
        return await self._offset_for_time(topic, partition, target)

    async def _offset_for_time(self, topic: str, partition: int, target: pb.PartitionTimestamp) -> Any:
        """One target by the per-target path (a storage answer), or the error it meets."""
        try:
            log = self._manager.get_log(topic, partition)
            io_bytes = _BLOCKING if self._manager.timestamp_lookup_may_block(log, (target.timestamp_ms,)) else 0
            return await self._log_call(log, io_bytes, log.offset_for_timestamp, target.timestamp_ms)
        except Exception as exc:  # noqa: BLE001 - answered per target
            return exc

    @unary_rpc
    async def DeleteRecords(self, request: pb.DeleteRecordsRequest, context: Any) -> Any:
        topic, partition = validation.check_partition_ref(request.topic, request.partition)
        offset = request.offset
        if offset < validation.HIGH_WATERMARK_OFFSET:
            raise InvalidRequestError(f"offset must be >= 0 or -1 (high watermark), found {offset}")
        log = self._manager.get_log(topic, partition)
        if offset == validation.HIGH_WATERMARK_OFFSET:
            offset = log.high_watermark
        log_start_offset = await self._log_call(log, 0, log.delete_records, offset)
        return pb.DeleteRecordsResponse(log_start_offset=log_start_offset)

    # -- idempotent producers -------------------------------------------------------------------
    @unary_rpc
    async def InitProducerId(self, request: pb.InitProducerIdRequest, context: Any) -> Any:
        if request.transactional_id:
            raise InvalidRequestError(
                f"transactional_id {request.transactional_id!r}: seglog has no transactions yet; "
                "leave it empty for an idempotent producer"
            )
        producer_id, epoch = await self._calls.blocking(self._manager.init_producer_id)
        return pb.InitProducerIdResponse(producer_id=producer_id, producer_epoch=epoch)

    # -- explain ------------------------------------------------------------------------------
    @unary_rpc
    async def ExplainLookup(self, request: pb.ExplainLookupRequest, context: Any) -> Any:
        topic, partition = validation.check_partition_ref(request.topic, request.partition)
        target = request.WhichOneof("target")
        if target is None:
            raise InvalidRequestError("set offset or timestamp_ms")
        log = self._manager.get_log(topic, partition)
        if target == "offset":
            explanation = await self._log_call(
                log, _BLOCKING, log.explain_offset, request.offset, resident_pages
            )
        else:
            if request.timestamp_ms < 0:
                raise InvalidRequestError(
                    f"timestamp_ms must be >= 0, found {request.timestamp_ms}"
                )
            explanation = await self._log_call(
                log, _BLOCKING, log.explain_timestamp, request.timestamp_ms, resident_pages
            )
        response = conversions.explain_lookup_response(explanation)
        for search in response.searches:  # the file by its log dir's label: no server path
            search.path = self.log_dir_names.label(search.path)
        return response


# _log_call's io_bytes for calls that always go to the pool (fsync).
_BLOCKING = -1
# The most time lookups of one partition answered on the event loop (about 8-20 us each): more
# than that hold it for a millisecond or more, and go to the storage pool.
_INLINE_LOOKUPS_MAX = 64


def _enough(data: Any, min_bytes: int, max_bytes: int) -> bool:
    """min_bytes 0 or 1: any batch; never more than max_bytes could ever bring."""
    return len(data.records) >= max(1, min(min_bytes, max_bytes))
