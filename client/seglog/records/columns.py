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


def _decode_runs(
    data: bytes, pos: int, end: int, count: int, base_offset: int, base_timestamp: int
) -> RecordColumns | None:
    columns = RecordColumns()
    offsets, timestamps, keys, values, headers = (
        columns.offsets, columns.timestamps_ms, columns.keys, columns.values, columns.headers,
    )
    one_byte_timestamps: list[int] | None = None  # base_timestamp + delta, by the delta's byte
    decode = ZIGZAG_DECODE
    done = 0
    scratch: list = []
    misses = 0  # records in a row that started no run
    while done < count:
        if misses >= _MISSES_MAX:
            # Records of varied shapes: the rest goes through the per-record decoder's fast loop.
            rest = decode_records(data, pos, end, count - done, base_offset, base_timestamp)
            if rest:
                rest_offsets, rest_timestamps, rest_keys, rest_values, rest_headers = zip(*rest)
                offsets += rest_offsets
                timestamps += rest_timestamps
                keys += rest_keys
                values += rest_values
                headers += rest_headers
            return columns
        misses += 1
        start = pos
        pos = _decode_record(data, pos, end, scratch, count, base_offset, base_timestamp)
        record = scratch.pop()
        offsets.append(record[0])
        timestamps.append(record[1])
        keys.append(record[2])
        values.append(record[3])
        headers.append(record[4])
        done += 1
        left = count - done
        if left < _RUN_MIN or record[4]:
            continue
        # The template: where each framing field of the record just decoded sits, read from
        # its bytes (an encoding need not be the shortest one).
        stride = pos - start
        _, length_width = _varint_at(data, start)
        at_timestamp = length_width + 1
        _, timestamp_width = _varint_at(data, start + at_timestamp)
        at_offset = at_timestamp + timestamp_width
        _, template_offset_width = _varint_at(data, start + at_offset)
        at_key_size = at_offset + template_offset_width
        key_size, key_width = _varint_at(data, start + at_key_size)
        at_key = at_key_size + key_width
        at_value_size = at_key + max(key_size, 0)
        value_size, value_width = _varint_at(data, start + at_value_size)
        at_value = at_value_size + value_width
        at_headers = at_value + max(value_size, 0)
        if not (length_width and timestamp_width and template_offset_width and key_width and value_width):
            continue
        if at_headers + 1 != stride:
            continue
        offset_delta = record[0] - base_offset + 1  # the next record's, if consecutive
        if offset_delta < 1:
            continue
        if offset_delta < _ONE_BYTE_DELTAS:
            offset_width, run_max = 1, _ONE_BYTE_DELTAS - offset_delta
        elif offset_delta < _TWO_BYTE_DELTAS:
            offset_width, run_max = 2, _TWO_BYTE_DELTAS - offset_delta
        else:
            continue
        if offset_width != template_offset_width:  # the deltas widen here: the next run starts below
            continue
        run_max = min(run_max, left, (end - pos) // stride)
        if run_max < _RUN_MIN:
            continue
        template = data[start:start + stride]
        run = _run_length(
            data, pos, stride, run_max, template, offset_delta, offset_width,
            at_timestamp, timestamp_width, at_offset, at_key_size, key_width, at_value_size, value_width,
            at_headers,
        )
        if run < _RUN_MIN:
            continue
        misses = 0
        stop = pos + run * stride
        offsets += range(base_offset + offset_delta, base_offset + offset_delta + run)
        if timestamp_width == 1:
            if one_byte_timestamps is None:
                one_byte_timestamps = [base_timestamp + decode[b] for b in range(0x80)]
            timestamps += map(one_byte_timestamps.__getitem__, data[pos + at_timestamp:stop:stride])
        else:
            timestamps += [
                base_timestamp + decode[low + (high << 7)]
                for low, high in zip(
                    data[pos + at_timestamp:stop:stride], data[pos + at_timestamp + 1:stop:stride]
                )
            ]
        keys += _cut(data, pos + at_key, stop, stride, key_size, run)
        values += _cut(data, pos + at_value, stop, stride, value_size, run)
        headers += repeat(_NO_HEADERS, run)
        pos = stop
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


def _run_length(
    data: bytes, pos: int, stride: int, run_max: int, template: bytes, offset_delta: int, offset_width: int,
    at_timestamp: int, timestamp_width: int, at_offset: int, at_key_size: int, key_width: int,
    at_value_size: int, value_width: int, at_headers: int,
) -> int:
    """How many records from ``pos`` (at most ``run_max``) match the template's framing."""

    def matches(run: int) -> bool:
        stop = pos + run * stride
        for at in range(0, at_timestamp - 1):  # the length field
            if data[pos + at:stop:stride] != template[at:at + 1] * run:
                return False
        if timestamp_width == 1:
            if max(data[pos + at_timestamp:stop:stride]) >= 0x80:
                return False
        elif min(data[pos + at_timestamp:stop:stride]) < 0x80 or max(data[pos + at_timestamp + 1:stop:stride]) >= 0x80:
            return False
        last = offset_delta + run
        if offset_width == 1:
            if data[pos + at_offset:stop:stride] != _OFFSET_BYTE[offset_delta:last]:
                return False
        elif (
            data[pos + at_offset:stop:stride] != _OFFSET_LOW[offset_delta:last]
            or data[pos + at_offset + 1:stop:stride] != _OFFSET_HIGH[offset_delta:last]
        ):
            return False
        for at in range(at_key_size, at_key_size + key_width):
            if data[pos + at:stop:stride] != template[at:at + 1] * run:
                return False
        for at in range(at_value_size, at_value_size + value_width):
            if data[pos + at:stop:stride] != template[at:at + 1] * run:
                return False
        return data[pos + at_headers:stop:stride] == bytes(run)

    # Galloping: a run that breaks early costs little, a long one about twice its length.
    # Matching is monotone in the run length.
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
