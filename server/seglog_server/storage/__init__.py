"""The storage engine: segments, indexes, logs, recovery, retention.

Imports only the standard library, small well-kept helpers and ``seglog.records``; never gRPC,
protobuf or Prometheus (checked by import-linter, see pyproject.toml). The names below are the
surface the service uses; errors live in ``seglog_server.storage.base.errors``.
"""

from .base.clock import SYSTEM_CLOCK, Clock, FakeClock
from .base.fs import REAL_FS, FileSystem
from .base.inline_calls import INLINE_CALL, InlineRefused
from .base.log_config import LogConfig
from .base.observer import StorageObserver, install_observer
from .base.topic_partition import unify_collision_chars
from .log.unified_log import Log
from .log.log_results import AppendInfo, FetchData, LogStatistics, TimestampAndOffset
from .log.lookup_explain import LookupExplanation
from .manager.log_manager import LogManager, MaintenanceIntervals, PartitionDescription, TopicDescription

__all__ = [
    "INLINE_CALL",
    "REAL_FS",
    "SYSTEM_CLOCK",
    "AppendInfo",
    "Clock",
    "FakeClock",
    "FetchData",
    "FileSystem",
    "InlineRefused",
    "Log",
    "LogConfig",
    "LogManager",
    "LogStatistics",
    "LookupExplanation",
    "MaintenanceIntervals",
    "PartitionDescription",
    "StorageObserver",
    "TimestampAndOffset",
    "TopicDescription",
    "install_observer",
    "unify_collision_chars",
]
