"""decode_columns: a records area decoded into columns (offsets, timestamps, keys, values, headers).

The same records as ``decode_records`` (record_codec.py), a column per field instead of a Record
per record, at a fraction of the per-record cost: most batches are runs of records of one shape,
and a run is checked and cut with a few C-level operations instead of a Python loop per record.

A run is a stretch of records that share every byte of framing a decoder branches on: the same
length (so they sit ``stride`` bytes apart), the same width of timestampDelta, consecutive
offsetDeltas of one varint width, the same key and value lengths, and no headers. A producer's
batch of fixed-size keys and values is one or two runs (offsetDelta widens from one byte to two at
64 and three at 8192); varied sizes give short runs and fall back to the per-record decoder.

How a run is found: the record at the current position is decoded with the checked per-record
decoder (``_decode_record``), which gives the run's template; then the framing bytes of the next
records are read as strided slices (``data[first:stop:stride]``, one bytes object per field) and
compared with what the template predicts. The longest prefix that matches is cut into columns
with ``map``/``slice``. Every byte the per-record decoder branches on (apart from the unused
attributes byte, which it skips too) is compared, so a run decodes exactly as record by record
would: ``tests/unit/records/test_columns.py`` checks that on arbitrary batches.

Any error, and any records area that does not end exactly after ``count`` records, is handed to
``decode_records``, which raises the precise CorruptRecordError (or decodes what this one would
not try).
"""

from __future__ import annotations

from itertools import repeat
from typing import NamedTuple

from .errors import CorruptRecordError
from .record_codec import _decode_record, decode_records
from .varint import ZIGZAG_DECODE

__all__ = ["RecordColumns", "decode_columns"]

# Records whose next run is shorter than this are decoded one by one (a run costs a few
# strided slices whatever its length).
_RUN_MIN = 4
# After this many records in a row that start no run, the rest of the area is decoded record by
# record (decode_records' own fast loop): varied shapes cost one template each otherwise.
_MISSES_MAX = 8
# offsetDelta encodings of consecutive deltas: one byte below 64, two bytes from 64 to 8191
# (zigzag(d) = 2d for d >= 0). Indexed by the delta.
_ONE_BYTE_DELTAS = 64
_TWO_BYTE_DELTAS = 8192
_OFFSET_BYTE = bytes(2 * d for d in range(_ONE_BYTE_DELTAS))
_OFFSET_LOW = bytes(((2 * d) & 0x7F) | 0x80 if d >= _ONE_BYTE_DELTAS else 0 for d in range(_TWO_BYTE_DELTAS))
_OFFSET_HIGH = bytes((2 * d) >> 7 if d >= _ONE_BYTE_DELTAS else 0 for d in range(_TWO_BYTE_DELTAS))
_NO_HEADERS = ()
# The value of each one-byte varint (its byte below 0x80).
_ONE_BYTE_ZIGZAG = tuple(ZIGZAG_DECODE[:0x80]).__getitem__


class RecordColumns:
    """Decoded records as parallel lists: ``offsets[i]``, ``timestamps_ms[i]``, ``keys[i]``,
    ``values[i]``, ``headers[i]`` are record i's fields (headers: a tuple of (str, bytes-or-None)
    pairs, ``()`` for most records)."""

    __slots__ = ("headers", "keys", "offsets", "timestamps_ms", "values")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.timestamps_ms: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[tuple] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def extend_records(self, records: list) -> None:
        """Append decoded Records (or 5-tuples of their fields)."""
        if records:
            offsets, timestamps, keys, values, headers = zip(*records)
            self.offsets += offsets
            self.timestamps_ms += timestamps
            self.keys += keys
            self.values += values
            self.headers += headers

    def add_run(self, data: bytes, pos: int, shape: _Shape, run: int, first_offset: int, base_timestamp: int) -> None:
        """Append the ``run`` records of ``shape`` from ``pos`` (checked by ``_run_length``):
        each field of all of them with a few C-level passes over strided slices."""
        stride = shape.stride
        stop = pos + run * stride
        self.offsets += range(first_offset, first_offset + run)
        at = pos + shape.at_timestamp
        if shape.timestamp_width == 1:  # a table lookup and an add per record, both C-level
            self.timestamps_ms += map(base_timestamp.__add__, map(_ONE_BYTE_ZIGZAG, data[at:stop:stride]))
        else:
            decode = ZIGZAG_DECODE
            self.timestamps_ms += [
                base_timestamp + decode[low + (high << 7)]  # varint.py's two-byte index
                for low, high in zip(data[at:stop:stride], data[at + 1:stop:stride])
            ]
        self.keys += _cut(data, pos + shape.at_key, stop, stride, shape.key_size, run)
        self.values += _cut(data, pos + shape.at_value, stop, stride, shape.value_size, run)
        self.headers += repeat(_NO_HEADERS, run)


def _varint_at(data: bytes, at: int) -> tuple[int, int]:
    """(value, width) of the one- or two-byte varint at ``at``; (0, 0) when it is longer."""
    b = data[at]
    if b < 0x80:
        return ZIGZAG_DECODE[b], 1
    b1 = data[at + 1]
    if b1 < 0x80:
        return ZIGZAG_DECODE[b + (b1 << 7)], 2
    return 0, 0


def decode_columns(
    data: bytes,
    position: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time_ms: int | None = None,
) -> RecordColumns:
    """The ``count`` records of data[position:end] (a bytes object) as columns; the arguments
    and the errors are those of ``decode_records``."""
    try:
        columns = _decode_runs(data, position, end, count, base_offset, base_timestamp)
    except (CorruptRecordError, IndexError):
        columns = None
    if columns is None:  # the reference decoder raises the precise error, or decodes it
        columns = RecordColumns()
        for record in decode_records(data, position, end, count, base_offset, base_timestamp):
            columns.offsets.append(record[0])
            columns.timestamps_ms.append(record[1])
            columns.keys.append(record[2])
            columns.values.append(record[3])
            columns.headers.append(record[4])
    if log_append_time_ms is not None:
        columns.timestamps_ms = [log_append_time_ms] * len(columns.offsets)
    return columns


class _Shape(NamedTuple):
    """Where each framing field of a record sits, relative to its first byte (a run's template)."""

    stride: int  # bytes of the whole record, length field included
    length_width: int
    timestamp_width: int
    offset_width: int
    key_size: int  # -1: null
    key_width: int
    value_size: int  # -1: null
    value_width: int

    @property
    def at_timestamp(self) -> int:
        return self.length_width + 1  # after the length and the attributes byte

    @property
    def at_offset(self) -> int:
        return self.at_timestamp + self.timestamp_width

    @property
    def at_key_size(self) -> int:
        return self.at_offset + self.offset_width

    @property
    def at_key(self) -> int:
        return self.at_key_size + self.key_width

    @property
    def at_value_size(self) -> int:
        return self.at_key + max(self.key_size, 0)

    @property
    def at_value(self) -> int:
        return self.at_value_size + self.value_width

    @property
    def at_headers(self) -> int:
        return self.at_value + max(self.value_size, 0)


def _shape_at(data: bytes, start: int, stride: int) -> _Shape | None:
    """The shape of the headerless record at ``start`` (``stride`` bytes long, decoded already),
    read from its bytes (an encoding need not be the shortest one); None when a framing varint
    is longer than two bytes."""
    _, length_width = _varint_at(data, start)
    at = start + length_width + 1
    _, timestamp_width = _varint_at(data, at)
    at += timestamp_width
    _, offset_width = _varint_at(data, at)
    at += offset_width
    key_size, key_width = _varint_at(data, at)
    at += key_width + max(key_size, 0)
    value_size, value_width = _varint_at(data, at)
    if not (length_width and timestamp_width and offset_width and key_width and value_width):
        return None
    shape = _Shape(stride, length_width, timestamp_width, offset_width, key_size, key_width, value_size, value_width)
    return shape if shape.at_headers + 1 == stride else None


def _next_deltas(offset_delta: int, offset_width: int) -> int:
    """How many consecutive offset deltas from ``offset_delta`` keep a varint of
    ``offset_width`` bytes (0: none, the width differs or is three bytes)."""
    if 1 <= offset_delta < _ONE_BYTE_DELTAS:
        return _ONE_BYTE_DELTAS - offset_delta if offset_width == 1 else 0
    if _ONE_BYTE_DELTAS <= offset_delta < _TWO_BYTE_DELTAS:
        return _TWO_BYTE_DELTAS - offset_delta if offset_width == 2 else 0
    return 0


def _decode_runs(
    data: bytes, pos: int, end: int, count: int, base_offset: int, base_timestamp: int
) -> RecordColumns | None:
    columns = RecordColumns()
    done = 0
    scratch: list = []
    misses = 0  # records in a row that started no run
    while done < count:
        if misses >= _MISSES_MAX:
            # Records of varied shapes: the rest goes through the per-record decoder's fast loop.
            columns.extend_records(decode_records(data, pos, end, count - done, base_offset, base_timestamp))
            return columns
        misses += 1
        start = pos
        pos = _decode_record(data, pos, end, scratch, count, base_offset, base_timestamp)
        columns.extend_records(scratch)
        record = scratch.pop()
        done += 1
        left = count - done
        if left < _RUN_MIN or record[4]:
            continue
        shape = _shape_at(data, start, pos - start)
        if shape is None:
            continue
        offset_delta = record[0] - base_offset + 1  # the next record's, if consecutive
        run_max = min(_next_deltas(offset_delta, shape.offset_width), left, (end - pos) // shape.stride)
        if run_max < _RUN_MIN:
            continue
        run = _run_length(data, pos, shape, data[start:pos], offset_delta, run_max)
        if run < _RUN_MIN:
            continue
        misses = 0
        columns.add_run(data, pos, shape, run, base_offset + offset_delta, base_timestamp)
        pos += run * shape.stride
        done += run
    if pos != end:
        return None
    return columns


def _cut(data: bytes, first: int, stop: int, stride: int, size: int, run: int):
    """The ``run`` fields of ``size`` bytes (-1: null) at first, first + stride, ..."""
    if size < 0:
        return repeat(None, run)
    if size == 0:
        return repeat(b"", run)
    return map(data.__getitem__, map(slice, range(first, stop, stride), range(first + size, stop + size, stride)))


def _run_length(data: bytes, pos: int, shape: _Shape, template: bytes, offset_delta: int, run_max: int) -> int:
    """How many records from ``pos`` (at most ``run_max``) have the template's framing bytes
    and consecutive offset deltas from ``offset_delta``."""
    stride = shape.stride
    at_timestamp, at_offset = shape.at_timestamp, shape.at_offset
    # Framing bytes that repeat the template's: the length, the key length, the value length.
    repeated = [
        *range(0, shape.length_width),
        *range(shape.at_key_size, shape.at_key_size + shape.key_width),
        *range(shape.at_value_size, shape.at_value_size + shape.value_width),
    ]
    at_headers = shape.at_headers

    def matches(run: int) -> bool:
        stop = pos + run * stride
        for at in repeated:
            if data[pos + at:stop:stride] != template[at:at + 1] * run:
                return False
        if shape.timestamp_width == 1:
            if max(data[pos + at_timestamp:stop:stride]) >= 0x80:
                return False
        elif min(data[pos + at_timestamp:stop:stride]) < 0x80 or max(data[pos + at_timestamp + 1:stop:stride]) >= 0x80:
            return False
        last = offset_delta + run
        if shape.offset_width == 1:
            if data[pos + at_offset:stop:stride] != _OFFSET_BYTE[offset_delta:last]:
                return False
        elif (
            data[pos + at_offset:stop:stride] != _OFFSET_LOW[offset_delta:last]
            or data[pos + at_offset + 1:stop:stride] != _OFFSET_HIGH[offset_delta:last]
        ):
            return False
        return data[pos + at_headers:stop:stride] == bytes(run)

    # Most runs reach run_max (a producer's batch of one shape): that is tried first, one pass.
    # Otherwise galloping: a run that breaks early costs little, a long one about twice its
    # length. Matching is monotone in the run length.
    if matches(run_max):
        return run_max
    low = 0  # matches(low) holds (vacuously for 0)
    high = min(_RUN_MIN, run_max)
    while matches(high):
        if high == run_max:
            return run_max
        low, high = high, min(2 * high, run_max)
    while high - low > 1:
        middle = (low + high) // 2
        if matches(middle):
            low = middle
        else:
            high = middle
    return low
