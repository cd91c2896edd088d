"""Delivery results that cost nothing until they are asked for.

A producer batch is appended with one Produce request, so it succeeds or fails as a whole: it
carries ONE ``concurrent.futures.Future`` (its ``BatchDelivery``), completed once per batch, and
every record gets a ``RecordFuture``, a two-slot handle (the delivery and the record's index in the
batch). The record's ``RecordMetadata`` is computed only when ``result()`` is called.

Before this, each record had a ``concurrent.futures.Future`` of its own (a Condition, an RLock and
a list: about 2.3 us to create here) and each was completed one by one when its batch was
acknowledged; together that was most of the producer's per-record cost.

``RecordFuture`` offers what callers use of ``concurrent.futures.Future`` (``result``,
``exception``, ``done``, ``add_done_callback``, ...) and is awaitable, so the same handle serves the
synchronous ``Producer`` (``future.result(timeout)``) and ``AsyncProducer`` (``await future``,
``asyncio.gather(*futures)``). ``DeliveryGroup`` is the one result of ``send_many``: the spans of
batches its records went into.

A batch the service refused as too large is split (``BatchDelivery.split_into``): its records go
out in pieces, each with a delivery of its own, and the batch's delivery completes once every
piece has; each record then reads its outcome (its offset, or its piece's error) from its piece.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any

from seglog._sync import wait_for_future, wait_for_futures
from seglog.structs import RecordMetadata

__all__ = ["BatchDelivery", "DeliveryGroup", "RecordFuture"]


class BatchDelivery:
    """Where one batch landed, once it has: (base offset, LogAppendTime or -1), or its error;
    None once every piece of a split batch completed (each record's outcome is its piece's)."""

    __slots__ = ("_piece_deliveries", "_piece_starts", "future", "partition", "timestamps_ms", "topic")

    def __init__(self, topic: str, partition: int, timestamps_ms: list[int]) -> None:
        self.topic = topic
        self.partition = partition
        # The batch's own list, filled as records are appended (shared, not copied).
        self.timestamps_ms = timestamps_ms
        self.future: concurrent.futures.Future[tuple[int, int] | None] = concurrent.futures.Future()
        # Set by ``split_into`` (before the future completes): each piece's first index, in order.
        self._piece_starts: list[int] | None = None
        self._piece_deliveries: list[BatchDelivery] = []

    def succeed(self, base_offset: int, log_append_time_ms: int) -> None:
        if not self.future.done():
            self.future.set_result((base_offset, log_append_time_ms))

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)

    def split_into(self, pieces: Sequence[tuple[int, BatchDelivery]]) -> None:
        """The batch went out as ``pieces`` instead, each (its first record's index here, its
        delivery), in order and covering every record: this delivery completes (with None) once
        the last of them has, so a record's done-callbacks still run once, when its batch is done."""
        assert pieces and pieces[0][0] == 0 and not self.future.done(), pieces
        self._piece_starts = [start for start, _ in pieces]
        self._piece_deliveries = [delivery for _, delivery in pieces]
        owed = [len(pieces)]
        lock = threading.Lock()

        def one_done(_: concurrent.futures.Future[Any]) -> None:
            with lock:  # pieces may complete on different threads (a close fails what is queued)
                owed[0] -= 1
                last = owed[0] == 0
            if last:
                self.future.set_result(None)

        for delivery in self._piece_deliveries:
            delivery.future.add_done_callback(one_done)

    def metadata(self, index: int, timeout: float | None = None) -> RecordMetadata:
        wait_for_future(self.future, timeout)  # interruptible (a Ctrl-C), not future.result(timeout)
        landed = self.future.result(0)
        if landed is None:
            piece, at = self._piece_of(index)
            return piece.metadata(at, 0)
        base_offset, log_append_time_ms = landed
        stamped = log_append_time_ms if log_append_time_ms >= 0 else self.timestamps_ms[index]
        return RecordMetadata(self.topic, self.partition, base_offset + index, stamped)

    def error(self, index: int, timeout: float | None = None) -> BaseException | None:
        """The record's error once its batch completed (None if it landed)."""
        wait_for_future(self.future, timeout)
        error = self.future.exception(0)
        if error is not None or self._piece_starts is None:
            return error
        piece, at = self._piece_of(index)
        return piece.error(at, 0)

    def raise_first(self, first: int, count: int) -> None:
        """Raise the error of the first of records [first, first + count) that failed (the batch
        has completed)."""
        if self.future.result(0) is not None or count <= 0:
            return
        assert self._piece_starts is not None
        starts = self._piece_starts
        for start, piece, end in zip(starts, self._piece_deliveries, [*starts[1:], first + count]):
            low, high = max(start, first), min(end, first + count)
            if low < high:
                piece.raise_first(low - start, high - low)

    def _piece_of(self, index: int) -> tuple[BatchDelivery, int]:
        assert self._piece_starts is not None
        position = bisect.bisect_right(self._piece_starts, index) - 1
        return self._piece_deliveries[position], index - self._piece_starts[position]


class RecordFuture:
    """The delivery result of one record: ``result(timeout)`` -> RecordMetadata, or ``await`` it.

    Records cannot be cancelled one by one (their batch is sent whole): ``cancel()`` returns False.
    """

    __slots__ = ("_delivery", "_index")

    def __init__(self, delivery: BatchDelivery, index: int) -> None:
        self._delivery = delivery
        self._index = index

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait up to ``timeout`` seconds (None: forever); raises the batch's error if it failed
        and TimeoutError if it is still in flight."""
        return self._delivery.metadata(self._index, timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._delivery.error(self._index, timeout)

    def done(self) -> bool:
        return self._delivery.future.done()

    def running(self) -> bool:
        return not self._delivery.future.done()

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False

    def add_done_callback(self, callback: Callable[[RecordFuture], object]) -> None:
        """Call ``callback(self)`` when the record's batch completes (at once if it has); on the
        thread that completes it, as with concurrent.futures."""
        self._delivery.future.add_done_callback(lambda _: callback(self))

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        future = self._delivery.future
        if not future.done():
            yield from asyncio.wrap_future(future).__await__()
        return self.result()

    def __repr__(self) -> str:
        state = "pending" if not self.done() else "failed" if self.exception() else "done"
        return f"<RecordFuture {self._delivery.topic}-{self._delivery.partition} #{self._index} {state}>"


class DeliveryGroup:
    """The delivery results of records sent together with ``send_many``, in the order given."""

    __slots__ = ("_order", "_spans", "record_count")

    def __init__(
        self, spans: Sequence[tuple[BatchDelivery, int, int]], record_count: int, order: Sequence[int] | None = None
    ) -> None:
        # (delivery, first index in the batch, record count), partition by partition.
        self._spans = spans
        # Where each record of the spans came from in the caller's sequence (None: the same order).
        self._order = order
        self.record_count = record_count

    def done(self) -> bool:
        return all(delivery.future.done() for delivery, _, _ in self._spans)

    def wait(self, timeout: float | None = None) -> None:
        """Wait until every record was appended; raises the first failed batch's error, or
        TimeoutError when some are still in flight after ``timeout`` seconds."""
        wait_for_futures([delivery.future for delivery, _, _ in self._spans], timeout)
        for delivery, first, count in self._spans:
            delivery.raise_first(first, count)

    def result(self, timeout: float | None = None) -> list[RecordMetadata]:
        """Every record's RecordMetadata, in the order given (built now: the costly part)."""
        self.wait(timeout)
        return self._in_given_order(
            [delivery.metadata(index) for delivery, first, count in self._spans for index in range(first, first + count)]
        )

    def futures(self) -> list[RecordFuture]:
        """One RecordFuture per record, in the order given."""
        return self._in_given_order(
            [RecordFuture(delivery, index) for delivery, first, count in self._spans for index in range(first, first + count)]
        )

    def _in_given_order(self, items: list[Any]) -> list[Any]:
        if self._order is None:
            return items
        ordered: list[Any] = [None] * len(items)
        for position, item in zip(self._order, items, strict=True):
            ordered[position] = item
        return ordered

    def __await__(self) -> Generator[Any, None, list[RecordMetadata]]:
        pending = [delivery.future for delivery, _, _ in self._spans if not delivery.future.done()]
        if pending:
            yield from asyncio.wait([asyncio.wrap_future(future) for future in pending]).__await__()
        return self.result(0)
