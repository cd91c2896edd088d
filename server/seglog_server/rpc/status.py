"""Every error class the service can meet, mapped to a gRPC status code, once.

The servicer catches exceptions at the boundary and asks ``status_for``; nothing else in the
service chooses a status code. Lookup walks the exception's MRO, so a subclass without its own
row takes its parent's code, and the table's order does not matter. An exception with no row at
all is a bug: INTERNAL, with its traceback logged by the caller.

The message sent is the exception's own text (storage and codec messages say what was expected
and what was found); the class name travels in the ``seglog-error`` trailing metadata entry so a
client can tell, say, RecordTooLargeError from RecordBatchTooLargeError.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import grpc

from seglog import records as codec
from seglog_server import groups, security
from seglog_server.storage.base import errors as storage
from seglog_server.storage.base.io_errors import exhaustion_error

from . import cluster_routing as cluster
from . import errors as service
from . import move_errors as moves

__all__ = [
    "ERROR_CLASS_METADATA_KEY",
    "RETRY_AFTER_METADATA_KEY",
    "STATUS_BY_ERROR",
    "ErrorStatus",
    "status_for",
]

ERROR_CLASS_METADATA_KEY = "seglog-error"
# Quota refusals say when to come back, in milliseconds (the client's retries wait that long).
RETRY_AFTER_METADATA_KEY = "retry-after-ms"

_Code = grpc.StatusCode

STATUS_BY_ERROR: Mapping[type[BaseException], grpc.StatusCode] = {
    # -- storage: the caller's request ------------------------------------------------------
    storage.InvalidTopicError: _Code.INVALID_ARGUMENT,
    storage.InvalidConfigError: _Code.INVALID_ARGUMENT,
    storage.InvalidRecordError: _Code.INVALID_ARGUMENT,
    storage.InvalidTimestampError: _Code.INVALID_ARGUMENT,
    storage.TransactionsNotSupportedError: _Code.INVALID_ARGUMENT,
    # Idempotent produce: the batch is well formed but the producer's state on this partition
    # refuses it (a sequence gap or reorder; a fenced older epoch). Nothing was written.
    storage.OutOfOrderSequenceError: _Code.FAILED_PRECONDITION,
    storage.InvalidProducerEpochError: _Code.FAILED_PRECONDITION,
    # Cluster mode: the append was admitted under an older ownership epoch (produce answers the
    # owner's hint instead, cluster_routing.fenced_append_error); nothing was written.
    storage.FencedLeaderEpochError: _Code.FAILED_PRECONDITION,
    storage.UnknownTopicOrPartitionError: _Code.NOT_FOUND,
    storage.TopicExistsError: _Code.ALREADY_EXISTS,
    storage.OffsetOutOfRangeError: _Code.OUT_OF_RANGE,
    # A produced batch whose CRC does not match its bytes (or a stored one that fails a check).
    storage.CorruptRecordError: _Code.DATA_LOSS,
    # Stored bytes that fail a read's checks: never skipped, never served as offsets.
    storage.CorruptSegmentError: _Code.DATA_LOSS,
    storage.OffsetsLostError: _Code.DATA_LOSS,  # names the lost range
    storage.RecordTooLargeError: _Code.RESOURCE_EXHAUSTED,
    storage.RecordBatchTooLargeError: _Code.RESOURCE_EXHAUSTED,
    # The batch is valid but this log cannot take its offsets (relative offsets overflow).
    storage.OffsetOverflowError: _Code.FAILED_PRECONDITION,
    storage.LogDirOfflineError: _Code.UNAVAILABLE,
    # Disk full or out of descriptors: retriable, the directory stays online (io_errors.py).
    storage.ResourceExhaustedError: _Code.RESOURCE_EXHAUSTED,
    storage.LogDirFullError: _Code.RESOURCE_EXHAUSTED,
    storage.TooManyOpenFilesError: _Code.RESOURCE_EXHAUSTED,
    # The directories are locked by another process or hold one partition twice.
    storage.LogDirStateError: _Code.FAILED_PRECONDITION,
    # A partition's topic.properties cannot be read: its settings are lost.
    storage.CorruptTopicMetadataError: _Code.DATA_LOSS,
    # -- storage: offline cleaning -------------------------------------------------------------
    storage.InvalidSnapshotIdError: _Code.INVALID_ARGUMENT,
    storage.SnapshotNotFoundError: _Code.NOT_FOUND,
    # The topic is not compacted, or nothing is cleanable yet: the log's state refuses it.
    storage.NotCleanableError: _Code.FAILED_PRECONDITION,
    # The log changed since the snapshot, or the job's output is damaged: nothing is installed.
    storage.StaleCleaningResultError: _Code.FAILED_PRECONDITION,
    storage.InvalidCleaningResultError: _Code.FAILED_PRECONDITION,
    # -- storage: the remote tier (object store) ----------------------------------------------
    # A store down, slow past its deadline or answering 5xx: retriable, as Kafka's remote reads.
    storage.RemoteStorageUnavailableError: _Code.UNAVAILABLE,
    storage.RemoteResourceNotFoundError: _Code.NOT_FOUND,
    storage.CorruptRemoteObjectError: _Code.DATA_LOSS,
    storage.RemoteStorageError: _Code.INTERNAL,  # Kafka: KAFKA_STORAGE_ERROR
    # -- storage: its own invariants (indexes are caches; these are bugs, not bad requests) ----
    storage.CorruptIndexError: _Code.INTERNAL,
    storage.InvalidOffsetError: _Code.INTERNAL,
    storage.IndexFullError: _Code.INTERNAL,
    storage.CorruptCheckpointError: _Code.INTERNAL,
    storage.CorruptProducerSnapshotError: _Code.INTERNAL,  # caught on load: rebuilt from the log  # read as empty by the storage; never expected here
    storage.StorageError: _Code.INTERNAL,
    # -- codec: bytes a producer sent (stored bytes that fail are StoredBatchCorruptError) ------
    codec.InvalidCrcError: _Code.DATA_LOSS,
    codec.DecompressionLimitError: _Code.RESOURCE_EXHAUSTED,
    codec.CorruptRecordError: _Code.INVALID_ARGUMENT,
    codec.UnsupportedCompressionError: _Code.INVALID_ARGUMENT,
    codec.CodecError: _Code.INVALID_ARGUMENT,
    # -- the adapter ---------------------------------------------------------------------------
    service.InvalidRequestError: _Code.INVALID_ARGUMENT,
    service.ResponseTooLargeError: _Code.RESOURCE_EXHAUSTED,
    service.RecordCountTooLargeError: _Code.RESOURCE_EXHAUSTED,  # as RecordTooLargeError
    service.StoredBatchCorruptError: _Code.DATA_LOSS,
    service.ServiceStoppingError: _Code.UNAVAILABLE,
    service.FlushIncompleteError: _Code.UNAVAILABLE,
    service.OverloadedError: _Code.RESOURCE_EXHAUSTED,
    service.InternalTopicError: _Code.PERMISSION_DENIED,
    service.InternalTopicCollisionError: _Code.INVALID_ARGUMENT,  # Kafka: INVALID_TOPIC_EXCEPTION
    service.CoordinatorNotAvailableError: _Code.UNAVAILABLE,
    service.ServiceError: _Code.INTERNAL,
    # -- cluster mode (cluster_routing.py): the owner hint rides in trailing metadata -----------
    cluster.InstanceFencedError: _Code.UNAVAILABLE,  # no lease renewal in time: retriable
    cluster.NotPartitionOwnerError: _Code.FAILED_PRECONDITION,  # ask the owner named
    cluster.PartitionOwnerGoneError: _Code.UNAVAILABLE,  # its owner is down: offline until back
    cluster.ClusterUnavailableError: _Code.UNAVAILABLE,  # etcd did not answer a change
    cluster.NoLiveInstanceError: _Code.UNAVAILABLE,
    cluster.PartitionMovingError: _Code.UNAVAILABLE,  # fenced for a move's final catch-up: retriable
    cluster.OffsetsNotReservedError: _Code.UNAVAILABLE,  # log end past its etcd offset ceiling: retriable
    cluster.TopicGenerationError: _Code.UNAVAILABLE,  # local copy not of etcd's generation yet: retriable
    # -- partition moves (move_rpcs.py) ------------------------------------------------------------
    moves.MoveRefusedError: _Code.FAILED_PRECONDITION,  # the message says why (dead target, not owner...)
    moves.UnknownInstanceError: _Code.NOT_FOUND,
    moves.MoveFailedError: _Code.ABORTED,  # begun, not committed: the source still owns it
    moves.NotMoveTargetError: _Code.FAILED_PRECONDITION,  # ask the target (address in trailing metadata)
    # -- consumer groups (groups/errors.py) --------------------------------------------------------
    # A member whose epoch moved on (a zombie after a rebalance or a session timeout): it must
    # rejoin (Kafka's FENCED_MEMBER_EPOCH); the message names the epochs.
    groups.FencedMemberError: _Code.FAILED_PRECONDITION,
    groups.UnknownMemberError: _Code.NOT_FOUND,  # Kafka's UNKNOWN_MEMBER_ID
    groups.GroupNotEmptyError: _Code.FAILED_PRECONDITION,
    # Static membership: the instance id moved to another member id (Kafka's FENCED_INSTANCE_ID:
    # this one must stop, not rejoin), or a join names an instance id a live member holds
    # (UNRELEASED_INSTANCE_ID: two consumers configured with one group.instance.id).
    groups.FencedInstanceIdError: _Code.FAILED_PRECONDITION,
    groups.UnreleasedInstanceIdError: _Code.ALREADY_EXISTS,
    groups.GroupNotFoundError: _Code.NOT_FOUND,  # Kafka's GROUP_ID_NOT_FOUND
    groups.InvalidGroupRequestError: _Code.INVALID_ARGUMENT,
    groups.CorruptGroupRecordError: _Code.DATA_LOSS,
    groups.GroupError: _Code.INTERNAL,
    # -- security: never a path or a credential in the message -----------------------------------
    security.AuthenticationFailedError: _Code.UNAUTHENTICATED,
    security.PermissionDeniedError: _Code.PERMISSION_DENIED,
    security.QuotaExceededError: _Code.RESOURCE_EXHAUSTED,  # with retry-after-ms
    security.PrincipalLimitError: _Code.RESOURCE_EXHAUSTED,  # with retry-after-ms
    # The bounded queue of slow token checks is full: the caller retries after the hint.
    security.AuthenticationBusyError: _Code.RESOURCE_EXHAUSTED,  # with retry-after-ms
    # File errors happen at start and on SIGHUP, never inside a call: a bug if one gets here.
    security.SecurityFileError: _Code.INTERNAL,
    security.SecurityError: _Code.INTERNAL,
}


@dataclass(frozen=True)
class ErrorStatus:
    code: grpc.StatusCode
    message: str
    error_class: str
    expected: bool  # False: no row matched, a bug; the caller logs the traceback
    retry_after_ms: int | None = None
    extra_metadata: tuple[tuple[str, str], ...] = ()  # an error's own ``status_metadata``

    @property
    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        if self.retry_after_ms is None:
            return ((ERROR_CLASS_METADATA_KEY, self.error_class), *self.extra_metadata)
        return (
            (ERROR_CLASS_METADATA_KEY, self.error_class),
            (RETRY_AFTER_METADATA_KEY, str(self.retry_after_ms)),
            *self.extra_metadata,
        )


def status_for(exc: BaseException) -> ErrorStatus:
    """The status to send for ``exc``: its class's row, the nearest ancestor's, or INTERNAL."""
    name = type(exc).__name__
    text = str(exc) or name
    for cls in type(exc).__mro__:
        code = STATUS_BY_ERROR.get(cls)
        if code is not None:
            retry_after_ms = getattr(exc, "retry_after_ms", None)
            return ErrorStatus(code, text, name, expected=True, retry_after_ms=retry_after_ms,
                               extra_metadata=tuple(getattr(exc, "status_metadata", ())))
    # An exhausted resource (no descriptor, a full disk) is the world, not a bug, wherever the
    # OSError came from: it answers as the storage's own error for it would (retriable), with
    # no path in the message.
    exhausted = exhaustion_error(exc, "serving this call") if isinstance(exc, OSError) else None
    if exhausted is not None:
        return status_for(exhausted)
    return ErrorStatus(_Code.INTERNAL, f"internal error ({name}): {text}", name, expected=False)
