from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MovePartitionRequest(_message.Message):
    __slots__ = ("topic", "partition", "to_instance", "from_instance")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TO_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    FROM_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    to_instance: str
    from_instance: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., to_instance: _Optional[str] = ..., from_instance: _Optional[str] = ...) -> None: ...

class MovePartitionResponse(_message.Message):
    __slots__ = ("from_instance", "to_instance", "epoch", "log_start_offset", "log_end_offset", "bytes_copied", "batch_count", "fenced_ms", "elapsed_ms", "bytes_copied_fenced")
    FROM_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    TO_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BYTES_COPIED_FIELD_NUMBER: _ClassVar[int]
    BATCH_COUNT_FIELD_NUMBER: _ClassVar[int]
    FENCED_MS_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    BYTES_COPIED_FENCED_FIELD_NUMBER: _ClassVar[int]
    from_instance: str
    to_instance: str
    epoch: int
    log_start_offset: int
    log_end_offset: int
    bytes_copied: int
    batch_count: int
    fenced_ms: int
    elapsed_ms: int
    bytes_copied_fenced: int
    def __init__(self, from_instance: _Optional[str] = ..., to_instance: _Optional[str] = ..., epoch: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., bytes_copied: _Optional[int] = ..., batch_count: _Optional[int] = ..., fenced_ms: _Optional[int] = ..., elapsed_ms: _Optional[int] = ..., bytes_copied_fenced: _Optional[int] = ...) -> None: ...

class CopiedFile(_message.Message):
    __slots__ = ("name", "size", "identity")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    identity: str
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ..., identity: _Optional[str] = ...) -> None: ...

class CopyPartitionRequest(_message.Message):
    __slots__ = ("topic", "partition", "epoch", "final", "copied", "final_revision")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    COPIED_FIELD_NUMBER: _ClassVar[int]
    FINAL_REVISION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    epoch: int
    final: bool
    copied: _containers.RepeatedCompositeFieldContainer[CopiedFile]
    final_revision: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., epoch: _Optional[int] = ..., final: _Optional[bool] = ..., copied: _Optional[_Iterable[_Union[CopiedFile, _Mapping]]] = ..., final_revision: _Optional[int] = ...) -> None: ...

class CopyPartitionChunk(_message.Message):
    __slots__ = ("name", "position", "data", "crc32c", "identity", "summary", "log_start_offset", "log_end_offset", "files")
    NAME_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CRC32C_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    name: str
    position: int
    data: bytes
    crc32c: int
    identity: str
    summary: bool
    log_start_offset: int
    log_end_offset: int
    files: _containers.RepeatedCompositeFieldContainer[CopiedFile]
    def __init__(self, name: _Optional[str] = ..., position: _Optional[int] = ..., data: _Optional[bytes] = ..., crc32c: _Optional[int] = ..., identity: _Optional[str] = ..., summary: _Optional[bool] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., files: _Optional[_Iterable[_Union[CopiedFile, _Mapping]]] = ...) -> None: ...

class AbortMoveRequest(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class AbortMoveResponse(_message.Message):
    __slots__ = ("aborted", "to_instance")
    ABORTED_FIELD_NUMBER: _ClassVar[int]
    TO_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    aborted: bool
    to_instance: str
    def __init__(self, aborted: _Optional[bool] = ..., to_instance: _Optional[str] = ...) -> None: ...

class TakeOverPartitionRequest(_message.Message):
    __slots__ = ("topic", "partition", "unclean")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    UNCLEAN_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    unclean: bool
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., unclean: _Optional[bool] = ...) -> None: ...

class TakeOverPartitionResponse(_message.Message):
    __slots__ = ("from_instance", "epoch", "start_offset")
    FROM_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    from_instance: str
    epoch: int
    start_offset: int
    def __init__(self, from_instance: _Optional[str] = ..., epoch: _Optional[int] = ..., start_offset: _Optional[int] = ...) -> None: ...

class DescribeClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterInstanceStatus(_message.Message):
    __slots__ = ("instance_id", "address", "alive", "gone_since_ms", "partition_count", "bytes")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    GONE_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_COUNT_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    address: str
    alive: bool
    gone_since_ms: int
    partition_count: int
    bytes: int
    def __init__(self, instance_id: _Optional[str] = ..., address: _Optional[str] = ..., alive: _Optional[bool] = ..., gone_since_ms: _Optional[int] = ..., partition_count: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class OfflinePartition(_message.Message):
    __slots__ = ("topic", "partition", "owner_id", "gone_since_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    GONE_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    owner_id: str
    gone_since_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., owner_id: _Optional[str] = ..., gone_since_ms: _Optional[int] = ...) -> None: ...

class MoveInProgress(_message.Message):
    __slots__ = ("topic", "partition", "from_instance", "to_instance", "state", "started_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FROM_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    TO_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    from_instance: str
    to_instance: str
    state: str
    started_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., from_instance: _Optional[str] = ..., to_instance: _Optional[str] = ..., state: _Optional[str] = ..., started_ms: _Optional[int] = ...) -> None: ...

class DescribeClusterResponse(_message.Message):
    __slots__ = ("cluster_name", "instance_id", "current", "instances", "offline_partitions", "moves")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    MOVES_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    instance_id: str
    current: bool
    instances: _containers.RepeatedCompositeFieldContainer[ClusterInstanceStatus]
    offline_partitions: _containers.RepeatedCompositeFieldContainer[OfflinePartition]
    moves: _containers.RepeatedCompositeFieldContainer[MoveInProgress]
    def __init__(self, cluster_name: _Optional[str] = ..., instance_id: _Optional[str] = ..., current: _Optional[bool] = ..., instances: _Optional[_Iterable[_Union[ClusterInstanceStatus, _Mapping]]] = ..., offline_partitions: _Optional[_Iterable[_Union[OfflinePartition, _Mapping]]] = ..., moves: _Optional[_Iterable[_Union[MoveInProgress, _Mapping]]] = ...) -> None: ...
