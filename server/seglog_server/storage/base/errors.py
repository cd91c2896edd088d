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
    │   ├── InvalidTimestampError       record timestamp outside the accepted window
    │   └── TransactionsNotSupportedError  a transactional batch: seglog has no transactions yet
    ├── OutOfOrderSequenceError         an idempotent batch whose sequence does not follow the
    │                                   producer's last one on this partition (a gap or a reorder)
    ├── InvalidProducerEpochError       an idempotent batch from an older epoch of its producer id
    ├── FencedLeaderEpochError          cluster mode: an append admitted under an ownership epoch
    │                                   that is no longer the partition's current one
    ├── CorruptProducerSnapshotError    a .snapshot file fails its checks (never leaves the storage:
    │                                   the state is rebuilt from the log instead)
    ├── CorruptRecordError              CRC mismatch or unreadable batch bytes
    ├── CorruptSegmentError             a stored batch fails a read's checks (length, offsets):
    │   │                               names the partition and the offset asked for
    │   └── OffsetsLostError            a read at offsets recovery cut from a closed segment
    │                                   (lost_offsets.py): names the lost range
    ├── RecordTooLargeError             a batch above max.message.bytes
    ├── RecordBatchTooLargeError        a produced set above segment.bytes
    ├── CorruptIndexError               an index file contradicts itself or its log
    ├── InvalidOffsetError              an index append would not increase the offset
    ├── IndexFullError                  append to an index with no free slot
    ├── OffsetOverflowError             an offset not representable relative to a base offset
    ├── LogDirOfflineError              the log directory failed and was taken offline
    ├── ResourceExhaustedError          retriable: the resource comes back, nothing failed
    │   ├── LogDirFullError             ENOSPC/EDQUOT: the directory's file system is full
    │   └── TooManyOpenFilesError       EMFILE/ENFILE/ENOMEM on open or mmap: descriptors ran out
    ├── LogDirStateError                log dirs seglog refuses to serve (locked elsewhere, a
    │                                   partition in two dirs)
    ├── CorruptCheckpointError          a checkpoint file breaks Kafka's text format
    ├── CorruptTopicMetadataError       a topic.properties file cannot be parsed or contradicts its dir
    ├── InvalidSnapshotIdError          a cleaning snapshot id that cannot name a snapshot directory
    ├── SnapshotNotFoundError           no such cleaning snapshot (committed, dropped or expired)
    ├── NotCleanableError               CreateSnapshot of a partition that is not compacted or has
    │                                   nothing cleanable
    ├── StaleCleaningResultError        the live log changed since the snapshot (retention,
    │                                   DeleteRecords, another cleaning): the result no longer applies
    ├── InvalidCleaningResultError      a cleaning result that is incomplete, damaged or breaks the
    │                                   cleaning contract (CLEANING-CONTRACT: result.json, outputs)
    └── RemoteStorageError              the object store (storage/remote) refused or failed a call
        ├── RemoteStorageUnavailableError  retriable: the store is down, slow past its deadline or
        │                                  answered 5xx; names the endpoint
        ├── RemoteResourceNotFoundError    an object (or the bucket) the call needs is not there
        └── CorruptRemoteObjectError       an object whose size or content breaks its format

Messages say what was expected and what was found, and name the file where there is one.
"""

from __future__ import annotations

__all__ = [
    "CorruptCheckpointError",
    "CorruptIndexError",
    "CorruptProducerSnapshotError",
    "CorruptRecordError",
    "CorruptRemoteObjectError",
    "CorruptSegmentError",
    "CorruptTopicMetadataError",
    "FencedLeaderEpochError",
    "IndexFullError",
    "InvalidCleaningResultError",
    "InvalidConfigError",
    "InvalidOffsetError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidSnapshotIdError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "LogDirFullError",
    "LogDirOfflineError",
    "LogDirStateError",
    "NotCleanableError",
    "OffsetOutOfRangeError",
    "OffsetOverflowError",
    "OffsetsLostError",
    "OutOfOrderSequenceError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageUnavailableError",
    "ResourceExhaustedError",
    "SnapshotNotFoundError",
    "StaleCleaningResultError",
    "StorageError",
    "TooManyOpenFilesError",
    "TopicExistsError",
    "TransactionsNotSupportedError",
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


class TransactionsNotSupportedError(InvalidRecordError):
    """A batch with the transactional attribute: refused until seglog has transactions."""


class OutOfOrderSequenceError(StorageError):
    """An idempotent batch whose first sequence is not the one after its producer's last batch
    on this partition (Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER). Nothing was written."""


class InvalidProducerEpochError(StorageError):
    """An idempotent batch carrying an epoch below the one its producer id last wrote with
    (Kafka's INVALID_PRODUCER_EPOCH): a fenced, older incarnation. Nothing was written."""


class FencedLeaderEpochError(StorageError):
    """Cluster mode: the append carries the ownership epoch its request was admitted under, and
    the partition's current epoch moved past it (Kafka's FENCED_LEADER_EPOCH). Nothing was
    written; the message names both epochs."""

    def __init__(self, message: str, *, admitted_epoch: int = -1, current_epoch: int = -1) -> None:
        super().__init__(message)
        self.admitted_epoch = admitted_epoch
        self.current_epoch = current_epoch


class CorruptProducerSnapshotError(StorageError):
    """A producer-state snapshot file breaks the format (version, CRC, sizes, offsets)."""


class CorruptRecordError(StorageError):
    pass


class CorruptSegmentError(StorageError):
    """A batch a read was about to hand out disagrees with where it came from: its length runs
    past its segment, its base offset is outside the segment's range or not above the previous
    batch's, or its bytes do not parse. The read fails instead of skipping or inventing offsets."""


class OffsetsLostError(CorruptSegmentError):
    """A read at offsets that damage cut from a closed segment (lost_offsets.py). ``start`` and
    ``end`` bound the lost range [start, end); reads below and from ``end`` on still work."""

    def __init__(self, message: str = "", start: int = 0, end: int = 0) -> None:
        super().__init__(message)
        self.start = start
        self.end = end


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


class ResourceExhaustedError(StorageError):
    """A resource ran out that comes back by itself or by an operator's action (disk space,
    descriptors). Nothing failed: the log and its directory stay online, and the same request
    may succeed later. Kafka treats both as a failed log directory; seglog does not."""


class LogDirFullError(ResourceExhaustedError):
    """The file system of a log directory is full (ENOSPC, EDQUOT); nothing was written."""


class TooManyOpenFilesError(ResourceExhaustedError):
    """The process ran out of descriptors or mappings (EMFILE, ENFILE, ENOMEM)."""


class LogDirStateError(StorageError):
    """The log directories are in a state seglog refuses to serve: locked by another process,
    or the same partition found in two directories."""


class CorruptCheckpointError(StorageError):
    """A checkpoint file does not follow the format; its content cannot be trusted."""


class CorruptTopicMetadataError(StorageError):
    """A topic.properties file cannot be parsed or contradicts its directory."""


class InvalidSnapshotIdError(StorageError):
    """A snapshot id that is empty, too long, or not a plain directory name."""


class SnapshotNotFoundError(StorageError):
    """No cleaning snapshot with that id (never made, committed, dropped or expired)."""


class NotCleanableError(StorageError):
    """The partition is not compacted, or holds no closed segment the cleaner may rewrite."""


class StaleCleaningResultError(StorageError):
    """The live log no longer holds what the snapshot saw; the message says what changed."""


class InvalidCleaningResultError(StorageError):
    """A cleaning result that is missing, damaged or inconsistent; the message says where."""


class RemoteStorageError(StorageError):
    """The remote tier's object store refused or failed a call (Kafka's RemoteStorageException)."""


class RemoteStorageUnavailableError(RemoteStorageError):
    """Retriable: the store did not answer within its deadline, refused connections or answered
    5xx. The message names the endpoint and the operation; nothing was half done that is read."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """An object or bucket the call needs is absent (Kafka's RemoteResourceNotFoundException)."""


class CorruptRemoteObjectError(RemoteStorageError):
    """An object whose size or content breaks its format: the message names the key, the
    expected and the found value."""
