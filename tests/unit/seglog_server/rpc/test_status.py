import errno
import importlib
import os
import pkgutil

import grpc
import pytest

import seglog_server.storage

from seglog import records as codec
from seglog_server import groups, security
from seglog_server.rpc import cluster_routing as cluster
from seglog_server.rpc import errors as service
from seglog_server.rpc import move_errors as moves
from seglog_server.rpc.status import (
    ERROR_CLASS_METADATA_KEY,
    RETRY_AFTER_METADATA_KEY,
    STATUS_BY_ERROR,
    status_for,
)
from seglog_server.storage.base import errors as storage
from seglog_server.storage.format.checkpoint import CorruptCheckpointError
from seglog_server.storage.dirs.log_dir import LogDirStateError
from seglog_server.storage.format.topic_metadata import CorruptTopicMetadataError

Code = grpc.StatusCode

# What the public API promises (proto/seglog/v1/log_service.proto, header comment), per class.
PROMISED = {
    storage.InvalidTopicError: Code.INVALID_ARGUMENT,
    storage.InvalidConfigError: Code.INVALID_ARGUMENT,
    storage.InvalidRecordError: Code.INVALID_ARGUMENT,
    storage.InvalidTimestampError: Code.INVALID_ARGUMENT,
    storage.TransactionsNotSupportedError: Code.INVALID_ARGUMENT,
    storage.OutOfOrderSequenceError: Code.FAILED_PRECONDITION,
    storage.InvalidProducerEpochError: Code.FAILED_PRECONDITION,
    storage.FencedLeaderEpochError: Code.FAILED_PRECONDITION,
    storage.CorruptProducerSnapshotError: Code.INTERNAL,
    storage.UnknownTopicOrPartitionError: Code.NOT_FOUND,
    storage.TopicExistsError: Code.ALREADY_EXISTS,
    storage.OffsetOutOfRangeError: Code.OUT_OF_RANGE,
    storage.CorruptRecordError: Code.DATA_LOSS,
    storage.CorruptSegmentError: Code.DATA_LOSS,
    storage.OffsetsLostError: Code.DATA_LOSS,
    storage.RecordTooLargeError: Code.RESOURCE_EXHAUSTED,
    storage.RecordBatchTooLargeError: Code.RESOURCE_EXHAUSTED,
    storage.OffsetOverflowError: Code.FAILED_PRECONDITION,
    storage.LogDirOfflineError: Code.UNAVAILABLE,
    storage.ResourceExhaustedError: Code.RESOURCE_EXHAUSTED,
    storage.LogDirFullError: Code.RESOURCE_EXHAUSTED,
    storage.TooManyOpenFilesError: Code.RESOURCE_EXHAUSTED,
    LogDirStateError: Code.FAILED_PRECONDITION,
    CorruptTopicMetadataError: Code.DATA_LOSS,
    CorruptCheckpointError: Code.INTERNAL,
    storage.CorruptIndexError: Code.INTERNAL,
    storage.InvalidOffsetError: Code.INTERNAL,
    storage.IndexFullError: Code.INTERNAL,
    storage.StorageError: Code.INTERNAL,
    storage.InvalidSnapshotIdError: Code.INVALID_ARGUMENT,
    storage.SnapshotNotFoundError: Code.NOT_FOUND,
    storage.NotCleanableError: Code.FAILED_PRECONDITION,
    storage.StaleCleaningResultError: Code.FAILED_PRECONDITION,
    storage.InvalidCleaningResultError: Code.FAILED_PRECONDITION,
    storage.RemoteStorageUnavailableError: Code.UNAVAILABLE,
    storage.RemoteResourceNotFoundError: Code.NOT_FOUND,
    storage.CorruptRemoteObjectError: Code.DATA_LOSS,
    storage.RemoteStorageError: Code.INTERNAL,
    codec.InvalidCrcError: Code.DATA_LOSS,
    codec.DecompressionLimitError: Code.RESOURCE_EXHAUSTED,
    codec.CorruptRecordError: Code.INVALID_ARGUMENT,
    codec.UnsupportedCompressionError: Code.INVALID_ARGUMENT,
    codec.CodecError: Code.INVALID_ARGUMENT,
    service.InvalidRequestError: Code.INVALID_ARGUMENT,
    service.ResponseTooLargeError: Code.RESOURCE_EXHAUSTED,
    service.RecordCountTooLargeError: Code.RESOURCE_EXHAUSTED,
    service.StoredBatchCorruptError: Code.DATA_LOSS,
    service.ServiceStoppingError: Code.UNAVAILABLE,
    service.FlushIncompleteError: Code.UNAVAILABLE,
    service.OverloadedError: Code.RESOURCE_EXHAUSTED,
    service.InternalTopicError: Code.PERMISSION_DENIED,
    service.CoordinatorNotAvailableError: Code.UNAVAILABLE,
    service.InternalTopicCollisionError: Code.INVALID_ARGUMENT,
    service.ServiceError: Code.INTERNAL,
    # proto/seglog/v1/cluster.proto's header comment.
    cluster.InstanceFencedError: Code.UNAVAILABLE,
    cluster.NotPartitionOwnerError: Code.FAILED_PRECONDITION,
    cluster.PartitionOwnerGoneError: Code.UNAVAILABLE,
    cluster.ClusterUnavailableError: Code.UNAVAILABLE,
    cluster.NoLiveInstanceError: Code.UNAVAILABLE,
    cluster.PartitionMovingError: Code.UNAVAILABLE,
    cluster.OffsetsNotReservedError: Code.UNAVAILABLE,
    cluster.TopicGenerationError: Code.UNAVAILABLE,
    moves.MoveRefusedError: Code.FAILED_PRECONDITION,
    moves.UnknownInstanceError: Code.NOT_FOUND,
    moves.MoveFailedError: Code.ABORTED,
    moves.NotMoveTargetError: Code.FAILED_PRECONDITION,
    groups.FencedMemberError: Code.FAILED_PRECONDITION,
    groups.UnknownMemberError: Code.NOT_FOUND,
    groups.GroupNotEmptyError: Code.FAILED_PRECONDITION,
    groups.FencedInstanceIdError: Code.FAILED_PRECONDITION,
    groups.UnreleasedInstanceIdError: Code.ALREADY_EXISTS,
    groups.GroupNotFoundError: Code.NOT_FOUND,
    groups.InvalidGroupRequestError: Code.INVALID_ARGUMENT,
    groups.CorruptGroupRecordError: Code.DATA_LOSS,
    groups.GroupError: Code.INTERNAL,
    security.AuthenticationFailedError: Code.UNAUTHENTICATED,
    security.PermissionDeniedError: Code.PERMISSION_DENIED,
    security.QuotaExceededError: Code.RESOURCE_EXHAUSTED,
    security.PrincipalLimitError: Code.RESOURCE_EXHAUSTED,
    security.AuthenticationBusyError: Code.RESOURCE_EXHAUSTED,
    security.SecurityFileError: Code.INTERNAL,
    security.SecurityError: Code.INTERNAL,
}

# Security errors build their own messages from their fields (never a path or a credential).
_EXAMPLES = {
    security.AuthenticationFailedError: lambda: security.AuthenticationFailedError(),
    service.InternalTopicError: lambda: service.InternalTopicError("produce to", "__consumer_offsets"),
    service.InternalTopicCollisionError: lambda: service.InternalTopicCollisionError("__consumer.offsets",
                                                                                     "__consumer_offsets"),
    security.PermissionDeniedError: lambda: security.PermissionDeniedError("bob", "write", "events"),
    security.QuotaExceededError: lambda: security.QuotaExceededError("over quota", 250),
    security.PrincipalLimitError: lambda: security.PrincipalLimitError("too many", 100),
    security.AuthenticationBusyError: lambda: security.AuthenticationBusyError("too many checks", 1000),
    cluster.NotPartitionOwnerError: lambda: cluster.NotPartitionOwnerError("owned by b", "b", "h:1", 3),
    cluster.PartitionOwnerGoneError: lambda: cluster.PartitionOwnerGoneError("b is gone", "b", "h:1", 3),
    moves.NotMoveTargetError: lambda: moves.NotMoveTargetError("run by its target b", "b", "h:1"),
}


def _example(error_class):
    return _EXAMPLES.get(error_class, lambda: error_class("what was wrong"))()


@pytest.mark.parametrize("error_class", list(STATUS_BY_ERROR), ids=lambda cls: cls.__name__)
def test_every_row_maps_its_class_to_the_promised_code_with_the_message(error_class):
    error = _example(error_class)
    status = status_for(error)
    assert status.code == PROMISED[error_class]
    assert status.message == str(error)
    assert status.expected
    metadata = ((ERROR_CLASS_METADATA_KEY, error_class.__name__),)
    if isinstance(error, security.QuotaExceededError):
        metadata += ((RETRY_AFTER_METADATA_KEY, str(error.retry_after_ms)),)
    if isinstance(error, (cluster.NotPartitionOwnerError, cluster.PartitionOwnerGoneError)):
        metadata += ((cluster.OWNER_ID_METADATA_KEY, "b"), (cluster.OWNER_ADDRESS_METADATA_KEY, "h:1"),
                     (cluster.EPOCH_METADATA_KEY, "3"))
    if isinstance(error, moves.NotMoveTargetError):  # the target, where the client repeats the move
        metadata += ((cluster.OWNER_ID_METADATA_KEY, "b"), (cluster.OWNER_ADDRESS_METADATA_KEY, "h:1"))
    assert status.trailing_metadata == metadata


def test_authentication_failure_says_nothing_about_which_part_was_wrong():
    status = status_for(security.AuthenticationFailedError())
    assert status.code == Code.UNAUTHENTICATED
    assert "token" in status.message and "certificate" in status.message
    assert not any(word in status.message for word in ("unknown", "wrong", "expired", "missing"))


def test_permission_denied_names_the_principal_operation_and_topic():
    message = status_for(security.PermissionDeniedError("bob", "write", "events")).message
    assert "'bob'" in message and "write" in message and "'events'" in message


def test_table_has_exactly_the_promised_rows():
    assert set(STATUS_BY_ERROR) == set(PROMISED)


@pytest.mark.parametrize(
    ("module", "root"),
    [(storage, storage.StorageError), (codec, codec.CodecError), (service, service.ServiceError),
     (security, security.SecurityError)],
    ids=["storage", "codec", "service", "security"],
)
def test_every_exported_error_class_has_its_own_row(module, root):
    exported = [getattr(module, name) for name in module.__all__]
    error_classes = [c for c in exported if isinstance(c, type) and issubclass(c, root)]
    assert error_classes
    missing = [c.__name__ for c in error_classes if c not in STATUS_BY_ERROR]
    assert not missing, f"no status row for {missing}"


def _all_subclasses(root):
    found = set()
    stack = [root]
    while stack:
        for cls in stack.pop().__subclasses__():
            if cls not in found:
                found.add(cls)
                stack.append(cls)
    return found


def test_every_storage_error_class_in_any_storage_module_has_its_own_row():
    for module in pkgutil.walk_packages(seglog_server.storage.__path__, "seglog_server.storage."):
        importlib.import_module(module.name)
    classes = {c for c in _all_subclasses(storage.StorageError)
               if c.__module__.startswith("seglog_server.storage")}
    missing = sorted(c.__qualname__ for c in classes if c not in STATUS_BY_ERROR)
    assert not missing, f"no status row for {missing}"


def test_subclass_without_a_row_takes_its_parents_code():
    class DiskTiredError(storage.LogDirOfflineError):
        pass

    status = status_for(DiskTiredError("disk is tired"))
    assert status.code == Code.UNAVAILABLE
    assert status.error_class == "DiskTiredError"


def test_unknown_exception_is_internal_and_marked_unexpected():
    status = status_for(KeyError("x"))
    assert status.code == Code.INTERNAL
    assert not status.expected
    assert "KeyError" in status.message


def test_empty_message_falls_back_to_the_class_name():
    assert status_for(storage.TopicExistsError()).message == "TopicExistsError"


@pytest.mark.parametrize(("number", "error_class"), [
    (errno.EMFILE, "TooManyOpenFilesError"),
    (errno.ENFILE, "TooManyOpenFilesError"),
    (errno.ENOSPC, "LogDirFullError"),
    (errno.EDQUOT, "LogDirFullError"),
])
def test_a_raw_oserror_of_an_exhausted_resource_answers_resource_exhausted_without_its_path(number, error_class):
    status = status_for(OSError(number, os.strerror(number), "/srv/seglog/data/t-0/00000000000000000000.log"))
    assert (status.code, status.error_class, status.expected) == (Code.RESOURCE_EXHAUSTED, error_class, True)
    assert "/srv/seglog" not in status.message


def test_any_other_raw_oserror_is_still_a_bug():
    status = status_for(OSError(errno.EIO, "Input/output error"))
    assert (status.code, status.expected) == (Code.INTERNAL, False)
