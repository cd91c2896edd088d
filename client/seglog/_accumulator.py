"""The producer's batching core: records in, ready batches out. No I/O, no clock of its own.

Records are appended per partition into an open ``ProducerBatch`` (a ``RecordBatchBuilder`` plus
one future per record). A batch closes when the next record would push it past ``batch_bytes``. The
sender asks ``drain`` for batches that are ready:

- closed (full), or not the only batch of its partition (then it is full by construction);
- open for ``linger_ms`` or longer (``now_ms`` is passed in, so tests move time by hand);
- covered by a ``begin_flush`` (flush / close);
- anything at all while an append waits for buffer space (sending is what frees space).

Sizes are upper bounds of the uncompressed encoding, so a batch never exceeds ``batch_bytes`` before
compression and the buffer accounting never under-counts. Appends may come from any thread (the
synchronous producer appends from the caller's thread); one lock guards the state.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from seglog.errors import RecordTooLargeError
from seglog.records import RECORD_BATCH_OVERHEAD, Compression, RecordBatchBuilder
from seglog.structs import Header, RecordMetadata, TopicPartition

__all__ = [
    "RECORD_OVERHEAD_BYTES_MAX",
    "AccumulatorStatistics",
    "AppendResult",
    "BufferFullError",
    "FutureLike",
    "ProducerBatch",
    "RecordAccumulator",
    "record_bytes_upper_bound",
]

# Largest framing of one v2 record around its key, value and header bytes: length varint (5),
# attributes (1), timestamp delta varlong (10), offset delta varint (5), key length (5), value
# length (5), header count (5). Each header adds its key and value lengths (5 + 5) on top.
RECORD_OVERHEAD_BYTES_MAX = 36
HEADER_OVERHEAD_BYTES_MAX = 10


class FutureLike(Protocol):
    """What a batch completes: a concurrent.futures.Future or an asyncio.Future (on its loop)."""

    def done(self) -> bool: ...
    def set_result(self, result: Any) -> None: ...
    def set_exception(self, exception: BaseException) -> None: ...


class BufferFullError(Exception):
    """Internal: the append needs more buffer space than is free right now (the caller waits)."""


def record_bytes_upper_bound(key: bytes | None, value: bytes | None, headers: tuple[Header, ...]) -> int:
    size = RECORD_OVERHEAD_BYTES_MAX + (len(key) if key else 0) + (len(value) if value else 0)
    if not headers:
        return size
    for header_key, header_value in headers:
        size += HEADER_OVERHEAD_BYTES_MAX + len(header_key.encode()) + (len(header_value) if header_value else 0)
    return size


@dataclass(frozen=True)
class AppendResult:
    # The append opened a new batch (the sender must learn its linger deadline, and the batch
    # before it, now closed, is ready).
    new_batch: bool
    # The append filled its batch: ready on size alone.
    batch_full: bool


# The four possible results, built once (append is on every record's path).
_APPEND_RESULTS = {(new, full): AppendResult(new, full) for new in (False, True) for full in (False, True)}


@dataclass(frozen=True)
class AccumulatorStatistics:
    batches_queued: int
    records_queued: int
    buffered_bytes: int
    buffer_bytes_max: int


class ProducerBatch:
    """Records for one partition, sent as one v2 batch in one Produce request."""

    __slots__ = (
        "_builder",
        "batch_id",
        "closed",
        "created_ms",
        "futures",
        "size_bytes_bound",
        "timestamps_ms",
        "topic_partition",
    )

    def __init__(self, batch_id: int, topic_partition: TopicPartition, compression: Compression, now_ms: float) -> None:
        self.batch_id = batch_id
        self.topic_partition = topic_partition
        self.created_ms = now_ms
        self.closed = False
        self.size_bytes_bound = RECORD_BATCH_OVERHEAD
        self.futures: list[FutureLike] = []
        self.timestamps_ms: list[int] = []
        self._builder = RecordBatchBuilder(compression=compression)

    @property
    def record_count(self) -> int:
        return len(self.futures)

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: tuple[Header, ...],
        record_bytes: int,
        future: FutureLike,
    ) -> None:
        offset_delta = self._builder.append(value, key=key, timestamp_ms=timestamp_ms, headers=headers)
        assert offset_delta == len(self.futures), (offset_delta, len(self.futures))
        self.futures.append(future)
        self.timestamps_ms.append(timestamp_ms)
        self.size_bytes_bound += record_bytes

    def build(self) -> bytes:
        return self._builder.build()

    def succeed(self, base_offset: int, log_append_time_ms: int) -> None:
        topic, partition = self.topic_partition
        for delta, (future, timestamp_ms) in enumerate(zip(self.futures, self.timestamps_ms, strict=True)):
            if not future.done():
                stamped = log_append_time_ms if log_append_time_ms >= 0 else timestamp_ms
                future.set_result(RecordMetadata(topic, partition, base_offset + delta, stamped))

    def fail(self, error: BaseException) -> None:
        for future in self.futures:
            if not future.done():
                future.set_exception(error)


class RecordAccumulator:
    def __init__(
        self,
        *,
        batch_bytes: int,
        linger_ms: float,
        compression: Compression,
        buffer_bytes: int,
        request_bytes_max: int,
        wall_clock_ms: Callable[[], int],
    ) -> None:
        assert 0 < batch_bytes <= buffer_bytes, (batch_bytes, buffer_bytes)
        assert linger_ms >= 0, linger_ms
        self._batch_bytes = batch_bytes
        self._linger_ms = linger_ms
        self._compression = compression
        self._buffer_bytes = buffer_bytes
        self._request_bytes_max = request_bytes_max
        self._wall_clock_ms = wall_clock_ms
        self._record_bytes_limit = min(request_bytes_max, buffer_bytes)
        self._lock = threading.Lock()
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._ids = itertools.count(1)
        self._last_id = 0
        self._flush_through_id = 0
        self._incomplete: set[int] = set()
        self._buffered_bytes = 0
        self._records_queued = 0
        self._space_waiters = 0

    def append(
        self,
        topic_partition: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None,
        headers: tuple[Header, ...],
        future: FutureLike,
        now_ms: float,
    ) -> AppendResult:
        """Add one record; raises RecordTooLargeError (never fits) or BufferFullError (not now)."""
        record_bytes = record_bytes_upper_bound(key, value, headers)
        if record_bytes + RECORD_BATCH_OVERHEAD > self._record_bytes_limit:
            self._refuse_too_large(topic_partition, record_bytes)
        if timestamp_ms is None:
            timestamp_ms = self._wall_clock_ms()
        with self._lock:
            # Counts a batch header too, in case this record has to open a new batch.
            needed_bytes = record_bytes + RECORD_BATCH_OVERHEAD
            if self._buffered_bytes > 0 and self._buffered_bytes + needed_bytes > self._buffer_bytes:
                raise BufferFullError
            batch, new_batch = self._open_batch_for(topic_partition, record_bytes, now_ms)
            try:
                batch.append(key, value, timestamp_ms, headers, record_bytes, future)
            except BaseException:
                if new_batch:  # never leave an empty batch behind for the sender
                    self._discard_new_batch(batch)
                raise
            self._buffered_bytes += record_bytes
            self._records_queued += 1
            batch_full = batch.size_bytes_bound >= self._batch_bytes
            if batch_full:
                batch.closed = True
            return _APPEND_RESULTS[new_batch, batch_full]

    def drain(
        self, now_ms: float, can_send: Callable[[TopicPartition], bool], batch_count_max: int
    ) -> tuple[list[ProducerBatch], float | None]:
        """Pop up to ``batch_count_max`` ready batches (one per partition); also the next due time."""
        ready: list[ProducerBatch] = []
        next_due_ms: float | None = None
        with self._lock:
            for topic_partition, queue in self._queues.items():
                if not queue:
                    continue
                head = queue[0]
                if not self._is_ready(head, len(queue), now_ms):
                    due_ms = head.created_ms + self._linger_ms
                    next_due_ms = due_ms if next_due_ms is None else min(next_due_ms, due_ms)
                elif len(ready) < batch_count_max and can_send(topic_partition):
                    queue.popleft()
                    head.closed = True
                    self._records_queued -= head.record_count
                    ready.append(head)
            self._drop_empty_queues()
        return ready, next_due_ms

    def complete(self, batch: ProducerBatch) -> None:
        """The batch's request finished (either way): free its buffer space."""
        with self._lock:
            self._buffered_bytes -= batch.size_bytes_bound
            self._incomplete.discard(batch.batch_id)
            assert self._buffered_bytes >= 0, self._buffered_bytes

    def begin_flush(self) -> int:
        """Make every batch existing now ready at once; returns the id to wait for."""
        with self._lock:
            self._flush_through_id = self._last_id
            return self._last_id

    def flushed_through(self, batch_id: int) -> bool:
        """Whether every batch with an id up to ``batch_id`` has completed."""
        with self._lock:
            return not any(incomplete <= batch_id for incomplete in self._incomplete)

    def abort_queued(self, error: BaseException) -> int:
        """Fail and drop every queued (unsent) batch; returns how many records failed."""
        with self._lock:
            batches = [batch for queue in self._queues.values() for batch in queue]
            self._queues.clear()
            self._records_queued = 0
        for batch in batches:
            batch.fail(error)
            self.complete(batch)
        return sum(batch.record_count for batch in batches)

    def add_space_waiter(self, delta: int) -> None:
        with self._lock:
            self._space_waiters += delta
            assert self._space_waiters >= 0

    def is_empty(self) -> bool:
        with self._lock:
            return not self._incomplete

    def statistics(self) -> AccumulatorStatistics:
        with self._lock:
            return AccumulatorStatistics(
                batches_queued=sum(len(queue) for queue in self._queues.values()),
                records_queued=self._records_queued,
                buffered_bytes=self._buffered_bytes,
                buffer_bytes_max=self._buffer_bytes,
            )

    # -- helpers (called with the lock held) -----------------------------------------------------

    def _refuse_too_large(self, topic_partition: TopicPartition, record_bytes: int) -> NoReturn:
        batch_bytes = RECORD_BATCH_OVERHEAD + record_bytes
        limit = self._record_bytes_limit
        raise RecordTooLargeError(
            f"a record for {topic_partition.topic}-{topic_partition.partition} needs up to "
            f"{batch_bytes} bytes in its batch, above the producer's limit of {limit} bytes "
            f"(max_request_bytes={self._request_bytes_max}, buffer_bytes={self._buffer_bytes})"
        )

    def _open_batch_for(
        self, topic_partition: TopicPartition, record_bytes: int, now_ms: float
    ) -> tuple[ProducerBatch, bool]:
        queue = self._queues.get(topic_partition)
        if queue is None:
            queue = self._queues[topic_partition] = deque()
        elif queue:
            tail = queue[-1]
            if not tail.closed and tail.size_bytes_bound + record_bytes <= self._batch_bytes:
                return tail, False
            tail.closed = True
        batch_id = next(self._ids)
        batch = ProducerBatch(batch_id, topic_partition, self._compression, now_ms)
        queue.append(batch)
        self._last_id = batch_id
        self._incomplete.add(batch_id)
        self._buffered_bytes += RECORD_BATCH_OVERHEAD
        return batch, True

    def _discard_new_batch(self, batch: ProducerBatch) -> None:
        assert batch.record_count == 0
        queue = self._queues[batch.topic_partition]
        assert queue[-1] is batch
        queue.pop()
        self._incomplete.discard(batch.batch_id)
        self._buffered_bytes -= batch.size_bytes_bound

    def _is_ready(self, head: ProducerBatch, queued: int, now_ms: float) -> bool:
        return (
            head.closed
            or queued > 1
            or now_ms - head.created_ms >= self._linger_ms
            or head.batch_id <= self._flush_through_id
            or self._space_waiters > 0
        )

    def _drop_empty_queues(self) -> None:
        for topic_partition in [tp for tp, queue in self._queues.items() if not queue]:
            del self._queues[topic_partition]
