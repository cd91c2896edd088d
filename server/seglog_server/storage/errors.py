"""Errors raised by the storage engine.

One root, one class per failure mode (Kafka's exception taxonomy). The gRPC adapter maps each
class to a status code once, in ``seglog_server.rpc.status``; nothing else inspects them::

    StorageError
    ├── InvalidTopicError               topic or partition name is illegal
    ├── TopicExistsError
    ├── UnknownTopicOrPartitionError
    ├── InvalidConfigError              unknown topic config or a value out of range
    ├── OffsetOutOfRangeError           offset outside [log start offset, log end offset]
    ├── InvalidRecordError              a produced batch breaks a rule (count, base offset, null key ...)
    │   └── InvalidTimestampError       record timestamp outside the accepted window
    ├── CorruptRecordError              CRC mismatch or unreadable batch bytes
    ├── CorruptSegmentError             a stored batch fails a read's checks (length, offsets):
    │                                   names the partition and the offset asked for
    ├── RecordTooLargeError             a batch above max.message.bytes
    ├── RecordBatchTooLargeError        a produced set above segment.bytes
    ├── CorruptIndexError               an index file contradicts itself or its log
    ├── InvalidOffsetError              an index append would not increase the offset
    ├── IndexFullError                  append to an index with no free slot
    ├── OffsetOverflowError             an offset not representable relative to a base offset
    ├── LogDirOfflineError              the log directory failed and was taken offline
    ├── LogDirStateError                log dirs seglog refuses to serve (locked elsewhere, a
    │                                   partition in two dirs)
    ├── CorruptCheckpointError          a checkpoint file breaks Kafka's text format
    └── CorruptTopicMetadataError       a topic.properties file cannot be parsed or contradicts its dir

Messages say what was expected and what was found, and name the file where there is one.
"""

from __future__ import annotations

__all__ = [
    "CorruptCheckpointError",
    "CorruptIndexError",
    "CorruptRecordError",
    "CorruptSegmentError",
    "CorruptTopicMetadataError",
    "IndexFullError",
    "InvalidConfigError",
    "InvalidOffsetError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "LogDirOfflineError",
    "LogDirStateError",
    "OffsetOutOfRangeError",
    "OffsetOverflowError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "StorageError",
    "TopicExistsError",
    "UnknownTopicOrPartitionError",
]


class StorageError(Exception):
    """Root of every error the storage engine raises on purpose."""


class InvalidTopicError(StorageError):
    pass


class TopicExistsError(StorageError):
    pass


class UnknownTopicOrPartitionError(StorageError):
    pass


class InvalidConfigError(StorageError):
    pass


class OffsetOutOfRangeError(StorageError):
    pass


class InvalidRecordError(StorageError):
    pass


class InvalidTimestampError(InvalidRecordError):
    pass


class CorruptRecordError(StorageError):
    pass


class CorruptSegmentError(StorageError):
    """A batch a read was about to hand out disagrees with where it came from: its length runs
    past its segment, its base offset is outside the segment's range or not above the previous
    batch's, or its bytes do not parse. The read fails instead of skipping or inventing offsets."""


class RecordTooLargeError(StorageError):
    pass


class RecordBatchTooLargeError(StorageError):
    pass


class CorruptIndexError(StorageError):
    pass


class InvalidOffsetError(StorageError):
    pass


class IndexFullError(StorageError):
    pass


class OffsetOverflowError(StorageError):
    pass


class LogDirOfflineError(StorageError):
    pass


class LogDirStateError(StorageError):
    """The log directories are in a state seglog refuses to serve: locked by another process,
    or the same partition found in two directories."""


class CorruptCheckpointError(StorageError):
    """A checkpoint file does not follow the format; its content cannot be trusted."""


class CorruptTopicMetadataError(StorageError):
    """A topic.properties file cannot be parsed or contradicts its directory."""
