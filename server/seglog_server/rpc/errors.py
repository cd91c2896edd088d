"""Errors raised by the gRPC adapter itself (requests it refuses, responses it cannot send).

Storage and codec errors are not re-wrapped here: ``seglog_server.rpc.status`` maps them
directly. These cover what only the adapter knows::

    ServiceError
    ├── InvalidRequestError        a request field is missing or out of range   INVALID_ARGUMENT
    ├── ResponseTooLargeError      a response would exceed response_bytes_max   RESOURCE_EXHAUSTED
    ├── RecordCountTooLargeError   a batch declares more than batch_records_max RESOURCE_EXHAUSTED
    ├── StoredBatchCorruptError    a stored batch failed to decode (decode=true) DATA_LOSS
    ├── ServiceStoppingError       the service is shutting down                 UNAVAILABLE
    ├── FlushIncompleteError       an fsynced produce could not be made durable UNAVAILABLE
    └── OverloadedError            a named concurrency limit is full            RESOURCE_EXHAUSTED
"""

from __future__ import annotations

__all__ = [
    "FlushIncompleteError",
    "InvalidRequestError",
    "OverloadedError",
    "RecordCountTooLargeError",
    "ResponseTooLargeError",
    "ServiceError",
    "ServiceStoppingError",
    "StoredBatchCorruptError",
]


class ServiceError(Exception):
    """Root of the errors the gRPC adapter raises on purpose."""


class InvalidRequestError(ServiceError):
    pass


class ResponseTooLargeError(ServiceError):
    pass


class RecordCountTooLargeError(ServiceError):
    """A produced batch declares more records than ``batch_records_max``: refused from its header,
    before any record is decompressed or decoded. Not retriable (the batch must be split)."""


class StoredBatchCorruptError(ServiceError):
    pass


class ServiceStoppingError(ServiceError):
    pass


class FlushIncompleteError(ServiceError):
    pass


class OverloadedError(ServiceError):
    """A named limit (requests, long-poll waiters, streams; service-wide or per client) is full.
    Retriable: the same request succeeds once others finish."""
