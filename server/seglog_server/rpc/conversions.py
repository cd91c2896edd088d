"""Conversions between the protobuf messages of seglog.v1 and the storage engine's values.

Pure functions: no I/O, no gRPC context. The servicer is convert -> one storage call -> convert,
and both converts live here. Record batches pass through untouched; the only batch work done
here is (a) building one batch from ``plain_records`` with ``seglog.records.RecordBatchBuilder``,
(b) walking batch headers to find the next offset, and (c) decoding for ``decode=true``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb

from seglog_server.config import DECODED_RECORD_OVERHEAD_BYTES

from .errors import InvalidRequestError, RecordCountTooLargeError, ResponseTooLargeError, StoredBatchCorruptError

__all__ = [
    "DECODED_RECORD_OVERHEAD_BYTES",
    "batch_from_plain_records",
    "compression_from_proto",
    "create_topic_response",
    "declared_record_count",
    "decode_batches",
    "describe_topic_response",
    "explain_lookup_response",
    "fetch_next_offset",
    "fetch_response_wire",
    "holds_compressed",
    "list_topics_response",
    "next_offset_after",
    "add_partition_offset",
    "check_record_count",
    "produce_response",
]

# FetchResponse.records on the wire: field 1, wire type 2 (length-delimited): (1 << 3) | 2.
_RECORDS_TAG = bytes([(pb.FetchResponse.RECORDS_FIELD_NUMBER << 3) | 2])

# Where the next-offset walk finds baseOffset, attributes and lastOffsetDelta in a HEADER tuple.
_BASE_OFFSET_FIELD = 0
_ATTRIBUTES_FIELD = 5
_LAST_OFFSET_DELTA_FIELD = 6
_RECORDS_COUNT_FIELD = 12
_COMPRESSION_MASK = 0x07
assert codec.HEADER.unpack(bytes(range(61)))[_LAST_OFFSET_DELTA_FIELD] == int.from_bytes(bytes(range(23, 27)), "big")
assert codec.HEADER.unpack(bytes(range(61)))[_RECORDS_COUNT_FIELD] == int.from_bytes(bytes(range(57, 61)), "big")
_RECORDS_COUNT = struct.Struct(">i")  # recordsCount, the header's last field
assert codec.RECORDS_COUNT_OFFSET + _RECORDS_COUNT.size == codec.RECORD_BATCH_OVERHEAD


# -- produce ------------------------------------------------------------------------------------


def compression_from_proto(value: int) -> codec.Compression:
    try:
        return codec.Compression(value)
    except ValueError:
        raise InvalidRequestError(f"unknown compression {value}") from None


def batch_from_plain_records(
    plain_records: Iterable[pb.PlainRecord], compression: codec.Compression
) -> bytes:
    """One v2 batch with base offset 0 holding ``plain_records`` (timestamp 0 means now)."""
    builder = codec.RecordBatchBuilder(compression=compression)
    for index, plain in enumerate(plain_records):
        try:
            builder.append(
                plain.value if plain.HasField("value") else None,
                key=plain.key if plain.HasField("key") else None,
                timestamp_ms=plain.timestamp_ms or None,
                headers=tuple(
                    (header.key, header.value if header.HasField("value") else None)
                    for header in plain.headers
                ),
            )
        except ValueError as exc:
            # The builder refuses values it cannot encode (negative timestamps, too many
            # records, lengths out of range): the request's fault, said with the record's index.
            raise InvalidRequestError(f"plain_records[{index}]: {exc}") from exc
    if builder.record_count == 0:
        raise InvalidRequestError("ProduceRequest has no records: set records or plain_records")
    try:
        return builder.build()
    except ValueError as exc:
        raise InvalidRequestError(f"plain_records: {exc}") from exc


def check_record_count(record_count: int, records_max: int) -> None:
    """RecordCountTooLargeError when a produced batch declares more than ``records_max`` records."""
    if record_count > records_max:
        raise RecordCountTooLargeError(
            f"the batch declares {record_count} records, above batch_records_max ({records_max}): "
            "send fewer records per batch"
        )


def declared_record_count(batch: bytes | memoryview) -> int:
    """A produced batch's recordsCount, read from its header alone (0 when the bytes are too
    short to hold one: the storage's validation then says what is wrong)."""
    if len(batch) < codec.RECORD_BATCH_OVERHEAD:
        return 0
    return _RECORDS_COUNT.unpack_from(batch, codec.RECORDS_COUNT_OFFSET)[0]


def holds_compressed(records: bytes | memoryview) -> bool:
    """Whether any whole batch in fetched ``records`` is compressed (a header walk, no decoding)."""
    try:
        return any(fields[_ATTRIBUTES_FIELD] & _COMPRESSION_MASK for _, fields in codec.BatchWalk(records))
    except codec.CodecError:
        return True  # the decode that follows says what is wrong; off the loop like the rest


def produce_response(info: Any) -> pb.ProduceResponse:
    return pb.ProduceResponse(
        base_offset=info.base_offset,
        last_offset=info.last_offset,
        log_append_time_ms=info.log_append_time_ms,
        log_start_offset=info.log_start_offset,
    )


# -- fetch --------------------------------------------------------------------------------------


def next_offset_after(records: bytes | memoryview, default: int) -> int:
    """One past the last whole batch in ``records``, or ``default`` when it holds none. The
    codec's bounded walk: a length that lies is StoredBatchCorruptError, never a loop."""
    last_fields = None
    try:
        for _, last_fields in codec.BatchWalk(records):
            pass
    except codec.CodecError as exc:
        raise StoredBatchCorruptError(f"stored batch failed to decode: {exc}") from exc
    if last_fields is None:
        return default
    return last_fields[_BASE_OFFSET_FIELD] + last_fields[_LAST_OFFSET_DELTA_FIELD] + 1


def fetch_next_offset(data: Any, requested_offset: int) -> int:
    """The next offset of a storage FetchData: the one the read's checking walk found, or (when
    the data does not carry one) ``next_offset_after`` its records."""
    next_offset = getattr(data, "next_offset", -1)
    return next_offset if next_offset >= 0 else next_offset_after(data.records, requested_offset)


def decode_batches(
    records: bytes | memoryview, from_offset: int, budget_bytes: int
) -> tuple[list[pb.DecodedRecord], int]:
    """Decodes whole batches while raw plus decoded bytes fit ``budget_bytes``.

    Returns the decoded records at or after ``from_offset`` and the byte count of the batches
    kept (the caller trims ``records`` to it so both fields describe the same batches). The first
    batch is always kept; if it alone does not fit, ResponseTooLargeError. Stored bytes that fail
    to parse or whose CRC does not match raise StoredBatchCorruptError.

    The work is bounded by the budget before it is done: a batch whose header's recordsCount
    alone (DECODED_RECORD_OVERHEAD_BYTES a record) cannot fit is never decompressed, and a
    compressed one is decompressed only up to the room left (its records decode to at least
    their framed bytes, so a larger area could not fit either). A record-count bomb (a million
    empty records in a few KiB of zstd) is refused from its 61-byte header.
    """
    decoded: list[pb.DecodedRecord] = []
    used_bytes = 0
    kept_bytes = 0
    try:
        for batch in codec.iter_batches(records):
            batch.ensure_valid()
            room_bytes = budget_bytes - used_bytes - batch.size_in_bytes
            if batch.records_count * DECODED_RECORD_OVERHEAD_BYTES > room_bytes:
                if kept_bytes == 0:
                    raise _decodes_too_large(batch, f"{batch.records_count} records", budget_bytes)
                break
            try:
                all_records = batch.records(max(room_bytes, 0))
            except codec.DecompressionLimitError:
                if kept_bytes == 0:
                    raise _decodes_too_large(batch, f"records of more than {room_bytes} bytes", budget_bytes) from None
                break
            # Sized before any protobuf message is built: a batch that does not fit is never
            # turned into a list of messages.
            batch_records = [r for r in all_records if r.offset >= from_offset]
            batch_bytes = batch.size_in_bytes + sum(_record_size(r) for r in batch_records)
            if used_bytes + batch_bytes > budget_bytes:
                if kept_bytes == 0:
                    raise _decodes_too_large(batch, f"{batch_bytes} bytes", budget_bytes)
                break
            decoded.extend(_decoded(r) for r in batch_records)
            used_bytes += batch_bytes
            kept_bytes = batch.position + batch.size_in_bytes
    except codec.CodecError as exc:
        raise StoredBatchCorruptError(f"stored batch failed to decode: {exc}") from exc
    return decoded, kept_bytes


def _decodes_too_large(batch: Any, what: str, budget_bytes: int) -> ResponseTooLargeError:
    return ResponseTooLargeError(
        f"the batch at offset {batch.base_offset} decodes to {what}, above the {budget_bytes} "
        "bytes a response can carry (response_bytes_max); fetch it without decode"
    )


def _decoded(record: Any) -> pb.DecodedRecord:
    message = pb.DecodedRecord(offset=record.offset, timestamp_ms=record.timestamp_ms)
    if record.key is not None:
        message.key = record.key
    if record.value is not None:
        message.value = record.value
    for key, value in record.headers:
        header = message.headers.add(key=key)
        if value is not None:
            header.value = value
    return message


def _record_size(record: Any) -> int:
    """Protobuf bytes of the DecodedRecord ``record`` becomes (header keys as UTF-8)."""
    size = DECODED_RECORD_OVERHEAD_BYTES + len(record.key or b"") + len(record.value or b"")
    return size + sum(len(key.encode()) + len(value or b"") + 8 for key, value in record.headers)


def fetch_response_wire(
    topic: str,
    partition: int,
    requested_offset: int,
    data: Any,
    records: bytes | memoryview | None = None,
    decoded: list[pb.DecodedRecord] | None = None,
) -> tuple[bytes, int]:
    """A serialized FetchResponse for ``data`` (storage FetchData) and its next offset.

    ``records`` overrides ``data.records``. The small fields are serialized by protobuf; the
    ``records`` field is appended as tag, length and the bytes themselves, one copy in all (see
    ``registration.py`` for why and how it is sent as is).
    """
    if records is None:
        payload, next_offset = data.records, fetch_next_offset(data, requested_offset)
    else:
        payload, next_offset = records, next_offset_after(records, requested_offset)
    fields = pb.FetchResponse(
        high_watermark=data.high_watermark,
        log_start_offset=data.log_start_offset,
        log_end_offset=data.log_end_offset,
        next_offset=next_offset,
        topic=topic,
        partition=partition,
        decoded_records=decoded or (),
    ).SerializeToString()
    if not payload:
        return fields, next_offset
    return b"".join((fields, _RECORDS_TAG, _varint(len(payload)), payload)), next_offset


def _varint(value: int) -> bytes:
    assert value >= 0
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# -- offsets ------------------------------------------------------------------------------------


def add_partition_offset(results: Any, topic: str, partition: int, found: Any) -> None:
    """A PartitionOffset added to a response's repeated ``results`` in place (building the
    message and appending it would copy it: OffsetsForTimes adds thousands per request).
    ``found`` is a storage TimestampAndOffset, or None: offset -1 and timestamp -1."""
    result = results.add()
    result.topic = topic
    result.partition = partition
    if found is None:
        result.offset = result.timestamp_ms = -1
    else:
        result.offset = found.offset
        result.timestamp_ms = found.timestamp_ms


def partition_offset_error(
    target: pb.PartitionTimestamp, status: Any, message: str, error: Any = None
) -> pb.PartitionOffset:
    """A partition OffsetsForTimes could not answer (``status``: a status.ErrorStatus); the owner's
    hint when ``error`` is a cluster refusal (cluster_routing's, with ``owner_id``)."""
    return pb.PartitionOffset(
        topic=target.topic, partition=target.partition, offset=-1, timestamp_ms=-1,
        error=pb.PartitionError(code=status.code.value[0], message=message,
                                error_class=status.error_class,
                                owner_id=getattr(error, "owner_id", ""),
                                owner_address=getattr(error, "owner_address", ""),
                                owner_epoch=getattr(error, "epoch", 0)),
    )


def fill_partition_error(error: pb.PartitionError, status: Any, message: str, cause: Any = None) -> None:
    """``error`` (a PartitionError in place: the packed form's TargetError.error) filled as
    ``partition_offset_error`` fills the old form's."""
    error.code, error.message, error.error_class = status.code.value[0], message, status.error_class
    error.owner_id = getattr(cause, "owner_id", "")
    error.owner_address = getattr(cause, "owner_address", "")
    error.owner_epoch = getattr(cause, "epoch", 0)


# -- admin --------------------------------------------------------------------------------------


def create_topic_response(topic: str, partitions: int, config: Any) -> pb.CreateTopicResponse:
    return pb.CreateTopicResponse(
        topic=topic, partitions=partitions, configs=config.to_properties()
    )


def list_topics_response(topics: Iterable[tuple[str, int]],
                         internal: frozenset[str] = frozenset()) -> pb.ListTopicsResponse:
    return pb.ListTopicsResponse(topics=[
        pb.TopicSummary(topic=topic, partitions=count, internal=topic in internal) for topic, count in topics
    ])


def describe_topic_response(
    description: Any, log_dir_label: Callable[[str], str]
) -> pb.DescribeTopicResponse:
    """``log_dir_label`` names a partition's directory without its server path."""
    configs: Mapping[str, str] = description.config.to_properties()
    return pb.DescribeTopicResponse(
        topic=description.topic,
        configs=configs,
        partition_count=len(description.partitions) + len(description.offline_partitions),
        partitions=[
            pb.PartitionDescription(
                partition=p.partition,
                log_start_offset=p.log_start_offset,
                log_end_offset=p.log_end_offset,
                high_watermark=p.high_watermark,
                size_bytes=p.size_bytes,
                segment_count=p.segment_count,
                log_dir=log_dir_label(str(p.log_dir)),
                configs=configs,
                local_log_start_offset=p.local_log_start_offset,
                local_segment_count=p.segment_count,
                local_size_bytes=p.size_bytes,
                remote_segment_count=p.remote_segment_count,
                remote_size_bytes=p.remote_size_bytes,
            )
            for p in description.partitions
        ],
    )


def explain_lookup_response(explanation: Any) -> pb.ExplainLookupResponse:
    """A storage LookupExplanation as the ExplainLookup answer."""
    return pb.ExplainLookupResponse(
        segment_count=explanation.segment_count,
        segment_base_offset=explanation.segment_base_offset,
        searches=[
            pb.IndexSearch(
                index=search.index,
                path=search.path,
                entry_count=search.entry_count,
                zone=search.zone.value,
                slot=search.slot,
                probed_slots=search.probed_slots,
                pages=search.pages,
                pages_resident=search.pages_resident,
            )
            for search in explanation.searches
        ],
        index_position=explanation.index_position,
        found_offset=explanation.found_offset,
        found_position=explanation.found_position,
        scanned_bytes=explanation.scanned_bytes,
        duration_us=round(explanation.duration_seconds * 1_000_000),
        remote_segment_id=explanation.remote_segment_id,
    )
