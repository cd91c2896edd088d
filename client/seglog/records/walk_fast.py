"""Fast paths of the bounded record walker: the common record, checked in one tight loop.

``walk_records`` (walk.py) is the reference: it checks every field of every record and names
the first lie.  Produce validation and lookups by time run it on every batch, and its careful
shape (a generator, a branch per varint width, a bounds test per field) costs several times the
framing walk seglog had before.  The functions here check the same rules for the records nearly
every producer writes, and give up (return None) on anything else, so that the caller runs the
reference walk, which then accepts what they could not vouch for or raises its precise error.
Together, fast path then reference, they accept and reject exactly what the reference does
(tests/unit/seglog/records/test_walk_fast.py checks this differentially with Hypothesis).

The common record: every varint one or two bytes, no headers, offset deltas 0, 1, 2 ... in
order (a produced batch; at most ``OFFSET_DELTAS_MAX`` records).  Its check per record::

    length          1-2 bytes   record_end = start + width + length
    attributes      1 byte      skipped
    timestampDelta  1-2 bytes   decoded (the batch's maxTimestamp is recomputed from them)
    offsetDelta     1-2 bytes   must be the record's index
    keyLength       1-2 bytes   skipped with its key: ``_FIELD_BYTES`` gives width + max(n, 0)
    valueLength     1-2 bytes   the same
    headerCount     1 byte      must be 0, and the record's last byte (p + 1 == record_end)

Why the last test is enough for every bound: positions only move forward (each field moves at
least one byte; a length below -1 moves past any buffer), so fields ending exactly at
``record_end`` lie inside the record, and records chaining from ``position`` to exactly ``end``
lie inside the area.  A read past the buffer is an IndexError (give up), one past ``end`` but
inside the buffer ends the chain somewhere other than ``end`` (give up).  A three-byte or longer
varint indexes past ``_FIELD_BYTES`` / ``ZIGZAG_DECODE`` (16,512 entries): IndexError, give up.
"""

from __future__ import annotations

from .varint import ZIGZAG_DECODE

__all__ = ["OFFSET_DELTAS_MAX", "records_max_timestamp_delta", "first_record_reaching"]

_CONTINUATION = 0x80
# Offset deltas 0..8191 are one or two varint bytes (zigzag 2n < 2**14): the records of a
# batch the fast loops handle.
OFFSET_DELTAS_MAX = 8192
# A length below -1 (never valid): moves the walk past any buffer, so the next read gives up.
_PAST_ANY_BUFFER = 1 << 62


def _field_bytes(index: int) -> int:
    """Bytes a length-prefixed field takes (its varint and its bytes), by ZIGZAG_DECODE index."""
    width = 1 if index < _CONTINUATION else 2
    size = ZIGZAG_DECODE[index]
    if size < -1:
        return _PAST_ANY_BUFFER
    return width + max(size, 0)


def _by_two_bytes(one_or_two: list, three_or_more) -> tuple[tuple, ...]:
    """A table indexed by a varint's first byte b0 (>= 0x80) and then its second b1, holding
    ``one_or_two[b0 + (b1 << 7)]`` when b1 ends the varint, else ``three_or_more``: two tuple
    subscripts instead of a shift and an add, whose results (above 256) are new ints."""
    return tuple(
        tuple(
            one_or_two[first + (second << 7)] if first >= _CONTINUATION and second < _CONTINUATION else three_or_more
            for second in range(256)
        )
        for first in range(256)
    )


# By a one-byte varint: the bytes from the varint's first byte to the end of the field it
# prefixes (null, -1, and empty, 0, hold none); by the two bytes of a longer one (_BY_TWO).
_FIELD_BYTES: tuple[int, ...] = tuple(_field_bytes(index) for index in range(len(ZIGZAG_DECODE)))
_FIELD_BYTES_BY_TWO = _by_two_bytes(list(_FIELD_BYTES), _PAST_ANY_BUFFER)
# Varint values the same way; None for a varint of three bytes or more: comparing it raises
# TypeError (give up), and it is never equal to an offset delta.
_VALUE_BY_TWO = _by_two_bytes(ZIGZAG_DECODE, None)
assert _FIELD_BYTES[1] == 1 and _FIELD_BYTES[0] == 1 and _FIELD_BYTES[2] == 2 and _FIELD_BYTES[3] == _PAST_ANY_BUFFER
assert len(_FIELD_BYTES) == _CONTINUATION + (_CONTINUATION << 7)
assert _FIELD_BYTES_BY_TWO[0x80 | 4][1] == 2 + 66 and _VALUE_BY_TWO[0x81][0x80] is None
_DELTA_MIN = -(2**63)


def records_max_timestamp_delta(data: bytes, position: int, end: int, count: int) -> int | None:
    """The largest timestampDelta of the ``count`` common records filling ``data[position:end]``
    with offset deltas 0..count-1, each record checked as ``walk_records`` checks it; None when
    this loop cannot vouch for the area (run ``walk_records`` for the answer or the error).
    ``data`` should be ``bytes``: the fastest indexing Python has."""
    if not 0 < count <= OFFSET_DELTAS_MAX or not 0 <= position <= end <= len(data):
        return None
    one, two, value, value_two, more = _FIELD_BYTES, _FIELD_BYTES_BY_TWO, ZIGZAG_DECODE, _VALUE_BY_TWO, _CONTINUATION
    max_delta = _DELTA_MIN
    try:
        for index in range(count):
            first = data[position]  # length
            if first < more:
                record_end = position + one[first]
                p = position + 2  # past the length and the attributes
            else:
                record_end = position + two[first][data[position + 1]]
                p = position + 3
            first = data[p]  # timestampDelta
            if first < more:
                delta = value[first]
                p += 1
            else:
                delta = value_two[first][data[p + 1]]
                p += 2
            if delta > max_delta:  # TypeError for None: a varlong of three bytes or more
                max_delta = delta
            first = data[p]  # offsetDelta
            if first < more:
                if value[first] != index:
                    return None
                p += 1
            else:
                if value_two[first][data[p + 1]] != index:
                    return None
                p += 2
            first = data[p]  # keyLength, then the key
            p += one[first] if first < more else two[first][data[p + 1]]
            first = data[p]  # valueLength, then the value
            p += one[first] if first < more else two[first][data[p + 1]]
            if data[p] or p + 1 != record_end:  # no headers, and the record ends right there
                return None
            position = record_end
    except (IndexError, TypeError):
        return None
    return max_delta if position == end else None


_NOT_COMMON = None  # first_record_reaching: the loop cannot vouch for the records it walked
NONE_REACHING = (-1, -1)  # first_record_reaching: every record checked, none reaches the target


def first_record_reaching(
    data: bytes, position: int, end: int, count: int, base_timestamp: int, timestamp_ms: int, offset_delta_min: int
) -> tuple[int, int] | None:
    """(offsetDelta, timestampDelta) of the first of the ``count`` records in
    ``data[position:end]`` with base_timestamp + timestampDelta >= ``timestamp_ms`` and an
    offsetDelta >= ``offset_delta_min``, each record up to it checked as ``walk_records`` checks
    it; ``NONE_REACHING`` when all ``count`` records are checked and none does; None when this
    loop cannot vouch for a record it needed (run the reference walk for the answer or the
    error). Offset deltas need not be 0, 1, 2 ... here (a compacted batch has gaps)."""
    if count < 0 or not 0 <= position <= end <= len(data):
        return None
    one, two, value, value_two, more = _FIELD_BYTES, _FIELD_BYTES_BY_TWO, ZIGZAG_DECODE, _VALUE_BY_TWO, _CONTINUATION
    target_delta = timestamp_ms - base_timestamp
    try:
        for _ in range(count):
            first = data[position]  # length
            if first < more:
                record_end = position + one[first]
                p = position + 2
            else:
                record_end = position + two[first][data[position + 1]]
                p = position + 3
            first = data[p]  # timestampDelta
            if first < more:
                delta = value[first]
                p += 1
            else:
                delta = value_two[first][data[p + 1]]
                p += 2
            first = data[p]  # offsetDelta
            if first < more:
                offset_delta = value[first]
                p += 1
            else:
                offset_delta = value_two[first][data[p + 1]]
                if offset_delta is None:  # three bytes or more
                    return _NOT_COMMON
                p += 2
            first = data[p]
            p += one[first] if first < more else two[first][data[p + 1]]
            first = data[p]
            p += one[first] if first < more else two[first][data[p + 1]]
            if data[p] or p + 1 != record_end or record_end > end:
                return _NOT_COMMON
            # TypeError for None: a varlong of three bytes or more
            if delta >= target_delta and offset_delta >= offset_delta_min:
                return offset_delta, delta
            position = record_end
    except (IndexError, TypeError):
        return _NOT_COMMON
    return NONE_REACHING if position == end else _NOT_COMMON
