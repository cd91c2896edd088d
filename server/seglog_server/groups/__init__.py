"""The consumer groups' core: Kafka's ``__consumer_offsets`` records, the group's offsets
partition, the committed-offsets map rebuilt by replaying the topic through the storage engine,
and server-side assignment in KIP-848's shape (docs/architecture.md, "Consumer groups").

Imports the storage's public surface (``seglog_server.storage``) and ``seglog.records`` only; no
gRPC (checked by import-linter). ``coordinator.GroupCoordinator`` is what the service composes
(app.py) and rpc/group_rpcs.py calls.
"""

from .errors import (
    CorruptGroupRecordError,
    FencedInstanceIdError,
    FencedMemberError,
    GroupError,
    GroupNotEmptyError,
    GroupNotFoundError,
    InvalidGroupRequestError,
    UnknownGroupRecordError,
    UnknownMemberError,
    UnreleasedInstanceIdError,
)
from .partitioning import OFFSETS_TOPIC_PARTITIONS, partition_for
from .records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

__all__ = [
    "OFFSETS_TOPIC_PARTITIONS",
    "CorruptGroupRecordError",
    "FencedInstanceIdError",
    "FencedMemberError",
    "GroupError",
    "GroupMetadataKey",
    "GroupNotEmptyError",
    "GroupNotFoundError",
    "InvalidGroupRequestError",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "UnknownGroupRecordError",
    "UnknownMemberError",
    "UnreleasedInstanceIdError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "partition_for",
]
