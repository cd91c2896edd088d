from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Acks(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACKS_UNSPECIFIED: _ClassVar[Acks]
    ACKS_WRITTEN: _ClassVar[Acks]
    ACKS_FSYNCED: _ClassVar[Acks]

class Compression(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPRESSION_NONE: _ClassVar[Compression]
    COMPRESSION_GZIP: _ClassVar[Compression]
    COMPRESSION_SNAPPY: _ClassVar[Compression]
    COMPRESSION_LZ4: _ClassVar[Compression]
    COMPRESSION_ZSTD: _ClassVar[Compression]

class StartPosition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    START_POSITION_UNSPECIFIED: _ClassVar[StartPosition]
    START_POSITION_EARLIEST: _ClassVar[StartPosition]
    START_POSITION_LATEST: _ClassVar[StartPosition]
ACKS_UNSPECIFIED: Acks
ACKS_WRITTEN: Acks
ACKS_FSYNCED: Acks
COMPRESSION_NONE: Compression
COMPRESSION_GZIP: Compression
COMPRESSION_SNAPPY: Compression
COMPRESSION_LZ4: Compression
COMPRESSION_ZSTD: Compression
START_POSITION_UNSPECIFIED: StartPosition
START_POSITION_EARLIEST: StartPosition
START_POSITION_LATEST: StartPosition

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic", "partitions", "configs", "validate_only")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: int
    configs: _containers.ScalarMap[str, str]
    validate_only: bool
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[int] = ..., configs: _Optional[_Mapping[str, str]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("topic", "partitions", "configs")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: int
    configs: _containers.ScalarMap[str, str]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[int] = ..., configs: _Optional[_Mapping[str, str]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ("include_internal",)
    INCLUDE_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    include_internal: bool
    def __init__(self, include_internal: _Optional[bool] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicSummary]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicSummary, _Mapping]]] = ...) -> None: ...

class TopicSummary(_message.Message):
    __slots__ = ("topic", "partitions", "internal")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    INTERNAL_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: int
    internal: bool
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[int] = ..., internal: _Optional[bool] = ...) -> None: ...

class DescribeTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class DescribeTopicResponse(_message.Message):
    __slots__ = ("topic", "configs", "partitions", "partition_count")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_COUNT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    configs: _containers.ScalarMap[str, str]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionDescription]
    partition_count: int
    def __init__(self, topic: _Optional[str] = ..., configs: _Optional[_Mapping[str, str]] = ..., partitions: _Optional[_Iterable[_Union[PartitionDescription, _Mapping]]] = ..., partition_count: _Optional[int] = ...) -> None: ...

class PartitionDescription(_message.Message):
    __slots__ = ("partition", "log_start_offset", "log_end_offset", "high_watermark", "size_bytes", "segment_count", "log_dir", "configs", "owner_id", "owner_address", "owner_epoch", "owned_elsewhere", "local_log_start_offset", "local_segment_count", "local_size_bytes", "remote_segment_count", "remote_size_bytes")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    LOG_DIR_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    OWNER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    OWNED_ELSEWHERE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOCAL_SEGMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    LOCAL_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    REMOTE_SEGMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    REMOTE_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    partition: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    segment_count: int
    log_dir: str
    configs: _containers.ScalarMap[str, str]
    owner_id: str
    owner_address: str
    owner_epoch: int
    owned_elsewhere: bool
    local_log_start_offset: int
    local_segment_count: int
    local_size_bytes: int
    remote_segment_count: int
    remote_size_bytes: int
    def __init__(self, partition: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., size_bytes: _Optional[int] = ..., segment_count: _Optional[int] = ..., log_dir: _Optional[str] = ..., configs: _Optional[_Mapping[str, str]] = ..., owner_id: _Optional[str] = ..., owner_address: _Optional[str] = ..., owner_epoch: _Optional[int] = ..., owned_elsewhere: _Optional[bool] = ..., local_log_start_offset: _Optional[int] = ..., local_segment_count: _Optional[int] = ..., local_size_bytes: _Optional[int] = ..., remote_segment_count: _Optional[int] = ..., remote_size_bytes: _Optional[int] = ...) -> None: ...

class ProduceRequest(_message.Message):
    __slots__ = ("topic", "partition", "records", "acks", "plain_records", "compression")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    PLAIN_RECORDS_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    records: bytes
    acks: Acks
    plain_records: _containers.RepeatedCompositeFieldContainer[PlainRecord]
    compression: Compression
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., records: _Optional[bytes] = ..., acks: _Optional[_Union[Acks, str]] = ..., plain_records: _Optional[_Iterable[_Union[PlainRecord, _Mapping]]] = ..., compression: _Optional[_Union[Compression, str]] = ...) -> None: ...

class PlainRecord(_message.Message):
    __slots__ = ("key", "value", "timestamp_ms", "headers")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    value: bytes
    timestamp_ms: int
    headers: _containers.RepeatedCompositeFieldContainer[RecordHeader]
    def __init__(self, key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., timestamp_ms: _Optional[int] = ..., headers: _Optional[_Iterable[_Union[RecordHeader, _Mapping]]] = ...) -> None: ...

class RecordHeader(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("base_offset", "last_offset", "log_append_time_ms", "log_start_offset")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_APPEND_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    def __init__(self, base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., log_append_time_ms: _Optional[int] = ..., log_start_offset: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset", "max_bytes", "max_wait_ms", "min_bytes", "decode")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_BYTES_FIELD_NUMBER: _ClassVar[int]
    DECODE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    max_bytes: int
    max_wait_ms: int
    min_bytes: int
    decode: bool
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., min_bytes: _Optional[int] = ..., decode: _Optional[bool] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("records", "high_watermark", "log_start_offset", "log_end_offset", "next_offset", "topic", "partition", "decoded_records")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    DECODED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    next_offset: int
    topic: str
    partition: int
    decoded_records: _containers.RepeatedCompositeFieldContainer[DecodedRecord]
    def __init__(self, records: _Optional[bytes] = ..., high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., next_offset: _Optional[int] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., decoded_records: _Optional[_Iterable[_Union[DecodedRecord, _Mapping]]] = ...) -> None: ...

class DecodedRecord(_message.Message):
    __slots__ = ("offset", "timestamp_ms", "key", "value", "headers")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    offset: int
    timestamp_ms: int
    key: bytes
    value: bytes
    headers: _containers.RepeatedCompositeFieldContainer[RecordHeader]
    def __init__(self, offset: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[RecordHeader, _Mapping]]] = ...) -> None: ...

class ConsumeRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset", "timestamp_ms", "position", "max_bytes", "min_bytes", "max_wait_ms", "decode")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MIN_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    DECODE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    position: StartPosition
    max_bytes: int
    min_bytes: int
    max_wait_ms: int
    decode: bool
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., position: _Optional[_Union[StartPosition, str]] = ..., max_bytes: _Optional[int] = ..., min_bytes: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., decode: _Optional[bool] = ...) -> None: ...

class OffsetsForTimesRequest(_message.Message):
    __slots__ = ("partitions", "packed")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionTimestamp]
    packed: _containers.RepeatedCompositeFieldContainer[PartitionTimestamps]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionTimestamp, _Mapping]]] = ..., packed: _Optional[_Iterable[_Union[PartitionTimestamps, _Mapping]]] = ...) -> None: ...

class PartitionTimestamp(_message.Message):
    __slots__ = ("topic", "partition", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class OffsetsForTimesResponse(_message.Message):
    __slots__ = ("results", "packed")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    packed: _containers.RepeatedCompositeFieldContainer[PartitionOffsets]
    def __init__(self, results: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ..., packed: _Optional[_Iterable[_Union[PartitionOffsets, _Mapping]]] = ...) -> None: ...

class PartitionTimestamps(_message.Message):
    __slots__ = ("topic", "partition", "timestamps_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMPS_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    timestamps_ms: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., timestamps_ms: _Optional[_Iterable[int]] = ...) -> None: ...

class PartitionOffsets(_message.Message):
    __slots__ = ("topic", "partition", "offsets", "timestamps_ms", "errors")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMPS_MS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offsets: _containers.RepeatedScalarFieldContainer[int]
    timestamps_ms: _containers.RepeatedScalarFieldContainer[int]
    errors: _containers.RepeatedCompositeFieldContainer[TargetError]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offsets: _Optional[_Iterable[int]] = ..., timestamps_ms: _Optional[_Iterable[int]] = ..., errors: _Optional[_Iterable[_Union[TargetError, _Mapping]]] = ...) -> None: ...

class TargetError(_message.Message):
    __slots__ = ("index", "error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    error: PartitionError
    def __init__(self, index: _Optional[int] = ..., error: _Optional[_Union[PartitionError, _Mapping]] = ...) -> None: ...

class PartitionOffset(_message.Message):
    __slots__ = ("topic", "partition", "offset", "timestamp_ms", "error")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    error: PartitionError
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., error: _Optional[_Union[PartitionError, _Mapping]] = ...) -> None: ...

class PartitionError(_message.Message):
    __slots__ = ("code", "message", "error_class", "owner_id", "owner_address", "owner_epoch")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    OWNER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    error_class: str
    owner_id: str
    owner_address: str
    owner_epoch: int
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., error_class: _Optional[str] = ..., owner_id: _Optional[str] = ..., owner_address: _Optional[str] = ..., owner_epoch: _Optional[int] = ...) -> None: ...

class DeleteRecordsRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class DeleteRecordsResponse(_message.Message):
    __slots__ = ("log_start_offset",)
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    log_start_offset: int
    def __init__(self, log_start_offset: _Optional[int] = ...) -> None: ...

class ListCleanableRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class ListCleanableResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[CleanablePartition]
    def __init__(self, partitions: _Optional[_Iterable[_Union[CleanablePartition, _Mapping]]] = ...) -> None: ...

class CleanablePartition(_message.Message):
    __slots__ = ("topic", "partition", "log_dir", "dirty_ratio", "min_cleanable_dirty_ratio", "cleanable_bytes", "clean_bytes", "first_dirty_offset", "first_uncleanable_offset", "log_start_offset", "log_end_offset", "compaction_delay_ms", "must_clean", "eligible", "open_snapshot_ids")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LOG_DIR_FIELD_NUMBER: _ClassVar[int]
    DIRTY_RATIO_FIELD_NUMBER: _ClassVar[int]
    MIN_CLEANABLE_DIRTY_RATIO_FIELD_NUMBER: _ClassVar[int]
    CLEANABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CLEAN_BYTES_FIELD_NUMBER: _ClassVar[int]
    FIRST_DIRTY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FIRST_UNCLEANABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    MUST_CLEAN_FIELD_NUMBER: _ClassVar[int]
    ELIGIBLE_FIELD_NUMBER: _ClassVar[int]
    OPEN_SNAPSHOT_IDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    log_dir: str
    dirty_ratio: float
    min_cleanable_dirty_ratio: float
    cleanable_bytes: int
    clean_bytes: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    log_start_offset: int
    log_end_offset: int
    compaction_delay_ms: int
    must_clean: bool
    eligible: bool
    open_snapshot_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., log_dir: _Optional[str] = ..., dirty_ratio: _Optional[float] = ..., min_cleanable_dirty_ratio: _Optional[float] = ..., cleanable_bytes: _Optional[int] = ..., clean_bytes: _Optional[int] = ..., first_dirty_offset: _Optional[int] = ..., first_uncleanable_offset: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., compaction_delay_ms: _Optional[int] = ..., must_clean: _Optional[bool] = ..., eligible: _Optional[bool] = ..., open_snapshot_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateSnapshotRequest(_message.Message):
    __slots__ = ("topic", "partition", "include_local_path", "export_to_store")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_LOCAL_PATH_FIELD_NUMBER: _ClassVar[int]
    EXPORT_TO_STORE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    include_local_path: bool
    export_to_store: bool
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., include_local_path: _Optional[bool] = ..., export_to_store: _Optional[bool] = ...) -> None: ...

class CreateSnapshotResponse(_message.Message):
    __slots__ = ("snapshot_id", "log_dir", "relative_path", "local_path", "manifest_json", "segment_count", "size_bytes", "first_dirty_offset", "first_uncleanable_offset", "store_url")
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_DIR_FIELD_NUMBER: _ClassVar[int]
    RELATIVE_PATH_FIELD_NUMBER: _ClassVar[int]
    LOCAL_PATH_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_JSON_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FIRST_DIRTY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FIRST_UNCLEANABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STORE_URL_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    log_dir: str
    relative_path: str
    local_path: str
    manifest_json: str
    segment_count: int
    size_bytes: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    store_url: str
    def __init__(self, snapshot_id: _Optional[str] = ..., log_dir: _Optional[str] = ..., relative_path: _Optional[str] = ..., local_path: _Optional[str] = ..., manifest_json: _Optional[str] = ..., segment_count: _Optional[int] = ..., size_bytes: _Optional[int] = ..., first_dirty_offset: _Optional[int] = ..., first_uncleanable_offset: _Optional[int] = ..., store_url: _Optional[str] = ...) -> None: ...

class CommitCleanedRequest(_message.Message):
    __slots__ = ("snapshot_id",)
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    def __init__(self, snapshot_id: _Optional[str] = ...) -> None: ...

class CommitCleanedResponse(_message.Message):
    __slots__ = ("topic", "partition", "replaced_segment_count", "installed_segment_count", "bytes_before", "bytes_after", "cleaned_up_to_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLACED_SEGMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    INSTALLED_SEGMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    BYTES_BEFORE_FIELD_NUMBER: _ClassVar[int]
    BYTES_AFTER_FIELD_NUMBER: _ClassVar[int]
    CLEANED_UP_TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replaced_segment_count: int
    installed_segment_count: int
    bytes_before: int
    bytes_after: int
    cleaned_up_to_offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replaced_segment_count: _Optional[int] = ..., installed_segment_count: _Optional[int] = ..., bytes_before: _Optional[int] = ..., bytes_after: _Optional[int] = ..., cleaned_up_to_offset: _Optional[int] = ...) -> None: ...

class DropSnapshotRequest(_message.Message):
    __slots__ = ("snapshot_id",)
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    def __init__(self, snapshot_id: _Optional[str] = ...) -> None: ...

class DropSnapshotResponse(_message.Message):
    __slots__ = ("dropped",)
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    dropped: bool
    def __init__(self, dropped: _Optional[bool] = ...) -> None: ...

class ExplainLookupRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class ExplainLookupResponse(_message.Message):
    __slots__ = ("segment_count", "segment_base_offset", "searches", "index_position", "found_offset", "found_position", "scanned_bytes", "duration_us", "remote_segment_id")
    SEGMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SEARCHES_FIELD_NUMBER: _ClassVar[int]
    INDEX_POSITION_FIELD_NUMBER: _ClassVar[int]
    FOUND_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FOUND_POSITION_FIELD_NUMBER: _ClassVar[int]
    SCANNED_BYTES_FIELD_NUMBER: _ClassVar[int]
    DURATION_US_FIELD_NUMBER: _ClassVar[int]
    REMOTE_SEGMENT_ID_FIELD_NUMBER: _ClassVar[int]
    segment_count: int
    segment_base_offset: int
    searches: _containers.RepeatedCompositeFieldContainer[IndexSearch]
    index_position: int
    found_offset: int
    found_position: int
    scanned_bytes: int
    duration_us: int
    remote_segment_id: str
    def __init__(self, segment_count: _Optional[int] = ..., segment_base_offset: _Optional[int] = ..., searches: _Optional[_Iterable[_Union[IndexSearch, _Mapping]]] = ..., index_position: _Optional[int] = ..., found_offset: _Optional[int] = ..., found_position: _Optional[int] = ..., scanned_bytes: _Optional[int] = ..., duration_us: _Optional[int] = ..., remote_segment_id: _Optional[str] = ...) -> None: ...

class IndexSearch(_message.Message):
    __slots__ = ("index", "path", "entry_count", "zone", "slot", "probed_slots", "pages", "pages_resident")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    PROBED_SLOTS_FIELD_NUMBER: _ClassVar[int]
    PAGES_FIELD_NUMBER: _ClassVar[int]
    PAGES_RESIDENT_FIELD_NUMBER: _ClassVar[int]
    index: str
    path: str
    entry_count: int
    zone: str
    slot: int
    probed_slots: _containers.RepeatedScalarFieldContainer[int]
    pages: _containers.RepeatedScalarFieldContainer[int]
    pages_resident: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, index: _Optional[str] = ..., path: _Optional[str] = ..., entry_count: _Optional[int] = ..., zone: _Optional[str] = ..., slot: _Optional[int] = ..., probed_slots: _Optional[_Iterable[int]] = ..., pages: _Optional[_Iterable[int]] = ..., pages_resident: _Optional[_Iterable[bool]] = ...) -> None: ...

class ProduceStreamRequest(_message.Message):
    __slots__ = ("correlation_id", "produce", "more")
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCE_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    correlation_id: int
    produce: ProduceRequest
    more: _containers.RepeatedCompositeFieldContainer[ProduceRequest]
    def __init__(self, correlation_id: _Optional[int] = ..., produce: _Optional[_Union[ProduceRequest, _Mapping]] = ..., more: _Optional[_Iterable[_Union[ProduceRequest, _Mapping]]] = ...) -> None: ...

class ProduceStreamResponse(_message.Message):
    __slots__ = ("correlation_id", "produce", "error", "more")
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    correlation_id: int
    produce: ProduceResponse
    error: StreamError
    more: _containers.RepeatedCompositeFieldContainer[ProduceAnswer]
    def __init__(self, correlation_id: _Optional[int] = ..., produce: _Optional[_Union[ProduceResponse, _Mapping]] = ..., error: _Optional[_Union[StreamError, _Mapping]] = ..., more: _Optional[_Iterable[_Union[ProduceAnswer, _Mapping]]] = ...) -> None: ...

class ProduceAnswer(_message.Message):
    __slots__ = ("produce", "error")
    PRODUCE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    produce: ProduceResponse
    error: StreamError
    def __init__(self, produce: _Optional[_Union[ProduceResponse, _Mapping]] = ..., error: _Optional[_Union[StreamError, _Mapping]] = ...) -> None: ...

class LookupStreamRequest(_message.Message):
    __slots__ = ("correlation_id", "offsets_for_times")
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FOR_TIMES_FIELD_NUMBER: _ClassVar[int]
    correlation_id: int
    offsets_for_times: OffsetsForTimesRequest
    def __init__(self, correlation_id: _Optional[int] = ..., offsets_for_times: _Optional[_Union[OffsetsForTimesRequest, _Mapping]] = ...) -> None: ...

class LookupStreamResponse(_message.Message):
    __slots__ = ("correlation_id", "offsets_for_times", "error")
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FOR_TIMES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    correlation_id: int
    offsets_for_times: OffsetsForTimesResponse
    error: StreamError
    def __init__(self, correlation_id: _Optional[int] = ..., offsets_for_times: _Optional[_Union[OffsetsForTimesResponse, _Mapping]] = ..., error: _Optional[_Union[StreamError, _Mapping]] = ...) -> None: ...

class StreamError(_message.Message):
    __slots__ = ("code", "message", "error_class", "retry_after_ms", "owner_id", "owner_address", "owner_epoch")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    OWNER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    error_class: str
    retry_after_ms: int
    owner_id: str
    owner_address: str
    owner_epoch: int
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., error_class: _Optional[str] = ..., retry_after_ms: _Optional[int] = ..., owner_id: _Optional[str] = ..., owner_address: _Optional[str] = ..., owner_epoch: _Optional[int] = ...) -> None: ...

class InitProducerIdRequest(_message.Message):
    __slots__ = ("transactional_id",)
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    def __init__(self, transactional_id: _Optional[str] = ...) -> None: ...

class InitProducerIdResponse(_message.Message):
    __slots__ = ("producer_id", "producer_epoch")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class GroupPartition(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class OffsetToCommit(_message.Message):
    __slots__ = ("topic", "partition", "offset", "leader_epoch", "metadata")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...

class CommitOffsetsRequest(_message.Message):
    __slots__ = ("group", "member_id", "member_epoch", "offsets")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    member_epoch: int
    offsets: _containers.RepeatedCompositeFieldContainer[OffsetToCommit]
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., offsets: _Optional[_Iterable[_Union[OffsetToCommit, _Mapping]]] = ...) -> None: ...

class CommitOffsetsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FetchOffsetsRequest(_message.Message):
    __slots__ = ("group", "partitions")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    group: str
    partitions: _containers.RepeatedCompositeFieldContainer[GroupPartition]
    def __init__(self, group: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[GroupPartition, _Mapping]]] = ...) -> None: ...

class CommittedOffset(_message.Message):
    __slots__ = ("topic", "partition", "offset", "leader_epoch", "metadata")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...

class FetchOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[CommittedOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[CommittedOffset, _Mapping]]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group", "member_id", "member_epoch", "instance_id", "subscribed_topics", "rebalance_timeout_ms", "owned_partitions", "client_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_TOPICS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    OWNED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    member_epoch: int
    instance_id: str
    subscribed_topics: _containers.RepeatedScalarFieldContainer[str]
    rebalance_timeout_ms: int
    owned_partitions: _containers.RepeatedCompositeFieldContainer[GroupPartition]
    client_id: str
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., instance_id: _Optional[str] = ..., subscribed_topics: _Optional[_Iterable[str]] = ..., rebalance_timeout_ms: _Optional[int] = ..., owned_partitions: _Optional[_Iterable[_Union[GroupPartition, _Mapping]]] = ..., client_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("member_id", "member_epoch", "assignment", "heartbeat_interval_ms", "session_timeout_ms")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    member_epoch: int
    assignment: _containers.RepeatedCompositeFieldContainer[GroupPartition]
    heartbeat_interval_ms: int
    session_timeout_ms: int
    def __init__(self, member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., assignment: _Optional[_Iterable[_Union[GroupPartition, _Mapping]]] = ..., heartbeat_interval_ms: _Optional[int] = ..., session_timeout_ms: _Optional[int] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListedGroup(_message.Message):
    __slots__ = ("group", "state", "member_count")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_COUNT_FIELD_NUMBER: _ClassVar[int]
    group: str
    state: str
    member_count: int
    def __init__(self, group: _Optional[str] = ..., state: _Optional[str] = ..., member_count: _Optional[int] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[ListedGroup]
    def __init__(self, groups: _Optional[_Iterable[_Union[ListedGroup, _Mapping]]] = ...) -> None: ...

class DescribeGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class GroupMemberDescription(_message.Message):
    __slots__ = ("member_id", "member_epoch", "subscribed_topics", "owned_partitions", "instance_id", "client_id", "host")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_TOPICS_FIELD_NUMBER: _ClassVar[int]
    OWNED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    member_epoch: int
    subscribed_topics: _containers.RepeatedScalarFieldContainer[str]
    owned_partitions: _containers.RepeatedCompositeFieldContainer[GroupPartition]
    instance_id: str
    client_id: str
    host: str
    def __init__(self, member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., subscribed_topics: _Optional[_Iterable[str]] = ..., owned_partitions: _Optional[_Iterable[_Union[GroupPartition, _Mapping]]] = ..., instance_id: _Optional[str] = ..., client_id: _Optional[str] = ..., host: _Optional[str] = ...) -> None: ...

class GroupPartitionLag(_message.Message):
    __slots__ = ("topic", "partition", "committed_offset", "log_end_offset", "lag", "member_id", "metadata")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    committed_offset: int
    log_end_offset: int
    lag: int
    member_id: str
    metadata: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., committed_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., lag: _Optional[int] = ..., member_id: _Optional[str] = ..., metadata: _Optional[str] = ...) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class DeleteGroupResponse(_message.Message):
    __slots__ = ("deleted_offsets",)
    DELETED_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    deleted_offsets: int
    def __init__(self, deleted_offsets: _Optional[int] = ...) -> None: ...

class DescribeGroupResponse(_message.Message):
    __slots__ = ("group", "state", "group_epoch", "members", "partitions")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    group: str
    state: str
    group_epoch: int
    members: _containers.RepeatedCompositeFieldContainer[GroupMemberDescription]
    partitions: _containers.RepeatedCompositeFieldContainer[GroupPartitionLag]
    def __init__(self, group: _Optional[str] = ..., state: _Optional[str] = ..., group_epoch: _Optional[int] = ..., members: _Optional[_Iterable[_Union[GroupMemberDescription, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[GroupPartitionLag, _Mapping]]] = ...) -> None: ...

class AlterTopicConfigsRequest(_message.Message):
    __slots__ = ("topic", "set_configs", "delete_configs", "validate_only")
    class SetConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SET_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    DELETE_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    set_configs: _containers.ScalarMap[str, str]
    delete_configs: _containers.RepeatedScalarFieldContainer[str]
    validate_only: bool
    def __init__(self, topic: _Optional[str] = ..., set_configs: _Optional[_Mapping[str, str]] = ..., delete_configs: _Optional[_Iterable[str]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class AlterTopicConfigsResponse(_message.Message):
    __slots__ = ("topic", "configs")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    configs: _containers.ScalarMap[str, str]
    def __init__(self, topic: _Optional[str] = ..., configs: _Optional[_Mapping[str, str]] = ...) -> None: ...
