"""Checks that a trusted segment's three files agree, without rebuilding anything.

A segment that is not recovered on load (every segment after a clean shutdown, and those below
the recovery point after an unclean one) is trusted only after these checks; a segment that fails
one goes through ``LogSegment.recover`` (indexes rebuilt from the ``.log``, torn tail cut). The
clean-shutdown marker says the *process* stopped cleanly, not that nothing touched the files
afterwards: a torn copy, a truncation, appended garbage or a rotten index after a clean stop must
never let a log start whose next offset already exists in a file.

**Index sanity (every trusted segment, when first opened).** Read with a few ``pread``s, never
mapped (load stays lazy: KAFKA-7283):

- the file length is a multiple of the entry size (Kafka checks this too);
- the last offset is at or above the base offset (Kafka checks this too);
- the last ``TAIL_ENTRY_COUNT`` entries increase: offsets and positions strictly (offset index),
  timestamps strictly and offsets never decreasing (time index). Kafka checks only that the last
  timestamp is not below the first; the tail catches a rotten or zero-filled recent entry too;
- every tail position is inside the ``.log`` (Kafka does not look at the log's size at all, so a
  truncated ``.log`` under a clean marker is served through an index pointing past its end);
- the last offset of either index is below the next segment's base offset, or below the active
  segment's next offset found by the tail walk (Kafka does not check this either).

**Each segment's tail.** The bytes from the last offset-index entry to the end of the ``.log``
must be whole, valid batches (``whole_valid_batches``), the first of them ending at the entry's
offset and the last below the next segment's base offset. About one index interval plus one
batch lies past the last entry, so with the defaults this reads a few KiB per segment. How long
the tail may be is not bounded by the log's config: index.interval.bytes and max.message.bytes
change after creation, and a segment written under larger values holds a longer tail than the
current ones allow (Kafka's load checks no length against the config either). So the tail is
walked whatever its length, bounded by the segment's own size, in chunks of one reused buffer of
``TAIL_CHUNK_BYTES`` (grown only for a batch longer than that whose header is valid and which
the file holds whole: garbage with a long length field is rejected at the chunk's size).
Kafka checks no log tail after a clean shutdown: a torn copy or garbage appended
to any segment then breaks reads of that whole segment (or, in the active one, reuses offsets).
Cost: three small reads per segment (the two index tails and the log tail), where Kafka reads
nothing: at start for the last segment of each log, on first use for the others, so a clean
start of many segments stays one object per segment.
"""

from __future__ import annotations

import logging
import os
import struct
from seglog.records import (
    ATTRIBUTES_OFFSET, LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, BatchStop, BatchWalk, CodecError, crc32c,
)

from ..format.abstract_index import RELATIVE_OFFSET_MAX
from ..format.file_records import HeaderField
from ..base.fs import FileSystem
from ..format.offset_index import ENTRY as OFFSET_ENTRY
from ..format.time_index import ENTRY as TIME_ENTRY
from .segment_files import SegmentFiles

__all__ = ["TAIL_CHUNK_BYTES", "TAIL_ENTRY_COUNT", "check_indexes", "check_tail", "whole_valid_batches"]

_LOG = logging.getLogger(__name__)

# Entries read from the end of each index: one 4 KiB page of the offset index holds 512, and the
# newest entries are the ones a crash or a torn copy damages. 16 costs one small pread.
TAIL_ENTRY_COUNT = 16

# The tail walk reads this much at a time: the defaults' tail (4 KiB interval and a batch of up to
# 1 MiB) in one read, while a long tail written under larger configs costs no more memory.
TAIL_CHUNK_BYTES = 1024 * 1024


def whole_valid_batches(
    view: memoryview, base_offset: int, next_offset: int, *, region_end: int | None = None
) -> tuple[int, int, int, list[int]]:
    """Walks whole, valid batches from the start of ``view`` (the bytes of a segment with base
    offset ``base_offset``, the first batch's offsets at or above ``next_offset``). Returns
    (bytes covered, next offset after them, last offset of the first batch or -1, positions of
    rotten batches).

    A batch is whole when its length reaches a v2 header and stays inside ``view``, its magic is
    2 and its offsets increase from ``next_offset`` and stay representable relative to the base
    offset; the walk stops at the first that is not. A whole batch whose CRC-32C does not match
    is *rotten*: the walk stops there if it is the last batch (a torn write), and otherwise steps
    over it and names it, because cutting there would throw away the good batches after it (the
    read path answers DATA_LOSS for the rotten one). The same framing rules as the recovery
    scan, walked by the codec's bounded ``BatchWalk``.

    ``region_end``: where the bytes ``view`` starts end in the file, when ``view`` is a chunk of
    them; the walk then also stops before the first batch the chunk does not hold whole."""
    return _walk_chunk(view, base_offset, next_offset, region_end)[:4]


def _walk_chunk(
    view: memoryview, base_offset: int, next_offset: int, region_end: int | None
) -> tuple[int, int, int, list[int], int]:
    """``whole_valid_batches`` and why it stopped, as the bytes from where it stopped a read
    must hold for the walk to go on: the batch's when its header is valid and the file holds
    it but ``view`` does not, a header's when ``view`` ends inside one; 0 at the end or at
    bytes no valid batch has (reading more changes nothing)."""
    consumed, size, first_last_offset = 0, len(view), -1
    needed = 0
    end = size if region_end is None else region_end
    rotten: list[int] = []
    walk = BatchWalk(view, region_end=end, offset_min=next_offset, offset_limit=base_offset + RELATIVE_OFFSET_MAX + 1)
    try:
        for consumed, fields in walk:
            batch_bytes = fields[HeaderField.LENGTH] + LOG_OVERHEAD
            if consumed + batch_bytes > size:
                needed = batch_bytes
                break  # whole in the file, not in this chunk: the caller reads on from here
            last = fields[HeaderField.BASE_OFFSET] + fields[HeaderField.LAST_OFFSET_DELTA]
            if crc32c(view[consumed + ATTRIBUTES_OFFSET : consumed + batch_bytes]) != fields[HeaderField.CRC]:
                if consumed + batch_bytes == end:
                    break
                rotten.append(consumed)
            if first_last_offset < 0:
                first_last_offset = last
            next_offset = last + 1
        else:
            consumed = walk.position
            if walk.stop is BatchStop.NEED_BYTES:
                needed = RECORD_BATCH_OVERHEAD
    except CodecError:  # a length, magic or offset no valid batch has: the walk stops there
        consumed = walk.position
    return consumed, next_offset, first_last_offset, rotten, needed


def check_indexes(files: SegmentFiles, fs: FileSystem, next_offset_max: int | None) -> str | None:
    """What is wrong with the segment's index files, or None. ``next_offset_max``: no entry may
    name an offset at or above it (the next segment's base offset; None for the active one)."""
    log_bytes = files.log.size_in_bytes
    base = files.base_offset
    problem = _check_offset_index(files.offset_index.path, fs, base, log_bytes, next_offset_max)
    return problem or _check_time_index(files.time_index.path, fs, base, next_offset_max)


def check_tail(
    files: SegmentFiles, fs: FileSystem, next_offset_max: int | None = None
) -> tuple[str | None, int]:
    """(what is wrong with the segment's tail or None, its next offset). ``next_offset_max``:
    the next segment's base offset, which the tail's offsets must stay below."""
    entry = _last_offset_entry(files.offset_index.path, fs, files.base_offset)
    position, entry_offset = (0, None) if entry is None else (entry[1], entry[0])
    log_bytes = files.log.size_in_bytes
    covered, next_offset, first_last, rotten = _walk_tail(files, position, log_bytes)
    for at in rotten:
        _LOG.error(
            "%s: the batch at position %d fails its CRC; left in place (reads of it answer "
            "DATA_LOSS), the batches after it are intact",
            files.log.path, position + at,
        )
    if entry_offset is not None and covered and first_last != entry_offset:
        return f"the last offset-index entry names offset {entry_offset}, the batch at {position} ends at {first_last}", -1
    if covered != log_bytes - position:
        return (
            f"the bytes from position {position + covered} to the end ({log_bytes}) are not a whole, "
            f"valid batch (torn, overwritten or appended after the segment was closed)",
            -1,
        )
    if next_offset_max is not None and next_offset > next_offset_max:
        return f"the last batch ends at offset {next_offset - 1}, inside the next segment (base {next_offset_max})", -1
    problem = _check_time_index(files.time_index.path, fs, files.base_offset, next_offset)
    return problem, next_offset


def _walk_tail(files: SegmentFiles, position: int, log_bytes: int) -> tuple[int, int, int, list[int]]:
    """``whole_valid_batches`` over the ``.log`` from ``position`` to ``log_bytes``, read in
    chunks of one reused buffer (positions relative to ``position``)."""
    buffer = bytearray(max(1, min(TAIL_CHUNK_BYTES, log_bytes - position)))
    covered, next_offset, first_last = 0, files.base_offset, -1
    rotten: list[int] = []
    while position + covered < log_bytes:
        at = position + covered
        filled = files.log.read_into(buffer, at)
        consumed, next_offset, chunk_first_last, chunk_rotten, needed = _walk_chunk(
            memoryview(buffer)[:filled], files.base_offset, next_offset, log_bytes - at
        )
        rotten.extend(covered + slot for slot in chunk_rotten)
        first_last = chunk_first_last if first_last < 0 else first_last
        covered += consumed
        if consumed:
            continue
        # Nothing whole in the chunk: either the walk stopped (torn, garbage: no longer read
        # changes that, so no larger buffer) or the first batch, its header valid, is longer
        # than the buffer (or the buffer, smaller than a header, ends inside one). The walk
        # checked that length against the file's end, so growing to it allocates at most the
        # segment's size, and only for a header that is a batch's.
        if needed <= len(buffer) or at + needed > log_bytes:
            break
        buffer = bytearray(needed)
    return covered, next_offset, first_last, rotten


# -- the index files, read by their tails ---------------------------------------------------------
def _read_tail(path: str, fs: FileSystem, entry_bytes: int) -> tuple[int, bytes]:
    """(file length, the last TAIL_ENTRY_COUNT whole entries' bytes)."""
    fd = fs.open(path, os.O_RDONLY)
    try:
        file_bytes = fs.fsize(fd)
        whole = file_bytes - file_bytes % entry_bytes
        start = max(0, whole - TAIL_ENTRY_COUNT * entry_bytes)
        return file_bytes, fs.pread(fd, whole - start, start) if whole > start else b""
    finally:
        fs.close(fd)


def _last_offset_entry(path: str, fs: FileSystem, base_offset: int) -> tuple[int, int] | None:
    _, tail = _read_tail(path, fs, OFFSET_ENTRY.size)
    if not tail:
        return None
    relative, position = OFFSET_ENTRY.unpack_from(tail, len(tail) - OFFSET_ENTRY.size)
    return base_offset + relative, position


def _entries(entry: struct.Struct, tail: bytes) -> list[tuple[int, int]]:
    return [entry.unpack_from(tail, at) for at in range(0, len(tail), entry.size)]


def _check_offset_index(
    path: str, fs: FileSystem, base: int, log_bytes: int, next_offset_max: int | None
) -> str | None:
    file_bytes, tail = _read_tail(path, fs, OFFSET_ENTRY.size)
    if file_bytes % OFFSET_ENTRY.size:
        return f"{path}: {file_bytes} bytes is not a multiple of the {OFFSET_ENTRY.size}-byte entry"
    previous_relative, previous_position = -1, -1
    for relative, position in _entries(OFFSET_ENTRY, tail):
        if relative < 0 or relative <= previous_relative:
            return f"{path}: relative offset {relative} after {previous_relative} (expected increasing, >= 0)"
        if position <= previous_position or position >= log_bytes:
            return f"{path}: position {position} after {previous_position}, log is {log_bytes} bytes"
        previous_relative, previous_position = relative, position
    if next_offset_max is not None and tail and base + previous_relative >= next_offset_max:
        return f"{path}: last offset {base + previous_relative} is not below {next_offset_max}"
    return None


def _check_time_index(path: str, fs: FileSystem, base: int, next_offset_max: int | None) -> str | None:
    file_bytes, tail = _read_tail(path, fs, TIME_ENTRY.size)
    if file_bytes % TIME_ENTRY.size:
        return f"{path}: {file_bytes} bytes is not a multiple of the {TIME_ENTRY.size}-byte entry"
    previous_timestamp, previous_relative = None, 0
    for timestamp_ms, relative in _entries(TIME_ENTRY, tail):
        if relative < previous_relative or (previous_timestamp is not None and timestamp_ms <= previous_timestamp):
            return (
                f"{path}: entry ({timestamp_ms}, {relative}) after ({previous_timestamp}, {previous_relative}) "
                f"(expected increasing timestamps, offsets not decreasing)"
            )
        previous_timestamp, previous_relative = timestamp_ms, relative
    if next_offset_max is not None and tail and base + previous_relative >= next_offset_max:
        return f"{path}: last offset {base + previous_relative} is not below {next_offset_max}"
    return None
