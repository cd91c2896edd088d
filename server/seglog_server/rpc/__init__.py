"""The gRPC adapter: seglog.v1.LogService on top of the storage engine.

Thin by design: each RPC converts its request, makes one storage call and converts the result
(``conversions``). The RPCs live in one module per family (``admin_rpcs``, ``produce_rpcs``,
``fetch_rpcs``, ``lookup_rpcs``, ``cleaning_rpcs``, ``streams``), each over the one
``service_core``; ``log_service`` builds them and routes each RPC. The storage is reached only
through the declared port (``storage_port``); errors become statuses once, through the table in
``status``; long polls wait on per-partition append notifications (``append_waiters``); blocking
storage calls run on a bounded thread pool (``storage_calls``).
"""

from .append_waiters import AppendWaiters
from .errors import (
    InvalidRequestError,
    ResponseTooLargeError,
    ServiceError,
    ServiceStoppingError,
    StoredBatchCorruptError,
)
from .log_service import LogServicer, LogServicerLimits
from .status import STATUS_BY_ERROR, status_for
from .storage_calls import StorageCalls

__all__ = [
    "STATUS_BY_ERROR",
    "AppendWaiters",
    "InvalidRequestError",
    "LogServicer",
    "LogServicerLimits",
    "ResponseTooLargeError",
    "ServiceError",
    "ServiceStoppingError",
    "StorageCalls",
    "StoredBatchCorruptError",
    "status_for",
]
