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
    ├── OverloadedError            a named concurrency limit is full            RESOURCE_EXHAUSTED
    ├── InternalTopicError         a user write or delete of __consumer_offsets PERMISSION_DENIED
    └── CoordinatorNotAvailableError  no group coordinator runs here            UNAVAILABLE
"""

from __future__ import annotations

__all__ = [
    "CoordinatorNotAvailableError",
    "FlushIncompleteError",
    "InternalTopicCollisionError",
    "InternalTopicError",
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


class InternalTopicError(ServiceError):
    """Produce, DeleteTopic, DeleteRecords or CreateTopic of an internal topic by a user: the
    service alone writes __consumer_offsets (Kafka refuses these as INVALID_TOPIC_EXCEPTION /
    TOPIC_AUTHORIZATION_FAILED). Not retriable."""

    def __init__(self, action: str, topic: str) -> None:
        super().__init__(f"{topic!r} is an internal topic of the service (the consumer groups' committed "
                         f"offsets): users may read it, not {action} it; commit offsets with CommitOffsets")
        self.topic = topic


class InternalTopicCollisionError(ServiceError):
    """CreateTopic of a name that collides with an internal topic's ('.' and '_' are the same
    character in metric names, Kafka's rule): refused (INVALID_ARGUMENT), else the service could
    never create its internal topic. Not retriable."""

    def __init__(self, topic: str, internal: str) -> None:
        super().__init__(f"topic {topic!r} collides with the internal topic {internal!r} ('.' and '_' are the "
                         "same character in metric names): choose another name")
        self.topic = topic


class CoordinatorNotAvailableError(ServiceError):
    """Kafka's COORDINATOR_NOT_AVAILABLE: no group coordinator serves here (yet); in cluster mode
    also a group whose offsets partition has no owner in this instance's view yet, or changed
    ownership epoch while the call ran (rpc/group_routing.py). Retriable."""
