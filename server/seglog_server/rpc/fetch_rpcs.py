"""Fetch and Consume of seglog.v1.LogService: reads, long polls at the tail, and the Consume stream.

A read is one storage call (``PartitionLog.read``), inline when its answer is small and pooled
when it is large (``_read``: a small probe inline first, since most reads are at the tail). A
long poll takes a ticket from the append waiters before it reads, so an append between the read
and the wait is never missed; the storage announces every append itself. A Consume stream holds
a reservation of the shared Consume buffer for each response until the transport took it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from seglog.v1 import log_service_pb2 as pb
from seglog_server.config import RESPONSE_OVERHEAD_BYTES

from . import conversions, validation
from .admission import client_of
from .boundary import stream_rpc, unary_rpc
from .call_gate import current_call
from .consume_buffer import Reservation
from .errors import ServiceStoppingError
from .service_core import BLOCKING, ServiceCore
from .storage_port import PartitionLog

__all__ = ["START_OFFSET_METADATA_KEY", "FetchRpcs"]

# Initial metadata of a Consume stream: the offset it starts from, once resolved.
START_OFFSET_METADATA_KEY = "seglog-start-offset"
# A bounded search's refusal (``_bounded_offset_for_timestamp``): the pool's search answers.
_REFUSED = object()

# The largest batch a woken stream pushes from its append's bytes: joining them into one bytes
# object runs on the event loop, about 22 us a MiB here, where the log read of a large batch
# costs the loop a pool hand-off (27 us of the loop's CPU) and a probe; above this size the
# join costs the loop more (8 MiB: 225 us), so the batch is read from the log on the pool.
APPENDED_JOIN_BYTES_MAX = 1 << 20


def _bounded_offset_for_timestamp(log: PartitionLog, timestamp_ms: int, read_bytes_max: int) -> Any:
    """``log.offset_for_timestamp`` by the search bounded by ``read_bytes_max``
    (``lookup_timestamps_without_builds``): its answer or the error it met, raised; ``_REFUSED``
    when it refused a step past the bound."""
    found = log.lookup_timestamps_without_builds([timestamp_ms], read_bytes_max)
    if found is None:
        return _REFUSED
    if isinstance(found[0], Exception):
        raise found[0]
    return found[0]


class FetchRpcs:
    def __init__(self, core: ServiceCore) -> None:
        self.core = core
        self.consume_stream_count = 0
        # Consume reads served from the batch whose append woke the stream (no log read).
        self.appended_read_count = 0

    # -- fetch --------------------------------------------------------------------------------
    @unary_rpc
    async def Fetch(self, request: pb.FetchRequest, context: Any) -> Any:
        topic, partition = validation.check_partition_ref(request.topic, request.partition)
        if self.core.cluster is not None:  # another instance's partition: refused with its owner
            self.core.cluster.check_owner(topic, partition)
        max_bytes = self._fetch_bytes(request.max_bytes)
        wait_s = self._wait_seconds(request.max_wait_ms)
        min_bytes = validation.check_non_negative("min_bytes", request.min_bytes)
        core = self.core
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        # An unknown partition answers NOT_FOUND before any ticket is taken.
        core.storage.get_log(topic, partition)
        while True:
            ticket = core.waiters.ticket(topic, partition) if wait_s > 0 else None
            data = await self._ticketed_read(ticket, topic, partition, request.offset, max_bytes)
            if ticket is None or _enough(data, min_bytes, max_bytes) or core.stopping:
                break
            # Waiting holds a waiter slot, not a request slot (admission.py).
            with core.admission.waiting(client_of(context)):
                woken = await core.waiters.wait_ticket(ticket, deadline - loop.time())
            if not woken:
                break
            # Woken by a change of the partition, its move away included: ask the owner again.
            self._check_still_owner(topic, partition)
        response = await self._fetch_response(topic, partition, request.offset, data, request.decode)
        return response[0]

    @stream_rpc
    async def Consume(self, request: pb.ConsumeRequest, context: Any) -> None:
        topic, partition = validation.check_partition_ref(request.topic, request.partition)
        if self.core.cluster is not None:  # another instance's partition: refused with its owner
            self.core.cluster.check_owner(topic, partition)
        max_bytes = self._fetch_bytes(request.max_bytes)
        wait_s = self._wait_seconds(request.max_wait_ms)
        min_bytes = validation.check_non_negative("min_bytes", request.min_bytes)
        offset = await self._start_offset(topic, partition, request)
        # The client learns where the stream starts before any data (and that it has started).
        await context.send_initial_metadata(((START_OFFSET_METADATA_KEY, str(offset)),))
        call = current_call()
        self.consume_stream_count += 1
        try:
            while True:
                # No local keeps the chunk: _send_chunk drops the records once they are copied.
                offset = await self._send_chunk(
                    topic, partition, offset,
                    await self._next_chunk(topic, partition, offset, max_bytes, min_bytes, wait_s),
                    request.decode, call, context,
                )
        finally:
            self.consume_stream_count -= 1

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
        budget is short). A stream waiting at the tail holds no reservation. A stream woken by an
        append at its offset takes that batch from the append (``_read_appended``), not the log."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        appended = None  # the AppendedBatch (or None) the last wake-up came with
        while True:
            if self.core.stopping:
                raise ServiceStoppingError("seglog is shutting down; reconnect to resume")
            # Each read of the stream, after a push or a wake-up, is a request for the partition:
            # moved away meanwhile, the stream ends with the refusal a new one would get.
            self._check_still_owner(topic, partition)
            log = self.core.storage.get_log(topic, partition)  # NOT_FOUND before taking a ticket
            ticket = self.core.waiters.ticket(topic, partition)
            if offset == log.high_watermark:
                # At the tail (after each push of a stream keeping up): the read would be empty,
                # so park at once. The ticket is taken first: an append after the look wakes it.
                # A batch a truncation took back is dropped, not held (its request's bytes too).
                appended = None
                await self._park(ticket, None)
                appended = ticket.result() if ticket.done() else None
                continue
            reservation = self.core.consume_buffer.reserve(max_bytes)
            try:
                data = None if appended is None else self._read_appended(log, appended, offset)
                appended = None
                if data is None:
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
            # or a reload revokes the stream's rights: CallGate.recheck, in _park).
            await self._park(ticket, deadline if data.records else None)
            appended = ticket.result() if ticket.done() else None

    def _read_appended(self, log: PartitionLog, appended: Any, offset: int) -> Any:
        """What the read at ``offset`` would answer, from the batch whose append woke the stream
        (``PartitionLog.read_appended``: the same bytes, whatever the stream's max_bytes, since
        a read answers at least one whole batch); None when the log cannot vouch for it, or when
        the batch is above ``APPENDED_JOIN_BYTES_MAX``: its bytes are then read on the pool."""
        if appended.size > APPENDED_JOIN_BYTES_MAX:
            return None
        data = log.read_appended(appended, offset)
        if data is not None:
            self.appended_read_count += 1
        return data

    def _check_still_owner(self, topic: str, partition: int) -> None:
        """The owner check of a read that waited or pushed (cluster mode): the partition moved
        away (a move, a takeover) is refused as a new request for it is, the owner in trailing
        metadata. A change of owner wakes the partition's waiters (the log announces the new
        ownership epoch: ``UnifiedLog.advance_leader_epoch``), so a read parked at the tail ends
        then rather than waiting on a log nothing appends to any more."""
        if self.core.cluster is not None:
            self.core.cluster.check_owner(topic, partition)

    async def _park(self, ticket: Any, deadline: float | None) -> None:
        """Waits for ``ticket`` (the partition's next change) until ``deadline`` (loop time; None:
        however long it takes); an admitted call through ``AdmittedCall.park`` (a policy reload
        rechecks its rights at once). Either way the append wakes this task one loop turn later."""
        waiters = self.core.waiters
        loop = asyncio.get_running_loop()

        def wait(reloaded: asyncio.Future[None] | None) -> Awaitable[bool]:
            return waiters.wait_ticket(ticket, None if deadline is None else deadline - loop.time(), reloaded)

        call = current_call()
        await (call.park(wait) if call is not None else wait(None))

    async def _ticketed_read(
        self, ticket: Any, topic: str, partition: int, offset: int, max_bytes: int
    ) -> Any:
        """``_read`` after taking ``ticket`` (or None): a failed read leaves no ticket behind."""
        try:
            return await self._read(topic, partition, offset, max_bytes)
        except Exception:
            if ticket is not None:
                self.core.waiters.discard(topic, partition)
            raise

    async def _start_offset(self, topic: str, partition: int, request: pb.ConsumeRequest) -> int:
        position = validation.check_start_position(request.position)
        log = self.core.storage.get_log(topic, partition)
        if position == pb.START_POSITION_EARLIEST:
            # UNAVAILABLE while a tiered log's remote segments are unlisted: the local log start
            # would skip the records in the store without a word.
            return log.known_log_start_offset()
        if position == pb.START_POSITION_LATEST:
            return log.log_end_offset
        if request.HasField("timestamp_ms"):
            target = validation.check_target_timestamp(request.timestamp_ms)
            # Inline when the search bounded by the inline bound answers (the tables' bisections,
            # a small batch walked), else on the pool: through core.log_call for LogDirOfflineError.
            found = await self.core.log_call(log, 0, _bounded_offset_for_timestamp, log, target,
                                             self.core.calls.inline_io_bytes_max)
            if found is _REFUSED:
                found = await self.core.log_call(log, BLOCKING, log.offset_for_timestamp, target)
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
        core = self.core
        log = core.storage.get_log(topic, partition)
        probe_bytes = core.calls.inline_io_bytes_max
        if max_bytes <= probe_bytes or probe_bytes == 0:
            return await core.log_call(log, max_bytes, log.read, offset, max_bytes)
        data = await core.log_call(log, 0, self._probe, log, offset, probe_bytes)
        if conversions.fetch_next_offset(data, offset) >= data.high_watermark:
            return data
        return await core.log_call(log, BLOCKING, log.read, offset, max_bytes)

    @staticmethod
    def _probe(log: PartitionLog, offset: int, probe_bytes: int) -> Any:
        # Not even one batch above probe_bytes: a large first batch means a large answer.
        return log.read(offset, probe_bytes, min_one_batch=False)

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
        budget_bytes = self.core.limits.response_bytes_max - RESPONSE_OVERHEAD_BYTES
        if len(data.records) > self.core.calls.inline_io_bytes_max or conversions.holds_compressed(data.records):
            decoded, kept_bytes = await self.core.calls.blocking(
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
        if self.core.metrics is not None and size_bytes:
            self.core.metrics.fetched(topic, response[1] - offset, size_bytes)
        return response

    def _fetch_bytes(self, max_bytes: int) -> int:
        validation.check_non_negative("max_bytes", max_bytes)
        if max_bytes == 0:
            return self.core.limits.fetch_bytes_max
        return min(max_bytes, self.core.limits.fetch_bytes_max)

    def _wait_seconds(self, max_wait_ms: int) -> float:
        validation.check_non_negative("max_wait_ms", max_wait_ms)
        return min(max_wait_ms, self.core.limits.fetch_wait_ms_max) / 1000


def _enough(data: Any, min_bytes: int, max_bytes: int) -> bool:
    """min_bytes 0 or 1: any batch; never more than max_bytes could ever bring."""
    return len(data.records) >= max(1, min(min_bytes, max_bytes))
