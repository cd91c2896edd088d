"""The 61-byte header of a Kafka v2 record batch, declared once.

Layout (big-endian, byte offsets on the left)::

     0  baseOffset            int64   first offset of the batch; the broker assigns it
     8  length                int32   bytes after this field: batch size - 12
    12  partitionLeaderEpoch  int32   stamped by the broker; outside the CRC
    16  magic                 int8    2
    17  crc                   uint32  CRC-32C of bytes [21, end of batch)
    21  attributes            int16   compression, timestamp type, flags (attributes.py)
    23  lastOffsetDelta       int32   lastOffset - baseOffset
    27  baseTimestamp         int64   first record's timestamp, or the delete horizon
    35  maxTimestamp          int64   largest record timestamp, or the log append time
    43  producerId            int64
    51  producerEpoch         int16
    53  baseSequence          int32
    57  recordsCount          int32
    61  records ...                   possibly compressed as one stream

The CRC starts at the attributes so that the broker can rewrite baseOffset and
partitionLeaderEpoch (and the file layer can read length/magic) without recomputing it.
Every offset below is derived from HEADER; none is typed twice.
"""

from __future__ import annotations

import struct

HEADER = struct.Struct(
    ">"
    "q"  # baseOffset: offset of the first record (records carry deltas from it)
    "i"  # length: size of the batch minus the 12 bytes of baseOffset and length
    "i"  # partitionLeaderEpoch: leader epoch when the broker appended the batch
    "b"  # magic: record format version, always 2 here
    "I"  # crc: CRC-32C (Castagnoli) of attributes .. end of batch
    "h"  # attributes: compression bits 0-2, timestamp type 3, transactional 4, control 5,
    #      delete horizon 6
    "i"  # lastOffsetDelta: lastOffset - baseOffset (also the last sequence delta)
    "q"  # baseTimestamp: timestamp the records' deltas count from (or the delete horizon)
    "q"  # maxTimestamp: largest record timestamp (CreateTime) or the log append time
    "q"  # producerId: -1 when not idempotent
    "h"  # producerEpoch: -1 when not idempotent
    "i"  # baseSequence: sequence of the first record, -1 when not idempotent
    "i"  # recordsCount: number of records in the batch
)

# Index of each field in HEADER (and in the tuple HEADER.unpack returns), in layout order.
BASE_OFFSET_FIELD = 0
LENGTH_FIELD = 1
PARTITION_LEADER_EPOCH_FIELD = 2
MAGIC_FIELD = 3
CRC_FIELD = 4
ATTRIBUTES_FIELD = 5
LAST_OFFSET_DELTA_FIELD = 6
BASE_TIMESTAMP_FIELD = 7
MAX_TIMESTAMP_FIELD = 8
PRODUCER_ID_FIELD = 9
PRODUCER_EPOCH_FIELD = 10
BASE_SEQUENCE_FIELD = 11
RECORDS_COUNT_FIELD = 12
FIELD_COUNT = 13

_FIELD_CODES = HEADER.format[1:]  # one struct code per field, after the ">" byte order
assert len(_FIELD_CODES) == FIELD_COUNT


def _offset_of(field: int) -> int:
    """Byte offset of a HEADER field: the size of every field before it."""
    return struct.calcsize(HEADER.format[: 1 + field])


def field_struct(field: int) -> struct.Struct:
    """A one-field big-endian Struct for patching a single HEADER field in place."""
    return struct.Struct(">" + _FIELD_CODES[field])


BASE_OFFSET_OFFSET = _offset_of(BASE_OFFSET_FIELD)
LENGTH_OFFSET = _offset_of(LENGTH_FIELD)
PARTITION_LEADER_EPOCH_OFFSET = _offset_of(PARTITION_LEADER_EPOCH_FIELD)
MAGIC_OFFSET = _offset_of(MAGIC_FIELD)
CRC_OFFSET = _offset_of(CRC_FIELD)
ATTRIBUTES_OFFSET = _offset_of(ATTRIBUTES_FIELD)
LAST_OFFSET_DELTA_OFFSET = _offset_of(LAST_OFFSET_DELTA_FIELD)
BASE_TIMESTAMP_OFFSET = _offset_of(BASE_TIMESTAMP_FIELD)
MAX_TIMESTAMP_OFFSET = _offset_of(MAX_TIMESTAMP_FIELD)
PRODUCER_ID_OFFSET = _offset_of(PRODUCER_ID_FIELD)
PRODUCER_EPOCH_OFFSET = _offset_of(PRODUCER_EPOCH_FIELD)
BASE_SEQUENCE_OFFSET = _offset_of(BASE_SEQUENCE_FIELD)
RECORDS_COUNT_OFFSET = _offset_of(RECORDS_COUNT_FIELD)
RECORDS_OFFSET = HEADER.size

# Bytes of baseOffset + length, the "log overhead" every batch carries before `length` counts.
LOG_OVERHEAD = _offset_of(PARTITION_LEADER_EPOCH_FIELD)
# Size of a batch with no records: the whole header.
RECORD_BATCH_OVERHEAD = HEADER.size
# Bytes the file iterator must see before it can read baseOffset, length, epoch and magic
# (Kafka's HEADER_SIZE_UP_TO_MAGIC): with this many or fewer left, iteration stops quietly.
HEADER_BYTES_UP_TO_MAGIC = _offset_of(CRC_FIELD)
# The smallest `length` the file iterator accepts before calling a batch corrupt: Kafka's
# FileLogInputStream checks against the v0 record overhead (14 bytes) for every magic, and
# leaves the stricter v2 minimum (RECORD_BATCH_OVERHEAD - LOG_OVERHEAD) to ensure_valid().
BATCH_LENGTH_MIN = 14
# The smallest `length` a v2 batch can have: a header and no records.
V2_BATCH_LENGTH_MIN = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD

MAGIC = 2

# Sentinels Kafka writes for "not set" (kafka-storage.md, global conventions).
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# The pinned layout of kafka-storage.md 2.1; a changed format string must fail loudly here.
assert HEADER.size == 61
assert (LOG_OVERHEAD, MAGIC_OFFSET, CRC_OFFSET, ATTRIBUTES_OFFSET) == (12, 16, 17, 21)
assert (LAST_OFFSET_DELTA_OFFSET, BASE_TIMESTAMP_OFFSET, MAX_TIMESTAMP_OFFSET) == (23, 27, 35)
assert (PRODUCER_ID_OFFSET, PRODUCER_EPOCH_OFFSET, BASE_SEQUENCE_OFFSET) == (43, 51, 53)
assert RECORDS_COUNT_OFFSET == 57 and HEADER_BYTES_UP_TO_MAGIC == 17
assert BATCH_LENGTH_MIN <= V2_BATCH_LENGTH_MIN == 49
