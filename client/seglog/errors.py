"""Errors raised by the seglog client.

Every error the client raises on purpose derives from one root. gRPC status codes are translated
into these classes once, here, through ``_STATUS_TO_ERROR``; codec errors from ``seglog.records``
through ``_CODEC_TO_ERROR``. The original exception is always chained as ``__cause__``::

    SeglogError                       root; .code is the gRPC status code (None when raised locally)
    ├── InvalidRequestError           INVALID_ARGUMENT: bad topic name, bad config, malformed batch
    ├── TopicNotFoundError            NOT_FOUND: unknown topic or partition
    ├── TopicExistsError              ALREADY_EXISTS: CreateTopic of an existing topic
    ├── OffsetOutOfRangeError         OUT_OF_RANGE: offset outside [log start, log end]
    ├── CorruptRecordError            DATA_LOSS; also a fetched batch whose CRC or layout is wrong
    ├── RecordTooLargeError           RESOURCE_EXHAUSTED with ``seglog-error`` metadata (the service's
    │                                 own size errors); also a record above max_request_bytes
    ├── FailedPreconditionError       FAILED_PRECONDITION: valid request the log's state refuses
    │   ├── NotPartitionOwnerError    cluster mode: another instance owns the partition; its id,
    │   │                             address and epoch from ``seglog-owner-*`` (retriable there)
    │   ├── OutOfOrderSequenceError   an idempotent batch whose sequence does not follow its
    │   │                             producer's last one on the partition (nothing written)
    │   └── InvalidProducerEpochError an idempotent batch from a fenced (older) producer epoch
    ├── AuthenticationError           UNAUTHENTICATED
    ├── AuthorizationError            PERMISSION_DENIED
    ├── ServiceUnavailableError       UNAVAILABLE: service down, stopping, or log dir offline; also
    │   │                             CANCELLED from the service's side (its gRPC server stopping
    │   │                             under a call that just arrived) (retriable)
    │   ├── OwnerUnavailableError     cluster mode: the partition's owner is gone (``seglog-owner-*``)
    │   ├── ServiceOverloadedError    any other RESOURCE_EXHAUSTED: gRPC's own limits (max concurrent
    │   │   │                         RPCs, message size), no ``seglog-error`` metadata, or the
    │   │   │                         service's OverloadedError (a named limit is full) (retriable)
    │   │   └── QuotaExceededError    RESOURCE_EXHAUSTED from a per-principal quota or cap; its
    │   │                             ``retry_after_ms`` (from ``retry-after-ms``) says when (retriable)
    │   └── ServiceResourceExhaustedError  RESOURCE_EXHAUSTED for a full disk or no descriptors
    │                                 left on the service (retriable once space is freed)
    ├── RequestTimeoutError           DEADLINE_EXCEEDED, or a local wait ran out (retriable; also a
    │                                 builtin TimeoutError)
    ├── ServiceError                  any other status: INTERNAL, UNKNOWN, UNIMPLEMENTED, ...
    └── ClientClosedError             the producer, consumer or admin was already closed

``retriable`` says whether repeating the same request may succeed without changing it;
``retry_after_ms`` is the service's hint of when (None when it gave none). The producer's and
consumer's retries wait at least that long.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import grpc

from seglog.records import errors as codec_errors

__all__ = [
    "AuthenticationError",
    "AuthorizationError",
    "ClientClosedError",
    "CorruptRecordError",
    "FailedPreconditionError",
    "InvalidProducerEpochError",
    "InvalidRequestError",
    "NotPartitionOwnerError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "OwnerUnavailableError",
    "QuotaExceededError",
    "RecordTooLargeError",
    "RequestTimeoutError",
    "SeglogError",
    "ServiceError",
    "ServiceOverloadedError",
    "ServiceResourceExhaustedError",
    "ServiceUnavailableError",
    "TopicExistsError",
    "TopicNotFoundError",
    "error_from_codec",
    "error_from_partition",
    "error_from_rpc",
    "error_from_status",
    "raise_partition_errors",
    "translate_codec_errors",
    "translate_rpc_errors",
]


class SeglogError(Exception):
    """Root of every error the seglog client raises on purpose."""

    retriable: ClassVar[bool] = False

    def __init__(
        self, message: str, *, code: grpc.StatusCode | None = None, service_error: str | None = None,
        retry_after_ms: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retry_after_ms = retry_after_ms
        # The service's own name for the failure (its ``seglog-error`` trailing metadata), e.g.
        # "RecordBatchTooLargeError" under RESOURCE_EXHAUSTED; None when it sent none.
        self.service_error = service_error

    def __str__(self) -> str:
        if self.code is None:
            return self.message
        return f"{self.message} ({self.code.name})"


class InvalidRequestError(SeglogError):
    pass


class TopicNotFoundError(SeglogError):
    pass


class TopicExistsError(SeglogError):
    pass


class OffsetOutOfRangeError(SeglogError):
    pass


class CorruptRecordError(SeglogError):
    pass


class RecordTooLargeError(SeglogError):
    pass


class FailedPreconditionError(SeglogError):
    pass


class OutOfOrderSequenceError(FailedPreconditionError):
    """The service refused an idempotent batch: a batch before it on its partition is missing
    (it failed) or the batches arrived out of order. Nothing of it was written."""


class _OwnerHint:
    """The partition's owner as a refusal named it (a unary call's trailing ``seglog-owner-*``, a
    stream message's ``StreamError.owner_*``); None where the service sent none (a build from
    before the stream's fields names the owner there only in its text)."""

    def __init__(
        self, message: str, *, owner_id: str | None = None, owner_address: str | None = None,
        epoch: int | None = None, **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)  # type: ignore[call-arg]
        self.owner_id = owner_id
        self.owner_address = owner_address or None
        self.epoch = epoch


class NotPartitionOwnerError(_OwnerHint, FailedPreconditionError):
    """Cluster mode: the instance asked does not own the partition (docs/cluster.md). Retriable
    as Kafka's NOT_LEADER_OR_FOLLOWER is: nothing was written, and the same request succeeds at
    the owner. ``owner_id``, ``owner_address`` and ``epoch`` are the service's hint."""

    retriable = True


class InvalidProducerEpochError(FailedPreconditionError):
    """The service refused an idempotent batch whose producer epoch is older than the one its
    producer id last wrote with on the partition. Nothing of it was written."""


class AuthenticationError(SeglogError):
    pass


class AuthorizationError(SeglogError):
    pass


class ServiceUnavailableError(SeglogError):
    retriable = True


class OwnerUnavailableError(_OwnerHint, ServiceUnavailableError):
    """Cluster mode: the partition's owner is not registered (dead or cut off from etcd); the
    message says since when. Its partitions wait for it (or an operator's move)."""


class ServiceOverloadedError(ServiceUnavailableError):
    """RESOURCE_EXHAUSTED from gRPC itself (too many concurrent RPCs, a message size limit)."""


class QuotaExceededError(ServiceOverloadedError):
    """The caller's principal is over a byte-rate quota or a concurrency cap; wait
    ``retry_after_ms`` and try again."""


class ServiceResourceExhaustedError(ServiceUnavailableError):
    """RESOURCE_EXHAUSTED because the service's disk is full or it ran out of descriptors
    (``seglog-error`` LogDirFullError or TooManyOpenFilesError): retriable once space or
    descriptors are back; reads and deletions still work meanwhile."""


# The service's names (``seglog-error``) of RESOURCE_EXHAUSTED answers that pass with time.
_RETRIABLE_EXHAUSTION = frozenset({"LogDirFullError", "TooManyOpenFilesError", "ResourceExhaustedError"})


class RequestTimeoutError(SeglogError, TimeoutError):
    retriable = True


class ServiceError(SeglogError):
    pass


class ClientClosedError(SeglogError):
    pass


# Trailing metadata entry in which the service names its error class.
SERVICE_ERROR_METADATA_KEY = "seglog-error"
# Trailing metadata entry with the service's retry hint, in milliseconds.
RETRY_AFTER_METADATA_KEY = "retry-after-ms"
# Trailing metadata of a refusal naming the partition's owner (server rpc/cluster_routing.py).
OWNER_ID_METADATA_KEY = "seglog-owner-id"
OWNER_ADDRESS_METADATA_KEY = "seglog-owner-address"
EPOCH_METADATA_KEY = "seglog-epoch"
_KNOWN_METADATA_KEYS = (SERVICE_ERROR_METADATA_KEY, RETRY_AFTER_METADATA_KEY, OWNER_ID_METADATA_KEY,
                        OWNER_ADDRESS_METADATA_KEY, EPOCH_METADATA_KEY)
# Longest retry hint honoured: a hint from a confused or hostile service must not park a client.
RETRY_AFTER_MS_MAX = 60_000
# The service's class for a full concurrency limit (rpc/errors.py): retriable, like gRPC's own.
_OVERLOADED = "OverloadedError"

# The one place a gRPC status becomes a client exception. Codes missing here become ServiceError.
_STATUS_TO_ERROR: dict[grpc.StatusCode, type[SeglogError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequestError,
    grpc.StatusCode.NOT_FOUND: TopicNotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: TopicExistsError,
    grpc.StatusCode.OUT_OF_RANGE: OffsetOutOfRangeError,
    grpc.StatusCode.DATA_LOSS: CorruptRecordError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: RecordTooLargeError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.UNAUTHENTICATED: AuthenticationError,
    grpc.StatusCode.PERMISSION_DENIED: AuthorizationError,
    grpc.StatusCode.UNAVAILABLE: ServiceUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: RequestTimeoutError,
    # A CANCELLED status reaching the client is never its own cancel (grpc.aio raises
    # asyncio.CancelledError for that): the service's gRPC server stopped under a call that arrived
    # after the service drained (rpc/admission.py), or a proxy dropped it. Retriable, as Kafka's
    # client retries a request whose connection dropped (NetworkException); the idempotent
    # producer's retry cannot land twice.
    grpc.StatusCode.CANCELLED: ServiceUnavailableError,
}


# Service error classes (``seglog-error``) that refine the code's class: quota refusals are
# RESOURCE_EXHAUSTED like size errors, but retriable after the hint.
_SERVICE_ERROR_TO_ERROR: dict[str, type[SeglogError]] = {
    "QuotaExceededError": QuotaExceededError,
    "PrincipalLimitError": QuotaExceededError,
    # The service's queue of new tokens to check is full: not yet authenticated, retry later.
    "AuthenticationBusyError": QuotaExceededError,
    "OutOfOrderSequenceError": OutOfOrderSequenceError,
    "InvalidProducerEpochError": InvalidProducerEpochError,
    "NotPartitionOwnerError": NotPartitionOwnerError,
}


# Refusals that carry the owner's trailing metadata, by status code.
_OWNER_HINT_ERRORS: dict[grpc.StatusCode, type[NotPartitionOwnerError | OwnerUnavailableError]] = {
    grpc.StatusCode.FAILED_PRECONDITION: NotPartitionOwnerError,
    grpc.StatusCode.UNAVAILABLE: OwnerUnavailableError,
}


# Codec failures seen by the client (decoding fetched batches, building produced ones). Checked in
# order, most specific first; InvalidCrcError is a CorruptRecordError in the codec's own tree.
_CODEC_TO_ERROR: tuple[tuple[type[codec_errors.CodecError], type[SeglogError]], ...] = (
    (codec_errors.CorruptRecordError, CorruptRecordError),
    (codec_errors.UnsupportedCompressionError, CorruptRecordError),
    (codec_errors.CodecError, CorruptRecordError),
)


def error_from_rpc(error: grpc.RpcError) -> SeglogError:
    """The client exception for a failed RPC (the caller chains it: ``raise ... from error``)."""
    code = error.code() if callable(getattr(error, "code", None)) else None
    details = error.details() if callable(getattr(error, "details", None)) else None
    if not isinstance(code, grpc.StatusCode):
        return ServiceError(f"RPC failed without a status: {error!r}")
    trailing = _trailing_metadata(error)
    translated = error_from_status(
        code, details, trailing.get(SERVICE_ERROR_METADATA_KEY),
        _retry_after_ms(trailing.get(RETRY_AFTER_METADATA_KEY)),
    )
    owner_id = trailing.get(OWNER_ID_METADATA_KEY)
    if owner_id is None:
        return translated
    return with_owner_hint(translated, owner_id, trailing.get(OWNER_ADDRESS_METADATA_KEY),
                           _epoch(trailing.get(EPOCH_METADATA_KEY)))


def with_owner_hint(translated: SeglogError, owner_id: str, owner_address: str | None,
                    epoch: int | None) -> SeglogError:
    """``translated`` (``error_from_status``'s) as the owner-hinted error of its code, carrying
    the refusal's hint as data: a unary call's ``seglog-owner-*`` trailing metadata, a stream
    refusal's ``StreamError.owner_*`` fields. Codes that name no owner keep ``translated``."""
    hinted = _OWNER_HINT_ERRORS.get(translated.code) if translated.code is not None else None
    if hinted is None:
        return translated
    return hinted(
        translated.message, code=translated.code, service_error=translated.service_error,
        retry_after_ms=translated.retry_after_ms, owner_id=owner_id, owner_address=owner_address, epoch=epoch,
    )


def raise_partition_errors(results: Any) -> None:
    """Raises the first failed partition's error of a multi-partition answer (OffsetsForTimes
    answers each partition on its own; the client's calls promise all of them or an error)."""
    for result in results:
        if result.HasField("error"):
            raise error_from_partition(result.error, f"{result.topic}-{result.partition}")


def error_from_partition(error: Any, where: str = "") -> SeglogError:
    """The client exception for one failed partition of a multi-partition answer (a
    ``PartitionError``: a status code number, a message and the service's error class)."""
    codes = {code.value[0]: code for code in grpc.StatusCode}
    code = codes.get(error.code, grpc.StatusCode.UNKNOWN)
    message = f"{where}: {error.message}" if where else error.message
    translated = error_from_status(code, message, error.error_class or None)
    if error.owner_id:  # the owner's hint, as data
        return with_owner_hint(translated, error.owner_id, error.owner_address, error.owner_epoch)
    return translated


def error_from_status(
    code: grpc.StatusCode, details: str | None, service_error: str | None,
    retry_after_ms: int | None = None,
) -> SeglogError:
    """The one mapping from a status (code, details, ``seglog-error`` class, retry hint) to an
    exception."""
    cls = _STATUS_TO_ERROR.get(code, ServiceError)
    if service_error in _SERVICE_ERROR_TO_ERROR:
        cls = _SERVICE_ERROR_TO_ERROR[service_error]
    elif code is grpc.StatusCode.RESOURCE_EXHAUSTED and service_error in _RETRIABLE_EXHAUSTION:
        cls = ServiceResourceExhaustedError
    elif code is grpc.StatusCode.RESOURCE_EXHAUSTED and service_error in (None, _OVERLOADED):
        # The service names its own size errors (RecordTooLargeError, RecordBatchTooLargeError,
        # ResponseTooLargeError) in ``seglog-error``; without it the code came from gRPC itself:
        # max concurrent RPCs or a message size limit. Retriable. So is the service's own
        # OverloadedError (a request, long-poll waiter or stream limit is full).
        cls = ServiceOverloadedError
    message = details or f"the service answered {code.name} without details"
    return cls(message, code=code, service_error=service_error, retry_after_ms=retry_after_ms)


def _trailing_metadata(error: grpc.RpcError) -> dict[str, str]:
    trailing = getattr(error, "trailing_metadata", None)
    try:
        pairs = trailing() if callable(trailing) else None
    except Exception:  # a call object in a state without metadata
        return {}
    found: dict[str, str] = {}
    for key, value in pairs or ():
        if key in _KNOWN_METADATA_KEYS and key not in found:
            found[key] = value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")
    return found


def _retry_after_ms(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return min(max(value, 0), RETRY_AFTER_MS_MAX)


def _epoch(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def error_from_codec(error: codec_errors.CodecError) -> SeglogError:
    """The client exception for a record-codec failure."""
    for codec_cls, cls in _CODEC_TO_ERROR:
        if isinstance(error, codec_cls):
            return cls(str(error))
    raise AssertionError(f"no translation for codec error {type(error).__name__}")


@contextmanager
def translate_rpc_errors() -> Iterator[None]:
    """Re-raise any ``grpc.RpcError`` inside the block as a ``SeglogError``, cause chained."""
    try:
        yield
    except grpc.RpcError as error:
        raise error_from_rpc(error) from error


@contextmanager
def translate_codec_errors() -> Iterator[None]:
    """Re-raise any ``seglog.records`` ``CodecError`` inside the block as a ``SeglogError``."""
    try:
        yield
    except codec_errors.CodecError as error:
        raise error_from_codec(error) from error
