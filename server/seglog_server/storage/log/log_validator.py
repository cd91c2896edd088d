"""Produce-side validation of one record batch (Kafka's ``analyzeAndValidateRecords`` and
``LogValidator``, kafka-storage.md 2.5-2.6).

A produce request carries exactly one v2 batch built by the client with base offset 0. The rules
run in Kafka's order and the first one broken raises:

1. the bytes hold a batch header and the whole batch its length field declares (CorruptRecordError)
2. magic is 2 (InvalidRecordError: seglog stores v2 batches only)
3. base offset is 0 (InvalidRecordError)
4. size <= ``max.message.bytes`` (RecordTooLargeError)
5. the CRC-32C matches (CorruptRecordError)
6. nothing follows the batch: exactly one batch per request (InvalidRecordError)
7. a known compression codec; lastOffsetDelta + 1 == recordsCount > 0 (InvalidRecordError)
8. no control batch; a producer id comes with a base sequence (InvalidRecordError)
9. per record: a key on compacted topics (InvalidRecordError), a timestamp inside
   [now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms] under CreateTime,
   and no LogAppendTime claimed by the producer (InvalidTimestampError)
10. size <= ``segment.bytes`` (RecordBatchTooLargeError)

Records are decoded only where a rule needs them: on compacted topics (keys) and when a timestamp
window is configured under CreateTime. Otherwise an uncompressed batch's records area is walked by
the codec's bounded ``walk_records`` (InvalidRecordError naming the record): each record's length
keeps it inside the area, its key, value and header lengths keep them inside the record, no
varint runs past 5 (varlong 10) bytes, exactly recordsCount records fill the area with no byte
left over, and the offset deltas run 0..recordsCount-1 in order (Kafka's condition for assigning
offsets in place). A compressed batch is decompressed (with an output cap) and walked the same
way. A CRC only proves the bytes arrived as the producer sent them, not that they parse: without
the walk a poison batch would be stored and fail every later read.

Under CreateTime the batch's maxTimestamp is recomputed from the records on every path, the fast
one included, as Kafka's LogValidator does: a header claiming less than its largest record makes
lookups by time miss records, one claiming more pins time retention. A header that disagrees is
rewritten (a copy of the batch, maxTimestamp patched and the CRC recomputed).

The result says how the log must rewrite the header: only the base offset (the common case, no
copy, CRC untouched), or also the timestamp type and maxTimestamp (a copy and a new CRC) when the
topic uses LogAppendTime, a CreateTime topic receives a batch claiming LogAppendTime, or the
header's maxTimestamp is not its records' largest timestamp.
"""

from __future__ import annotations

from typing import NamedTuple

from seglog.records import (
    ATTRIBUTES_OFFSET,
    HEADER,
    LOG_OVERHEAD,
    MAGIC,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    CodecError,
    Compression,
    DecompressionLimitError,
    RecordBatch,
    TimestampType,
    crc32c,
    decompress,
    set_max_timestamp,
    records_max_timestamp_delta,
    walk_records,
)
from seglog.records.errors import CorruptRecordError as CorruptCodecRecordError
from seglog.records.record_codec import decode_records
from seglog.records.walk_compiled import STEPS_COMPILED, record_steps

from ..base.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from ..format.file_records import HeaderField
from ..base.log_config import LONG_MAX, LogConfig

__all__ = ["LogValidator", "ValidatedBatch"]

_INT64_MIN = -(2**63)


def _max_timestamp_delta(records, view: memoryview, size: int, count: int) -> int | None:
    """The largest timestampDelta of the batch's ``count`` records filling its records area with
    offset deltas 0..count-1, every record checked as ``walk_records`` checks it; None when the
    walk refuses or the deltas are out of order (``_check_framing`` then names what is wrong)."""
    if STEPS_COMPILED:
        try:
            deltas, _, in_order = record_steps(view, RECORDS_OFFSET, size, count, 0, 0, _INT64_MIN)
        except (CodecError, OverflowError):
            return None
        return deltas[-1] if in_order and deltas else None
    data = records if type(records) is bytes else bytes(view)
    return records_max_timestamp_delta(data, RECORDS_OFFSET, size, count)

_unpack_header = HEADER.unpack_from

# Attribute bits (kafka-storage.md 2.2).
_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_CONTROL_BIT = 0x20
_COMPRESSION_MAX = max(Compression)
# A batch whose attributes hit this mask leaves the fast path: a control batch, a claimed
# LogAppendTime, or a compression id above 3 (4, zstd, is legal and rechecked by the rules).
_FAST_PATH_ATTRIBUTE_MASK = _CONTROL_BIT | _TIMESTAMP_TYPE_BIT | 0x04
assert _COMPRESSION_MAX == 4
# Below every timestampDelta a varlong can hold: the running maximum starts here.
_DELTA_MIN = -(2**63)
# Kafka lists at most this many failing records in one error message.
_RECORD_ERRORS_SHOWN_MAX = 3


class ValidatedBatch(NamedTuple):
    """A batch that passed every rule, ready for offset assignment."""

    batch: memoryview  # the bytes to append (a rewritten copy when the timestamps changed)
    size_in_bytes: int
    last_offset_delta: int
    record_count: int
    max_timestamp_ms: int  # the batch's maxTimestamp after any rewrite
    log_append_time_ms: int  # the broker time stamped on the batch, or -1 under CreateTime
    # A compressed batch's records area as validation decompressed it (the time-step table's feed
    # walks it: no second decompression), else None.
    records_area: bytes | None


# ValidatedBatch(...) without the NamedTuple's Python-level __new__ (a microsecond of the fast path).
_new_tuple = tuple.__new__


class LogValidator:
    """Validates produced batches against one topic's configuration."""

    def __init__(self, config: LogConfig, log_name: str) -> None:
        self._name = log_name
        self._max_message_bytes = config.max_message_bytes
        self._segment_bytes = config.segment_bytes
        self._compacted = config.is_compacted
        self._log_append_time = config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
        self._before_max_ms = config.message_timestamp_before_max_ms
        self._after_max_ms = config.message_timestamp_after_max_ms
        self._has_window = self._before_max_ms != LONG_MAX or self._after_max_ms != LONG_MAX
        # The header alone decides when no record has to be decoded and no timestamp stamped.
        self._header_only = not (self._compacted or self._has_window or self._log_append_time)
        self._size_max = min(self._max_message_bytes, self._segment_bytes)
        self._decompressed_bytes_max = config.decompressed_bytes_max

    def validate(self, records: bytes | bytearray | memoryview, now_ms: int) -> ValidatedBatch:
        """The batch, checked by every rule; raises the error of the first rule it breaks."""
        view = records if type(records) is memoryview else memoryview(records)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        if self._header_only and len(view) >= RECORD_BATCH_OVERHEAD:
            # The common batch passes one combined test; anything else takes the ordered rules
            # below, which name the first rule broken. Fields by name, unpacked once: this runs
            # on every produce.
            fields = _unpack_header(view, 0)
            (base_offset, length, _, magic, crc, attributes, last_offset_delta, base_timestamp, max_timestamp,
             producer_id, _, base_sequence, count) = fields
            size = length + LOG_OVERHEAD
            if (
                base_offset == 0
                and magic == MAGIC
                and size == len(view)
                and size <= self._size_max
                and last_offset_delta + 1 == count > 0
                and not attributes & _FAST_PATH_ATTRIBUTE_MASK
                and (producer_id < 0 or base_sequence >= 0)
                and crc32c(view[ATTRIBUTES_OFFSET:]) == crc
            ):
                if not attributes & _COMPRESSION_MASK:
                    # The records in one compiled walk (record_steps: every rule of walk_records,
                    # the largest timestampDelta its last step), else the common records in one
                    # tight Python loop over bytes; _check_framing when they cannot vouch.
                    max_delta = _max_timestamp_delta(records, view, size, count)
                    if max_delta is not None and base_timestamp + max_delta == max_timestamp:
                        return _new_tuple(
                            ValidatedBatch, (view, size, last_offset_delta, count, max_timestamp, NO_TIMESTAMP, None)
                        )
                max_timestamp, area = self._check_framing(view, fields)
                if max_timestamp == fields[HeaderField.MAX_TIMESTAMP]:
                    return ValidatedBatch(view, size, count - 1, count, max_timestamp, NO_TIMESTAMP, area)
                return self._stamp(view, fields, size, max_timestamp, now_ms, area)
        return self._validate_in_order(view, now_ms)

    def _validate_in_order(self, view: memoryview, now_ms: int) -> ValidatedBatch:
        fields = self._check_header(view)
        size = fields[HeaderField.LENGTH] + LOG_OVERHEAD
        if fields[HeaderField.BASE_OFFSET] != 0:
            raise InvalidRecordError(
                f"{self._name}: a produced batch must have base offset 0, found {fields[HeaderField.BASE_OFFSET]}"
            )
        if size > self._max_message_bytes:
            raise RecordTooLargeError(
                f"{self._name}: the batch is {size} bytes, above max.message.bytes ({self._max_message_bytes})"
            )
        computed = crc32c(view[ATTRIBUTES_OFFSET:size])
        if computed != fields[HeaderField.CRC]:
            raise CorruptRecordError(
                f"{self._name}: batch CRC mismatch: the header says {fields[HeaderField.CRC]:#010x}, "
                f"the bytes give {computed:#010x}"
            )
        if len(view) != size:
            raise InvalidRecordError(
                f"{self._name}: a produce request must carry exactly one batch; {len(view) - size} "
                f"bytes follow the {size}-byte batch"
            )
        self._check_batch(fields)
        max_timestamp, area = self._check_records(view, fields, now_ms)
        if size > self._segment_bytes:
            raise RecordBatchTooLargeError(
                f"{self._name}: the batch is {size} bytes, above segment.bytes ({self._segment_bytes})"
            )
        return self._stamp(view, fields, size, max_timestamp, now_ms, area)

    # -- the rules ----------------------------------------------------------------------------
    def _check_header(self, view: memoryview) -> tuple:
        if len(view) < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"{self._name}: {len(view)} bytes cannot hold a record batch: a v2 batch header "
                f"is {RECORD_BATCH_OVERHEAD} bytes"
            )
        fields = HEADER.unpack_from(view, 0)
        if fields[HeaderField.MAGIC] != MAGIC:
            raise InvalidRecordError(
                f"{self._name}: unsupported batch magic {fields[HeaderField.MAGIC]}: seglog stores "
                f"magic {MAGIC} (Kafka 0.11+) batches only"
            )
        size = fields[HeaderField.LENGTH] + LOG_OVERHEAD
        if size < RECORD_BATCH_OVERHEAD or size > len(view):
            raise CorruptRecordError(
                f"{self._name}: the batch length field declares {size} bytes in all, but "
                f"{len(view)} bytes arrived (and a batch is at least {RECORD_BATCH_OVERHEAD})"
            )
        return fields

    def _check_batch(self, fields: tuple) -> None:
        attributes = fields[HeaderField.ATTRIBUTES]
        if attributes & _COMPRESSION_MASK > _COMPRESSION_MAX:
            raise InvalidRecordError(
                f"{self._name}: unknown compression codec id {attributes & _COMPRESSION_MASK} "
                f"(known: 0 none .. {_COMPRESSION_MAX} zstd)"
            )
        last_offset_delta = fields[HeaderField.LAST_OFFSET_DELTA]
        count = fields[HeaderField.RECORDS_COUNT]
        if last_offset_delta + 1 <= 0:
            raise InvalidRecordError(f"{self._name}: batch has an invalid offset range [0, {last_offset_delta}]")
        if count <= 0:
            raise InvalidRecordError(f"{self._name}: invalid record count {count} in the batch")
        if last_offset_delta + 1 != count:
            raise InvalidRecordError(
                f"{self._name}: inconsistent batch offset range [0, {last_offset_delta}] and count "
                f"of records {count}"
            )
        if attributes & _CONTROL_BIT:
            raise InvalidRecordError(f"{self._name}: clients are not allowed to write control batches")
        if fields[HeaderField.PRODUCER_ID] >= 0 and fields[HeaderField.BASE_SEQUENCE] < 0:
            raise InvalidRecordError(
                f"{self._name}: invalid base sequence {fields[HeaderField.BASE_SEQUENCE]} in a batch "
                f"with producer id {fields[HeaderField.PRODUCER_ID]}"
            )

    def _check_records(self, view: memoryview, fields: tuple, now_ms: int) -> tuple[int, bytes | None]:
        """Per-record rules; returns the batch's max timestamp (recomputed when decoded) and a
        compressed batch's records area as it was decompressed (else None)."""
        claims_log_append_time = bool(fields[HeaderField.ATTRIBUTES] & _TIMESTAMP_TYPE_BIT)
        header_max = fields[HeaderField.MAX_TIMESTAMP]
        count = fields[HeaderField.RECORDS_COUNT]
        needs_window = self._has_window and not self._log_append_time and not claims_log_append_time
        if not (self._compacted or needs_window):
            max_timestamp, area = self._check_framing(view, fields)
            if claims_log_append_time:
                self._check_claimed_log_append_time(header_max, count, now_ms)
                return header_max, area
            return max_timestamp, area
        errors: list[tuple[int, str, bool]] = []  # (record index, message, is a timestamp error)
        max_timestamp = NO_TIMESTAMP
        records, area = self._decode(view, fields)
        for index, record in enumerate(records):
            if self._compacted and record.key is None:
                errors.append((index, "Compacted topic cannot accept message without key", False))
                continue
            timestamp = record.timestamp_ms
            if timestamp > max_timestamp:
                max_timestamp = timestamp
            message = self._timestamp_error(timestamp, claims_log_append_time, now_ms)
            if message is not None:
                errors.append((index, f"record at offset delta {index}: {message}", True))
        if errors:
            self._raise_record_errors(errors)
        return (header_max if claims_log_append_time else max_timestamp), area

    def _check_claimed_log_append_time(self, timestamp: int, count: int, now_ms: int) -> None:
        # Every record of a LogAppendTime batch reads the batch maxTimestamp: one check covers all.
        message = self._timestamp_error(timestamp, True, now_ms)
        if message is not None:
            self._raise_record_errors([(index, message, True) for index in range(count)])

    def _timestamp_error(self, timestamp: int, claims_log_append_time: bool, now_ms: int) -> str | None:
        if not self._log_append_time and timestamp != NO_TIMESTAMP:
            if now_ms - timestamp > self._before_max_ms or timestamp - now_ms > self._after_max_ms:
                return (
                    f"timestamp {timestamp} is out of range: expected one within "
                    f"[{now_ms - self._before_max_ms}, {now_ms + self._after_max_ms}]"
                )
            return None
        if claims_log_append_time:
            return "the producer should not set the timestamp type to LogAppendTime"
        return None

    def _raise_record_errors(self, errors: list[tuple[int, str, bool]]) -> None:
        shown = "; ".join(f"record {index}: {message}" for index, message, _ in errors[:_RECORD_ERRORS_SHOWN_MAX])
        more = f" (and {len(errors) - _RECORD_ERRORS_SHOWN_MAX} more)" if len(errors) > _RECORD_ERRORS_SHOWN_MAX else ""
        text = f"{self._name}: {len(errors)} invalid record(s): {shown}{more}"
        if any(is_timestamp for _, _, is_timestamp in errors):
            raise InvalidTimestampError(text)
        raise InvalidRecordError(text)

    def _check_framing(self, view: memoryview, fields: tuple) -> tuple[int, bytes | None]:
        """The records area parses, every record's key, value and header lengths inside it, and
        the offset deltas run 0..count-1; returns the largest record timestamp (Kafka's
        LogValidator recomputes maxTimestamp: the header's claim is not trusted). The area, or
        for a compressed batch the area decompressed (capped), goes through the codec's bounded
        ``walk_records``: no record is built and no key or value copied, so the work per record
        is a few varints, and the records are at most the header's count (which the service
        caps, batch_records_max) and at most a third of the bytes. Also returns a compressed
        batch's decompressed area (else None)."""
        count = fields[HeaderField.RECORDS_COUNT]
        size = fields[HeaderField.LENGTH] + LOG_OVERHEAD
        if fields[HeaderField.ATTRIBUTES] & _COMPRESSION_MASK:
            data = area = self._decompressed(view, fields, size)
        else:
            data, area = bytes(view[RECORDS_OFFSET:size]), None
        max_delta = records_max_timestamp_delta(data, 0, len(data), count)
        if max_delta is not None:  # the common records, checked in one tight loop
            return fields[HeaderField.BASE_TIMESTAMP] + max_delta, area
        index = 0
        max_delta = _DELTA_MIN
        try:
            for timestamp_delta, offset_delta in walk_records(data, 0, len(data), count):
                if offset_delta != index:
                    raise InvalidRecordError(
                        f"{self._name}: malformed records area of a {count}-record batch: expected "
                        f"record {index} to have offset delta {index}, found {offset_delta}"
                    )
                if timestamp_delta > max_delta:
                    max_delta = timestamp_delta
                index += 1
        except CodecError as exc:
            raise InvalidRecordError(f"{self._name}: malformed records area of a {count}-record batch: {exc}") from exc
        return fields[HeaderField.BASE_TIMESTAMP] + max_delta, area

    def _decompressed(self, view: memoryview, fields: tuple, size: int) -> bytes:
        compression = fields[HeaderField.ATTRIBUTES] & _COMPRESSION_MASK
        try:
            return decompress(compression, view[RECORDS_OFFSET:size], self._decompressed_bytes_max)
        except DecompressionLimitError as exc:
            raise InvalidRecordError(f"{self._name}: {exc}") from exc
        except CodecError as exc:
            raise InvalidRecordError(f"{self._name}: the batch's records cannot be decoded: {exc}") from exc

    def _decode(self, view: memoryview, fields: tuple) -> tuple[list, bytes | None]:
        """The batch's records, and a compressed batch's records area decompressed (once: the
        time-step table's feed walks it too), else None."""
        area = None
        try:
            if fields[HeaderField.ATTRIBUTES] & _COMPRESSION_MASK:
                area = self._decompressed(view, fields, fields[HeaderField.LENGTH] + LOG_OVERHEAD)
                records = self._decode_area(area, fields)
            else:
                records = RecordBatch(view).records(self._decompressed_bytes_max)
        except DecompressionLimitError as exc:
            raise InvalidRecordError(f"{self._name}: {exc}") from exc
        except CodecError as exc:
            raise InvalidRecordError(f"{self._name}: the batch's records cannot be decoded: {exc}") from exc
        for index, record in enumerate(records):
            if record.offset != index:  # a produced batch has base offset 0
                raise InvalidRecordError(
                    f"{self._name}: malformed records area of a {len(records)}-record batch: expected "
                    f"record {index} to have offset delta {index}, found {record.offset}"
                )
        return records, area

    @staticmethod
    def _decode_area(area: bytes, fields: tuple) -> list:
        """The records of a compressed batch from its decompressed ``area``, as
        ``RecordBatch.records`` decodes them (its error named the same way)."""
        log_append_time_ms = (fields[HeaderField.MAX_TIMESTAMP]
                              if fields[HeaderField.ATTRIBUTES] & _TIMESTAMP_TYPE_BIT else None)
        try:
            return decode_records(area, 0, len(area), fields[HeaderField.RECORDS_COUNT],
                                  fields[HeaderField.BASE_OFFSET], fields[HeaderField.BASE_TIMESTAMP],
                                  log_append_time_ms)
        except CorruptCodecRecordError as exc:
            raise type(exc)(f"{exc} (in the decompressed records area of the batch at position 0 "
                            f"(base offset {fields[HeaderField.BASE_OFFSET]}))") from None

    # -- the header rewrite -------------------------------------------------------------------
    def _stamp(self, view: memoryview, fields: tuple, size: int, max_timestamp: int, now_ms: int,
               area: bytes | None) -> ValidatedBatch:
        last_offset_delta = fields[HeaderField.LAST_OFFSET_DELTA]
        count = fields[HeaderField.RECORDS_COUNT]
        claims_log_append_time = bool(fields[HeaderField.ATTRIBUTES] & _TIMESTAMP_TYPE_BIT)
        if self._log_append_time:
            copy = bytearray(view)
            set_max_timestamp(copy, TimestampType.LOG_APPEND_TIME, now_ms)
            return ValidatedBatch(memoryview(copy), size, last_offset_delta, count, now_ms, now_ms, area)
        if claims_log_append_time or max_timestamp != fields[HeaderField.MAX_TIMESTAMP]:
            copy = bytearray(view)
            set_max_timestamp(copy, TimestampType.CREATE_TIME, max_timestamp)
            return ValidatedBatch(memoryview(copy), size, last_offset_delta, count, max_timestamp, NO_TIMESTAMP, area)
        return ValidatedBatch(view, size, last_offset_delta, count, max_timestamp, NO_TIMESTAMP, area)
