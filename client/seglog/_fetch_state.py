"""The consumer's per-partition state and the decoding of fetched batches. No I/O.

A Fetch (or each message of a Consume stream) returns whole batches starting with the one that
holds the requested offset, so the first batch may begin below it: records below the offset the
consumer asked for are skipped here, as are control batches. Batches are decoded client-side with
``seglog.records`` and their CRC is checked when ``check_crcs`` is on (Kafka's check.crcs).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from seglog.errors import CorruptRecordError, SeglogError, translate_codec_errors
from seglog.records import iter_batches
from seglog.structs import ConsumerRecord

__all__ = ["FetchedRecords", "PartitionState", "StartPosition", "decode_fetched", "parse_start"]

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


def decode_fetched(
    topic: str, partition: int, records: bytes, from_offset: int, *, check_crcs: bool
) -> FetchedRecords:
    """The records at or after ``from_offset`` in fetched ``records`` bytes (whole v2 batches)."""
    decoded: list[ConsumerRecord] = []
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
            for record in batch.records():
                if record.offset >= from_offset:
                    decoded.append(
                        ConsumerRecord(
                            topic,
                            partition,
                            record.offset,
                            record.timestamp_ms,
                            record.key,
                            record.value,
                            tuple(record.headers),
                        )
                    )
    if records and next_offset is None:
        raise CorruptRecordError(
            f"{topic}-{partition}: the service returned {len(records)} bytes at offset {from_offset} "
            "without one whole record batch"
        )
    return FetchedRecords(decoded, next_offset, batch_count)


class PartitionState:
    """One assigned partition: where to fetch next, what is buffered, what is in flight."""

    def __init__(self, partition: int, start: StartPosition) -> None:
        self.partition = partition
        # Pending (re)start; resolved into fetch_offset with OffsetsForTimes before fetching.
        self.start: StartPosition | None = None
        # Offset the next fetch asks for (None until the start is resolved).
        self.fetch_offset: int | None = None
        self.buffer: deque[ConsumerRecord] = deque()
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
            return self.buffer[0].offset
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
        taken = [self.buffer.popleft() for _ in range(min(count_max, len(self.buffer)))]
        if not self.buffer:
            self.drained.set()
        return taken
