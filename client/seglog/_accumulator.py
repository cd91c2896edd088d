"""The producer's batching core: records in, ready batches out. No I/O, no clock of its own.

Records are appended per partition into an open ``ProducerBatch`` (the records' references, encoded
when the batch is sent, and one delivery future for the whole batch). A batch closes when the next record would push it past ``batch_bytes``. The
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

import bisect
import itertools
import operator
import threading
import time
from collections import deque
from itertools import repeat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from seglog.errors import RecordTooLargeError
from seglog.records import RECORD_BATCH_OVERHEAD, Compression, RecordBatchBuilder
from seglog.records.builder import SealedBatch
from seglog.records.errors import CodecError
from seglog.records.builder import _check_timestamp as check_timestamp
from seglog._delivery import BatchDelivery, RecordFuture
from seglog._producer_config import wall_clock_ms as default_wall_clock_ms
from seglog.structs import Header, TopicPartition

__all__ = [
    "RECORD_OVERHEAD_BYTES_MAX",
    "AccumulatorStatistics",
    "AppendResult",
    "BufferFullError",
    "ProducerBatch",
    "RecordAccumulator",
    "piece_spans",
    "record_bytes_upper_bound",
]

# Largest framing of one v2 record around its key, value and header bytes: length varint (5),
# attributes (1), timestamp delta varlong (10), offset delta varint (5), key length (5), value
# length (5), header count (5). Each header adds its key and value lengths (5 + 5) on top.
RECORD_OVERHEAD_BYTES_MAX = 36
HEADER_OVERHEAD_BYTES_MAX = 10


class BufferFullError(Exception):
    """Internal: the append needs more buffer space than is free right now (the caller waits).

    From ``append_many``: ``args`` are (records appended before it stopped, their spans, wake)."""


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
    """Records for one partition, sent as one v2 batch in one Produce request.

    Appending only keeps references (key, value, timestamp, headers); the records are encoded
    once, by ``build`` on the sender, so ``send`` stays a few list appends. The batch completes
    one ``BatchDelivery`` that every record's ``RecordFuture`` reads.
    """

    __slots__ = (
        "batch_id",
        "closed",
        "created_ms",
        "delivery",
        "headers",
        "keys",
        "size_bytes_bound",
        "timestamps_ms",
        "topic_partition",
        "values",
        "_compression",
        "_encoded",
        "_refusal",
        "_ahead_failed",
    )

    def __init__(self, batch_id: int, topic_partition: TopicPartition, compression: Compression, now_ms: float) -> None:
        self.batch_id = batch_id
        self.topic_partition = topic_partition
        self.created_ms = now_ms
        self.closed = False
        self.size_bytes_bound = RECORD_BATCH_OVERHEAD
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.timestamps_ms: list[int] = []
        # None until a record with headers arrives; then one tuple per record.
        self.headers: list[tuple[Header, ...]] | None = None
        self.delivery = BatchDelivery(topic_partition.topic, topic_partition.partition, self.timestamps_ms)
        self._compression = compression
        # ``encode_ahead``'s records, encoded and sealed (the producer's fields not yet given),
        # held until the batch is built by the accumulator (its message then carries them:
        # ``RecordAccumulator.build``) or completed.
        self._encoded: SealedBatch | None = None
        # What the codec raised encoding the records ahead: not encoded again, raised by build.
        self._refusal: Exception | None = None
        # Encoding ahead failed otherwise (MemoryError, a bug): not tried ahead again, so drains
        # do not spend their budget on it again and again; ``build`` encodes the records.
        self._ahead_failed = False

    @property
    def record_count(self) -> int:
        return len(self.values)

    def append_headers(self, index: int, headers: tuple[Header, ...]) -> None:
        """Headers for the record at ``index`` (its key and value are already appended)."""
        if self.headers is None:
            self.headers = [()] * index
        self.headers.append(headers)

    def build(self, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
        """Encode the batch (base offset 0; the service assigns the real one), with the
        idempotent producer's fields when given (``_idempotence.py``). After ``encode_ahead``
        only the header is left to write (its fields and the CRC); the encoded records stay
        held (and counted) until ``RecordAccumulator.build`` or the batch's completion lets
        them go."""
        sealed = self._encoded
        if sealed is not None:
            return sealed.build(producer_id, producer_epoch, base_sequence)
        if self._refusal is not None:
            raise self._refusal
        builder = RecordBatchBuilder(compression=self._compression)
        self._encode_into(builder)
        builder.set_producer(producer_id, producer_epoch, base_sequence)
        return builder.build()

    def encode_ahead(self) -> int:
        """Encode a closed batch's records (compressed, if so) before it is sent: the sender
        does it while the partition's window is full and it waits for the service, so sending
        the batch once the window has room costs only its header. Returns the bytes now held
        for it (the records in the one form the batch carries). Records refused by the codec
        (``CODEC_REFUSALS``) are encoded once: the refusal is kept and ``build`` raises it when
        the batch is sent, where a batch that fails to build fails alone. Anything else raised
        (MemoryError, a bug) says nothing of the records: the batch is left to be encoded by
        ``build``, where what it raises then is its own failure (raising it here would fail
        whichever send or drain ran this encoding), and is not encoded ahead again: a drain
        after a drain would otherwise encode it anew each time, under the lock sends wait for."""
        assert self.closed, "an open batch may still get records"
        if not self.encodable_ahead:
            return 0
        builder = RecordBatchBuilder(compression=self._compression)
        try:
            self._encode_into(builder)
            sealed = builder.seal()
        except CODEC_REFUSALS as error:  # raised by build when the batch is sent
            self._refusal = error
            return 0
        except Exception:  # noqa: BLE001 - not the records' fault: build encodes them (above)
            self._ahead_failed = True
            return 0
        self._encoded = sealed
        return len(sealed.records)

    def drop_encoded(self) -> int:
        """Let the records encoded ahead go (if any); returns how many bytes they held."""
        sealed, self._encoded = self._encoded, None
        return 0 if sealed is None else len(sealed.records)

    @property
    def encoded_ahead(self) -> bool:
        """Whether ``encode_ahead`` encoded the records and they are still held (a ``build``
        then writes the header only)."""
        return self._encoded is not None

    @property
    def encodable_ahead(self) -> bool:
        """Whether ``encode_ahead`` would still encode the records: not encoded and held, not
        refused by the codec, not failed otherwise before."""
        return self._encoded is None and self._refusal is None and not self._ahead_failed

    @property
    def encode_refused(self) -> bool:
        """Whether ``encode_ahead`` found records the codec refuses (``build`` raises it)."""
        return self._refusal is not None

    def _encode_into(self, builder: RecordBatchBuilder) -> None:
        append = builder.append
        if len(self.values) == 1 and self.headers is None:  # linger_ms=0's usual batch
            append(self.values[0], self.keys[0], self.timestamps_ms[0])
        elif self.headers is None:
            # Records sent within the same millisecond share a timestamp: encode each such run
            # with one extend (send_many's records are one run).
            keys, values, timestamps = self.keys, self.values, self.timestamps_ms
            start = 0
            for end, timestamp_ms in enumerate(timestamps):
                if timestamp_ms != timestamps[start]:
                    builder.extend(keys[start:end], values[start:end], timestamps[start])
                    start = end
            builder.extend(keys[start:], values[start:], timestamps[start])
        else:
            for key, value, timestamp_ms, headers in zip(
                self.keys, self.values, self.timestamps_ms, self.headers, strict=True
            ):
                append(value, key, timestamp_ms, headers)

    def record_sizes(self) -> list[int]:
        """Each record's upper bound, as appending counted it."""
        if self.headers is None:
            return _record_sizes(self.keys, self.values)
        return [
            record_bytes_upper_bound(key, value, headers)
            for key, value, headers in zip(self.keys, self.values, self.headers, strict=True)
        ]

    def piece(self, start: int, stop: int, size_bytes_bound: int) -> ProducerBatch:
        """Records [start, stop) as a batch of their own (closed, same id: see ``split``)."""
        piece = ProducerBatch(self.batch_id, self.topic_partition, self._compression, self.created_ms)
        piece.closed = True
        piece.size_bytes_bound = size_bytes_bound
        piece.keys[:] = self.keys[start:stop]
        piece.values[:] = self.values[start:stop]
        piece.timestamps_ms[:] = self.timestamps_ms[start:stop]  # the delivery's list, kept
        if self.headers is not None:
            piece.headers = self.headers[start:stop]
        return piece

    def succeed(self, base_offset: int, log_append_time_ms: int) -> None:
        self.delivery.succeed(base_offset, log_append_time_ms)

    def fail(self, error: BaseException) -> None:
        self.delivery.fail(error)


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
        # Pieces still owed by batches split after the service refused them as too large
        # (``split``), by batch id: the batch stays incomplete (a flush waits) until its last.
        self._pieces_owed: dict[int, int] = {}
        self._buffered_bytes = 0
        # The bytes of the records encoded ahead (``_encode_ahead_locked``) and still held beside
        # the batches' records: queued, or drained and not built yet (``build`` or the batch's
        # completion lets them go, and counts them out). They stay within a share of the buffer.
        self._encoded_bytes = 0
        self._space_waiters = 0
        # The open (tail) batch of each partition, for ``append_plain``: a cache, an entry is
        # used only while its batch is not closed.
        self._open: dict[TopicPartition | tuple[str, int], ProducerBatch] = {}
        # Called (from the appending thread) when ``append_plain`` closes a full batch: the
        # producer wakes its sender there. Set by the producer.
        self.on_batch_full: Callable[[], None] = _nothing
        # append_plain checks a record against its batch's room only: that is enough when a
        # batch never exceeds what a request and the buffer may carry.
        # The wall clock is read inline there (time.time_ns), so a clock given by a test turns
        # it off too.
        self._plain_ok = batch_bytes <= self._record_bytes_limit and wall_clock_ms is default_wall_clock_ms

    def append(
        self,
        topic_partition: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None,
        headers: tuple[Header, ...],
        now_ms: float,
    ) -> tuple[RecordFuture, AppendResult]:
        """Add one record; raises RecordTooLargeError (never fits), BufferFullError (not now) or
        ValueError (a timestamp Kafka refuses). Keys and values are bytes or None: checked here
        (``len``), because the records are encoded later, on the sender, where one bad record
        would fail the whole batch."""
        # Runs once per record: the common case (an open batch with room) is inlined here, and
        # everything else goes through the helpers below.
        if headers:
            record_bytes = record_bytes_upper_bound(key, value, headers)
        else:
            record_bytes = RECORD_OVERHEAD_BYTES_MAX + (len(key) if key else 0) + (len(value) if value else 0)
        if record_bytes + RECORD_BATCH_OVERHEAD > self._record_bytes_limit:
            self._refuse_too_large(topic_partition, record_bytes)
        if timestamp_ms is None:
            timestamp_ms = self._wall_clock_ms()
        else:
            check_timestamp(timestamp_ms)
        with self._lock:
            # Counts a batch header too, in case this record has to open a new batch.
            if self._buffered_bytes > 0 and self._buffered_bytes + record_bytes + RECORD_BATCH_OVERHEAD > self._buffer_bytes:
                raise BufferFullError
            queue = self._queues.get(topic_partition)
            batch = queue[-1] if queue else None
            if batch is None or batch.closed or batch.size_bytes_bound + record_bytes > self._batch_bytes:
                batch, new_batch = self._open_batch_for(topic_partition, record_bytes, now_ms)
            else:
                new_batch = False
            index = len(batch.values)
            batch.keys.append(key)
            batch.values.append(value)
            batch.timestamps_ms.append(timestamp_ms)
            if headers or batch.headers is not None:
                batch.append_headers(index, headers)
            size = batch.size_bytes_bound = batch.size_bytes_bound + record_bytes
            self._buffered_bytes += record_bytes
            batch_full = size >= self._batch_bytes
            if batch_full:
                batch.closed = True
            return RecordFuture(batch.delivery, index), _APPEND_RESULTS[new_batch, batch_full]

    def append_plain(
        self,
        topic_partition: TopicPartition | tuple[str, int],
        key: bytes | None,
        value: bytes | None,
        _time_ns: Callable[[], int] = time.time_ns,
        _len: Callable[[bytes], int] = len,
    ) -> RecordFuture | None:
        """``send``'s common case in one call: a record without headers or a timestamp of its own
        (it gets the wall clock now), key and value bytes or None (the caller checked), going
        into the open batch of its partition. Returns None, having changed nothing, when that
        batch does not exist, is closed or has no room, or the buffer is full: the caller then
        goes through ``append``, which handles every case. Same bookkeeping as ``append``, minus
        the checks that cannot fail here (``_plain_ok``)."""
        record_bytes = RECORD_OVERHEAD_BYTES_MAX + (_len(key) if key else 0) + (_len(value) if value else 0)
        # acquire/release rather than ``with``: half the cost of the lock here (try/finally is
        # free in CPython 3.11).
        lock = self._lock
        lock.acquire()
        try:
            batch = self._open.get(topic_partition)
            if (
                batch is None
                or batch.closed
                or not self._plain_ok
                or batch.size_bytes_bound + record_bytes > self._batch_bytes
                or self._buffered_bytes + record_bytes > self._buffer_bytes
            ):
                return None
            values = batch.values
            index = _len(values)
            values.append(value)
            batch.keys.append(key)
            batch.timestamps_ms.append(_time_ns() // 1_000_000)
            if batch.headers is not None:
                batch.headers.append(())
            size = batch.size_bytes_bound = batch.size_bytes_bound + record_bytes
            self._buffered_bytes += record_bytes
            if size >= self._batch_bytes:
                batch.closed = True
                self.on_batch_full()
            return RecordFuture(batch.delivery, index)
        finally:
            lock.release()

    def append_many(
        self,
        topic_partition: TopicPartition,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        timestamp_ms: int | None,
        now_ms: float,
        *,
        start: int = 0,
        totals: list[int] | None = None,
    ) -> tuple[list[tuple[BatchDelivery, int, int]], bool]:
        """Add records without headers, all with one timestamp (the wall clock when None), under
        one lock hold; returns the (delivery, first index, count) spans they went into and whether
        the sender must be woken. Appends as many as the buffer has room for, then raises
        BufferFullError carrying the position it stopped at (``appended``: how many went in when
        ``start`` is 0), so the caller can wait and go on from there.

        ``start`` and ``totals`` (``record_totals`` of the same records) let a caller that waits
        for buffer space go on without sizing or copying the records again: a send_many of
        10,000 records that waits once per freed batch would otherwise size the rest each time."""
        if timestamp_ms is None:
            timestamp_ms = self._wall_clock_ms()
        else:
            check_timestamp(timestamp_ms)
        if totals is None:
            totals = self.record_totals(topic_partition, keys, values)
        spans: list[tuple[BatchDelivery, int, int]] = []
        wake = False
        count = len(totals)
        with self._lock:
            batch: ProducerBatch | None = None
            first = 0
            position = start
            while position < count:
                record_bytes = totals[position] - (totals[position - 1] if position else 0)
                if batch is None or batch.closed or batch.size_bytes_bound + record_bytes > self._batch_bytes:
                    if self._buffered_bytes > 0 and (
                        self._buffered_bytes + record_bytes + RECORD_BATCH_OVERHEAD > self._buffer_bytes
                    ):
                        if batch is not None:
                            spans.append((batch.delivery, first, len(batch.values) - first))
                        raise BufferFullError(position, spans, wake)
                    if batch is not None:
                        spans.append((batch.delivery, first, len(batch.values) - first))
                    batch, new_batch = self._open_batch_for(topic_partition, record_bytes, now_ms)
                    wake = wake or new_batch
                    first = len(batch.values)
                elif self._buffered_bytes + record_bytes > self._buffer_bytes:
                    spans.append((batch.delivery, first, len(batch.values) - first))
                    raise BufferFullError(position, spans, wake)
                # This record fits (checked above); so do the ones after it up to ``stop``.
                before = totals[position - 1] if position else 0
                room = min(self._batch_bytes - batch.size_bytes_bound, self._buffer_bytes - self._buffered_bytes)
                stop = max(bisect.bisect_right(totals, before + room, position, count), position + 1)
                added = totals[stop - 1] - before
                batch.keys += keys[position:stop]
                batch.values += values[position:stop]
                batch.timestamps_ms += [timestamp_ms] * (stop - position)
                if batch.headers is not None:
                    batch.headers += [()] * (stop - position)
                batch.size_bytes_bound += added
                self._buffered_bytes += added
                if batch.size_bytes_bound >= self._batch_bytes:
                    batch.closed = True
                    wake = True
                position = stop
            if batch is not None:
                spans.append((batch.delivery, first, len(batch.values) - first))
        return spans, wake

    def record_totals(
        self, topic_partition: TopicPartition, keys: Sequence[bytes | None], values: Sequence[bytes | None]
    ) -> list[int]:
        """The running totals of the records' size bounds, for ``append_many``: how many records
        from a position fit the room left is one bisect, and they go in with a few list extends.
        Every size first: a record that can never be sent refuses the whole call (RecordTooLargeError)
        before any record is queued (else the caller would see an error for records that still go out)."""
        sizes = _record_sizes(keys, values)
        largest = max(sizes, default=0)
        if largest + RECORD_BATCH_OVERHEAD > self._record_bytes_limit:
            self._refuse_too_large(topic_partition, largest)
        return list(itertools.accumulate(sizes))

    def drain(
        self, now_ms: float, can_send: Callable[[TopicPartition], bool], batch_count_max: int,
        batches_for: Callable[[TopicPartition], int] | None = None,
    ) -> tuple[list[ProducerBatch], float | None]:
        """Pop ready batches of up to ``batch_count_max`` partitions: one per partition, or with
        ``batches_for``, up to that many of the partition's ready batches, oldest first (they
        go in one request); also the next due time. The closed head batches of partitions
        that cannot send are encoded ahead, at most ``ENCODE_AHEAD_BYTES_PER_DRAIN`` of them a
        drain (under the lock, which appends wait for; at ``linger_ms=0`` the drain may run in
        a caller's send): with more left, the next due time is now."""
        ready: list[ProducerBatch] = []
        partitions = 0
        next_due_ms: float | None = None
        encode_budget = ENCODE_AHEAD_BYTES_PER_DRAIN
        with self._lock:
            for topic_partition, queue in self._queues.items():
                if not queue:
                    continue
                head = queue[0]
                if not self._is_ready(head, len(queue), now_ms):
                    due_ms = head.created_ms + self._linger_ms
                    next_due_ms = due_ms if next_due_ms is None else min(next_due_ms, due_ms)
                elif partitions < batch_count_max and can_send(topic_partition):
                    partitions += 1
                    count = 1 if batches_for is None else batches_for(topic_partition)
                    while True:
                        queue.popleft()
                        head.closed = True
                        ready.append(head)
                        count -= 1
                        if count <= 0 or not queue:
                            break
                        head = queue[0]
                        if not self._is_ready(head, len(queue), now_ms):
                            due_ms = head.created_ms + self._linger_ms
                            next_due_ms = due_ms if next_due_ms is None else min(next_due_ms, due_ms)
                            break
                elif encode_budget >= 0:
                    encode_budget = self._encode_ahead_locked(queue, encode_budget)
            self._drop_empty_queues()
        if encode_budget < 0:  # more to encode ahead than one drain does: the next drain goes on
            next_due_ms = now_ms
        return ready, next_due_ms

    def build(
        self, batch: ProducerBatch, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1
    ) -> bytes:
        """A drained batch's message (``ProducerBatch.build``). Records it encoded ahead are let
        go and counted out: the message carries them, and the sender keeps it for a retry (a
        batch renumbered later has its header rewritten, ``with_producer_fields``: the records
        are not encoded again)."""
        message = batch.build(producer_id, producer_epoch, base_sequence)
        if batch.encoded_ahead:
            with self._lock:
                self._encoded_bytes -= batch.drop_encoded()
                assert self._encoded_bytes >= 0, self._encoded_bytes
        return message

    def complete(self, batch: ProducerBatch) -> None:
        """The batch's request finished (either way): free its buffer space."""
        with self._lock:
            self._buffered_bytes -= batch.size_bytes_bound
            self._encoded_bytes -= batch.drop_encoded()  # never built (failed in hand, aborted)
            owed = self._pieces_owed.get(batch.batch_id)
            if owed is None or owed == 1:
                self._pieces_owed.pop(batch.batch_id, None)
                self._incomplete.discard(batch.batch_id)
            else:
                self._pieces_owed[batch.batch_id] = owed - 1
            assert self._buffered_bytes >= 0, self._buffered_bytes

    def split(self, batch: ProducerBatch, piece_bytes: int) -> list[ProducerBatch]:
        """A drained batch of two records or more that the service refused as too large, as
        pieces of at most ``piece_bytes`` by the records' size bounds (a record larger goes
        alone), in order, instead of it: Kafka's ``RecordAccumulator.splitAndReenqueue``. The
        pieces keep the batch's id, so a flush waits for the last of them, and its delivery
        completes once they all have (``BatchDelivery.split_into``); the batch itself is
        never completed. ``piece_bytes`` below half the batch's bound makes two pieces at least."""
        assert batch.record_count > 1 and batch.closed, batch.record_count
        sizes = batch.record_sizes()
        pieces = [
            batch.piece(start, stop, RECORD_BATCH_OVERHEAD + sum(sizes[start:stop]))
            for start, stop in piece_spans(sizes, piece_bytes - RECORD_BATCH_OVERHEAD)
        ]
        assert len(pieces) > 1 or piece_bytes >= batch.size_bytes_bound, (piece_bytes, batch.size_bytes_bound)
        with self._lock:
            self._buffered_bytes += sum(piece.size_bytes_bound for piece in pieces) - batch.size_bytes_bound
            self._encoded_bytes -= batch.drop_encoded()  # split before it was built: never built now
            self._pieces_owed[batch.batch_id] = self._pieces_owed.get(batch.batch_id, 1) + len(pieces) - 1
        starts = itertools.accumulate((piece.record_count for piece in pieces[:-1]), initial=0)
        batch.delivery.split_into(list(zip(starts, (piece.delivery for piece in pieces))))
        return pieces

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
            self._open.clear()
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
                records_queued=sum(batch.record_count for queue in self._queues.values() for batch in queue),
                buffered_bytes=self._buffered_bytes,
                buffer_bytes_max=self._buffer_bytes,
            )

    # -- helpers (called with the lock held) -----------------------------------------------------

    def _refuse_too_large(self, topic_partition: TopicPartition, record_bytes: int) -> NoReturn:
        batch_bytes = RECORD_BATCH_OVERHEAD + record_bytes
        limit = self._record_bytes_limit
        topic, partition = topic_partition
        raise RecordTooLargeError(
            f"a record for {topic}-{partition} needs up to "
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
        # Callers on the per-record path may pass a plain (topic, partition) tuple (it hashes and
        # compares equal to a TopicPartition, and is cheaper to make); batches keep the real one.
        batch = ProducerBatch(batch_id, TopicPartition(*topic_partition), self._compression, now_ms)
        queue.append(batch)
        self._open[topic_partition] = batch
        self._last_id = batch_id
        self._incomplete.add(batch_id)
        self._buffered_bytes += RECORD_BATCH_OVERHEAD
        return batch, True

    def _encode_ahead_locked(self, queue: deque[ProducerBatch], budget: int) -> int:
        """The closed batches at the head of a partition's queue that cannot send, encoded
        ahead (``ProducerBatch.encode_ahead``), while the encoded copies stay within
        ``ENCODED_AHEAD_BUFFER_SHARE`` of the buffer and this drain's encoding within ``budget``
        bytes (by the batches' size bounds; one batch at least). Returns the budget left: below
        zero when a batch was left for a later drain by the budget alone."""
        encoded_bytes_max = self._buffer_bytes // ENCODED_AHEAD_BUFFER_SHARE
        for batch in itertools.islice(queue, ENCODE_AHEAD_BATCHES):
            if not batch.closed:
                break
            if not batch.encodable_ahead:
                continue
            if self._encoded_bytes + batch.size_bytes_bound > encoded_bytes_max:
                break
            if batch.size_bytes_bound > budget and budget < ENCODE_AHEAD_BYTES_PER_DRAIN:
                return -1  # the drain's first batch goes however large; the others within budget
            budget -= batch.size_bytes_bound
            self._encoded_bytes += batch.encode_ahead()
        return max(budget, 0)

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
            self._open.pop(topic_partition, None)


def _nothing() -> None:
    pass


# What the codec raises about a batch's records (``seglog.records.errors``: CodecError for what
# it cannot encode, TypeError and ValueError for a record of the wrong type or range): the same
# whenever the records are encoded, so a refusal met encoding ahead is kept for build to raise.
CODEC_REFUSALS = (CodecError, TypeError, ValueError)
# The closed batches at the head of a partition's queue encoded ahead while it cannot send
# (``drain``): the next request of a partition takes at most its window's room, 5 batches by
# default (max_in_flight_per_partition, Kafka's limit with idempotence). Encoding them while the
# loop waits for the service takes their encoding (about 0.6 us a record: 70-80 us for a 16 KiB
# batch of 100-byte records) off the path from an answer to the next request.
ENCODE_AHEAD_BATCHES = 5
# One drain encodes ahead batches of at most this many bytes by their size bounds (one batch at
# least), about 300 us of 16 KiB batches of 100-byte records; what is left waits for the next
# drain, which the sender's loop runs at once (the due time ``drain`` returns), after the loop's
# other callbacks (answers) had their turn.
ENCODE_AHEAD_BYTES_PER_DRAIN = 64 << 10
# The encoded copies held beside the records stay within a quarter of buffer_bytes (8 MiB of the
# default 32 MiB: 5 batches of 512 KiB for three partitions, of 16 KiB for a hundred), so a
# producer of many partitions waiting on the service does not hold its buffer twice.
ENCODED_AHEAD_BUFFER_SHARE = 4


def piece_spans(sizes: Sequence[int], records_bytes_max: int) -> list[tuple[int, int]]:
    """Records of ``sizes``, in order, as consecutive [start, stop) spans whose sizes sum to at
    most ``records_bytes_max``; a record above it makes a span of its own."""
    spans: list[tuple[int, int]] = []
    start = 0
    total = 0
    for index, size in enumerate(sizes):
        if index > start and total + size > records_bytes_max:
            spans.append((start, index))
            start, total = index, 0
        total += size
    if sizes:
        spans.append((start, len(sizes)))
    return spans


def _record_sizes(keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> list[int]:
    """Each record's upper bound (no headers); C-level passes when no value is None."""
    if len(keys) != len(values):
        raise ValueError(f"one key per value: found {len(keys)} keys and {len(values)} values")
    if None not in values:
        value_sizes = map(len, values)
        if keys.count(None) == len(keys):
            return list(map(operator.add, value_sizes, repeat(RECORD_OVERHEAD_BYTES_MAX)))
        if None not in keys:
            return list(map(operator.add, map(operator.add, value_sizes, map(len, keys)),
                            repeat(RECORD_OVERHEAD_BYTES_MAX)))
    return [
        RECORD_OVERHEAD_BYTES_MAX + (len(key) if key else 0) + (len(value) if value else 0)
        for key, value in zip(keys, values)
    ]
