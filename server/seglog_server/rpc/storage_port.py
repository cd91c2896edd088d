"""The storage port: exactly what the gRPC adapter calls on the storage engine, as typed Protocols.

The adapter (``rpc/``) is written against these two Protocols, never against ``Any`` nor a
storage class's internals: ``StoragePort`` is the log manager, ``PartitionLog`` one partition's
log as ``StoragePort.get_log`` hands it out. ``storage.LogManager`` and ``storage.Log`` satisfy
them structurally (no inheritance: the storage does not know the adapter exists); a test compares
every member here with the real classes (tests/unit/seglog_server/rpc/test_storage_port.py).

Why the port lives here, on the adapter's side, and not in ``storage/``: it is the interface the
adapter *requires*, and it is this narrow because of what the adapter does (a second adapter,
the cluster's replica fetcher say, would declare its own). The storage keeps its one public
surface, ``seglog_server.storage``; the adapter imports only that and the error modules
(``storage.base.errors``, ``storage.base.io_errors``, for status.py's one table), which another
test and an import-linter contract keep.

What used to be the adapter's reach into storage state is now declared on the manager, as
questions the storage answers about its own logs:

- ``inline_lock(log)``: the re-entrant lock every operation of a log takes. ``StorageCalls`` runs
  an inline call only when it can take that lock without waiting (storage_calls.py), so the event
  loop never waits behind a pool thread's disk I/O. (It was ``log._lock``.)
- ``append_may_block(log, batch)``: whether appending ``batch`` may block (a ``flush.messages``
  policy that fsyncs inside the append, or a compressed batch decompressed to be validated).
  (It was the adapter reading the topic's flush config.)
- ``timestamp_lookup_may_block(log, timestamps_ms)``: whether a lookup by time reads every
  segment (the first after a restart runs each segment's deferred first-use check).
- ``handle_log_failure(log, cause)``: takes the log's directory offline after an I/O error the
  adapter met (it was the adapter computing the directory from the log's path).

Members are listed in the order the RPC families use them; the storage may offer more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from seglog_server.storage import (
    AppendInfo,
    FetchData,
    LogConfig,
    LookupExplanation,
    TimestampAndOffset,
    TopicDescription,
)
from seglog_server.storage.base.errors import StorageError

__all__ = ["InlineLock", "PartitionLog", "StoragePort"]

# Pages of a file in the page cache (ExplainLookup's residency probe, metrics/page_residency.py).
ResidentPages = Callable[[str], bytes]


class InlineLock(Protocol):
    """A re-entrant lock, tried without waiting (``acquire(blocking=False)``)."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...

    def release(self) -> None: ...


class PartitionLog(Protocol):
    """One partition's log, as the adapter uses it."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    def known_log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def recovery_point(self) -> int: ...

    # -- produce ------------------------------------------------------------------------------
    def append(self, records: bytes | bytearray | memoryview, *, leader_epoch: int | None = None) -> AppendInfo: ...

    def flush(self, offset: int | None = None) -> None: ...

    # -- fetch --------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True) -> FetchData: ...

    def read_appended(self, appended: Any, offset: int) -> FetchData | None: ...

    # -- lookups ------------------------------------------------------------------------------
    def offset_for_timestamp(self, timestamp_ms: int) -> TimestampAndOffset | None: ...

    def lookup_timestamps(self, timestamps_ms: Sequence[int]) -> list[TimestampAndOffset | None | StorageError]: ...

    def lookup_timestamps_without_builds(
        self, timestamps_ms: Sequence[int], read_bytes_max: int
    ) -> list[TimestampAndOffset | None | StorageError] | None: ...

    def lookup_timestamp_inline(self, timestamp_ms: int, read_bytes_max: int) -> TimestampAndOffset | None | StorageError | str: ...

    def explain_offset(self, offset: int, residency: ResidentPages | None = None) -> LookupExplanation: ...

    def explain_timestamp(self, timestamp_ms: int, residency: ResidentPages | None = None) -> LookupExplanation: ...

    # -- admin --------------------------------------------------------------------------------
    def delete_records(self, offset: int) -> int: ...

    # -- moves (move_rpcs.py: a copy emptied only while, under the log's lock, it is not ours) ---
    @property
    def size_in_bytes(self) -> int: ...

    def leader_epoch_entries(self) -> list[Any]: ...

    def truncate_fully_and_start_at(self, new_offset: int, *, only_if: Callable[[], bool] | None = None) -> bool: ...


class StoragePort(Protocol):
    """The log manager, as the adapter uses it."""

    def set_change_listener(self, listener: Callable[[str, int], None] | None) -> None: ...

    def get_log(self, topic: str, partition: int) -> PartitionLog: ...

    # -- placement and failure: questions the storage answers about its own logs ---------------
    def inline_lock(self, log: PartitionLog) -> InlineLock: ...

    def append_may_block(self, log: PartitionLog, batch: bytes | bytearray | memoryview) -> bool: ...

    def timestamp_lookup_may_block(self, log: PartitionLog, timestamps_ms: Sequence[int]) -> bool: ...

    def handle_log_failure(self, log: PartitionLog, cause: BaseException | str) -> None: ...

    # -- admin --------------------------------------------------------------------------------
    def create_topic(
        self, topic: str, partition_count: int, configs: Mapping[str, str] | None = None, *,
        validate_only: bool = False,
    ) -> LogConfig: ...

    def delete_topic(self, topic: str) -> None: ...

    def list_topics(self) -> list[tuple[str, int]]: ...

    def describe_topic(self, topic: str) -> TopicDescription: ...

    def alter_topic_configs(
        self, topic: str, set_configs: Mapping[str, str], delete_names: Sequence[str] = (), *,
        validate_only: bool = False,
    ) -> LogConfig: ...

    def init_producer_id(self) -> tuple[int, int]: ...

    # -- offline cleaning (their results are storage values read field by field) ----------------
    def list_cleanable(self, topic: str | None = None) -> list[Any]: ...

    def create_snapshot(self, topic: str, partition: int, *, export: bool = False) -> Any: ...

    def snapshot_store_url(self, snapshot_id: str) -> str: ...

    def commit_cleaned(self, snapshot_id: str) -> Any: ...

    def snapshot_partition(self, snapshot_id: str) -> Any: ...

    def drop_snapshot(self, snapshot_id: str) -> bool: ...
