"""In-place header rewrites the storage engine applies when it appends a batch.

Kafka's broker stamps the partition leader epoch (outside the CRC, so no CRC change) and,
for LogAppendTime topics or to fix maxTimestamp, rewrites the timestamp type bit and
maxTimestamp and recomputes the CRC (DefaultRecordBatch.setMaxTimestamp).  The base offset
is written by the storage engine itself at BASE_OFFSET_OFFSET (also outside the CRC).
"""

from __future__ import annotations

from .attributes import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    TIMESTAMP_TYPE_SHIFT,
    TRANSACTIONAL_MASK,
    TimestampType,
)
from .batch import RecordBatch
from .header import (
    ATTRIBUTES_FIELD,
    ATTRIBUTES_OFFSET,
    CRC_FIELD,
    CRC_OFFSET,
    MAX_TIMESTAMP_FIELD,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_FIELD,
    PARTITION_LEADER_EPOCH_OFFSET,
    field_struct,
)

_ATTRIBUTES = field_struct(ATTRIBUTES_FIELD)
_MAX_TIMESTAMP = field_struct(MAX_TIMESTAMP_FIELD)
_CRC = field_struct(CRC_FIELD)
_PARTITION_LEADER_EPOCH = field_struct(PARTITION_LEADER_EPOCH_FIELD)
# The attribute bits Kafka keeps when it recomputes attributes; it drops unknown bits 7-15.
_KEPT_ATTRIBUTES = COMPRESSION_MASK | TRANSACTIONAL_MASK | CONTROL_MASK | DELETE_HORIZON_MASK


def set_max_timestamp(buf, timestamp_type: int, max_timestamp_ms: int, position: int = 0) -> None:
    """Set the timestamp type bit and maxTimestamp of the batch at `position` of the
    writable buffer `buf`, and recompute its CRC.  Like Kafka, leaves the bytes untouched
    when both already hold these values.  CorruptRecordError if the batch is not whole."""
    timestamp_type = TimestampType(timestamp_type)
    batch = RecordBatch(buf, position)
    if batch.timestamp_type is timestamp_type and batch.max_timestamp == max_timestamp_ms:
        return
    batch._check_complete()  # the CRC below needs the whole batch inside `buf`
    attributes = (batch.attributes & _KEPT_ATTRIBUTES) | (timestamp_type << TIMESTAMP_TYPE_SHIFT)
    _ATTRIBUTES.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes)
    _MAX_TIMESTAMP.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, max_timestamp_ms)
    _CRC.pack_into(buf, position + CRC_OFFSET, RecordBatch(buf, position).compute_crc())


def set_partition_leader_epoch(buf, epoch: int, position: int = 0) -> None:
    """Write the partition leader epoch of the batch at `position` (outside the CRC)."""
    _PARTITION_LEADER_EPOCH.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)
