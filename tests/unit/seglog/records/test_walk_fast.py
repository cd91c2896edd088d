"""The walkers' fast paths against the reference walkers, differentially.

A fast path may decline (records: None; batches: stop early and leave the rest to the
iteration), but whatever it vouches for, the reference walk must accept with the same answer:
fast path then reference accepts and rejects exactly what the reference alone does. Each
property also checks that the fast path does vouch for the common case, so it is not a path
that is never taken.
"""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.records import (
    HEADER,
    LOG_OVERHEAD,
    NONE_REACHING,
    RECORDS_OFFSET,
    BatchWalk,
    CodecError,
    RecordBatchBuilder,
    first_record_reaching,
    records_max_timestamp_delta,
    walk_records,
)
from seglog.records.walk_fast import OFFSET_DELTAS_MAX
from seglog.records.varint import decode_varint, encode_varint, encode_varlong

FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_700_000_000_000

# -- records -----------------------------------------------------------------------------------

# Field sizes around the varint widths: 63/64 is where a length needs a second byte.
sizes = st.one_of(st.none(), st.integers(0, 3), st.integers(60, 70), st.integers(0, 300))
timestamp_deltas = st.one_of(st.integers(-70, 70), st.integers(-9000, 9000), st.integers(-(2**40), 2**40))
# Timestamps within 4,000 ms of each other: every timestampDelta (from the first record's) is
# a one- or two-byte varlong.
common_deltas = st.integers(-2000, 2000)


@st.composite
def record_areas(draw, common: bool = False):
    """(records area bytes, record count, with headers): built by the codec; with ``common``,
    the records the fast paths are for (no headers, deltas of one or two varint bytes)."""
    count = draw(st.integers(1, 90))
    builder = RecordBatchBuilder()
    with_headers = not common and draw(st.integers(0, 9)) == 0
    deltas = common_deltas if common else timestamp_deltas
    for index in range(count):
        key_size, value_size = draw(sizes), draw(sizes)
        key = None if key_size is None else bytes([index % 251]) * key_size
        value = None if value_size is None else b"v" * value_size
        headers = (("h", b"x"),) if with_headers and index % 3 == 0 else ()
        builder.append(value, key=key, timestamp_ms=NOW + draw(deltas), headers=headers)
    batch = builder.build()
    return batch[RECORDS_OFFSET:], count, with_headers


def _record_starts(area: bytes) -> list[int]:
    """Where each record of a sound records area starts, and where the area ends."""
    starts, position = [], 0
    while position < len(area):
        starts.append(position)
        length, body = decode_varint(area, position)
        position = body + length
    return starts + [position]


# Mostly the records the fast paths vouch for, so that damage to them is what is tested.
areas = st.one_of(record_areas(common=True), record_areas(common=True), record_areas())


def _mutate(area: bytes, edits: list[tuple[int, int, int]], cut: int, extra: bytes) -> bytes:
    """``area`` with bytes overwritten near record boundaries (an edit picks a record, a place
    from its start or end, and a byte: the fields a lie hides in), cut short and extended."""
    starts = _record_starts(area)
    data = bytearray(area)
    for record, where, byte in edits:
        index = record % (len(starts) - 1)
        position = starts[index] + where if where >= 0 else starts[index + 1] + where
        data[position % len(data)] = byte
    if cut:
        del data[len(data) - cut % len(data) :]
    return bytes(data) + extra


# The last byte of a record (its header count) and its first bytes (length, attributes,
# timestampDelta, offsetDelta, key length) are where a lie changes the framing.
edits = st.lists(
    st.tuples(
        st.integers(0, 100),
        st.sampled_from([-1, -1, -1, -2, -3, 0, 0, 1, 2, 3, 4, 5, 6, 7]),
        st.one_of(st.integers(0, 255), st.sampled_from([0, 1, 2, 3, 0x7F, 0x80, 0x81, 0xFF])),
    ),
    min_size=1,
    max_size=2,
)


def _mostly(value, other):
    """``value`` three times in four: most damage comes alone (edits alone are the subtle case)."""
    return st.one_of(st.just(value), st.just(value), st.just(value), other)


cuts = _mostly(0, st.integers(1, 40))
extras = _mostly(b"", st.binary(min_size=1, max_size=3))
claims = _mostly(0, st.integers(-2, 3))


def _reference_max_delta(data: bytes, position: int, end: int, count: int):
    """What produce validation concludes from the reference walk: the max timestampDelta, or
    "refused" (a CodecError, or offset deltas other than 0..count-1)."""
    try:
        walked = list(walk_records(data, position, end, count))
    except CodecError:
        return "refused"
    if [offset_delta for _, offset_delta in walked] != list(range(count)):
        return "refused"
    return max(delta for delta, _ in walked)


@FUZZ
@given(area=areas, edits=st.one_of(st.just([]), edits), cut=cuts, extra=extras, claimed=claims,
       prefix=st.binary(max_size=5))
def test_the_fast_record_walk_vouches_only_for_what_the_reference_accepts(area, edits, cut, extra, claimed, prefix):
    records, count, with_headers = area
    data = prefix + _mutate(records, edits, cut, extra)
    count = max(count + claimed, 0)
    fast = records_max_timestamp_delta(data, len(prefix), len(data), count)
    if fast is not None:
        assert _reference_max_delta(data, len(prefix), len(data), count) == fast


@FUZZ
@given(area=record_areas(common=True))
def test_the_fast_record_walk_vouches_for_every_common_batch(area):
    records, count, _ = area
    fast = records_max_timestamp_delta(records, 0, len(records), count)
    assert fast is not None
    assert fast == _reference_max_delta(records, 0, len(records), count)


@FUZZ
@given(data=st.binary(max_size=600), count=st.integers(-3, OFFSET_DELTAS_MAX + 3), position=st.integers(0, 8))
def test_the_fast_record_walk_over_random_bytes_vouches_only_for_what_the_reference_accepts(data, count, position):
    end = len(data)
    fast = records_max_timestamp_delta(data, position, end, count)
    if fast is not None:
        assert _reference_max_delta(data, position, end, count) == fast


def test_over_long_and_three_byte_varints_leave_the_fast_path():
    """A varint of three bytes or more is never read as a shorter one: the fast path declines
    and the reference decides (a five-byte varint is legal, a six-byte one is not)."""
    def area_with(timestamp_field: bytes) -> bytes:
        body = b"\x00" + timestamp_field + encode_varint(0) + encode_varint(1) + b"k" + encode_varint(-1) + b"\x00"
        return encode_varint(len(body)) + body

    legal = area_with(encode_varlong(2**20))  # three bytes
    assert records_max_timestamp_delta(legal, 0, len(legal), 1) is None
    assert _reference_max_delta(legal, 0, len(legal), 1) == 2**20
    over_long = area_with(b"\x80" * 10 + b"\x00")
    assert records_max_timestamp_delta(over_long, 0, len(over_long), 1) is None
    assert _reference_max_delta(over_long, 0, len(over_long), 1) == "refused"


def test_a_three_byte_offset_delta_leaves_the_fast_lookup_walk():
    """Read as two bytes, a three-byte offsetDelta would shift every later field by one: here
    the shifted reading finds a sound record where the reference finds a key overrunning it."""
    body = b"\x00" + encode_varlong(0) + b"\x80\x80\x02" + b"\x7e" + encode_varint(-1) + b"\x00"
    area = encode_varint(len(body)) + body
    assert _reference_first_reaching(area, 0, len(area), 1, NOW, NOW + 5, 0) == "refused"
    assert first_record_reaching(area, 0, len(area), 1, NOW, NOW + 5, 0) is None


def test_a_record_past_the_areas_end_is_not_vouched_for_even_when_the_bytes_go_on():
    builder = RecordBatchBuilder()
    builder.append(b"early", timestamp_ms=NOW)
    builder.append(b"late", timestamp_ms=NOW + 10)
    area = builder.build()[RECORDS_OFFSET:]
    end = len(area) - 2  # inside the second record, whose bytes still follow in the buffer
    assert _reference_first_reaching(area, 0, end, 2, NOW, NOW + 10, 0) == "refused"
    assert first_record_reaching(area, 0, end, 2, NOW, NOW + 10, 0) is None


def _reference_first_reaching(data, position, end, count, base_timestamp, timestamp_ms, offset_delta_min):
    try:
        for delta, offset_delta in walk_records(data, position, end, count):
            if base_timestamp + delta >= timestamp_ms and offset_delta >= offset_delta_min:
                return offset_delta, delta
    except CodecError:
        return "refused"
    return NONE_REACHING


@FUZZ
@given(area=areas, edits=edits, cut=cuts, extra=extras, claimed=claims, target=st.integers(-100, 10_000),
       offset_delta_min=st.integers(-1, 95), shrink=_mostly(0, st.integers(1, 80)))
def test_the_fast_lookup_walk_answers_only_what_the_reference_answers(
    area, edits, cut, extra, claimed, target, offset_delta_min, shrink
):
    records, count, _ = area
    count = max(count + claimed, 0)
    for data in (records, _mutate(records, edits, cut, extra)):
        end = max(0, len(data) - shrink)  # bytes past the area's end must not be walked
        fast = first_record_reaching(data, 0, end, count, NOW, NOW + target, offset_delta_min)
        reference = _reference_first_reaching(data, 0, end, count, NOW, NOW + target, offset_delta_min)
        if fast is not None:
            assert fast == reference


@FUZZ
@given(area=record_areas(common=True), target=st.integers(-2500, 2500), offset_delta_min=st.integers(0, 95))
def test_the_fast_lookup_walk_answers_common_batches(area, target, offset_delta_min):
    records, count, _ = area
    fast = first_record_reaching(records, 0, len(records), count, NOW, NOW + target, offset_delta_min)
    assert fast is not None
    assert fast == _reference_first_reaching(records, 0, len(records), count, NOW, NOW + target, offset_delta_min)


# -- batches -----------------------------------------------------------------------------------

_LENGTH = struct.Struct(">i")


def log_of(counts: list[int], gaps: list[int]) -> bytes:
    parts, offset = [], 0
    for index, count in enumerate(counts):
        builder = RecordBatchBuilder(base_offset=offset)
        for record in range(count):
            builder.append(b"v" * (record % 70), key=b"k", timestamp_ms=NOW + offset + record)
        parts.append(builder.build())
        offset += count + gaps[index % len(gaps)]
    return b"".join(parts)


def _lie(data: bytes, lies: list[tuple[int, int, int]]) -> bytes:
    buf = bytearray(data)
    for where, size, value in lies:
        where %= max(1, len(buf) - 8)
        buf[where : where + size] = (value % (1 << (8 * size))).to_bytes(size, "big")
    return bytes(buf)


lies = st.lists(
    st.tuples(
        st.integers(0, 10_000),
        st.sampled_from([1, 4, 8]),
        st.one_of(st.integers(-(2**31), 2**31), st.sampled_from([-12, -13, 0, 2, 13, 48, 49, 61, 2**31 - 1])),
    ),
    max_size=3,
)


def _iterate(walk: BatchWalk) -> tuple[list[int], str, int, int]:
    """Positions the iteration yields from where ``walk`` stands, how it ended, and where."""
    positions = []
    try:
        for position, _ in walk:
            positions.append(position)
    except CodecError as exc:
        return positions, f"error {exc}", walk.position, walk.last_offset
    return positions, str(walk.stop), walk.position, walk.last_offset


def _walk(data, region_end, offset_min, offset_limit, position=0):
    return BatchWalk(data, position, region_end=region_end, torn_tail_ok=False, offset_min=offset_min,
                     offset_limit=offset_limit)


batch_logs = st.tuples(
    st.lists(st.integers(1, 12), min_size=1, max_size=8), st.lists(st.integers(0, 3), min_size=1, max_size=3)
)


@FUZZ
@given(log=batch_logs, lies=lies, cut=st.integers(0, 3000), region_extra=st.integers(0, 3000),
       limit_cut=st.integers(0, 3000), offset_min=st.integers(0, 3), offset_limit=st.integers(0, 200))
def test_skip_moves_only_over_batches_the_iteration_yields(log, lies, cut, region_extra, limit_cut, offset_min, offset_limit):
    data = _lie(log_of(*log), lies)
    data = data[: len(data) - cut % (len(data) + 1)]
    region_end = len(data) + region_extra
    offset_limit = offset_limit if offset_limit < 150 else 2**63 - 1
    reference = _iterate(_walk(data, region_end, offset_min, offset_limit))
    skipping = _walk(data, region_end, offset_min, offset_limit)
    batch_end_max = max(0, len(data) - limit_cut % (len(data) + 1))
    skipping.skip(batch_end_max)
    skipped_to = skipping.position
    assert skipped_to == 0 or skipped_to <= batch_end_max
    rest = _iterate(skipping)
    # The positions skipped are a prefix of what the iteration yields; the rest is the same.
    yielded = reference[0]
    assert skipped_to == 0 or skipped_to in yielded or skipped_to == reference[2]
    prefix = [position for position in yielded if position < skipped_to]
    assert prefix + rest[0] == yielded
    assert rest[1:] == reference[1:]


@FUZZ
@given(log=batch_logs, lies=lies, cut=st.integers(0, 3000), region_extra=st.integers(0, 3000),
       target_offset=st.integers(-1, 120), target_timestamp=st.integers(-1, 130), offset_limit=st.integers(0, 200))
def test_seek_finds_what_the_iteration_finds_first(log, lies, cut, region_extra, target_offset, target_timestamp, offset_limit):
    data = _lie(log_of(*log), lies)
    data = data[: len(data) - cut % (len(data) + 1)]
    region_end = len(data) + region_extra
    offset_limit = offset_limit if offset_limit < 150 else 2**63 - 1
    target_timestamp += NOW
    # The reference: the first batch the iteration yields that reaches both targets.
    reference_walk = _walk(data, region_end, 0, offset_limit)
    expected, outcome = -1, None
    try:
        for position, fields in reference_walk:
            if fields[0] + fields[6] >= target_offset and fields[8] >= target_timestamp:
                expected = position
                break
    except CodecError as exc:
        outcome = f"error {exc}"
    seeking = _walk(data, region_end, 0, offset_limit)
    found = seeking.seek(target_offset, target_timestamp)
    if found >= 0:
        assert found == expected
        fields = HEADER.unpack_from(data, found)
        assert found + fields[1] + LOG_OVERHEAD <= region_end
        return
    # Declined: the iteration from where seek stopped finds the same batch or the same error.
    again, again_outcome = -1, None
    try:
        for position, fields in seeking:
            if fields[0] + fields[6] >= target_offset and fields[8] >= target_timestamp:
                again = position
                break
    except CodecError as exc:
        again_outcome = f"error {exc}"
    assert (again, again_outcome) == (expected, outcome)


@FUZZ
@given(log=batch_logs)
def test_skip_and_seek_vouch_for_a_sound_log(log):
    data = log_of(*log)
    walk = _walk(data, len(data), 0, 2**63 - 1)
    walk.skip()
    assert walk.position == len(data)
    last = HEADER.unpack_from(data, _iterate(_walk(data, len(data), 0, 2**63 - 1))[0][-1])
    assert walk.last_offset == last[0] + last[6]
    assert _walk(data, len(data), 0, 2**63 - 1).seek(last[0] + last[6], 0) == _iterate(
        _walk(data, len(data), 0, 2**63 - 1)
    )[0][-1]


def test_skip_stops_at_a_negative_last_offset_delta_and_the_iteration_names_it():
    data = bytearray(log_of([3, 4, 5], [0]))
    second = HEADER.unpack_from(data, 0)[1] + LOG_OVERHEAD
    struct.pack_into(">i", data, second + 23, -1)  # lastOffsetDelta of the second batch
    walk = _walk(bytes(data), len(data), 0, 2**63 - 1)
    walk.skip()
    assert walk.position == second
    positions, outcome, _, _ = _iterate(walk)
    assert positions == [] and "lastOffsetDelta -1" in outcome
