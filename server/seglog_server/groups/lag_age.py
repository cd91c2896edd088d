"""The timestamp of the first uncommitted record, for lag in seconds, read cheaply at scrape time.

For a committed offset the log's ``position_of`` finds the batch holding it through the offset
index (no data read); one positioned read of that batch's 61-byte header gives its timestamps.
The figure is the batch's first timestamp (``baseTimestamp``), or its ``maxTimestamp`` where that
is the batch's one timestamp (LogAppendTime) or the base field holds the cleaner's delete horizon:
within one batch's time span of the record's own (no record is decoded, no batch decompressed).

Timestamps are remembered per (topic, partition, offset): a group that did not move its commit
costs no read at the next scrape; what is remembered is what the last scrape asked for, so the
memory is bounded by the series cap. A partition unknown, offline, truncated below the offset or
failing its read gives None (the series is left out of that scrape).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from seglog.records.attributes import DELETE_HORIZON_MASK, TIMESTAMP_TYPE_MASK
from seglog.records.header import ATTRIBUTES_FIELD, BASE_OFFSET_FIELD, BASE_TIMESTAMP_FIELD, HEADER, MAX_TIMESTAMP_FIELD
from seglog_server.storage.base.errors import StorageError

__all__ = ["BatchTimestamps", "batch_timestamp"]


def batch_timestamp(header: bytes) -> tuple[int, int] | None:
    """(base offset, timestamp) of a v2 batch header; None when the header is short."""
    if len(header) < HEADER.size:
        return None
    fields = HEADER.unpack_from(header)
    attributes = fields[ATTRIBUTES_FIELD]
    if attributes & (TIMESTAMP_TYPE_MASK | DELETE_HORIZON_MASK):
        return fields[BASE_OFFSET_FIELD], fields[MAX_TIMESTAMP_FIELD]
    return fields[BASE_OFFSET_FIELD], fields[BASE_TIMESTAMP_FIELD]


class BatchTimestamps:
    """The timestamps remembered between scrapes (one scrape at a time reads them)."""

    def __init__(self, manager: Any) -> None:
        self._manager = manager
        self._known: dict[tuple[str, int, int], int] = {}
        self.reads = 0  # headers read since start (tests and the docs' cost figure)

    @contextmanager
    def scrape(self) -> Iterator[_Scrape]:
        scrape = _Scrape(self)
        yield scrape
        self._known = scrape.used

    def _read(self, topic: str, partition: int, offset: int) -> int | None:
        try:
            log = self._manager.get_log(topic, partition)
            found = log.position_of(max(offset, log.log_start_offset))
            if found is None:
                return None
            base_offset, position = found
            segment = next((s for s in log.segments_snapshot() if s.base_offset == base_offset), None)
            if segment is None:
                return None
            self.reads += 1
            read = batch_timestamp(segment.log.read(position, HEADER.size))
        except (StorageError, OSError, ValueError):  # unknown, offline, or the segment closed meanwhile
            return None
        return None if read is None else read[1]


class _Scrape:
    def __init__(self, owner: BatchTimestamps) -> None:
        self._owner = owner
        self.used: dict[tuple[str, int, int], int] = {}

    def at(self, topic: str, partition: int, offset: int) -> int | None:
        key = (topic, partition, offset)
        stamp = self._owner._known.get(key)
        if stamp is None:
            stamp = self._owner._read(topic, partition, offset)
        if stamp is not None:
            self.used[key] = stamp
        return stamp
