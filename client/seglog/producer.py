"""Producers: batch records per partition and append each batch with one Produce request.

``AsyncProducer`` is the implementation; ``Producer`` is its synchronous facade (see
``seglog._sync``). Both behave like the Kafka producers Python users know (kafka-python,
aiokafka, confluent-kafka): ``send`` returns a future of ``RecordMetadata``; records wait up to
``linger_ms`` to share a batch of at most ``batch_size`` bytes; ``flush`` sends everything now and
waits; ``close`` flushes and disconnects.

Sending: batches go out on the connection's ProduceStream (one open bidirectional call, no new
HTTP/2 stream per batch; the unary Produce on a service without it). Up to
``max_in_flight_per_partition`` batches of one partition are in flight at once (default 5, Kafka's
``max.in.flight.requests.per.connection``), so ``linger_ms=0`` keeps up a rate well above one
round trip per record. Ordering is kept: the stream appends in the order sent, a partition's
futures complete in send order, and a retriable failure sends the failed batch and every later one
that did not succeed again, in order (``_send_window``). On the unary path separate calls may be
appended in any order, so there one batch per partition is in flight.

Idempotence (``enable_idempotence=True``, the default): each batch carries the producer id and
its partition's sequence, given once when the batch is first sent (``_idempotence.py``), so the
service writes a retried batch only once and answers the retry with the original offsets.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from time import monotonic as _monotonic
from typing import Any

import grpc

from seglog import _sync
from seglog._security import ConnectionSecurity, PemSource
from seglog._accumulator import BufferFullError, ProducerBatch, RecordAccumulator
from seglog._delivery import BatchDelivery, DeliveryGroup, RecordFuture
from seglog._send_window import SendWindow, WindowEntry
from seglog._idempotence import Idempotence, ProducerFields
from seglog._partitioner import DefaultPartitioner
from seglog._producer_config import (
    BATCH_SIZE_DEFAULT,
    BUFFER_BYTES_DEFAULT,
    LINGER_MS_DEFAULT,
    MAX_BLOCK_MS_DEFAULT,
    MAX_IN_FLIGHT_REQUESTS_DEFAULT,
    MAX_REQUEST_BYTES_DEFAULT,
    RETRIES_DEFAULT,
    RETRY_BACKOFF_MS_DEFAULT,
    ProducerConfig,
    as_bytes,
    parse_acks,
    parse_compression,
    wall_clock_ms,
)
from seglog.client import REQUEST_TIMEOUT_MS_DEFAULT, Transport
from seglog.errors import (
    ClientClosedError,
    OutOfOrderSequenceError,
    RequestTimeoutError,
    SeglogError,
    ServiceError,
    ServiceUnavailableError,
    TopicNotFoundError,
    translate_codec_errors,
)
from seglog.records import Compression
from seglog.structs import DEFAULT_SERVER, Acks, HeadersLike, RecordMetadata, TopicPartition, normalize_headers
from seglog.v1 import log_service_pb2 as pb

# A batch in a partition's send window: the batch, its bytes and its producer fields.
_Sent = tuple[ProducerBatch, bytes, ProducerFields]

__all__ = ["AsyncProducer", "BatchMetadata", "Producer", "ProducerStatistics"]

_ACKS_TO_PROTO = {Acks.WRITTEN: pb.ACKS_WRITTEN, Acks.FSYNCED: pb.ACKS_FSYNCED}


@dataclass(frozen=True)
class BatchMetadata:
    """Where a batch appended with ``send_batch`` landed."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    # The service's timestamp when the topic uses LogAppendTime; -1 under CreateTime.
    log_append_time_ms: int
    log_start_offset: int


@dataclass(frozen=True)
class ProducerStatistics:
    records_sent: int
    records_failed: int
    batches_sent: int
    batches_failed: int
    bytes_sent: int  # encoded (compressed) batch bytes acknowledged by the service
    requests_in_flight: int
    retries: int
    batches_queued: int
    records_queued: int
    buffered_bytes: int
    buffer_bytes_max: int
    metadata_requests: int
    closed: bool


@dataclass
class _ManyPlan:
    """``send_many``'s records grouped by partition (positions: where each came from, or None
    when all go to one partition in the order given)."""

    groups: list[tuple[TopicPartition, list[bytes | None], list[bytes | None], list[int] | None]]
    record_count: int

    def group(self, spans: list[tuple[BatchDelivery, int, int]]) -> DeliveryGroup:
        if len(self.groups) == 1:
            return DeliveryGroup(spans, self.record_count)
        order = [position for _, _, _, positions in self.groups for position in positions or ()]
        return DeliveryGroup(spans, self.record_count, order)


_BYTES_OR_NONE = {bytes, type(None)}


def _as_bytes_list(name: str, items: Sequence[bytes | str | None]) -> list[bytes | None]:
    """``items`` as a list of bytes or None (str and bytes-likes converted as ``send`` does);
    a list of bytes and None already is passed as it is (one C-level pass over its types)."""
    if type(items) is list and set(map(type, items)) <= _BYTES_OR_NONE:
        return items
    return [item if item is None or type(item) is bytes else as_bytes(name, item) for item in items]


class AsyncProducer:
    """An asyncio producer (the implementation behind ``Producer``).

    Use ``async with AsyncProducer(...) as producer`` or ``await producer.start()`` /
    ``await producer.close()``.
    """

    def __init__(
        self,
        server: str = DEFAULT_SERVER,
        *,
        acks: Acks | str = Acks.WRITTEN,
        compression: Compression | str | None = Compression.NONE,
        batch_size: int = BATCH_SIZE_DEFAULT,
        linger_ms: float = LINGER_MS_DEFAULT,
        buffer_bytes: int = BUFFER_BYTES_DEFAULT,
        max_request_bytes: int = MAX_REQUEST_BYTES_DEFAULT,
        max_in_flight_requests: int = MAX_IN_FLIGHT_REQUESTS_DEFAULT,
        max_in_flight_per_partition: int = MAX_IN_FLIGHT_REQUESTS_DEFAULT,
        max_block_ms: int = MAX_BLOCK_MS_DEFAULT,
        retries: int = RETRIES_DEFAULT,
        retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        credentials: grpc.ChannelCredentials | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
        tls: bool | None = None,
        tls_ca: PemSource | None = None,
        tls_cert: PemSource | None = None,
        tls_key: PemSource | None = None,
        token: str | None = None,
        enable_idempotence: bool = True,
    ) -> None:
        self._config = ProducerConfig(
            acks=parse_acks(acks),
            compression=parse_compression(compression),
            batch_size=batch_size,
            linger_ms=linger_ms,
            buffer_bytes=buffer_bytes,
            max_request_bytes=max_request_bytes,
            max_in_flight_requests=max_in_flight_requests,
            max_in_flight_per_partition=max_in_flight_per_partition,
            max_block_ms=max_block_ms,
            retries=retries,
            retry_backoff_ms=retry_backoff_ms,
            request_timeout_ms=request_timeout_ms,
        )
        # Connecting needs the running loop (a grpc.aio rule), so it waits for start().
        self._connect = functools.partial(
            Transport,
            server,
            request_timeout_ms=request_timeout_ms,
            credentials=credentials,
            channel_options=channel_options,
            security=ConnectionSecurity.resolve(
                tls=tls, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token
            ),
        )
        self._accumulator = RecordAccumulator(
            batch_bytes=batch_size,
            linger_ms=linger_ms,
            compression=self._config.compression,
            buffer_bytes=buffer_bytes,
            request_bytes_max=max_request_bytes,
            wall_clock_ms=wall_clock_ms,
        )
        self._accumulator.on_batch_full = self._wake
        self._partitioner = DefaultPartitioner(sticky_bytes=batch_size)
        # The producer id and per-partition sequences (_idempotence.py): a retried batch is
        # never written twice. On by default, as in Kafka since 3.0.
        self._idempotence = Idempotence(enable_idempotence, self._init_producer_id)
        self._partition_counts: dict[str, int] = {}
        self._transport: Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id: int | None = None
        self._sender: asyncio.Task[None] | None = None
        self._sender_parked = False  # the sender waits for a wake-up (nothing of its own under way)
        self._requests: set[asyncio.Task[None]] = set()
        self._windows: dict[TopicPartition, SendWindow[_Sent]] = {}
        # None until the service answered a ProduceStream (True) or does not serve it (False).
        self._streaming: bool | None = None
        self._wakeup: asyncio.Event | None = None
        self._progress: asyncio.Event | None = None
        self._closing = False
        self._closed = False
        self._stats = {
            "records_sent": 0,
            "records_failed": 0,
            "batches_sent": 0,
            "batches_failed": 0,
            "bytes_sent": 0,
            "retries": 0,
            "metadata_requests": 0,
        }

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and start the sender task (idempotent)."""
        if self._transport is not None:
            return
        self._check_open()
        self._loop = asyncio.get_running_loop()
        self._loop_thread_id = threading.get_ident()
        self._wakeup = asyncio.Event()
        self._progress = asyncio.Event()
        self._transport = self._connect()
        self._sender = asyncio.create_task(self._run_sender(), name="seglog-producer-sender")

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self, timeout_ms: float | None = None) -> None:
        """Send what is queued, wait for it (up to ``timeout_ms``), then disconnect.

        Records still unsent when the timeout runs out fail with ClientClosedError.
        """
        if self._closed:
            return
        self._closing = True
        if self._transport is None:
            self._closed = True
            return
        try:
            await self.flush(timeout_ms)
        except RequestTimeoutError:
            self._abort(ClientClosedError("the producer was closed before these records were sent"))
        finally:
            self._closed = True
            await self._stop_tasks()
            await self._transport.close()

    # -- sending ---------------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: HeadersLike | None = None,
    ) -> RecordFuture:
        """Queue one record; the returned RecordFuture resolves to its RecordMetadata once
        appended (``await`` it, or ``result()`` once done). The metadata is computed only when
        asked for: one future completes per batch, not per record.

        Waits (up to ``max_block_ms``) only for partition metadata or for buffer space.
        """
        if (  # the common case in one call, as in Producer.send
            partition is not None
            and timestamp_ms is None
            and headers is None
            and type(value) is bytes
            and (key is None or type(key) is bytes)
            and self._transport is not None
            and not self._closing
        ):
            future = self._accumulator.append_plain((topic, partition), key, value)
            if future is not None:
                return future
        if self._transport is None:
            await self.start()
        if partition is None and topic not in self._partition_counts:
            await self._partition_count(topic)
        try:
            return self._append_nowait(topic, value, key, partition, timestamp_ms, headers)
        except BufferFullError:
            return await self._append_waiting(topic, value, key, partition, timestamp_ms, headers)

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: HeadersLike | None = None,
    ) -> RecordMetadata:
        """``send`` and wait for the record to be appended."""
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        await self.flush_soon()
        return await future

    async def send_many(
        self,
        topic: str,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> DeliveryGroup:
        """Queue many records at once (no headers; one timestamp for all, the wall clock when
        None): the bulk path, a few list appends per record and one lock hold per batch-full.

        ``keys`` is None (null keys) or has one key per value. Without ``partition``, each record
        goes where ``send`` would put it. Returns one DeliveryGroup (``await`` it or call
        ``result()`` for every RecordMetadata in the order given; ``wait()`` just waits).
        Waits (up to ``max_block_ms`` each time) for buffer space as records go in.
        """
        if self._transport is None:
            await self.start()
        if partition is None and topic not in self._partition_counts:
            await self._partition_count(topic)
        plan = self._plan_many(topic, values, keys, partition)
        spans: list[tuple[BatchDelivery, int, int]] = []
        for topic_partition, part_keys, part_values, _ in plan.groups:
            start = 0
            deadline = None
            while start is not None:
                start = self._append_many_step(topic_partition, part_keys, part_values, start, timestamp_ms, spans)
                if start is not None:
                    if deadline is None:
                        deadline = self._now_ms() + self._config.max_block_ms
                    await self._wait_for_space(deadline)
        return plan.group(spans)

    async def send_batch(self, topic: str, partition: int, records: bytes) -> BatchMetadata:
        """Append one ready-made Kafka v2 record batch (base offset 0) as it is, bypassing batching."""
        await self.start()
        response = await self._produce(topic, partition, records)
        return BatchMetadata(
            topic=topic,
            partition=partition,
            base_offset=response.base_offset,
            last_offset=response.last_offset,
            log_append_time_ms=response.log_append_time_ms,
            log_start_offset=response.log_start_offset,
        )

    async def partitions_for(self, topic: str) -> set[int]:
        """The partition ids of ``topic`` (TopicNotFoundError when it does not exist)."""
        await self.start()
        return set(range(await self._partition_count(topic)))

    async def flush(self, timeout_ms: float | None = None) -> None:
        """Send every queued record now and wait until all of them completed (either way)."""
        if self._transport is None:
            return
        target = self._accumulator.begin_flush()
        self._wake()
        deadline = None if timeout_ms is None else self._now_ms() + timeout_ms
        assert self._progress is not None
        while not self._accumulator.flushed_through(target):
            self._progress.clear()
            remaining_s = None if deadline is None else max(0.0, (deadline - self._now_ms()) / 1000)
            try:
                await asyncio.wait_for(self._progress.wait(), remaining_s)
            except TimeoutError:
                raise RequestTimeoutError(f"flush did not complete within {timeout_ms} ms") from None

    async def flush_soon(self) -> None:
        """Make queued records ready now without waiting for them (linger ends early)."""
        if self._transport is not None:
            self._accumulator.begin_flush()
            self._wake()

    def statistics(self) -> ProducerStatistics:
        accumulated = self._accumulator.statistics()
        return ProducerStatistics(
            **self._stats,
            requests_in_flight=len(self._requests),
            batches_queued=accumulated.batches_queued,
            records_queued=accumulated.records_queued,
            buffered_bytes=accumulated.buffered_bytes,
            buffer_bytes_max=accumulated.buffer_bytes_max,
            closed=self._closed,
        )

    # -- shared with the synchronous facade ------------------------------------------------------

    def _cached_partition_count(self, topic: str) -> int | None:
        return self._partition_counts.get(topic)

    async def _partition_count(self, topic: str) -> int:
        count = self._partition_counts.get(topic)
        if count is None:
            assert self._transport is not None
            self._stats["metadata_requests"] += 1
            response = await self._transport.describe_topic(pb.DescribeTopicRequest(topic=topic))
            # partition_count includes partitions whose log dir is offline (absent from
            # partitions): key -> partition affinity must not shift while a dir is down.
            count = response.partition_count or len(response.partitions)  # 0: an older service
            self._partition_counts[topic] = count
        return count

    def _append_nowait(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None,
        partition: int | None,
        timestamp_ms: int | None,
        headers: HeadersLike | None,
    ) -> RecordFuture:
        """Append from any thread; the partition count must be cached when ``partition`` is None."""
        if self._closing:
            raise ClientClosedError("the producer is closed")
        if (
            timestamp_ms is None
            and headers is None
            and (value is None or type(value) is bytes)
            and (key is None or type(key) is bytes)
        ):
            future = self._accumulator.append_plain(
                (topic, partition if partition is not None else self._choose_partition(topic, key, value)), key, value
            )
            if future is not None:
                return future
        value_bytes = value if value is None or type(value) is bytes else as_bytes("value", value)
        key_bytes = key if key is None or type(key) is bytes else as_bytes("key", key)
        header_pairs = normalize_headers(headers) if headers else ()
        if partition is None:
            partition = self._choose_partition(topic, key_bytes, value_bytes)
        elif partition < 0:
            raise ValueError(f"partition must be >= 0, got {partition}")
        future, result = self._accumulator.append(
            (topic, partition), key_bytes, value_bytes, timestamp_ms, header_pairs, _monotonic() * 1000
        )
        if (result.new_batch or result.batch_full) and not self._start_ready_now():
            self._wake()
        return future

    def _choose_partition(self, topic: str, key: bytes | None, value: bytes | None) -> int:
        count = self._partition_counts.get(topic)
        assert count is not None, f"partition count of {topic!r} not loaded"
        if count == 1:
            return 0
        return self._partitioner.partition(topic, key, count, (len(value) if value else 0) + (len(key) if key else 0))

    async def _append_waiting(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None,
        partition: int | None,
        timestamp_ms: int | None,
        headers: HeadersLike | None,
    ) -> RecordFuture:
        """Append on the loop, first loading metadata and waiting for buffer space if needed."""
        await self.start()
        if partition is None and topic not in self._partition_counts:
            await self._partition_count(topic)
        deadline = None
        while True:
            try:
                return self._append_nowait(topic, value, key, partition, timestamp_ms, headers)
            except BufferFullError:
                if deadline is None:
                    deadline = self._now_ms() + self._config.max_block_ms
                await self._wait_for_space(deadline)

    def _plan_many(
        self,
        topic: str,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None,
        partition: int | None,
    ) -> _ManyPlan:
        if self._closing:
            raise ClientClosedError("the producer is closed")
        values = _as_bytes_list("value", values)
        if keys is None:
            keys = [None] * len(values)
        else:
            keys = _as_bytes_list("key", keys)
            if len(keys) != len(values):
                raise ValueError(f"send_many needs one key per value: {len(keys)} keys, {len(values)} values")
        if partition is not None:
            if partition < 0:
                raise ValueError(f"partition must be >= 0, got {partition}")
            return _ManyPlan([(TopicPartition(topic, partition), keys, values, None)], len(values))
        count = self._partition_counts[topic]
        chosen = [
            self._partitioner.partition(topic, key, count, len(value or b"") + len(key or b""))
            for key, value in zip(keys, values, strict=True)
        ]
        by_partition: dict[int, list[int]] = {}
        for position, number in enumerate(chosen):  # one pass, whatever the partition count
            by_partition.setdefault(number, []).append(position)
        groups = [
            (TopicPartition(topic, number), [keys[i] for i in positions], [values[i] for i in positions], positions)
            for number, positions in sorted(by_partition.items())
        ]
        return _ManyPlan(groups, len(values))

    def _append_many_step(
        self,
        topic_partition: TopicPartition,
        keys: list[bytes | None],
        values: list[bytes | None],
        start: int,
        timestamp_ms: int | None,
        spans: list[tuple[BatchDelivery, int, int]],
    ) -> int | None:
        """Append ``values[start:]``; returns None when all went in, else where to go on from
        once buffer space is free."""
        if start:
            keys, values = keys[start:], values[start:]
        try:
            added, wake = self._accumulator.append_many(topic_partition, keys, values, timestamp_ms, self._now_ms())
        except BufferFullError as full:
            appended, added, _ = full.args
            spans += added
            self._wake()
            return start + appended
        spans += added
        if wake:
            self._wake()
        return None

    # -- the sender ------------------------------------------------------------------------------

    async def _run_sender(self) -> None:
        assert self._wakeup is not None and self._loop is not None
        while True:
            self._wakeup.clear()
            now = self._now_ms()
            batches, next_due_ms = self._drain(now)
            for batch in batches:
                if self._idempotence.needs_producer_id and not await self._producer_id_for(batch):
                    continue
                self._start_request(batch)
            if self._closing and self._accumulator.is_empty():
                return
            timer = None
            if next_due_ms is not None:
                timer = self._loop.call_later(max(0.0, next_due_ms - now) / 1000, self._wakeup.set)
            self._sender_parked = True
            try:
                await self._wakeup.wait()
            finally:
                self._sender_parked = False
            if timer is not None:
                timer.cancel()

    def _start_ready_now(self) -> bool:
        """At ``linger_ms=0``, what the sender would start on waking is started by the append
        itself: a record reaches the wire one loop turn sooner. Only on the loop's thread and
        while the sender is parked with a producer id in hand, so batches still start in the
        order they were drained; otherwise (False) the sender is woken as before."""
        if (
            self._config.linger_ms != 0
            or not self._sender_parked
            or self._closing
            or self._idempotence.needs_producer_id
            or threading.get_ident() != self._loop_thread_id
        ):
            return False
        for batch in self._drain(self._now_ms())[0]:
            self._start_request(batch)
        return True

    def _drain(self, now_ms: float) -> tuple[list[ProducerBatch], float | None]:
        """The batches ready to start now, as many as there is room in flight for (one per
        partition with room in its window), and the next linger deadline."""
        room = self._config.max_in_flight_requests - len(self._requests)
        return self._accumulator.drain(now_ms, self._can_send, room)

    def _can_send(self, topic_partition: TopicPartition) -> bool:
        window = self._windows.get(topic_partition)
        return window is None or window.can_send(self._in_flight_max())

    def _in_flight_max(self) -> int:
        """Batches per partition in flight: the configured window on a stream the service
        confirmed; one until then and on the unary path (separate calls may land in any order)."""
        if self._streaming:
            return self._config.max_in_flight_per_partition
        return 1

    async def _producer_id_for(self, batch: ProducerBatch) -> bool:
        """Before the first batch (and after a retired id) the idempotent producer asks for a
        producer id; the sender waits for it, so batches keep the order they were drained in.
        If it cannot be had, the batch fails with the reason and the next one asks again."""
        try:
            await self._idempotence.ensure_producer_id()
        except Exception as error:  # noqa: BLE001 - the batch fails, the producer goes on
            self._record_failure(batch, error)
            self._finish(batch)
            return False
        return True

    def _start_request(self, batch: ProducerBatch) -> None:
        tp = batch.topic_partition
        # The producer id and this partition's next sequence, given once: a retry resends the
        # same bytes, so the service can answer it with the offsets it got the first time.
        fields = self._idempotence.fields_now(tp, batch.record_count)
        try:
            with translate_codec_errors():
                records = batch.build(*fields)
        except Exception as error:  # noqa: BLE001 - the batch fails, the others go on
            self._idempotence.batch_failed(fields)
            self._record_failure(batch, error)
            self._finish(batch)
            return
        window = self._windows.get(tp)
        if window is None:
            window = self._windows[tp] = SendWindow()
        self._send_entry(tp, window.sent((batch, records, fields)))

    def _send_entry(self, tp: TopicPartition, entry: WindowEntry[_Sent]) -> None:
        task = asyncio.create_task(self._send_batch_request(tp, entry))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _send_batch_request(self, tp: TopicPartition, entry: WindowEntry[_Sent]) -> None:
        """One attempt of one batch; its answer goes to the partition's window, which says what
        completes and what is sent again."""
        records = entry.item[1]
        window = self._windows[tp]
        if window.holding:  # a retry is due: sending this now would land it before the retry
            not_sent = ServiceUnavailableError("not sent: an earlier batch of its partition is retried first")
            self._settle(tp, window, *window.sent_while_holding(entry, not_sent))
            return
        failed = True
        outcome: Any
        try:
            outcome = await self._produce_once(tp.topic, tp.partition, records)
            failed = False
        except SeglogError as error:
            outcome = error
        except asyncio.CancelledError:
            raise  # closing: _stop_tasks completes what the windows still hold
        except Exception as error:  # noqa: BLE001 - a bug or an unexpected failure: still complete it
            outcome = error
        # With idempotence, a batch sent after one that failed is refused as out of order (the
        # service never wrote the one before it): it is retried with that one, in order.
        retriable = isinstance(outcome, SeglogError) and (
            outcome.retriable or (isinstance(outcome, OutOfOrderSequenceError) and window.holding)
        )
        retry = failed and retriable and entry.attempt < self._config.retries and not self._closed
        self._settle(tp, window, *window.answered(entry, outcome, failed=failed, retry=retry))

    def _settle(
        self, tp: TopicPartition, window: SendWindow[_Sent],
        complete: list[WindowEntry[_Sent]],
        again: list[WindowEntry[_Sent]],
    ) -> None:
        for done in complete:
            self._complete_entry(done)
        if again:
            task = asyncio.create_task(self._resend(tp, window, again))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)
        if window.is_empty() and self._windows.get(tp) is window:
            del self._windows[tp]
        self._wake()

    async def _resend(
        self, tp: TopicPartition, window: SendWindow[_Sent],
        entries: list[WindowEntry[_Sent]],
    ) -> None:
        """After the backoff (the service's retry-after hint wins over a shorter one), the
        failed batches of a held partition go out again, oldest first, before anything new."""
        hints = [e.outcome.retry_after_ms or 0 for e in entries if isinstance(e.outcome, SeglogError)]
        await asyncio.sleep(max(self._config.retry_backoff_ms, *hints) / 1000)
        window.resending(entries)
        self._stats["retries"] += len(entries)
        for entry in entries:
            self._send_entry(tp, entry)
        self._wake()

    def _complete_entry(self, entry: WindowEntry[_Sent]) -> None:
        batch, records, fields = entry.item
        if SendWindow.succeeded(entry):
            response = entry.outcome
            batch.succeed(response.base_offset, response.log_append_time_ms)
            self._stats["records_sent"] += batch.record_count
            self._stats["batches_sent"] += 1
            self._stats["bytes_sent"] += len(records)
        else:
            self._idempotence.batch_failed(fields)  # its sequences left a gap: a new producer id
            self._record_failure(batch, entry.outcome)
        self._finish(batch)

    def _finish(self, batch: ProducerBatch) -> None:
        self._accumulator.complete(batch)
        assert self._progress is not None
        self._progress.set()

    def _record_failure(self, batch: ProducerBatch, error: BaseException) -> None:
        if isinstance(error, TopicNotFoundError):
            # The topic may have been deleted or re-created with another partition count.
            self._partition_counts.pop(batch.topic_partition.topic, None)
        batch.fail(error)
        self._stats["records_failed"] += batch.record_count
        self._stats["batches_failed"] += 1

    async def _produce(self, topic: str, partition: int, records: bytes) -> pb.ProduceResponse:
        """One batch outside the windows (``send_batch``), with its own retries."""
        attempt = 0
        while True:
            try:
                return await self._produce_once(topic, partition, records)
            except SeglogError as error:
                if not error.retriable or attempt >= self._config.retries or self._closed:
                    raise
                # The service's retry-after hint (quotas) wins over a shorter backoff.
                backoff_ms = max(self._config.retry_backoff_ms, error.retry_after_ms or 0)
            attempt += 1
            self._stats["retries"] += 1
            await asyncio.sleep(backoff_ms / 1000)

    def _on_stream_break(self, error: SeglogError) -> None:
        """The stream ended with batches owed: every partition with batches in flight holds
        (sends nothing new) until their failures are in and their retries are sent, in order."""
        for window in self._windows.values():
            window.hold()

    async def _produce_once(self, topic: str, partition: int, records: bytes) -> pb.ProduceResponse:
        """One Produce: on the connection's ProduceStream, or unary where it is not served."""
        assert self._transport is not None
        # Built in place inside the stream's message: handing it a built ProduceRequest would
        # copy the batch (590 us for 512 KiB against 12; bench/bench_stream_messages.py).
        message = pb.ProduceStreamRequest() if self._streaming is not False else None
        request = message.produce if message is not None else pb.ProduceRequest()
        request.topic = topic
        request.partition = partition
        request.records = records
        request.acks = _ACKS_TO_PROTO[self._config.acks]
        if message is not None:
            stream = self._transport.produce_stream()
            stream.on_break = self._on_stream_break
            try:
                response: pb.ProduceResponse = await stream.request(message, self._transport.request_timeout_s)
            except ServiceError as error:
                if error.code is not grpc.StatusCode.UNIMPLEMENTED or stream.confirmed:
                    raise
                self._streaming = False  # an older service: unary from now on
            else:
                return response
            finally:
                if stream.confirmed:  # the service answered the open: it serves the stream
                    self._streaming = True
        return await self._transport.produce(request)

    async def _init_producer_id(self, request: pb.InitProducerIdRequest) -> pb.InitProducerIdResponse:
        """InitProducerId with the same retries as a Produce."""
        assert self._transport is not None
        attempt = 0
        while True:
            try:
                return await self._transport.init_producer_id(request)
            except SeglogError as error:
                if not error.retriable or attempt >= self._config.retries or self._closed:
                    raise
                backoff_ms = max(self._config.retry_backoff_ms, error.retry_after_ms or 0)
            attempt += 1
            self._stats["retries"] += 1
            await asyncio.sleep(backoff_ms / 1000)

    # -- helpers ---------------------------------------------------------------------------------

    async def _wait_for_space(self, deadline_ms: float) -> None:
        assert self._progress is not None
        remaining_ms = deadline_ms - self._now_ms()
        if remaining_ms <= 0:
            raise RequestTimeoutError(
                f"no buffer space freed within max_block_ms={self._config.max_block_ms} "
                f"(buffer_bytes={self._config.buffer_bytes}); the service may be slow or down"
            )
        self._accumulator.add_space_waiter(+1)
        self._progress.clear()
        self._wake()
        try:
            await asyncio.wait_for(self._progress.wait(), remaining_ms / 1000)
        except TimeoutError:
            pass
        finally:
            self._accumulator.add_space_waiter(-1)

    def _wake(self) -> None:
        """Wake the sender; callable from any thread."""
        if self._loop is None or self._wakeup is None:
            return
        if threading.get_ident() == self._loop_thread_id:
            self._wakeup.set()
        else:
            self._loop.call_soon_threadsafe(self._wakeup.set)

    def _abort(self, error: BaseException) -> None:
        self._stats["records_failed"] += self._accumulator.abort_queued(error)

    async def _stop_tasks(self) -> None:
        tasks = [task for task in (self._sender, *self._requests) if task is not None and not task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Batches still in the windows: in flight when cancelled, or answered and waiting for an
        # earlier one. Completed in order; what was never answered fails.
        closed = ClientClosedError("the producer was closed while this batch was in flight")
        for window in self._windows.values():
            for entry in window.abandon():
                if not SendWindow.succeeded(entry):
                    entry.outcome = closed
                self._complete_entry(entry)
        self._windows.clear()
        # Whatever never reached a request (cancelled before drain) fails instead of hanging.
        self._abort(ClientClosedError("the producer was closed before these records were sent"))

    def _now_ms(self) -> float:
        # time.monotonic, not loop.time(): appends from the caller's thread (the synchronous
        # Producer) stamp batches with the same clock the sender reads on the loop.
        return _monotonic() * 1000

    def _check_open(self) -> None:
        if self._closing or self._closed:
            raise ClientClosedError("the producer is closed")


class Producer(_sync.SyncFacade):
    """A synchronous producer: the same options and methods as ``AsyncProducer``.

    ``send`` appends from the calling thread without a hop to the loop thread (except to load
    metadata for a new topic or to wait for buffer space) and returns a ``RecordFuture``
    (``concurrent.futures.Future``'s methods); ``future.result(timeout)`` waits for the
    RecordMetadata.
    Usable from several threads.
    """

    def __init__(
        self,
        server: str = DEFAULT_SERVER,
        *,
        acks: Acks | str = Acks.WRITTEN,
        compression: Compression | str | None = Compression.NONE,
        batch_size: int = BATCH_SIZE_DEFAULT,
        linger_ms: float = LINGER_MS_DEFAULT,
        buffer_bytes: int = BUFFER_BYTES_DEFAULT,
        max_request_bytes: int = MAX_REQUEST_BYTES_DEFAULT,
        max_in_flight_requests: int = MAX_IN_FLIGHT_REQUESTS_DEFAULT,
        max_in_flight_per_partition: int = MAX_IN_FLIGHT_REQUESTS_DEFAULT,
        max_block_ms: int = MAX_BLOCK_MS_DEFAULT,
        retries: int = RETRIES_DEFAULT,
        retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        credentials: grpc.ChannelCredentials | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
        tls: bool | None = None,
        tls_ca: PemSource | None = None,
        tls_cert: PemSource | None = None,
        tls_key: PemSource | None = None,
        token: str | None = None,
        enable_idempotence: bool = True,
    ) -> None:
        options = dict(locals())
        del options["self"]
        self._start(AsyncProducer(**options))  # validates the options in the caller's thread

    def send(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: HeadersLike | None = None,
    ) -> RecordFuture:
        producer = self._async
        if (  # the common case in one call; anything else (or no room) takes the general path
            partition is not None
            and timestamp_ms is None
            and headers is None
            and type(value) is bytes
            and (key is None or type(key) is bytes)
            and not producer._closing
        ):
            future = producer._accumulator.append_plain((topic, partition), key, value)
            if future is not None:
                return future
        if partition is None and producer._cached_partition_count(topic) is None:
            self._portal.run(producer._partition_count(topic))
        try:
            return producer._append_nowait(topic, value, key, partition, timestamp_ms, headers)
        except BufferFullError:
            return self._portal.run(self._async._append_waiting(topic, value, key, partition, timestamp_ms, headers))

    def send_and_wait(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: HeadersLike | None = None,
    ) -> RecordMetadata:
        return self._portal.run(self._async.send_and_wait(topic, value, key, partition, timestamp_ms, headers))

    def send_many(
        self,
        topic: str,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> DeliveryGroup:
        producer = self._async
        if partition is None and producer._cached_partition_count(topic) is None:
            self._portal.run(producer._partition_count(topic))
        plan = producer._plan_many(topic, values, keys, partition)
        spans: list[tuple[BatchDelivery, int, int]] = []
        for topic_partition, part_keys, part_values, _ in plan.groups:
            start: int | None = 0
            deadline = None
            while start is not None:
                start = producer._append_many_step(topic_partition, part_keys, part_values, start, timestamp_ms, spans)
                if start is not None:
                    if deadline is None:
                        deadline = producer._now_ms() + producer._config.max_block_ms
                    self._portal.run(producer._wait_for_space(deadline))
        return plan.group(spans)

    def send_batch(self, topic: str, partition: int, records: bytes) -> BatchMetadata:
        return self._portal.run(self._async.send_batch(topic, partition, records))

    def partitions_for(self, topic: str) -> set[int]:
        return self._portal.run(self._async.partitions_for(topic))

    def flush(self, timeout_ms: float | None = None) -> None:
        self._portal.run(self._async.flush(timeout_ms))

    def flush_soon(self) -> None:
        self._portal.run(self._async.flush_soon())

    def close(self, timeout_ms: float | None = None) -> None:
        self._close(timeout_ms)

    def statistics(self) -> ProducerStatistics:
        return self._async.statistics()
