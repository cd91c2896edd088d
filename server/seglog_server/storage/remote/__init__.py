"""The remote tier (Kafka's tiered storage, KIP-405): closed segments copied to an S3-compatible
object store under unique keys, each with a state record, read back by ranged GET through a
bounded chunk cache. Imports ``segment``'s layers below it (``base``); nothing above ``log`` is
needed, and the service does not use it yet (docs/architecture.md, "The remote tier").

Needs the ``remote`` extra (boto3)."""

from .object_store import ObjectStore, ObjectStoreConfig
from .remote_chunk_cache import ChunkCacheStatistics, RemoteChunkCache
from .remote_log_metadata import RemoteLogMetadata
from .remote_segment_metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState
from .remote_storage_manager import LogSegmentData, RemoteStorageManager

__all__ = [
    "ChunkCacheStatistics",
    "LogSegmentData",
    "ObjectStore",
    "ObjectStoreConfig",
    "RemoteChunkCache",
    "RemoteLogMetadata",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentState",
    "RemoteStorageManager",
]
