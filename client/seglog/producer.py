"""Producers: batch records per partition and append each batch with one Produce request.

``AsyncProducer`` is the implementation; ``Producer`` is its synchronous facade (see
``seglog._sync``). Both behave like the Kafka producers Python users know (kafka-python,
aiokafka, confluent-kafka): ``send`` returns a future of ``RecordMetadata``; records wait up to
``linger_ms`` to share a batch of at most ``batch_size`` bytes; ``flush`` sends everything now and
waits; ``close`` flushes and disconnects.

Sending (the sender, ``_sender.py``, apart from this module's API as in Kafka's and aiokafka's
producers): batches go out on the connection's ProduceStream (one open bidirectional call, no new
HTTP/2 stream per batch; the unary Produce on a service without it). Up to
``max_in_flight_per_partition`` batches of one partition are in flight at once (default 5, Kafka's
``max.in.flight.requests.per.connection``; at most 5 with idempotence, as there: the service
keeps that many batches a producer to answer a retry), so ``linger_ms=0`` keeps up a rate well
above one round trip per record. Ordering is kept: the stream appends in the order sent, a partition's
futures complete in send order, and a retriable failure sends the failed batch and every later one
that did not succeed again, in order (``_send_window``). On the unary path separate calls may be
appended in any order, so there one batch per partition is in flight.

Idempotence (``enable_idempotence=True``, the default): each batch carries the producer id and
its partition's sequence, given once when the batch is first sent (``_idempotence.py``), so the
service writes a retried batch only once and answers the retry with the original offsets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from time import monotonic as _monotonic
from typing import Any

import grpc

from seglog import _sync
from seglog._connection import ConnectionOptions, ServerList
from seglog._routing import Router
from seglog._security import PemSource
from seglog._accumulator import BufferFullError, RecordAccumulator
from seglog._delivery import BatchDelivery, DeliveryGroup, RecordFuture
from seglog._sender import Sender
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
from seglog.errors import ClientClosedError, RequestTimeoutError, SeglogError
from seglog.records import Compression
from seglog.structs import DEFAULT_SERVER, Acks, HeadersLike, RecordMetadata, TopicPartition, normalize_headers
from seglog.v1 import log_service_pb2 as pb

__all__ = ["AsyncProducer", "BatchMetadata", "Producer", "ProducerStatistics"]


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
    # Batches the service refused as too large and the producer sent again in pieces.
    batches_split: int = 0
    # Batches numbered afresh on a new producer id, their partition's sequences from 0 again:
    # refused out of order (past the gap a failed batch left, or a sequence the service's state
    # of the id cannot resolve), or never sent under the retired id.
    batches_renumbered: int = 0


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
# Batches of a partition in flight at most with idempotence: the batches the service keeps a
# producer to answer a retry (server storage/producers BATCHES_RETAINED, Kafka's 5).
IDEMPOTENT_IN_FLIGHT_MAX = 5


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
        server: ServerList = DEFAULT_SERVER,
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
        if enable_idempotence and max_in_flight_per_partition > IDEMPOTENT_IN_FLIGHT_MAX:
            # The service keeps a producer's last 5 batches a partition to answer a resent one
            # with its first offsets (Kafka's NUM_BATCHES_TO_RETAIN): a retry from further back
            # could not be told from a new batch. Kafka's producer refuses the same.
            raise ValueError(
                f"max_in_flight_per_partition must be at most {IDEMPOTENT_IN_FLIGHT_MAX} with "
                f"enable_idempotence=True (the service remembers that many batches a producer "
                f"to answer a retry), got {max_in_flight_per_partition}"
            )
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
        self._connection = ConnectionOptions.resolve(
            server, request_timeout_ms=request_timeout_ms, credentials=credentials, channel_options=channel_options,
            tls=tls, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token,
        )
        self._accumulator = RecordAccumulator(
            batch_bytes=batch_size,
            linger_ms=linger_ms,
            compression=self._config.compression,
            buffer_bytes=buffer_bytes,
            request_bytes_max=max_request_bytes,
            wall_clock_ms=wall_clock_ms,
        )
        self._partitioner = DefaultPartitioner(sticky_bytes=batch_size)
        self._partition_counts: dict[str, int] = {}
        self._stats = {
            "records_sent": 0,
            "records_failed": 0,
            "batches_sent": 0,
            "batches_failed": 0,
            "bytes_sent": 0,
            "retries": 0,
            "metadata_requests": 0,
            "batches_split": 0,
            "batches_renumbered": 0,
        }
        # Everything after the append (_sender.py): drains the accumulator onto the transport.
        self._sender = Sender(
            self._config,
            self._accumulator,
            enable_idempotence=enable_idempotence,
            partition_counts=self._partition_counts,
            stats=self._stats,
        )
        self._accumulator.on_batch_full = self._sender.wake
        self._transport: Transport | None = None
        self._router: Router | None = None  # the partition owners' channels (_routing.py)
        self._closing = False
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and start the sender task (idempotent)."""
        if self._transport is not None:
            return
        self._check_open()
        self._transport = self._connection.connect()
        self._router = Router(self._connection, self._transport)
        self._sender.start(self._router)

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
        self._closing = self._sender.closing = True
        if self._transport is None:
            self._closed = self._sender.closed = True
            return
        try:
            await self.flush(timeout_ms)
        except RequestTimeoutError:
            self._sender.abort(ClientClosedError("the producer was closed before these records were sent"))
        finally:
            self._closed = self._sender.closed = True
            await self._sender.stop()
            if self._router is not None:
                await self._router.close()
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
        # Every group's sizes first: a record too large refuses the call before any is queued.
        sized = [self._accumulator.record_totals(tp, part_keys, part_values) for tp, part_keys, part_values, _ in plan.groups]
        for (topic_partition, part_keys, part_values, _), totals in zip(plan.groups, sized, strict=True):
            start = 0
            deadline = None
            while start is not None:
                start = self._append_many_step(
                    topic_partition, part_keys, part_values, start, timestamp_ms, spans, totals
                )
                if start is not None:
                    if deadline is None:
                        deadline = self._now_ms() + self._config.max_block_ms
                    await self._wait_for_space(deadline)
        return plan.group(spans)

    async def send_batch(self, topic: str, partition: int, records: bytes) -> BatchMetadata:
        """Append one ready-made Kafka v2 record batch (base offset 0) as it is, bypassing batching."""
        await self.start()
        response = await self._sender.produce(topic, partition, records)
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
        self._sender.wake()
        deadline = None if timeout_ms is None else self._now_ms() + timeout_ms
        progress = self._sender.progress
        assert progress is not None
        while not self._accumulator.flushed_through(target):
            progress.clear()
            remaining_s = None if deadline is None else max(0.0, (deadline - self._now_ms()) / 1000)
            try:
                await asyncio.wait_for(progress.wait(), remaining_s)
            except TimeoutError:
                raise RequestTimeoutError(f"flush did not complete within {timeout_ms} ms") from None

    async def flush_soon(self) -> None:
        """Make queued records ready now without waiting for them (linger ends early)."""
        if self._transport is not None:
            self._accumulator.begin_flush()
            self._sender.wake()

    def statistics(self) -> ProducerStatistics:
        accumulated = self._accumulator.statistics()
        return ProducerStatistics(
            **self._stats,
            requests_in_flight=len(self._sender.requests),
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
        self._check_sender()
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
        if (result.new_batch or result.batch_full) and not self._sender.start_ready_now():
            self._sender.wake()
        return future

    def _check_sender(self) -> None:
        """A sender that stopped on an unexpected error sends nothing more: refuse at once
        rather than queue records that would never complete."""
        crashed = self._sender.crashed
        if crashed is not None:
            raise SeglogError(f"the producer's sender stopped on an unexpected error: {crashed!r}; close the producer")

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
        self._check_sender()
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
        totals: list[int],
    ) -> int | None:
        """Append ``values[start:]``; returns None when all went in, else where to go on from
        once buffer space is free. ``totals`` is the accumulator's ``record_totals`` of the
        records, taken once for every step."""
        try:
            added, wake = self._accumulator.append_many(
                topic_partition, keys, values, timestamp_ms, self._now_ms(), start=start, totals=totals
            )
        except BufferFullError as full:
            stopped_at, added, _ = full.args
            spans += added
            self._sender.wake()
            return stopped_at
        spans += added
        if wake:
            self._sender.wake()
        return None

    # -- helpers ---------------------------------------------------------------------------------

    async def _wait_for_space(self, deadline_ms: float) -> None:
        progress = self._sender.progress
        assert progress is not None
        remaining_ms = deadline_ms - self._now_ms()
        if remaining_ms <= 0:
            raise RequestTimeoutError(
                f"no buffer space freed within max_block_ms={self._config.max_block_ms} "
                f"(buffer_bytes={self._config.buffer_bytes}); the service may be slow or down"
            )
        self._accumulator.add_space_waiter(+1)
        progress.clear()
        self._sender.wake()
        try:
            await asyncio.wait_for(progress.wait(), remaining_ms / 1000)
        except TimeoutError:
            pass
        finally:
            self._accumulator.add_space_waiter(-1)

    def _now_ms(self) -> float:
        # time.monotonic, not loop.time(): appends from the caller's thread (the synchronous
        # Producer) stamp batches with the same clock the sender reads on the loop.
        return _monotonic() * 1000

    def _check_open(self) -> None:
        if self._closing or self._closed:
            raise ClientClosedError("the producer is closed")


class Producer(_sync.SyncFacade, implementation=AsyncProducer):
    """A synchronous producer: the same options and methods as ``AsyncProducer``.

    ``send`` appends from the calling thread without a hop to the loop thread (except to load
    metadata for a new topic or to wait for buffer space) and returns a ``RecordFuture``
    (``concurrent.futures.Future``'s methods); ``future.result(timeout)`` waits for the
    RecordMetadata.
    Usable from several threads.
    """

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
        # Every group's sizes first: a record too large refuses the call before any is queued.
        sized = [producer._accumulator.record_totals(tp, part_keys, part_values) for tp, part_keys, part_values, _ in plan.groups]
        for (topic_partition, part_keys, part_values, _), totals in zip(plan.groups, sized, strict=True):
            start: int | None = 0
            deadline = None
            while start is not None:
                start = producer._append_many_step(
                    topic_partition, part_keys, part_values, start, timestamp_ms, spans, totals
                )
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
