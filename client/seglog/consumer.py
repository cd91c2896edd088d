"""Consumers: read records of one topic's partitions from an offset, a time, the start or the end.

``AsyncConsumer`` is the implementation; ``Consumer`` is its synchronous facade (see
``seglog._sync``). Like Kafka's consumers: ``poll(timeout_ms, max_records)`` returns what is there
(waiting up to the timeout for something), iteration yields records one by one, ``seek`` /
``seek_to_beginning`` / ``seek_to_end`` / ``seek_to_timestamp`` move a partition, ``position`` is
the offset of the next record poll returns.

Without a group, a consumer reads the partitions it is given (all of one topic's by default) and
keeps its positions itself. With ``group_id=`` and ``topics=[...]`` it is a member of that
consumer group (KafkaConsumer.subscribe): it reads the partitions the service assigns it, across
its topics, and commits its positions to the group (``commit``, ``commit_async``, auto-commit on
by default), composed over ``seglog.group_consumer.AsyncGroupConsumer``. Arguments of one kind
given with the other's are refused at construction.

Two ways to read, same records:

- ``mode="fetch"``: unary long-poll Fetch requests, one in flight per partition, each waiting up
  to ``fetch_max_wait_ms`` at the tail for ``fetch_min_bytes``;
- ``mode="stream"``: one server-streaming Consume call per partition; the service pushes batches as
  they are appended. Flow control: a stream stops reading while its partition's buffer holds
  ``max_poll_records`` records or more.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from time import monotonic as _monotonic
from typing import Any, Literal, TypeVar

import grpc

from seglog import _sync
from seglog._connection import ConnectionOptions, ServerList
from seglog._routing import MoveFollower, Router
from seglog._security import PemSource
from seglog._fetch_state import PartitionState, RawBatch, RecordBatchView, StartPosition, fetched_batches, parse_start
from seglog.client import REQUEST_TIMEOUT_MS_DEFAULT, Transport
from seglog.errors import (
    ClientClosedError,
    CorruptRecordError,
    NotPartitionOwnerError,
    OffsetOutOfRangeError,
    QuotaExceededError,
    SeglogError,
    ServiceError,
    ServiceUnavailableError,
    raise_partition_errors,
)
from seglog.structs import (
    DEFAULT_SERVER,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ConsumerRecord,
    OffsetAndTimestamp,
    TopicPartition,
)
from seglog.v1 import log_service_pb2 as pb

__all__ = ["AsyncConsumer", "Consumer", "ConsumerStatistics", "RawBatch", "RecordBatchView"]

_T = TypeVar("_T")

# A quota refusal without a retry-after hint (an older service) is retried after this long.
QUOTA_RETRY_MS_DEFAULT = 100

# Kafka's consumer defaults: max.partition.fetch.bytes 1 MiB, fetch.max.wait.ms 500,
# fetch.min.bytes 1, max.poll.records 500.
FETCH_MAX_BYTES_DEFAULT = 1024 * 1024
FETCH_MAX_WAIT_MS_DEFAULT = 500
FETCH_MIN_BYTES_DEFAULT = 1
MAX_POLL_RECORDS_DEFAULT = 500
# Kafka's auto.commit.interval.ms.
AUTO_COMMIT_INTERVAL_MS_DEFAULT = 5000

Mode = Literal["fetch", "stream"]
OffsetReset = Literal["earliest", "latest", "none"]


@dataclass(frozen=True)
class ConsumerStatistics:
    topic: str
    records_consumed: int
    batches_fetched: int
    bytes_fetched: int
    fetch_requests: int
    empty_fetches: int
    streams_opened: int
    records_buffered: int
    quota_waits: int  # fetches refused by a quota and retried after the service's hint
    # partition -> offset of the next record poll returns (None before the start is resolved)
    positions: dict[int, int | None]
    # partition -> high watermark - position, as of the last response (None before one)
    lag: dict[int, int | None]
    closed: bool


@dataclass(frozen=True)
class _ConsumerConfig:
    mode: Mode
    fetch_max_bytes: int
    fetch_max_wait_ms: int
    fetch_min_bytes: int
    max_poll_records: int
    check_crcs: bool
    auto_offset_reset: OffsetReset
    consumer_timeout_ms: float | None

    def __post_init__(self) -> None:
        if self.mode not in ("fetch", "stream"):
            raise ValueError(f"mode must be 'fetch' or 'stream', got {self.mode!r}")
        if self.auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"auto_offset_reset must be 'earliest', 'latest' or 'none', got {self.auto_offset_reset!r}")
        for name in ("fetch_max_bytes", "max_poll_records"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("fetch_max_wait_ms", "fetch_min_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")


class AsyncConsumer:
    """An asyncio consumer (the implementation behind ``Consumer``).

    ``partition``: one partition, several, or None for all of the topic's partitions.
    ``start``: "earliest", "latest", an offset, or a timezone-aware datetime (the first record at
    or after it; the log end when there is none) — applied to every assigned partition.
    ``auto_offset_reset``: what to do when a position falls out of the log (retention, delete
    records): "earliest", "latest", or "none" to raise OffsetOutOfRangeError from poll.
    ``consumer_timeout_ms``: iteration stops after this long without a record (None: never).
    """

    def __init__(
        self,
        server: ServerList = DEFAULT_SERVER,
        topic: str = "",
        partition: int | Sequence[int] | None = None,
        *,
        start: int | str | datetime = "latest",
        mode: Mode = "fetch",
        fetch_max_bytes: int = FETCH_MAX_BYTES_DEFAULT,
        fetch_max_wait_ms: int = FETCH_MAX_WAIT_MS_DEFAULT,
        fetch_min_bytes: int = FETCH_MIN_BYTES_DEFAULT,
        max_poll_records: int = MAX_POLL_RECORDS_DEFAULT,
        check_crcs: bool = True,
        auto_offset_reset: OffsetReset | None = None,
        consumer_timeout_ms: float | None = None,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        credentials: grpc.ChannelCredentials | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
        tls: bool | None = None,
        tls_ca: PemSource | None = None,
        tls_cert: PemSource | None = None,
        tls_key: PemSource | None = None,
        token: str | None = None,
        group_id: str | None = None,
        topics: Sequence[str] | None = None,
        enable_auto_commit: bool | None = None,
        auto_commit_interval_ms: int = AUTO_COMMIT_INTERVAL_MS_DEFAULT,
        on_assign: Callable[[list[TopicPartition]], Any] | None = None,
        on_revoke: Callable[[list[TopicPartition]], Any] | None = None,
        group_instance_id: str | None = None,
        client_id: str | None = None,
    ) -> None:
        _check_roles(group_id, topics, topic, partition, start, enable_auto_commit, auto_commit_interval_ms,
                     on_assign=on_assign, on_revoke=on_revoke, group_instance_id=group_instance_id,
                     client_id=client_id)
        self.group_id = group_id
        # Kafka's auto.offset.reset is "latest"; the released consumer without a group raises ("none").
        reset: OffsetReset = auto_offset_reset or ("latest" if group_id is not None else "none")
        self._group: Any = None
        if group_id is not None:
            from seglog.group_consumer import AsyncGroupConsumer  # it reads through AsyncConsumers

            assert topics is not None
            self._group = AsyncGroupConsumer(
                server, group_id=group_id, topics=topics, enable_auto_commit=enable_auto_commit is not False,
                auto_commit_interval_ms=auto_commit_interval_ms, auto_offset_reset=reset, on_assign=on_assign,
                on_revoke=on_revoke, group_instance_id=group_instance_id, client_id=client_id, mode=mode,
                fetch_max_bytes=fetch_max_bytes,
                fetch_max_wait_ms=fetch_max_wait_ms, fetch_min_bytes=fetch_min_bytes,
                max_poll_records=max_poll_records, check_crcs=check_crcs, request_timeout_ms=request_timeout_ms,
                credentials=credentials, channel_options=channel_options, tls=tls, tls_ca=tls_ca, tls_cert=tls_cert,
                tls_key=tls_key, token=token)
            topic = topics[0]  # the members' readers are the group's; this one's own stay unused
        self._config = _ConsumerConfig(
            mode=mode,
            fetch_max_bytes=fetch_max_bytes,
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_min_bytes=fetch_min_bytes,
            max_poll_records=max_poll_records,
            check_crcs=check_crcs,
            auto_offset_reset=reset,
            consumer_timeout_ms=consumer_timeout_ms,
        )
        self._topic = topic
        self._requested_partitions = _parse_partitions(partition)
        self._start = parse_start(start)
        # Connecting needs the running loop (a grpc.aio rule), so it waits for start().
        self._connection = ConnectionOptions.resolve(
            server, request_timeout_ms=request_timeout_ms, credentials=credentials, channel_options=channel_options,
            tls=tls, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token,
        )
        self._transport: Transport | None = None
        # Each partition's reads go to its owner (_routing.py); the bootstrap channel otherwise.
        self._router: Router | None = None
        self._states: dict[int, PartitionState] = {}
        self._round_robin: Iterator[int] = iter(())
        self._data_ready: asyncio.Event | None = None
        # The synchronous Consumer polls a stream-mode consumer from its own thread (_poll_now):
        # the buffers change under this lock, and this event wakes that thread as _data_ready
        # wakes an asyncio poll.
        self._buffers_lock = threading.RLock()
        self._thread_ready = threading.Event()
        self._resolve_lock: asyncio.Lock | None = None
        self._closed = False
        self._stats = {
            "records_consumed": 0,
            "batches_fetched": 0,
            "bytes_fetched": 0,
            "fetch_requests": 0,
            "empty_fetches": 0,
            "streams_opened": 0,
            "quota_waits": 0,
        }

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and learn the assigned partitions (idempotent)."""
        if self._group is not None:
            self._check_open()
            await self._group.start()
            return
        if self._transport is not None:
            return
        self._check_open()
        self._data_ready = asyncio.Event()
        self._resolve_lock = asyncio.Lock()
        self._transport = self._connection.connect()
        self._router = Router(self._connection, self._transport)
        partitions = self._requested_partitions
        if partitions is None:
            response = await self._transport.describe_topic(pb.DescribeTopicRequest(topic=self._topic))
            if response.partition_count:
                # Every partition, offline ones included (absent from partitions): their
                # fetches fail with a retriable error until their log dir is back.
                partitions = list(range(response.partition_count))
            else:  # an older service without partition_count
                partitions = [p.partition for p in response.partitions]
        self._states = {p: PartitionState(p, self._start, self._topic) for p in partitions}
        self._round_robin = itertools.cycle(sorted(self._states))

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._group is not None:
            await self._group.close()  # commits (with auto-commit) and leaves the group
            return
        tasks = [s.task for s in self._states.values() if s.task is not None]
        for state in self._states.values():
            state.cancel_task()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._router is not None:
            await self._router.close()
        if self._transport is not None:
            await self._transport.close()

    # -- reading ---------------------------------------------------------------------------------

    async def poll(self, timeout_ms: float | None = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records available now, else wait up to ``timeout_ms`` (None: until some arrive).

        Raises the error of a failed fetch (OffsetOutOfRangeError, CorruptRecordError, ...) once.
        """
        if self._group is not None:
            return await self._group.poll(timeout_ms, max_records)
        return await self._poll(PartitionState.take, timeout_ms, max_records)

    async def poll_batches(self, timeout_ms: float | None = 0, max_records: int | None = None) -> list[RecordBatchView]:
        """``poll``, with the records as one RecordBatchView per fetched batch (columns of offsets,
        timestamps, keys, values, headers) instead of a ConsumerRecord each: the fast way to read."""
        if self._group is not None:
            return await self._group.poll_batches(timeout_ms, max_records)
        return await self._poll(PartitionState.take_views, timeout_ms, max_records)

    async def poll_raw(self, timeout_ms: float | None = 0, max_records: int | None = None) -> list[RawBatch]:
        """``poll``, with whole fetched batches as bytes, never decoded (CRC checked when
        ``check_crcs``). A batch may begin below the consumer's position: ``RawBatch.position``
        says where its new records start. At least one batch per partition that has one, even
        above ``max_records``."""
        if self._group is not None:
            return await self._group.poll_raw(timeout_ms, max_records)
        return await self._poll(PartitionState.take_raw, timeout_ms, max_records)

    async def _poll(self, take: Callable[[PartitionState, int], list[_T]], timeout_ms: float | None,
                    max_records: int | None) -> list[_T]:
        await self.start()
        self._check_open()
        assert self._data_ready is not None
        count_max = max_records or self._config.max_poll_records
        loop = asyncio.get_running_loop()
        deadline = None if timeout_ms is None else loop.time() + timeout_ms / 1000
        while True:
            # Cleared before looking, so anything that lands after the look wakes the wait below.
            self._data_ready.clear()
            self._raise_fetch_error()
            records = self._take(take, count_max)
            if records:
                self._prefetch()
                return records
            await self._resolve_starts()
            self._start_fetches()
            if self._data_ready.is_set():
                continue
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return []
            try:  # a timeout scope, not wait_for: no task of its own, so a set event resumes this one turn sooner
                async with asyncio.timeout(remaining):
                    await self._data_ready.wait()
            except TimeoutError:
                pass

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self

    async def __anext__(self) -> ConsumerRecord:
        records = await self.poll(self._config.consumer_timeout_ms, max_records=1)
        if not records:
            raise StopAsyncIteration
        return records[0]

    # -- positions -------------------------------------------------------------------------------

    def assignment(self) -> list[TopicPartition]:
        """The partitions read now: a group member's follow the group's assignment."""
        if self._group is not None:
            return self._group.assignment()
        return [TopicPartition(self._topic, p) for p in sorted(self._states)]

    async def position(self, partition: int | TopicPartition | None = None) -> int:
        """The offset of the next record poll returns for ``partition`` (a TopicPartition, or
        its number when the consumer reads one topic)."""
        if self._group is not None:
            return await self._group.position(*self._member_partition(partition))
        await self.start()
        await self._resolve_starts()
        position = self._state(partition).position
        assert position is not None
        return position

    def highwater(self, partition: int | TopicPartition | None = None) -> int | None:
        """The partition's high watermark as of the last fetch (None before the first)."""
        if self._group is not None:
            return self._group.highwater(*self._member_partition(partition))
        return self._state(partition).high_watermark

    def _position_now(self, partition: int) -> int | None:
        """``position`` as known now, without a call: None while the start is unresolved."""
        return self._state(partition).position

    async def seek(self, offset: int, partition: int | TopicPartition | None = None) -> None:
        if self._group is not None:
            topic, number = self._member_partition(partition)
            await self._group.seek(topic, number, offset)
            return
        await self.start()
        with self._buffers_lock:
            self._state(partition).seek(parse_start(offset))

    async def seek_to_beginning(self, *partitions: int | TopicPartition) -> None:
        if self._group is not None:
            await self._group.seek_to_beginning(*self._member_partitions(partitions))
            return
        await self._seek_all(StartPosition("earliest"), partitions)

    async def seek_to_end(self, *partitions: int | TopicPartition) -> None:
        if self._group is not None:
            await self._group.seek_to_end(*self._member_partitions(partitions))
            return
        await self._seek_all(StartPosition("latest"), partitions)

    async def seek_to_timestamp(self, timestamp_ms: int, *partitions: int | TopicPartition) -> None:
        """Move to the first record with timestamp >= ``timestamp_ms`` (the end when none)."""
        if self._group is not None:
            await self._group.seek_to_timestamp(timestamp_ms, *self._member_partitions(partitions))
            return
        await self._seek_all(StartPosition("timestamp", timestamp_ms), partitions)

    # A group member's answers below are keyed by TopicPartition (its partitions span topics).
    async def beginning_offsets(self) -> dict[Any, int]:
        if self._group is not None:
            return await self._group.beginning_offsets()
        return await self._offsets_at(EARLIEST_TIMESTAMP)

    async def end_offsets(self) -> dict[Any, int]:
        if self._group is not None:
            return await self._group.end_offsets()
        return await self._offsets_at(LATEST_TIMESTAMP)

    async def offsets_for_times(self, timestamp_ms: int) -> dict[Any, OffsetAndTimestamp | None]:
        """Per assigned partition, the first record with timestamp >= ``timestamp_ms`` (or None)."""
        if self._group is not None:
            return await self._group.offsets_for_times(timestamp_ms)
        await self.start()
        return await self._lookup({p: timestamp_ms for p in self._states})

    def statistics(self) -> ConsumerStatistics:
        if self._group is not None:
            raise ValueError("statistics() describes a consumer of one topic; a group member reads several "
                             "(assignment(), position() and highwater() describe each partition)")
        positions = {p: s.position for p, s in sorted(self._states.items())}
        lag = {p: _lag(s.high_watermark, positions[p]) for p, s in sorted(self._states.items())}
        return ConsumerStatistics(
            topic=self._topic,
            **self._stats,
            records_buffered=sum(len(s.buffer) for s in self._states.values()),
            positions=positions,
            lag=lag,
            closed=self._closed,
        )

    # -- the group's offsets (a group member only) ------------------------------------------------

    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commits ``offsets`` (the next offset to read, per partition), or the position of every
        partition the member owns, after its ``commit_async`` calls (Kafka's commitSync)."""
        await self._member().commit(offsets)

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None,
                     callback: Callable[[dict[TopicPartition, int], BaseException | None], Any] | None = None
                     ) -> asyncio.Future[dict[TopicPartition, int]]:
        """Commits ``offsets``, or the owned partitions' positions as they are at this call, in the
        background and in call order (Kafka's commitAsync): a future of the offsets committed,
        failed with the commit's error; ``callback(offsets, error)`` when it ends."""
        return self._member().commit_async(offsets, callback)

    async def committed(self, partitions: Sequence[TopicPartition] | None = None) -> dict[TopicPartition, int | None]:
        """The group's committed offsets of ``partitions`` (the owned ones by default), None where none."""
        return await self._member().committed(partitions)

    def _member(self) -> Any:
        if self._group is None:
            raise ValueError("offsets are committed to a consumer group: construct the consumer with group_id= "
                             "and topics=")
        return self._group

    def _member_partition(self, partition: int | TopicPartition | None) -> tuple[str, int]:
        """A group member's (topic, partition) for ``partition``: a TopicPartition, or a number
        when it subscribes to one topic, or None when it owns one partition."""
        if isinstance(partition, TopicPartition):
            return partition.topic, partition.partition
        topics = self._group._topics
        if partition is not None and len(topics) == 1:
            return topics[0], partition
        owned = self._group.assignment()
        if partition is None and len(owned) == 1:
            return owned[0].topic, owned[0].partition
        raise ValueError(f"name a TopicPartition: this member subscribes to {topics} and owns {owned}")

    def _member_partitions(self, partitions: Sequence[int | TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(*self._member_partition(p)) for p in partitions]

    # -- fetching --------------------------------------------------------------------------------

    def _start_fetches(self) -> None:
        for state in self._states.values():
            if state.task is not None or state.error is not None or state.fetch_offset is None:
                continue
            if state.buffer and self._config.mode == "fetch":
                continue
            worker = self._fetch_once if self._config.mode == "fetch" else self._stream
            state.task = asyncio.create_task(worker(state, state.epoch, state.fetch_offset))

    async def _fetch_once(self, state: PartitionState, epoch: int, offset: int) -> None:
        assert self._transport is not None
        request = pb.FetchRequest(
            topic=self._topic,
            partition=state.partition,
            offset=offset,
            max_bytes=self._config.fetch_max_bytes,
            max_wait_ms=self._config.fetch_max_wait_ms,
            min_bytes=self._config.fetch_min_bytes,
        )
        try:
            self._stats["fetch_requests"] += 1
            response = await self._fetch_within_quota(request, state, epoch)
            if state.epoch == epoch:
                self._absorb(state, response, offset)
        except SeglogError as error:
            if state.epoch == epoch:
                self._on_fetch_error(state, error)
        except Exception as error:  # a bug or an unexpected failure: poll() must still see it
            if state.epoch == epoch:
                self._on_fetch_error(state, _unexpected(error))
        finally:
            if state.epoch == epoch:
                state.task = None
            self._notify()

    async def _fetch_within_quota(
        self, request: pb.FetchRequest, state: PartitionState, epoch: int
    ) -> pb.FetchResponse:
        """A Fetch at the partition's owner; a quota refusal is waited out (its retry-after hint),
        not surfaced; a refusal naming another owner is repeated there (MoveFollower: again after
        a short back-off while the move's target has not caught up, within the request timeout)."""
        assert self._router is not None
        follower = MoveFollower(self._router, request.topic, request.partition)
        while True:
            transport = self._router.transport_for(request.topic, request.partition)
            try:
                response = await transport.fetch(request)
            except QuotaExceededError as error:
                if state.epoch != epoch or self._closed:
                    raise
                self._stats["quota_waits"] += 1
                await asyncio.sleep((error.retry_after_ms or QUOTA_RETRY_MS_DEFAULT) / 1000)
            except (NotPartitionOwnerError, ServiceUnavailableError) as error:
                if state.epoch != epoch or self._closed or not await follower.follow(error, transport):
                    raise
            else:
                self._router.confirm(request.topic, request.partition, transport)  # the route held answered
                return response

    async def _consume_at_owner(
        self, request: pb.ConsumeRequest, resume_at: Callable[[], int]
    ) -> AsyncIterator[pb.FetchResponse]:
        """The partition owner's Consume stream; refused for naming another owner (at its
        opening, or later: the partition moved away while the stream ran or waited at the
        tail), it is opened again there from ``resume_at()``, the offset after the last response
        taken. A stream refused naming an owner again before any answer (the move's target, or
        the metadata, not caught up with the commit yet) is opened again after a short back-off,
        within the request timeout (MoveFollower); an owner gone or silent is followed once."""
        assert self._router is not None
        follower = MoveFollower(self._router, request.topic, request.partition)
        while True:
            transport = self._router.transport_for(request.topic, request.partition)
            self._stats["streams_opened"] += 1
            try:
                opened = False
                async for response in transport.consume(request):
                    if not opened:  # the stream's first answer confirms the route held: once per open
                        opened = True
                        self._router.confirm(request.topic, request.partition, transport)
                    follower.answered()  # a later refusal is a later move, followed too
                    yield response
                return
            except (NotPartitionOwnerError, ServiceUnavailableError) as error:
                if self._closed or not await follower.follow(error, transport):
                    raise
                request.offset = resume_at()

    async def _stream(self, state: PartitionState, epoch: int, offset: int) -> None:
        request = pb.ConsumeRequest(
            topic=self._topic,
            partition=state.partition,
            offset=offset,
            max_bytes=self._config.fetch_max_bytes,
            max_wait_ms=self._config.fetch_max_wait_ms,
            min_bytes=self._config.fetch_min_bytes,
        )
        try:
            async for response in self._consume_at_owner(request, lambda: state.fetch_offset):
                if state.epoch != epoch:
                    return
                assert state.fetch_offset is not None
                self._absorb(state, response, state.fetch_offset)
                self._notify()
                while state.epoch == epoch:
                    with self._buffers_lock:  # against _poll_now's take, which wakes it when drained
                        if len(state.buffer) < self._config.max_poll_records:
                            break
                        state.drained.clear()
                    await state.drained.wait()
        except SeglogError as error:
            if state.epoch == epoch:
                self._on_fetch_error(state, error)
        except Exception as error:  # a bug or an unexpected failure: poll() must still see it
            if state.epoch == epoch:
                self._on_fetch_error(state, _unexpected(error))
        finally:
            if state.epoch == epoch:
                state.task = None
            self._notify()

    def _absorb(self, state: PartitionState, response: pb.FetchResponse, from_offset: int) -> None:
        state.high_watermark = response.high_watermark
        state.log_start_offset = response.log_start_offset
        if not response.records:
            self._stats["empty_fetches"] += 1
            return
        # Whole batches go into the buffer as they are (CRC checked); their records are decoded
        # when a poll takes them, and never for poll_raw.
        batches, next_offset, batch_count = fetched_batches(
            response.records, from_offset, check_crcs=self._config.check_crcs
        )
        if next_offset is None:
            raise CorruptRecordError(
                f"{self._topic}-{state.partition}: the service returned {len(response.records)} bytes at offset "
                f"{from_offset} without one whole record batch"
            )
        self._stats["batches_fetched"] += batch_count
        self._stats["bytes_fetched"] += len(response.records)
        with self._buffers_lock:
            for batch in batches:
                state.buffer.add(batch, from_offset)
            state.fetch_offset = max(next_offset, from_offset)

    def _on_fetch_error(self, state: PartitionState, error: SeglogError) -> None:
        reset = self._config.auto_offset_reset
        if isinstance(error, OffsetOutOfRangeError) and reset != "none":
            state.task = None  # this very task is ending; seek must not cancel it
            with self._buffers_lock:
                state.seek(StartPosition(reset))
        else:
            state.error = error

    def _take(self, take: Callable[[PartitionState, int], list[_T]], count_max: int) -> list[_T]:
        taken: list[_T] = []
        records = 0
        with self._buffers_lock:
            for _ in range(len(self._states)):
                if records >= count_max:
                    break
                state = self._states[next(self._round_robin)]
                before = len(state.buffer)
                taken += take(state, count_max - records)
                records += before - len(state.buffer)
            self._stats["records_consumed"] += records
        return taken

    def _poll_now(self, take: Callable[[PartitionState, int], list[_T]], timeout_ms: float | None,
                 max_records: int | None, loop: asyncio.AbstractEventLoop) -> tuple[list[_T] | None, float | None]:
        """``poll`` from a thread other than ``loop``'s, without a call into the loop, while every
        partition's Consume stream runs (stream mode, no group, no error to raise): the records
        the streams buffered, or a wait on a threading event for the next response. None when
        anything else is due (a stream to open or reopen, an error to raise, a start to resolve):
        the caller then polls on the loop, for the rest of the timeout (the second item, in ms).
        Closed, even while waiting here (by another thread): ClientClosedError, as from ``poll``."""
        self._check_open()
        if self._group is not None or not self._states:
            return None, timeout_ms
        if self._config.mode == "fetch":
            return self._take_fetched(take, max_records, loop), timeout_ms
        count_max = max_records or self._config.max_poll_records
        deadline = None if timeout_ms is None else _monotonic() + timeout_ms / 1000
        ready = self._thread_ready
        while True:
            # Cleared before looking, so a response absorbed after the look wakes the wait below.
            ready.clear()
            self._check_open()
            if any(s.task is None or s.error is not None for s in self._states.values()):
                return None, None if deadline is None else max(0.0, (deadline - _monotonic()) * 1000)
            # The buffers' own take: PartitionState's would set its asyncio event from this thread.
            # A stream that stopped for room (_stream, under the same lock) is woken on its loop.
            with self._buffers_lock:
                records = self._take(lambda state, count: getattr(state.buffer, take.__name__)(count), count_max)
                for state in self._states.values():
                    if not state.buffer and not state.drained.is_set():
                        loop.call_soon_threadsafe(state.drained.set)
            if records:
                return records, None
            remaining = None if deadline is None else deadline - _monotonic()
            if remaining is not None and remaining <= 0:
                return [], None
            _sync.wait_interruptibly(ready.wait, remaining)  # a Ctrl-C at an idle partition ends it

    def _take_fetched(self, take: Callable[[PartitionState, int], list[_T]], max_records: int | None,
                      loop: asyncio.AbstractEventLoop) -> list[_T] | None:
        """``poll`` in fetch mode from a thread other than ``loop``'s: the records earlier Fetches
        buffered, taken without a call into the loop; None when none is buffered or anything else
        is due (an error to raise, a start to resolve): the caller then polls on the loop. A take
        that drains a partition asks the loop for its next Fetch at once (``_prefetch``)."""
        states = self._states.values()
        if any(s.error is not None or s.start is not None for s in states):
            return None
        with self._buffers_lock:
            records = self._take(lambda state, count: getattr(state.buffer, take.__name__)(count),
                                 max_records or self._config.max_poll_records)
        if not records:
            return None
        if any(not s.buffer and s.task is None for s in states):
            loop.call_soon_threadsafe(self._prefetch)
        return records

    def _prefetch(self) -> None:
        """Fetch mode: the next Fetch of each partition a poll drained, started as the poll returns,
        so it runs while the caller handles the records (Kafka's consumer fetches ahead alike)."""
        if self._config.mode == "fetch" and not self._closed and self._transport is not None:
            self._start_fetches()

    def _raise_fetch_error(self) -> None:
        for state in self._states.values():
            if state.error is not None:
                error, state.error = state.error, None
                raise error

    # -- starting positions ----------------------------------------------------------------------

    async def _resolve_starts(self) -> None:
        assert self._resolve_lock is not None
        async with self._resolve_lock:
            pending = {p: s.start for p, s in self._states.items() if s.start is not None}
            if not pending:
                return
            targets = {p: _lookup_target(start) for p, start in pending.items() if start is not None}
            found = await self._lookup(targets)
            missing = [p for p, hit in found.items() if hit is None]
            if missing:  # no record at or after the time: start at the end, as Kafka's tools do
                found.update(await self._lookup({p: LATEST_TIMESTAMP for p in missing}))
            for partition, hit in found.items():
                state = self._states[partition]
                if state.start is pending[partition] and hit is not None:
                    state.start, state.fetch_offset = None, hit.offset

    async def _lookup(self, targets: dict[int, int]) -> dict[int, OffsetAndTimestamp | None]:
        assert self._router is not None
        request = pb.OffsetsForTimesRequest(
            partitions=[
                pb.PartitionTimestamp(topic=self._topic, partition=p, timestamp_ms=ts) for p, ts in targets.items()
            ]
        )
        # At each partition's owner (cluster mode): a start at latest or at a time is the
        # owner's end or record, never another instance's empty copy (offset 0).
        response = await self._router.offsets_for_times(request)
        raise_partition_errors(response.results)
        return {
            r.partition: (OffsetAndTimestamp(r.offset, r.timestamp_ms) if r.offset >= 0 else None)
            for r in response.results
        }

    async def _offsets_at(self, target: int) -> dict[int, int]:
        await self.start()
        found = await self._lookup({p: target for p in self._states})
        return {p: hit.offset for p, hit in found.items() if hit is not None}

    async def _seek_all(self, start: StartPosition, partitions: Sequence[int | TopicPartition]) -> None:
        await self.start()
        for partition in partitions or list(self._states):
            with self._buffers_lock:
                self._state(partition).seek(start)

    # -- helpers ---------------------------------------------------------------------------------

    def _state(self, partition: int | TopicPartition | None) -> PartitionState:
        if isinstance(partition, TopicPartition):
            if partition.topic != self._topic:
                raise ValueError(f"{partition.topic}-{partition.partition}: this consumer reads topic {self._topic!r}")
            partition = partition.partition
        if partition is None:
            if len(self._states) != 1:
                raise ValueError(f"name a partition: this consumer reads {sorted(self._states)}")
            return next(iter(self._states.values()))
        state = self._states.get(partition)
        if state is None:
            raise ValueError(f"partition {partition} is not assigned to this consumer ({sorted(self._states)})")
        return state

    def _notify(self) -> None:
        if self._data_ready is not None:
            self._data_ready.set()
        ready = self._thread_ready
        polled = not ready.is_set()  # cleared by a polling thread (_poll_now) since the last set
        ready.set()
        if polled:
            # Hand the polling thread the CPU and the GIL now: otherwise it waits for them until
            # the loop has run whatever else is ready (a producer's acknowledgement landing with
            # this push: 100-200 us more a record in a quarter to half of the pushes). An
            # asyncio consumer's event is never cleared: it yields once at most. No yield where
            # the platform has none (Windows).
            sched_yield = getattr(os, "sched_yield", None)
            if sched_yield is not None:
                sched_yield()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the consumer is closed")


def _check_roles(group_id: str | None, topics: Sequence[str] | None, topic: str, partition: object, start: object,
                 enable_auto_commit: bool | None, auto_commit_interval_ms: int, **group_options: object) -> None:
    """Refuses arguments that contradict each other: a group member subscribes to ``topics``
    and starts where the group committed; a consumer without a group reads ``topic`` (and the
    ``partition`` it is given) from ``start`` and commits nothing."""
    if group_id is None:
        if topics is not None:
            raise ValueError("topics= subscribes through a consumer group: give group_id= too (or read one topic "
                             "without a group with topic=)")
        if not topic:
            raise ValueError("a topic is required (or group_id= and topics= to subscribe through a group)")
        given = [name for name, value in group_options.items() if value is not None]
        given += ["enable_auto_commit"] if enable_auto_commit else []
        given += ["auto_commit_interval_ms"] if auto_commit_interval_ms != AUTO_COMMIT_INTERVAL_MS_DEFAULT else []
        if given:
            raise ValueError(f"{', '.join(given)} need a group: give group_id= and topics= (a consumer without a "
                             "group commits nothing)")
        return
    if not group_id:
        raise ValueError("group_id must not be empty")
    if isinstance(topics, str):
        raise ValueError(f"topics= is a list of topic names, got the string {topics!r}")
    if not topics:
        raise ValueError("a group member subscribes to at least one topic: give topics=[...]")
    if topic or partition is not None:
        raise ValueError("topic= and partition= assign partitions by hand, topics= subscribes through the group: "
                         "give one or the other")
    if start != "latest":
        raise ValueError("a group member starts at the group's committed offset, else at auto_offset_reset: "
                         "start= is for a consumer without a group (seek once assigned)")
    if group_options.get("group_instance_id") == "":
        raise ValueError("group_instance_id must not be empty (None: a dynamic member)")
    if auto_commit_interval_ms <= 0:
        raise ValueError(f"auto_commit_interval_ms must be > 0, got {auto_commit_interval_ms}")


def _parse_partitions(partition: int | Sequence[int] | None) -> list[int] | None:
    if partition is None:
        return None
    partitions = [partition] if isinstance(partition, int) else list(partition)
    if not partitions or any(not isinstance(p, int) or p < 0 for p in partitions):
        raise ValueError(f"partition must be an int >= 0, a non-empty list of them, or None; got {partition!r}")
    if len(set(partitions)) != len(partitions):
        raise ValueError(f"partitions repeat: {partitions}")
    return partitions


def _lag(high_watermark: int | None, position: int | None) -> int | None:
    if high_watermark is None or position is None:
        return None
    return high_watermark - position


def _lookup_target(start: StartPosition) -> int:
    if start.kind == "earliest":
        return EARLIEST_TIMESTAMP
    if start.kind == "latest":
        return LATEST_TIMESTAMP
    assert start.kind == "timestamp", start
    return start.value


class Consumer(_sync.SyncFacade, implementation=AsyncConsumer):
    """A synchronous consumer: the same options and methods as ``AsyncConsumer``.

    Iterating yields records one by one, polling ``max_poll_records`` at a time underneath, and
    stops after ``consumer_timeout_ms`` without a record (never when it is None).
    """

    # In stream mode, once the streams run, a poll takes what they buffered from the calling
    # thread and waits on a threading event, without a call into the loop thread (AsyncConsumer.
    # _poll_now): at the tail that is a task, a timer and two thread wake-ups fewer per poll. In
    # fetch mode a poll takes what earlier Fetches buffered the same way (_take_fetched).

    def poll(self, timeout_ms: float | None = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        taken, timeout_ms = self._async._poll_now(PartitionState.take, timeout_ms, max_records, self._portal.loop)
        return taken if taken is not None else self._portal.run(self._async.poll(timeout_ms, max_records))

    def poll_batches(self, timeout_ms: float | None = 0, max_records: int | None = None) -> list[RecordBatchView]:
        taken, timeout_ms = self._async._poll_now(PartitionState.take_views, timeout_ms, max_records, self._portal.loop)
        return taken if taken is not None else self._portal.run(self._async.poll_batches(timeout_ms, max_records))

    def poll_raw(self, timeout_ms: float | None = 0, max_records: int | None = None) -> list[RawBatch]:
        taken, timeout_ms = self._async._poll_now(PartitionState.take_raw, timeout_ms, max_records, self._portal.loop)
        return taken if taken is not None else self._portal.run(self._async.poll_raw(timeout_ms, max_records))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        timeout_ms = self._async._config.consumer_timeout_ms
        while True:
            records = self.poll(timeout_ms)
            if not records:
                return
            yield from records

    def assignment(self) -> list[TopicPartition]:
        return self._async.assignment()

    def position(self, partition: int | TopicPartition | None = None) -> int:
        return self._portal.run(self._async.position(partition))

    def highwater(self, partition: int | TopicPartition | None = None) -> int | None:
        return self._async.highwater(partition)

    def seek(self, offset: int, partition: int | TopicPartition | None = None) -> None:
        self._portal.run(self._async.seek(offset, partition))

    def seek_to_beginning(self, *partitions: int | TopicPartition) -> None:
        self._portal.run(self._async.seek_to_beginning(*partitions))

    def seek_to_end(self, *partitions: int | TopicPartition) -> None:
        self._portal.run(self._async.seek_to_end(*partitions))

    def seek_to_timestamp(self, timestamp_ms: int, *partitions: int | TopicPartition) -> None:
        self._portal.run(self._async.seek_to_timestamp(timestamp_ms, *partitions))

    def beginning_offsets(self) -> dict[Any, int]:
        return self._portal.run(self._async.beginning_offsets())

    def end_offsets(self) -> dict[Any, int]:
        return self._portal.run(self._async.end_offsets())

    def offsets_for_times(self, timestamp_ms: int) -> dict[Any, OffsetAndTimestamp | None]:
        return self._portal.run(self._async.offsets_for_times(timestamp_ms))

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        self._portal.run(self._async.commit(offsets))

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None,
                     callback: Callable[[dict[TopicPartition, int], BaseException | None], Any] | None = None
                     ) -> concurrent.futures.Future[dict[TopicPartition, int]]:
        """``AsyncConsumer.commit_async`` with a concurrent future (Kafka's commitAsync(callback));
        ``callback`` runs on the client's loop thread, where this consumer's blocking methods
        may not be called."""
        return self._portal.submit(lambda: self._async.commit_async(offsets, callback))

    def committed(self, partitions: Sequence[TopicPartition] | None = None) -> dict[TopicPartition, int | None]:
        return self._portal.run(self._async.committed(partitions))

    def statistics(self) -> ConsumerStatistics:
        return self._async.statistics()


def _unexpected(error: Exception) -> ServiceError:
    """A ServiceError wrapping a non-seglog exception from a fetch task, cause chained."""
    wrapped = ServiceError(f"fetch failed unexpectedly: {type(error).__name__}: {error}")
    wrapped.__cause__ = error
    return wrapped
