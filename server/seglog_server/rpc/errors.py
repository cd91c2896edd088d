"""Errors raised by the gRPC adapter itself (requests it refuses, responses it cannot send).

Storage and codec errors are not re-wrapped here: ``seglog_server.rpc.status`` maps them
directly. These cover what only the adapter knows::

    ServiceError
    ├── InvalidRequestError        a request field is missing or out of range   INVALID_ARGUMENT
    ├── ResponseTooLargeError      a response would exceed response_bytes_max   RESOURCE_EXHAUSTED
    ├── StoredBatchCorruptError    a stored batch failed to decode (decode=true) DATA_LOSS
    └── ServiceStoppingError       the service is shutting down                 UNAVAILABLE
"""

from __future__ import annotations

__all__ = [
    "InvalidRequestError",
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


class StoredBatchCorruptError(ServiceError):
    pass


class ServiceStoppingError(ServiceError):
    pass
