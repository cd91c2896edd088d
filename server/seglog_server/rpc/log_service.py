"""The seglog.v1.LogService servicer: one service core, a handler per RPC family, each RPC routed.

Each RPC is convert -> one storage call -> convert, in the module of its family:

    admin_rpcs     CreateTopic, DeleteTopic, ListTopics, DescribeTopic, DeleteRecords, InitProducerId
    produce_rpcs   Produce
    fetch_rpcs     Fetch, Consume
    lookup_rpcs    OffsetsForTimes, ExplainLookup
    cleaning_rpcs  ListCleanable, CreateSnapshot, CommitCleaned, DropSnapshot
    streams        ProduceStream, LookupStream (each message as its unary twin)

Every family takes the ``ServiceCore`` (service_core.py: the storage port, where its calls run,
admission, the call gate, limits, waiters, group commit, the Consume buffer, counters, metrics)
explicitly. ``LogServicer`` builds the core and the families and binds each RPC to its family's
method when it is built (``_route``), so a call costs no hop through the servicer.

Errors are not handled here: they propagate to ``boundary.py``, which maps them through the one
table in ``status.py``. Long polls wait on ``AppendWaiters``, which the storage tells of every
append, truncation and deletion itself (the manager's change listener).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.groups.coordinator import INTERNAL_TOPICS, GroupCoordinator, GroupMetrics

from .admin_rpcs import AdminRpcs
from .admission import Admission, AdmissionLimits, AdmissionStatistics
from .append_waiters import AppendWaitersStatistics
from .boundary import RpcStatistics
from .call_gate import CallGate
from .cleaning_rpcs import CleaningRpcs
from .consume_buffer import ConsumeBufferStatistics
from .fetch_rpcs import START_OFFSET_METADATA_KEY, FetchRpcs
from .group_commit import GroupCommitStatistics
from .group_rpcs import GroupRpcs
from .log_dir_names import LogDirNames
from .lookup_rpcs import LookupRpcs
from .produce_rpcs import ProduceRpcs
from .service_core import LogServicerLimits, ServiceCore
from .storage_calls import StorageCalls, StorageCallsStatistics
from .storage_port import StoragePort
from .streams import StreamRpcs

__all__ = [
    "ROUTES",
    "START_OFFSET_METADATA_KEY",
    "LogServicer",
    "LogServicerLimits",
    "LogServicerStatistics",
]

# The service's defaults (config.py); app.py passes the configured ones.
_DEFAULT_ADMISSION = AdmissionLimits(
    request_max=1000, waiter_max=10_000, waiter_per_client_max=2_000,
    stream_max=10_000, stream_per_client_max=2_000,
)

# RPC -> the family (a LogServicer attribute) that serves it. A test checks that every method of
# the service is routed, and a method with no row here answers UNIMPLEMENTED (the generated base).
ROUTES: dict[str, str] = {
    "CreateTopic": "admin",
    "DeleteTopic": "admin",
    "ListTopics": "admin",
    "DescribeTopic": "admin",
    "DeleteRecords": "admin",
    "InitProducerId": "admin",
    "Produce": "produce",
    "Fetch": "fetch",
    "Consume": "fetch",
    "OffsetsForTimes": "lookups",
    "ExplainLookup": "lookups",
    "ListCleanable": "cleaning",
    "CreateSnapshot": "cleaning",
    "CommitCleaned": "cleaning",
    "DropSnapshot": "cleaning",
    "ProduceStream": "streams",
    "LookupStream": "streams",
    "CommitOffsets": "groups",
    "FetchOffsets": "groups",
    "Heartbeat": "groups",
    "ListGroups": "groups",
    "DescribeGroup": "groups",
    "DeleteGroup": "groups",
    "AlterTopicConfigs": "admin",
}


@dataclass(frozen=True)
class LogServicerStatistics:
    rpc: RpcStatistics
    waiters: AppendWaitersStatistics
    storage_calls: StorageCallsStatistics
    group_commit: GroupCommitStatistics
    admission: AdmissionStatistics
    consume_stream_count: int
    consume_buffer: ConsumeBufferStatistics
    stopping: bool


class LogServicer(pb_grpc.LogServiceServicer):
    def __init__(
        self, manager: StoragePort, calls: StorageCalls, limits: LogServicerLimits,
        admission: AdmissionLimits = _DEFAULT_ADMISSION,
        log_dir_names: LogDirNames | None = None,
        gate: CallGate | None = None,
        *,
        metrics: Any = None,
        coordinator: GroupCoordinator | None = None,
    ) -> None:
        self.core = core = ServiceCore(
            manager, calls, limits, Admission(admission),
            gate if gate is not None else CallGate(),
            log_dir_names if log_dir_names is not None else LogDirNames(()),
            metrics=metrics,
            internal_topics=INTERNAL_TOPICS if coordinator is not None else frozenset(),
        )
        # The core's parts the app, the metrics and the tests read.
        self.admission = core.admission
        self.gate = core.gate
        self.counters = core.counters
        self.consume_buffer = core.consume_buffer
        self.log_dir_names = core.log_dir_names
        self.admin = AdminRpcs(core)
        self.produce = ProduceRpcs(core)
        self.fetch = FetchRpcs(core)
        self.lookups = LookupRpcs(core)
        self.cleaning = CleaningRpcs(core)
        self.streams = StreamRpcs(core, self.produce, self.lookups)
        self.groups = GroupRpcs(core, coordinator)
        self._route()

    def _route(self) -> None:
        """Binds each RPC to its family's method: gRPC (registration.py) finds the family's
        bound method on the servicer, and a call goes straight to it."""
        for name, family in ROUTES.items():
            setattr(self, name, getattr(getattr(self, family), name))

    @property
    def metrics(self) -> Any:
        """The metrics hook (rpc_finished, fetched), or None when metrics are off."""
        return self.core.metrics

    @metrics.setter
    def metrics(self, metrics: Any) -> None:
        self.core.metrics = metrics

    def group_metrics(self, cap: int) -> GroupMetrics:
        """The groups' figures for the metrics' scrape (lag in records and seconds, members,
        state, rebalances), each family capped at ``cap``; empty without a group coordinator."""
        coordinator = self.groups.coordinator_or_none
        if coordinator is None:
            return GroupMetrics({}, {}, {}, {}, {})
        cluster = self.core.cluster  # cluster mode: lag only of the partitions owned here
        return coordinator.metrics(cap, None if cluster is None else cluster.owns)

    # -- life cycle ---------------------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self.core.stopping

    @property
    def stream_in_flight_high(self) -> int:
        return self.streams.stream_in_flight_high

    def begin_shutdown(self) -> None:
        """Long polls answer now with what they have; Consume streams end with UNAVAILABLE;
        produce and lookup streams answer what they read, then end with UNAVAILABLE."""
        self.core.waiters.close()
        self.streams.stop_streams()

    async def drain(self, grace_s: float) -> int:
        """Shutdown: new calls answer UNAVAILABLE, calls in progress get ``grace_s`` to finish,
        the rest are cut with UNAVAILABLE (admission.py). Returns the count cut."""
        self.begin_shutdown()
        return await self.core.admission.drain(grace_s)

    def statistics(self) -> LogServicerStatistics:
        core = self.core
        return LogServicerStatistics(
            rpc=core.counters.snapshot(),
            waiters=core.waiters.statistics(),
            storage_calls=core.calls.statistics(),
            group_commit=core.group_commit.statistics(),
            admission=core.admission.statistics(),
            consume_stream_count=self.fetch.consume_stream_count,
            consume_buffer=core.consume_buffer.statistics(),
            stopping=core.stopping,
        )
