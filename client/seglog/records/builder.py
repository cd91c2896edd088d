"""RecordBatchBuilder: writes one v2 batch the way a Kafka producer does.

Each append() encodes its record at once into a list of byte strings (precomputed varints,
no per-record struct call or temporary object beyond one tuple), and build() joins them
once, compresses the records area if asked, and writes the header and its CRC.
"""

from __future__ import annotations

import time
from itertools import chain, repeat

from .attributes import Compression, TimestampType, make_attributes
from .compression import check_compression, compress
from .crc import crc32c
from .header import (
    ATTRIBUTES_OFFSET,
    HEADER,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
)
from .record_codec import encode_record

try:
    from ._encode_c import encode_run as _encode_run
except ImportError:  # not built (no compiler at install): extend's Python paths below
    _encode_run = None
from .varint import (
    ENCODED_NULL,
    ENCODED_VARINTS,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    PREFIXED_SIZES,
    VARINT_SIZES,
)

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
# A batch holds at most this many records: lastOffsetDelta is an int32.
RECORDS_COUNT_MAX = INT32_MAX

_ATTRIBUTES = b"\x00"  # per-record attributes byte (unused, 0)
# The attributes byte followed by each small varint: a record's attributes and timestampDelta
# as one part, one part fewer to build and join per record (about 3 % of encoding time).
_ENCODED_ATTRIBUTES_AND_VARINTS = [_ATTRIBUTES + encoded for encoded in ENCODED_VARINTS]
_NO_HEADERS = b"\x00"  # headersCount 0
assert len(ENCODED_NULL) == 1  # the fast path counts a null key or value as one byte
# A record's body always has the attributes byte and at least a one-byte headersCount.
_BODY_FIXED_BYTES = len(_ATTRIBUTES) + len(_NO_HEADERS)


# extend encodes runs at least this long with _extend_uniform (its checks cost a few passes).
_UNIFORM_RUN_MIN = 16
_BYTES_ONLY = {bytes}
_LISTS = (list, tuple)
# The offset deltas where a zigzag varint grows a byte (inside the encoding tables).
_DELTA_WIDTH_STEPS = (64,)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _check_range(name: str, value, low: int, high: int) -> int:
    if type(value) is not int:
        raise TypeError(f"{name} must be an int, found {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], found {value}")
    return value


def _check_timestamp(timestamp_ms) -> int:
    """Kafka's rule: a timestamp is >= 0 or NO_TIMESTAMP (-1)."""
    _check_range("timestamp_ms", timestamp_ms, INT64_MIN, INT64_MAX)
    if timestamp_ms < NO_TIMESTAMP:
        raise ValueError(f"timestamp_ms must be >= 0 or {NO_TIMESTAMP} (no timestamp), found {timestamp_ms}")
    return timestamp_ms


class RecordBatchBuilder:
    """Builds one Kafka v2 record batch.

    Records are encoded as they are appended; ``build()`` returns the batch's bytes.  The
    builder writes the producer fields it is given without judging them (whether a
    producer id needs a sequence is the broker's check, kafka-storage.md 2.6).  The batch's
    baseTimestamp is the first record's timestamp, or the delete horizon when one is given,
    and its maxTimestamp the largest record timestamp (a broker rewrites it for
    LogAppendTime).
    """

    __slots__ = (
        "_compression",
        "_attributes",
        "_base_offset",
        "_partition_leader_epoch",
        "_producer_id",
        "_producer_epoch",
        "_base_sequence",
        "_delete_horizon_ms",
        "_base_timestamp",
        "_max_timestamp",
        "_record_count",
        "_records_bytes",
        "_parts",
        "_last_offset_delta",
    )

    def __init__(
        self,
        *,
        compression: int = Compression.NONE,
        timestamp_type: int = TimestampType.CREATE_TIME,
        base_offset: int = 0,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        delete_horizon_ms: int | None = None,
    ) -> None:
        self._compression = check_compression(compression)
        if delete_horizon_ms is not None:
            _check_range("delete_horizon_ms", delete_horizon_ms, 0, INT64_MAX)
        self._attributes = make_attributes(
            self._compression,
            timestamp_type if type(timestamp_type) is TimestampType else TimestampType(timestamp_type),
            is_transactional=bool(is_transactional),
            is_control=bool(is_control),
            has_delete_horizon=delete_horizon_ms is not None,
        )
        if not (type(base_offset) is int and type(partition_leader_epoch) is int
                and INT64_MIN <= base_offset <= INT64_MAX and INT32_MIN <= partition_leader_epoch <= INT32_MAX):
            _check_range("base_offset", base_offset, INT64_MIN, INT64_MAX)  # raises, naming the field
            _check_range("partition_leader_epoch", partition_leader_epoch, INT32_MIN, INT32_MAX)
        self._base_offset = base_offset
        self._partition_leader_epoch = partition_leader_epoch
        self.set_producer(producer_id, producer_epoch, base_sequence)
        # The delete horizon takes the baseTimestamp slot (KIP-534); otherwise the first
        # record's timestamp becomes the base when it is appended.
        self._delete_horizon_ms = delete_horizon_ms
        self._base_timestamp: int | None = delete_horizon_ms
        self._max_timestamp = NO_TIMESTAMP
        self._record_count = 0
        self._records_bytes = 0
        self._parts: list[bytes] = []
        # The largest offset delta given to append_at(); -1 while only append() was used.
        self._last_offset_delta = -1

    @property
    def record_count(self) -> int:
        return self._record_count

    def set_producer(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """The idempotent producer's fields, given after the records: the producer encodes a
        batch's records ahead, while its partition's window is full, and learns the sequence
        only when the batch is sent. Checked as the constructor checks them (one test for the
        common case, then each field's own, which names the one out of range)."""
        if not (type(producer_id) is int and type(producer_epoch) is int and type(base_sequence) is int
                and INT64_MIN <= producer_id <= INT64_MAX and INT16_MIN <= producer_epoch <= INT16_MAX
                and INT32_MIN <= base_sequence <= INT32_MAX):
            _check_range("producer_id", producer_id, INT64_MIN, INT64_MAX)
            _check_range("producer_epoch", producer_epoch, INT16_MIN, INT16_MAX)
            _check_range("base_sequence", base_sequence, INT32_MIN, INT32_MAX)
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence

    def seal(self) -> SealedBatch:
        """The records encoded so far, joined and compressed now, as a ``SealedBatch`` whose
        ``build`` only packs the header (with the producer's fields) and computes the CRC. The
        builder stays usable: appending after it is allowed, and its next ``build`` joins (and
        compresses) again."""
        natural_last = self._natural_last_offset_delta()
        records = b"".join(self._parts)
        self._parts = [records]  # joined once: a later build of this builder does not join again
        if self._compression is not Compression.NONE:
            records = compress(self._compression, records)
        return SealedBatch(self._header_fields(natural_last, records), records)

    @property
    def estimated_size_in_bytes(self) -> int:
        """Size of the batch built uncompressed (exact for Compression.NONE)."""
        return RECORD_BATCH_OVERHEAD + self._records_bytes

    def append(
        self,
        value,
        key=None,
        timestamp_ms: int | None = None,
        headers=(),
        # Not arguments: module tables and builtins bound as locals, because LOAD_FAST is the
        # cheapest lookup CPython has and append() runs once per record (about 9 % of its
        # time, measured with bench/bench_codec.py); the same device as json.encoder's and
        # kafka-python's.  Not keyword-only: CPython 3.11 does not specialise calls to
        # functions with keyword-only parameters, which costs more than it saves.
        _encoded=ENCODED_VARINTS,
        _encoded_after_attributes=_ENCODED_ATTRIBUTES_AND_VARINTS,
        _varint_sizes=VARINT_SIZES,
        _prefixed_sizes=PREFIXED_SIZES,
        _null=ENCODED_NULL,
        _no_headers=_NO_HEADERS,
        _body_fixed_bytes=_BODY_FIXED_BYTES,
        _bytes=bytes,
        _type=type,
        _len=len,
    ) -> int:
        """Add a record; returns its offset delta.  `value` and `key` are bytes-like or None
        (a null key; a None value is a tombstone), `timestamp_ms` defaults to the wall clock
        now, `headers` is a sequence of (str, bytes-or-None) pairs."""
        if timestamp_ms is None:
            timestamp_ms = _now_ms()
        offset_delta = self._record_count
        base_timestamp = self._base_timestamp
        if base_timestamp is None:  # the first record's timestamp becomes the batch's base
            base_timestamp = self._base_timestamp = _check_timestamp(timestamp_ms)
        # Fast path: bytes or None key and value, no headers, and every varint in the
        # precomputed tables.  The parts are Kafka's record layout (record_codec.py):
        # length, attributes + timestampDelta, offsetDelta, key length, key, value length,
        # value, headersCount.  Anything else goes through the checked general encoder.
        try:
            timestamp_delta = timestamp_ms - base_timestamp
            if headers or timestamp_delta < 0:
                raise LookupError
            if _type(key) is _bytes:
                key_size = _len(key)
                key_field, key_data, key_bytes = _encoded[key_size], key, _prefixed_sizes[key_size]
            elif key is None:
                key_field, key_data, key_bytes = _null, b"", 1
            else:
                raise TypeError  # a bytearray or memoryview: copied by the checked path
            if _type(value) is _bytes:
                value_size = _len(value)
                value_field, value_data, value_bytes = _encoded[value_size], value, _prefixed_sizes[value_size]
            elif value is None:
                value_field, value_data, value_bytes = _null, b"", 1
            else:
                raise TypeError
            body = _body_fixed_bytes + key_bytes + value_bytes + _varint_sizes[timestamp_delta] + _varint_sizes[offset_delta]
            self._parts += (
                _encoded[body],
                _encoded_after_attributes[timestamp_delta],
                _encoded[offset_delta],
                key_field,
                key_data,
                value_field,
                value_data,
                _no_headers,
            )
            self._records_bytes += body + _varint_sizes[body]
        except (LookupError, TypeError):  # headers, beyond the tables, or not bytes/None/int
            try:
                self._append_checked(offset_delta, timestamp_ms, key, value, headers)
            except BaseException:
                if not offset_delta:  # a refused first record leaves no base timestamp behind
                    self._base_timestamp = self._delete_horizon_ms
                raise
        self._record_count = offset_delta + 1
        if timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        return offset_delta

    def extend(
        self,
        keys,
        values,
        timestamp_ms: int,
        _encoded=ENCODED_VARINTS,
        _encoded_after_attributes=_ENCODED_ATTRIBUTES_AND_VARINTS,
        _varint_sizes=VARINT_SIZES,
        _prefixed_sizes=PREFIXED_SIZES,
        _null=ENCODED_NULL,
        _no_headers=_NO_HEADERS,
        _bytes=bytes,
        _type=type,
        _len=len,
    ) -> None:
        """Append one record per (key, value) pair, all with ``timestamp_ms`` and no headers:
        the same bytes as calling ``append`` for each, at about half the cost (the bulk path of
        the producer, where runs of records share a millisecond). Keys and values are bytes or
        None here; anything else, or a run past the varint tables, goes record by record."""
        count = _len(values)
        if _len(keys) != count:
            raise ValueError(f"extend needs one key per value: found {_len(keys)} keys and {count} values")
        if not count:
            return
        first_delta = self._record_count
        if first_delta == 0 or self._base_timestamp is None:
            self.append(values[0], keys[0], timestamp_ms)  # sets (and checks) the base timestamp
            self.extend(keys[1:], values[1:], timestamp_ms)
            return
        _check_timestamp(timestamp_ms)
        timestamp_delta = timestamp_ms - self._base_timestamp
        if _encode_run is not None:
            # The run's bytes in one C pass (_encode_c.c); None for what it leaves to the paths
            # below (keys or values not bytes or None, deltas out of range, not lists).
            encoded = _encode_run(keys, values, first_delta, timestamp_delta, count)
            if encoded is not None:
                self._parts.append(encoded)
                self._records_bytes += len(encoded)
                self._record_count = first_delta + count
                if timestamp_ms > self._max_timestamp:
                    self._max_timestamp = timestamp_ms
                return
        last_delta = first_delta + count - 1
        if not 0 <= timestamp_delta < _len(_encoded) or last_delta >= _len(_encoded):
            for key, value in zip(keys, values):
                self.append(value, key, timestamp_ms)
            return
        attributes_and_timestamp = _encoded_after_attributes[timestamp_delta]
        fixed_bytes = _BODY_FIXED_BYTES + _varint_sizes[timestamp_delta]
        if count >= _UNIFORM_RUN_MIN and type(keys) in _LISTS and type(values) in _LISTS and self._extend_uniform(keys, values, first_delta, fixed_bytes, attributes_and_timestamp):
            if timestamp_ms > self._max_timestamp:
                self._max_timestamp = timestamp_ms
            return
        parts: list[bytes] = []
        add = parts.extend
        records_bytes = 0
        offset_delta = first_delta
        for key, value in zip(keys, values):
            try:  # a key, a value or a record above the tables' 8 KiB: the rest one by one, below
                if _type(key) is _bytes:
                    key_size = _len(key)
                    key_field, key_data, key_bytes = _encoded[key_size], key, _prefixed_sizes[key_size]
                elif key is None:
                    key_field, key_data, key_bytes = _null, b"", 1
                else:
                    break
                if _type(value) is _bytes:
                    value_size = _len(value)
                    value_field, value_data, value_bytes = _encoded[value_size], value, _prefixed_sizes[value_size]
                elif value is None:
                    value_field, value_data, value_bytes = _null, b"", 1
                else:
                    break
                body = fixed_bytes + key_bytes + value_bytes + _varint_sizes[offset_delta]
                body_field = _encoded[body]
            except IndexError:
                break
            add((body_field, attributes_and_timestamp, _encoded[offset_delta], key_field, key_data,
                 value_field, value_data, _no_headers))
            records_bytes += body + _varint_sizes[body]
            offset_delta += 1
        done = offset_delta - first_delta
        self._parts += parts
        self._records_bytes += records_bytes
        self._record_count = offset_delta
        if done and timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        for key, value in zip(keys[done:], values[done:]):  # what the fast loop left: one by one
            self.append(value, key, timestamp_ms)

    def _extend_uniform(self, keys, values, first_delta: int, fixed_bytes: int, attributes_and_timestamp: bytes) -> bool:
        """``extend``'s records when every key is bytes of one length (or every key None) and so
        is every value: their framing differs only in offsetDelta, so the parts are interleaved
        by C-level iterators (zip/chain) instead of a Python step per record. Returns False,
        having done nothing, for any other records."""
        count = len(values)
        fields = []
        for column in (keys, values):
            if column.count(None) == count:
                fields.append((ENCODED_NULL, None, 1))
                continue
            if set(map(type, column)) != _BYTES_ONLY or len(set(map(len, column))) != 1:
                return False
            size = len(column[0])
            if size >= len(ENCODED_VARINTS):
                return False
            fields.append((ENCODED_VARINTS[size], column, PREFIXED_SIZES[size]))
        (key_field, key_data, key_bytes), (value_field, value_data, value_bytes) = fields
        last_delta = first_delta + count  # exclusive
        # offsetDelta's varint widens at these deltas: one constant record prefix per stretch.
        bounds = [first_delta] + [d for d in _DELTA_WIDTH_STEPS if first_delta < d < last_delta] + [last_delta]
        parts: list[bytes] = []
        records_bytes = 0
        done = 0
        for low, high in zip(bounds, bounds[1:]):
            body = fixed_bytes + key_bytes + value_bytes + VARINT_SIZES[low]
            if body >= len(ENCODED_VARINTS) or high > len(ENCODED_VARINTS):
                return False
            run = high - low
            columns = [
                repeat(ENCODED_VARINTS[body] + attributes_and_timestamp, run),
                ENCODED_VARINTS[low:high],
                repeat(key_field, run),
            ]
            if key_data is not None:
                columns.append(key_data[done : done + run])
            columns.append(repeat(value_field, run))
            if value_data is not None:
                columns.append(value_data[done : done + run])
            columns.append(repeat(_NO_HEADERS, run))
            parts += chain.from_iterable(zip(*columns))
            records_bytes += run * (body + VARINT_SIZES[body])
            done += run
        self._parts += parts
        self._records_bytes += records_bytes
        self._record_count = last_delta
        return True

    def _append_checked(self, offset_delta: int, timestamp_ms, key, value, headers) -> None:
        if offset_delta >= RECORDS_COUNT_MAX:
            raise ValueError(f"a batch holds at most {RECORDS_COUNT_MAX} records, found one more")
        _check_timestamp(timestamp_ms)
        timestamp_delta = timestamp_ms - self._base_timestamp
        if not INT64_MIN <= timestamp_delta <= INT64_MAX:
            raise ValueError(
                f"timestamp_ms {timestamp_ms} is too far from the batch base timestamp "
                f"{self._base_timestamp}: the delta must fit an int64, found {timestamp_delta}"
            )
        record = encode_record(offset_delta, timestamp_delta, key, value, headers)
        self._parts.append(record)
        self._records_bytes += len(record)

    def append_at(self, offset_delta: int, value, key=None, timestamp_ms: int | None = None, headers=()) -> int:
        """Add a record at a given offset delta (a compacted batch keeps its records' offsets,
        so deltas may skip numbers); deltas must increase from call to call.  Use either
        append() or append_at() on one builder, not both.  Returns `offset_delta`."""
        _check_range("offset_delta", offset_delta, 0, INT32_MAX)
        if offset_delta <= self._last_offset_delta or offset_delta < self._record_count:
            raise ValueError(
                f"offset deltas must increase: expected more than {max(self._last_offset_delta, self._record_count - 1)}, "
                f"found {offset_delta}"
            )
        if timestamp_ms is None:
            timestamp_ms = _now_ms()
        if self._base_timestamp is None:
            self._base_timestamp = _check_timestamp(timestamp_ms)
        try:
            self._append_checked(offset_delta, timestamp_ms, key, value, headers)
        except BaseException:
            if not self._record_count:
                self._base_timestamp = self._delete_horizon_ms
            raise
        self._record_count += 1
        self._last_offset_delta = offset_delta
        if timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        return offset_delta

    def build(self, *, last_offset_delta: int | None = None) -> bytes:
        """The batch: header, CRC-32C and the (possibly compressed) records.

        `last_offset_delta` overrides the header's lastOffsetDelta (Kafka's overrideLastOffset:
        a cleaned batch keeps its original last offset even when its last records are gone);
        it may not be below the last record's delta."""
        natural_last = self._natural_last_offset_delta()
        if last_offset_delta is None:
            last_offset_delta = natural_last
        elif not natural_last <= last_offset_delta <= INT32_MAX:
            raise ValueError(f"last_offset_delta must be in [{natural_last}, {INT32_MAX}], found {last_offset_delta}")
        records = b"".join(self._parts)  # one part (sealed): that part itself, no copy
        assert len(records) == self._records_bytes, (len(records), self._records_bytes)
        if self._compression is not Compression.NONE:
            records = compress(self._compression, records)
        return _pack_batch(self._header_fields(last_offset_delta, records), records)

    def _natural_last_offset_delta(self) -> int:
        if not self._record_count:
            raise ValueError("a record batch needs at least one record: expected an append() before build(), found none")
        return max(self._record_count - 1, self._last_offset_delta)

    def _header_fields(self, last_offset_delta: int, records: bytes) -> list:
        return [
            self._base_offset,
            RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(records),
            self._partition_leader_epoch,
            MAGIC,
            0,  # crc: computed over the packed header (``_pack_batch``), then written in
            self._attributes,
            last_offset_delta,
            self._base_timestamp,
            self._max_timestamp,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            self._record_count,
        ]


# The producer's fields in a batch header's fields (``_header_fields``).
_PRODUCER_FIELDS = slice(9, 12)


def _pack_batch(fields: list, records: bytes) -> bytes:
    """The header of ``fields`` with its CRC over the header's tail and ``records``, then them."""
    unsigned = HEADER.pack(*fields)
    fields[4] = crc32c(records, crc32c(unsigned[ATTRIBUTES_OFFSET:]))
    return HEADER.pack(*fields) + records


class SealedBatch:
    """A batch's records encoded, joined and compressed once (``RecordBatchBuilder.seal``), its
    header written by ``build`` with the producer's fields given then: the producer encodes a
    closed batch's records ahead, while its partition's window is full, and learns the sequence
    only when the batch is sent. Holds the records in one form only, the one the batch carries
    (compressed, if so): ``records``."""

    __slots__ = ("_fields", "records")

    def __init__(self, fields: list, records: bytes) -> None:
        self._fields = fields
        self.records = records

    def build(self, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
        """The batch with these producer fields, checked as ``RecordBatchBuilder`` checks them."""
        if not (type(producer_id) is int and type(producer_epoch) is int and type(base_sequence) is int
                and INT64_MIN <= producer_id <= INT64_MAX and INT16_MIN <= producer_epoch <= INT16_MAX
                and INT32_MIN <= base_sequence <= INT32_MAX):
            _check_range("producer_id", producer_id, INT64_MIN, INT64_MAX)  # raises, naming the field
            _check_range("producer_epoch", producer_epoch, INT16_MIN, INT16_MAX)
            _check_range("base_sequence", base_sequence, INT32_MIN, INT32_MAX)
        fields = self._fields.copy()
        fields[_PRODUCER_FIELDS] = (producer_id, producer_epoch, base_sequence)
        return _pack_batch(fields, self.records)


def build_empty_batch(
    *,
    base_offset: int,
    last_offset_delta: int,
    max_timestamp_ms: int,
    timestamp_type: int = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """A batch with no records that keeps an offset range (Kafka's DefaultRecordBatch.
    writeEmptyHeader): 61 bytes, no compression, baseTimestamp NO_TIMESTAMP, the given
    maxTimestamp, no delete horizon.  The log cleaner writes one where every record of a batch
    it must retain was removed, so that the log's last offset never moves backwards."""
    attributes = make_attributes(
        Compression.NONE,
        TimestampType(timestamp_type),
        is_transactional=bool(is_transactional),
        is_control=bool(is_control),
    )
    fields = [
        _check_range("base_offset", base_offset, INT64_MIN, INT64_MAX),
        RECORD_BATCH_OVERHEAD - LOG_OVERHEAD,
        _check_range("partition_leader_epoch", partition_leader_epoch, INT32_MIN, INT32_MAX),
        MAGIC,
        0,
        attributes,
        _check_range("last_offset_delta", last_offset_delta, 0, INT32_MAX),
        NO_TIMESTAMP,
        _check_range("max_timestamp_ms", max_timestamp_ms, INT64_MIN, INT64_MAX),
        _check_range("producer_id", producer_id, INT64_MIN, INT64_MAX),
        _check_range("producer_epoch", producer_epoch, INT16_MIN, INT16_MAX),
        _check_range("base_sequence", base_sequence, INT32_MIN, INT32_MAX),
        0,
    ]
    unsigned = HEADER.pack(*fields)
    fields[4] = crc32c(unsigned[ATTRIBUTES_OFFSET:])
    return HEADER.pack(*fields)
