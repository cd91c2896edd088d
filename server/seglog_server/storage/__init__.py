"""The storage engine: segments, indexes, logs, recovery, retention.

Imports only the standard library, small well-kept helpers and ``seglog.records``; never gRPC,
protobuf or Prometheus (checked by import-linter, see pyproject.toml). The names below are the
surface the service uses; errors live in ``seglog_server.storage.errors``.
"""

from .clock import SYSTEM_CLOCK, Clock, FakeClock
from .fs import REAL_FS, FileSystem
from .log import Log
from .log_config import LogConfig
from .log_manager import LogManager, MaintenanceIntervals, PartitionDescription, TopicDescription
from .log_results import AppendInfo, FetchData, LogStatistics, TimestampAndOffset
from .lookup_explain import LookupExplanation
from .observer import StorageObserver, install_observer

__all__ = [
    "REAL_FS",
    "SYSTEM_CLOCK",
    "AppendInfo",
    "Clock",
    "FakeClock",
    "FetchData",
    "FileSystem",
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
]
