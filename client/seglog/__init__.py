"""seglog: the Python client of the seglog log-segment storage service.

    from seglog import Admin, Consumer, Producer

    with Producer("127.0.0.1:50551", linger_ms=5, compression="zstd") as producer:
        producer.send("orders", b"42 apples", key=b"customer-7").result()

Synchronous clients (``Producer``, ``Consumer``, ``Admin``) and asyncio ones (``AsyncProducer``,
``AsyncConsumer``, ``AsyncAdmin``) share one implementation; errors are ``SeglogError``
subclasses (``seglog.errors`` draws the tree). ``seglog.records`` is the Kafka v2 record-batch
codec; ``seglog.v1`` the generated gRPC stubs.

Names are imported lazily on first use, so ``import seglog.records`` (the storage engine, Spark
jobs) does not pull in gRPC.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "Acks",
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncGroupConsumer",
    "AsyncProducer",
    "AuthenticationError",
    "AuthorizationError",
    "BatchMetadata",
    "ClientClosedError",
    "ClusterInstance",
    "ClusterMetadata",
    "CommitFailedError",
    "Consumer",
    "ConsumerRecord",
    "ConsumerStatistics",
    "CorruptRecordError",
    "DEFAULT_SERVER",
    "DeliveryGroup",
    "EARLIEST_TIMESTAMP",
    "FailedPreconditionError",
    "GroupConsumer",
    "GroupDescription",
    "GroupListing",
    "GroupMemberDescription",
    "GroupPartitionLag",
    "InvalidProducerEpochError",
    "InvalidRequestError",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "NoOffsetForPartitionError",
    "NotPartitionOwnerError",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "OwnerUnavailableError",
    "PartitionDescription",
    "PartitionOwner",
    "Producer",
    "ProducerStatistics",
    "QuotaExceededError",
    "RawBatch",
    "RebalanceCallbackError",
    "RecordBatchView",
    "RecordFuture",
    "RecordMetadata",
    "RecordTooLargeError",
    "RequestTimeoutError",
    "SeglogError",
    "ServiceError",
    "ServiceOverloadedError",
    "ServiceResourceExhaustedError",
    "ServiceUnavailableError",
    "TopicDescription",
    "TopicExistsError",
    "TopicInfo",
    "TopicNotFoundError",
    "TopicPartition",
    "partition_for_key",
]

# public name -> the module that defines it
_LOCATIONS = {
    "DEFAULT_SERVER": "seglog.structs",
    "EARLIEST_TIMESTAMP": "seglog.structs",
    "LATEST_TIMESTAMP": "seglog.structs",
    "MAX_TIMESTAMP": "seglog.structs",
    "Acks": "seglog.structs",
    "Admin": "seglog.admin",
    "AsyncAdmin": "seglog.admin",
    "AsyncConsumer": "seglog.consumer",
    "AsyncGroupConsumer": "seglog.group_consumer",
    "GroupConsumer": "seglog.group_consumer",
    "GroupDescription": "seglog.structs",
    "GroupListing": "seglog.structs",
    "GroupMemberDescription": "seglog.structs",
    "GroupPartitionLag": "seglog.structs",
    "CommitFailedError": "seglog.group_consumer",
    "NoOffsetForPartitionError": "seglog.group_consumer",
    "RebalanceCallbackError": "seglog.group_consumer",
    "AsyncProducer": "seglog.producer",
    "AuthenticationError": "seglog.errors",
    "AuthorizationError": "seglog.errors",
    "BatchMetadata": "seglog.producer",
    "ClientClosedError": "seglog.errors",
    "ClusterInstance": "seglog.structs",
    "ClusterMetadata": "seglog.structs",
    "Consumer": "seglog.consumer",
    "ConsumerRecord": "seglog.structs",
    "ConsumerStatistics": "seglog.consumer",
    "CorruptRecordError": "seglog.errors",
    "DeliveryGroup": "seglog._delivery",
    "FailedPreconditionError": "seglog.errors",
    "InvalidProducerEpochError": "seglog.errors",
    "InvalidRequestError": "seglog.errors",
    "OffsetAndTimestamp": "seglog.structs",
    "OffsetOutOfRangeError": "seglog.errors",
    "OutOfOrderSequenceError": "seglog.errors",
    "NotPartitionOwnerError": "seglog.errors",
    "OwnerUnavailableError": "seglog.errors",
    "PartitionOwner": "seglog.structs",
    "PartitionDescription": "seglog.structs",
    "Producer": "seglog.producer",
    "ProducerStatistics": "seglog.producer",
    "QuotaExceededError": "seglog.errors",
    "RawBatch": "seglog.consumer",
    "RecordBatchView": "seglog.consumer",
    "RecordFuture": "seglog._delivery",
    "RecordMetadata": "seglog.structs",
    "RecordTooLargeError": "seglog.errors",
    "RequestTimeoutError": "seglog.errors",
    "SeglogError": "seglog.errors",
    "ServiceError": "seglog.errors",
    "ServiceOverloadedError": "seglog.errors",
    "ServiceResourceExhaustedError": "seglog.errors",
    "ServiceUnavailableError": "seglog.errors",
    "TopicDescription": "seglog.structs",
    "TopicExistsError": "seglog.errors",
    "TopicInfo": "seglog.structs",
    "TopicNotFoundError": "seglog.errors",
    "TopicPartition": "seglog.structs",
    "partition_for_key": "seglog._partitioner",
}


def __getattr__(name: str) -> Any:
    module = _LOCATIONS.get(name)
    if module is None:
        raise AttributeError(f"module 'seglog' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from seglog._delivery import DeliveryGroup, RecordFuture
    from seglog._partitioner import partition_for_key
    from seglog.admin import Admin, AsyncAdmin
    from seglog.consumer import AsyncConsumer, Consumer, ConsumerStatistics, RawBatch, RecordBatchView
    from seglog.group_consumer import (
        AsyncGroupConsumer,
        CommitFailedError,
        GroupConsumer,
        NoOffsetForPartitionError,
        RebalanceCallbackError,
    )
    from seglog.errors import (
        AuthenticationError,
        AuthorizationError,
        ClientClosedError,
        CorruptRecordError,
        FailedPreconditionError,
        InvalidProducerEpochError,
        InvalidRequestError,
        NotPartitionOwnerError,
        OffsetOutOfRangeError,
        OutOfOrderSequenceError,
        OwnerUnavailableError,
        QuotaExceededError,
        RecordTooLargeError,
        RequestTimeoutError,
        SeglogError,
        ServiceError,
        ServiceOverloadedError,
        ServiceResourceExhaustedError,
        ServiceUnavailableError,
        TopicExistsError,
        TopicNotFoundError,
    )
    from seglog.producer import AsyncProducer, BatchMetadata, Producer, ProducerStatistics
    from seglog.structs import (
        DEFAULT_SERVER,
        EARLIEST_TIMESTAMP,
        LATEST_TIMESTAMP,
        MAX_TIMESTAMP,
        Acks,
        ClusterInstance,
        ClusterMetadata,
        ConsumerRecord,
        GroupDescription,
        GroupListing,
        GroupMemberDescription,
        GroupPartitionLag,
        OffsetAndTimestamp,
        PartitionDescription,
        PartitionOwner,
        RecordMetadata,
        TopicDescription,
        TopicInfo,
        TopicPartition,
    )
