from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MetadataRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class InstanceMetadata(_message.Message):
    __slots__ = ("instance_id", "address", "alive", "gone_since_ms")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    GONE_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    address: str
    alive: bool
    gone_since_ms: int
    def __init__(self, instance_id: _Optional[str] = ..., address: _Optional[str] = ..., alive: _Optional[bool] = ..., gone_since_ms: _Optional[int] = ...) -> None: ...

class PartitionMetadata(_message.Message):
    __slots__ = ("topic", "partition", "owner_id", "owner_address", "epoch", "owner_alive")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OWNER_ALIVE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    owner_id: str
    owner_address: str
    epoch: int
    owner_alive: bool
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., owner_id: _Optional[str] = ..., owner_address: _Optional[str] = ..., epoch: _Optional[int] = ..., owner_alive: _Optional[bool] = ...) -> None: ...

class MetadataResponse(_message.Message):
    __slots__ = ("cluster_mode", "cluster_name", "instance_id", "instances", "partitions", "current")
    CLUSTER_MODE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    cluster_mode: bool
    cluster_name: str
    instance_id: str
    instances: _containers.RepeatedCompositeFieldContainer[InstanceMetadata]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionMetadata]
    current: bool
    def __init__(self, cluster_mode: _Optional[bool] = ..., cluster_name: _Optional[str] = ..., instance_id: _Optional[str] = ..., instances: _Optional[_Iterable[_Union[InstanceMetadata, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[PartitionMetadata, _Mapping]]] = ..., current: _Optional[bool] = ...) -> None: ...
