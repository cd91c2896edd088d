"""seglog.records: the Kafka v2 record-batch codec (pure: bytes in, bytes out, no I/O).

- RecordBatchBuilder writes a batch as a Kafka producer does (all five codecs); append_at and
  build(last_offset_delta=) keep the offsets of a compacted batch; build_empty_batch writes
  the empty batch the log cleaner keeps.
- RecordBatch is a zero-copy view of one batch in bytes/bytearray/memoryview/mmap;
  iter_batches walks a buffer of batches by Kafka's file-reading rules.
- BatchWalk and walk_records are the bounded walkers every layer steps through bytes with;
  records_max_timestamp_delta and first_record_reaching their fast paths for common records
  (walk_fast.py), BatchWalk.skip/seek the fast path of offset-checked batch walks;
  seek_record the first record reaching a time target, compiled where the install built
  _walk_c (walk_compiled.py), equal to walk_records; seek_records the same for several
  ascending targets in one walk.
- set_max_timestamp / set_partition_leader_epoch patch headers in place for the broker.
- HEADER and the *_OFFSET constants give the header layout (header.py).
- Errors: CodecError > CorruptRecordError > InvalidCrcError; DecompressionLimitError;
  UnsupportedCompressionError.
"""

from .attributes import Compression, TimestampType
from .batch import RecordBatch, iter_batches
from .builder import RecordBatchBuilder, build_empty_batch
from .crc import crc32c
from .compression import DECOMPRESSED_BYTES_MAX, decompress
from .errors import (
    CodecError,
    CorruptRecordError,
    DecompressionLimitError,
    InvalidCrcError,
    UnsupportedCompressionError,
)
from .header import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    CRC_OFFSET,
    HEADER,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
)
from .header_patch import set_max_timestamp, set_partition_leader_epoch
from .record import Record
from .walk import BatchStop, BatchWalk, vouch_batches, walk_records
from .walk_fast import NONE_REACHING, first_record_reaching, records_max_timestamp_delta
from .walk_compiled import record_times, seek_record, seek_records

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BASE_OFFSET_OFFSET",
    "BASE_SEQUENCE_OFFSET",
    "BASE_TIMESTAMP_OFFSET",
    "BatchStop",
    "BatchWalk",
    "CRC_OFFSET",
    "CodecError",
    "Compression",
    "CorruptRecordError",
    "DECOMPRESSED_BYTES_MAX",
    "DecompressionLimitError",
    "HEADER",
    "InvalidCrcError",
    "LAST_OFFSET_DELTA_OFFSET",
    "LENGTH_OFFSET",
    "LOG_OVERHEAD",
    "MAGIC",
    "MAGIC_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "NONE_REACHING",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "PRODUCER_EPOCH_OFFSET",
    "PRODUCER_ID_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "RECORDS_OFFSET",
    "RECORD_BATCH_OVERHEAD",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "TimestampType",
    "UnsupportedCompressionError",
    "build_empty_batch",
    "crc32c",
    "decompress",
    "first_record_reaching",
    "iter_batches",
    "record_times",
    "records_max_timestamp_delta",
    "seek_record",
    "seek_records",
    "set_max_timestamp",
    "set_partition_leader_epoch",
    "vouch_batches",
    "walk_records",
]
