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
    ├── RecordTooLargeError             a batch above max.message.bytes
    ├── RecordBatchTooLargeError        a produced set above segment.bytes
    ├── CorruptIndexError               an index file contradicts itself or its log
    ├── InvalidOffsetError              an index append would not increase the offset
    ├── IndexFullError                  append to an index with no free slot
    ├── OffsetOverflowError             an offset not representable relative to a base offset
    └── LogDirOfflineError              the log directory failed and was taken offline

Messages say what was expected and what was found, and name the file where there is one.
"""

from __future__ import annotations

__all__ = [
    "CorruptIndexError",
    "CorruptRecordError",
    "IndexFullError",
    "InvalidConfigError",
    "InvalidOffsetError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "LogDirOfflineError",
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
