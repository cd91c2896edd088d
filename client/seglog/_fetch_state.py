"""The consumer's per-partition state and the decoding of fetched batches. No I/O.

A Fetch (or each message of a Consume stream) returns whole batches starting with the one that
holds the requested offset, so the first batch may begin below it: records below the offset the
consumer asked for are skipped here, as are control batches. Batches are decoded client-side with
``seglog.records`` and their CRC is checked when ``check_crcs`` is on (Kafka's check.crcs).
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import repeat
from typing import Literal, NamedTuple

from seglog.errors import CorruptRecordError, SeglogError, translate_codec_errors
from seglog.records import RecordBatch, iter_batches
from seglog.records.columns import RecordColumns
from seglog.structs import ConsumerRecord, Header

__all__ = [
    "FetchedRecords",
    "PartitionState",
    "RawBatch",
    "RecordBatchView",
    "RecordBuffer",
    "StartPosition",
    "decode_fetched",
    "fetched_batches",
    "parse_start",
]

StartKind = Literal["earliest", "latest", "offset", "timestamp"]


@dataclass(frozen=True)
class StartPosition:
    """Where a partition (re)starts: earliest, latest, an offset or the first record at a time."""

    kind: StartKind
    value: int = 0


def parse_start(start: int | str | datetime) -> StartPosition:
    if isinstance(start, bool):
        raise TypeError("start must be 'earliest', 'latest', an offset or a datetime, got a bool")
    if isinstance(start, int):
        if start < 0:
            raise ValueError(f"a start offset must be >= 0, got {start}")
        return StartPosition("offset", start)
    if isinstance(start, datetime):
        if start.tzinfo is None:
            raise ValueError("a start datetime must be timezone-aware (e.g. datetime.now(timezone.utc))")
        return StartPosition("timestamp", round(start.timestamp() * 1000))
    if start == "earliest":
        return StartPosition("earliest")
    if start == "latest":
        return StartPosition("latest")
    raise ValueError(f"start must be 'earliest', 'latest', an offset or a datetime, got {start!r}")


@dataclass(frozen=True)
class FetchedRecords:
    records: list[ConsumerRecord]
    # One past the last whole batch seen; None when the bytes held no whole batch.
    next_offset: int | None
    batch_count: int


class RecordBatchView:
    """The records of one fetched batch that a poll returns, as columns: ``offsets[i]``,
    ``timestamps_ms[i]``, ``keys[i]``, ``values[i]`` and ``headers[i]`` are record i's fields
    (``poll_batches``). Cheaper than one ConsumerRecord per record; iterating it builds them."""

    __slots__ = ("headers", "keys", "offsets", "partition", "timestamps_ms", "topic", "values")

    def __init__(
        self,
        topic: str,
        partition: int,
        offsets: list[int],
        timestamps_ms: list[int],
        keys: list[bytes | None],
        values: list[bytes | None],
        headers: list[tuple[Header, ...]],
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offsets = offsets
        self.timestamps_ms = timestamps_ms
        self.keys = keys
        self.values = values
        self.headers = headers

    def __len__(self) -> int:
        return len(self.offsets)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return map(
            _new_consumer_record,
            zip(repeat(self.topic), repeat(self.partition), self.offsets, self.timestamps_ms, self.keys,
                self.values, self.headers),
        )

    def __repr__(self) -> str:
        span = f"{self.offsets[0]}..{self.offsets[-1]}" if self.offsets else "empty"
        return f"<RecordBatchView {self.topic}-{self.partition} {span}, {len(self.offsets)} records>"


class RawBatch(NamedTuple):
    """One whole fetched v2 batch, undecoded (``poll_raw``). Its records below ``position``
    were returned before (or lie below the offset the consumer started from): skip them."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    # The offset of the first record of this batch the consumer had not returned yet.
    position: int
    # The batch's bytes as Kafka's v2 format lays them out (seglog.records.RecordBatch reads them).
    records: bytes


# ConsumerRecord(*fields) through a NamedTuple's Python-level __new__ costs about 3x this
# C-level constructor from a 7-item iterable.
_new_consumer_record = functools.partial(tuple.__new__, ConsumerRecord)


class _Chunk:
    """One fetched batch in a partition's buffer, decoded when first needed."""

    __slots__ = ("batch", "columns", "from_offset", "remaining", "start")

    def __init__(self, batch: RecordBatch, from_offset: int) -> None:
        self.batch = batch
        self.from_offset = from_offset
        self.columns: RecordColumns | None = None
        self.start = 0
        # Records not yet taken (the batch's count until decoded: a whole batch above from_offset).
        self.remaining = batch.records_count

    def decode(self) -> RecordColumns:
        columns = self.columns
        if columns is None:
            with translate_codec_errors():
                columns = self.batch.columns()
            offsets = columns.offsets
            if offsets and min(offsets) < self.from_offset:  # the records below were asked for before
                columns = _at_or_after(columns, self.from_offset)
            self.columns = columns
            self.start = 0
            self.remaining = len(columns.offsets)
        return columns


def _at_or_after(columns: RecordColumns, offset: int) -> RecordColumns:
    kept = [i for i, record_offset in enumerate(columns.offsets) if record_offset >= offset]
    selected = RecordColumns()
    for name in RecordColumns.__slots__:
        column = getattr(columns, name)
        setattr(selected, name, [column[i] for i in kept])
    return selected


class RecordBuffer:
    """A partition's fetched, not yet returned records: whole batches, decoded when taken."""

    __slots__ = ("_chunks", "_count", "partition", "topic")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._chunks: deque[_Chunk] = deque()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def clear(self) -> None:
        self._chunks.clear()
        self._count = 0

    def add(self, batch: RecordBatch, from_offset: int) -> None:
        """A fetched batch whose records from ``from_offset`` on are to be returned."""
        chunk = _Chunk(batch, from_offset)
        if batch.base_offset < from_offset:  # the one batch that starts below: count exactly
            chunk.decode()
        if chunk.remaining:
            self._chunks.append(chunk)
            self._count += chunk.remaining

    def first_offset(self) -> int | None:
        if not self._chunks:
            return None
        chunk = self._chunks[0]
        return chunk.decode().offsets[chunk.start]

    def take_views(self, count_max: int) -> list[RecordBatchView]:
        views = []
        chunks = self._chunks
        while chunks and count_max > 0:
            chunk = chunks[0]
            columns = chunk.decode()
            start = chunk.start
            taken = min(count_max, chunk.remaining)
            stop = start + taken
            if start == 0 and taken == len(columns.offsets):
                view = RecordBatchView(self.topic, self.partition, columns.offsets, columns.timestamps_ms,
                                       columns.keys, columns.values, columns.headers)
            else:
                view = RecordBatchView(
                    self.topic, self.partition, columns.offsets[start:stop], columns.timestamps_ms[start:stop],
                    columns.keys[start:stop], columns.values[start:stop], columns.headers[start:stop],
                )
            views.append(view)
            self._advance(chunk, taken)
            count_max -= taken
        return views

    def take(self, count_max: int) -> list[ConsumerRecord]:
        taken: list[ConsumerRecord] = []
        for view in self.take_views(count_max):
            taken += view
        return taken

    def take_raw(self, count_max: int) -> list[RawBatch]:
        """Whole batches (each counts as its untaken records against ``count_max``; at least one)."""
        raw = []
        chunks = self._chunks
        while chunks and (count_max > 0 or not raw):
            chunk = chunks[0]
            batch = chunk.batch
            if chunk.columns is not None:
                position = chunk.columns.offsets[chunk.start]
            else:
                position = max(batch.base_offset, chunk.from_offset)
            raw.append(RawBatch(self.topic, self.partition, batch.base_offset, batch.last_offset, position,
                                bytes(batch.view)))
            count_max -= chunk.remaining
            self._advance(chunk, chunk.remaining)
        return raw

    def _advance(self, chunk: _Chunk, taken: int) -> None:
        chunk.start += taken
        chunk.remaining -= taken
        self._count -= taken
        if not chunk.remaining:
            self._chunks.popleft()


def fetched_batches(records: bytes, from_offset: int, *, check_crcs: bool) -> tuple[list[RecordBatch], int | None, int]:
    """The batches of fetched ``records`` bytes that hold records at or after ``from_offset``
    (CRC checked when asked, control batches left out), one past the last whole batch (None when
    there was none) and how many batches there were."""
    kept: list[RecordBatch] = []
    next_offset: int | None = None
    batch_count = 0
    with translate_codec_errors():
        for batch in iter_batches(records):
            batch_count += 1
            next_offset = batch.next_offset
            if batch.last_offset < from_offset:
                continue
            if check_crcs:
                batch.ensure_valid()
            if batch.is_control:
                continue
            kept.append(batch)
    return kept, next_offset, batch_count


def decode_fetched(
    topic: str, partition: int, records: bytes, from_offset: int, *, check_crcs: bool
) -> FetchedRecords:
    """The records at or after ``from_offset`` in fetched ``records`` bytes (whole v2 batches)."""
    batches, next_offset, batch_count = fetched_batches(records, from_offset, check_crcs=check_crcs)
    if records and next_offset is None:
        raise CorruptRecordError(
            f"{topic}-{partition}: the service returned {len(records)} bytes at offset {from_offset} "
            "without one whole record batch"
        )
    buffer = RecordBuffer(topic, partition)
    for batch in batches:
        buffer.add(batch, from_offset)
    return FetchedRecords(buffer.take(len(buffer)), next_offset, batch_count)


class PartitionState:
    """One assigned partition: where to fetch next, what is buffered, what is in flight."""

    def __init__(self, partition: int, start: StartPosition, topic: str = "") -> None:
        self.partition = partition
        # Pending (re)start; resolved into fetch_offset with OffsetsForTimes before fetching.
        self.start: StartPosition | None = None
        # Offset the next fetch asks for (None until the start is resolved).
        self.fetch_offset: int | None = None
        self.buffer = RecordBuffer(topic, partition)
        # Bumped by every seek: results of fetches started before it are dropped.
        self.epoch = 0
        self.task: asyncio.Task[None] | None = None
        self.error: SeglogError | None = None
        self.high_watermark: int | None = None
        self.log_start_offset: int | None = None
        # Set when the buffer is drained (a stream waits on it before reading further).
        self.drained = asyncio.Event()
        self._set_start(start)

    @property
    def position(self) -> int | None:
        """The offset of the next record poll will return (None until the start is resolved)."""
        if self.buffer:
            return self.buffer.first_offset()
        return self.fetch_offset

    def seek(self, start: StartPosition) -> None:
        self.epoch += 1
        self.cancel_task()
        self.buffer.clear()
        self.drained.set()
        self.error = None
        self._set_start(start)

    def _set_start(self, start: StartPosition) -> None:
        if start.kind == "offset":
            self.start, self.fetch_offset = None, start.value
        else:
            self.start, self.fetch_offset = start, None

    def cancel_task(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
        self.task = None

    def take(self, count_max: int) -> list[ConsumerRecord]:
        return self._drained_after(self.buffer.take(count_max))

    def take_views(self, count_max: int) -> list[RecordBatchView]:
        return self._drained_after(self.buffer.take_views(count_max))

    def take_raw(self, count_max: int) -> list[RawBatch]:
        return self._drained_after(self.buffer.take_raw(count_max))

    def _drained_after(self, taken: list) -> list:
        if not self.buffer:
            self.drained.set()
        return taken
