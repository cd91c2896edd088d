"""The ``.index`` and ``.timeindex`` of a cleaned segment, built from its batches by the rule
the log appends and recovers with (kafka-storage.md 4.1, per batch; 4.4; 3.3; 3.4):

- an offset entry (batch last offset -> batch position) when more than `index.interval.bytes`
  were written since the previous entry (so never for the batch at position 0), and a time
  entry (largest timestamp so far -> the offset where it was first reached) at the same time
  when that timestamp is above the last time entry's;
- when the segment is closed, one last time entry for the largest timestamp if it is new.

Entry formats are Kafka's (and the server's offset_index.py / time_index.py), declared here
again because the cleaner must not import the service: ``>ii`` (relative offset, position)
and ``>qi`` (timestamp, relative offset).  A test checks the two declarations agree.
"""

from __future__ import annotations

import struct

from seglog.records import NO_TIMESTAMP

from .layout import walk_headers

__all__ = ["OFFSET_INDEX_ENTRY", "TIME_INDEX_ENTRY", "build_indexes"]

OFFSET_INDEX_ENTRY = struct.Struct(
    ">"
    "i"  # relative_offset: offset - segment base offset
    "i"  # position: byte position of the batch in the .log
)
TIME_INDEX_ENTRY = struct.Struct(
    ">"
    "q"  # timestamp_ms: the largest timestamp up to the offset
    "i"  # relative_offset: offset - segment base offset
)
assert OFFSET_INDEX_ENTRY.size == 8 and TIME_INDEX_ENTRY.size == 12


def build_indexes(log, size: int, base_offset: int, index_interval_bytes: int, where: str = "cleaned segment") -> tuple[bytes, bytes]:
    """(offset index bytes, time index bytes) of the batches in log[:size]."""
    offset_entries: list[bytes] = []
    time_entries: list[bytes] = []
    pack_offset, pack_time = OFFSET_INDEX_ENTRY.pack, TIME_INDEX_ENTRY.pack
    max_timestamp = last_time_entry = NO_TIMESTAMP
    offset_of_max = base_offset
    last_entry_position = 0
    for position, fields in walk_headers(log, size, where):
        last = fields[0] + fields[6]
        if fields[8] > max_timestamp:
            max_timestamp, offset_of_max = fields[8], last
        if position - last_entry_position > index_interval_bytes:
            offset_entries.append(pack_offset(last - base_offset, position))
            if max_timestamp > last_time_entry:
                time_entries.append(pack_time(max_timestamp, offset_of_max - base_offset))
                last_time_entry = max_timestamp
            last_entry_position = position
    if max_timestamp > last_time_entry:
        time_entries.append(pack_time(max_timestamp, offset_of_max - base_offset))
    return b"".join(offset_entries), b"".join(time_entries)
