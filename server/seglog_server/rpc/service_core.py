"""The one service core every RPC family works over: the storage port and the shared parts.

``ServiceCore`` holds what the families share and nothing they own: the storage (``StoragePort``,
storage_port.py) and where its calls run (``StorageCalls``), the limits, admission, the call gate,
log directory labels, the append waiters, group commit, the Consume buffer, the RPC counters and
the metrics hook. Each family (admin_rpcs, produce_rpcs, fetch_rpcs, lookup_rpcs, cleaning_rpcs,
streams) takes the core explicitly in its constructor; the boundary (boundary.py) reads a
family's ``core`` for the admission, gate, counters and metrics of each call. Nothing is borrowed
from a sibling by inheritance: a family that needs another's work (the streams need produce's
append and the lookups' answer) is handed that family.

``log_call`` is the one way a family calls a storage log: inline or pooled by the bytes the call
moves, and a log that meets an I/O error takes its directory offline before the error is
answered (Kafka's rule: the whole directory is suspect).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from seglog_server.storage import unify_collision_chars
from seglog_server.storage.base.errors import LogDirOfflineError

from .admission import Admission
from .append_waiters import AppendWaiters
from .boundary import RpcCounters
from .call_gate import CallGate
from .consume_buffer import ConsumeBuffer
from .errors import InternalTopicCollisionError, InternalTopicError
from .fault_seams import AfterAppendFault
from .group_commit import GroupCommit
from .log_dir_names import LogDirNames
from .storage_calls import StorageCalls
from .storage_port import PartitionLog, StoragePort

__all__ = ["BLOCKING", "LogServicerLimits", "ServiceCore"]

# log_call's io_bytes for calls that always go to the pool (fsync, decompression, many lookups).
BLOCKING = -1


@dataclass(frozen=True)
class LogServicerLimits:
    fetch_bytes_max: int  # records per response; a request's max_bytes 0 means this
    fetch_wait_ms_max: int  # longer max_wait_ms are cut to this
    response_bytes_max: int  # the gRPC send limit, for decoded responses
    message_bytes_max: int  # the largest max.message.bytes a topic may have
    batch_records_max: int = 131_072  # most records a produced batch may declare (config.py)
    consume_buffer_bytes_max: int = 256 * 1024 * 1024  # Consume responses held, all streams (config.py)
    consume_response_bytes_min: int = 64 * 1024  # a Consume response when that budget is short

    def __post_init__(self) -> None:
        assert 0 < self.fetch_bytes_max < self.response_bytes_max
        assert 0 < self.consume_response_bytes_min <= self.consume_buffer_bytes_max
        assert self.batch_records_max > 0
        assert self.fetch_wait_ms_max >= 0
        assert self.message_bytes_max > 0


class ServiceCore:
    """The shared parts of the service; each RPC family takes it explicitly (module docstring)."""

    def __init__(
        self, storage: StoragePort, calls: StorageCalls, limits: LogServicerLimits,
        admission: Admission, gate: CallGate, log_dir_names: LogDirNames, *, metrics: Any = None,
        internal_topics: frozenset[str] = frozenset(),
    ) -> None:
        self.storage = storage
        self.calls = calls
        self.limits = limits
        self.admission = admission
        self.gate = gate
        self.log_dir_names = log_dir_names
        # ``metrics``: rpc_finished(method, code, seconds) after each call (boundary.py, streams)
        # and fetched(topic, records, bytes) per response sent; None when metrics are off.
        self.metrics = metrics
        self.counters = RpcCounters()
        self.waiters = AppendWaiters()
        storage.set_change_listener(self.waiters.storage_changed)
        self.group_commit = GroupCommit(calls)
        self.consume_buffer = ConsumeBuffer(limits.consume_buffer_bytes_max, limits.consume_response_bytes_min)
        self.after_append = AfterAppendFault.from_environ()  # tests only (fault_seams.py)
        # Topics only the service writes (the group coordinator's __consumer_offsets): users read
        # them; produce, delete and create are refused (``check_user_may_change``).
        self.internal_topics = internal_topics
        # Cluster mode's routing (cluster_routing.ClusterRouting), set by app.py with --etcd; None
        # in a single process, where no handler asks anything.
        self.cluster: Any = None

    def check_user_may_change(self, action: str, topic: str) -> None:
        """Raises InternalTopicError when ``topic`` is internal (PERMISSION_DENIED). A topic to
        create whose name collides with an internal topic's ('.' and '_' are one character, as
        Kafka's collision rule in storage/dirs/topic_registry.py) is refused too
        (InternalTopicCollisionError, INVALID_ARGUMENT): it would keep the service from ever
        creating the internal topic (the groups' lazy creation of __consumer_offsets)."""
        if topic in self.internal_topics:
            raise InternalTopicError(action, topic)
        if action == "create":
            unified = unify_collision_chars(topic)
            for internal in sorted(self.internal_topics):
                if unify_collision_chars(internal) == unified:
                    raise InternalTopicCollisionError(topic, internal)

    @property
    def stopping(self) -> bool:
        return self.waiters.closed

    async def log_call(self, log: PartitionLog, io_bytes: int, method: Callable[..., Any], *args: Any) -> Any:
        """One call of a log's method, inline or pooled by ``io_bytes`` (``BLOCKING``: pooled).

        Inline only when the log's lock is free (``StoragePort.inline_lock``): the event loop
        never waits behind a pool thread's disk I/O. A log that meets an I/O error raises
        LogDirOfflineError; the storage is told (its directory goes offline) before the error
        is answered.
        """
        try:
            if io_bytes == BLOCKING:
                return await self.calls.blocking(method, *args)
            return await self.calls.sized(io_bytes, method, *args, lock=self.storage.inline_lock(log))
        except LogDirOfflineError as exc:
            await self.calls.blocking(self.storage.handle_log_failure, log, exc)
            raise

    async def durable(self, log: PartitionLog, end_offset: int) -> None:
        """Group commit (group_commit.py), with ``log_call``'s offline-directory handling."""
        try:
            await self.group_commit.wait_durable(log, end_offset)
        except LogDirOfflineError as exc:
            await self.calls.blocking(self.storage.handle_log_failure, log, exc)
            raise
