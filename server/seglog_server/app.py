"""The composition root: storage, thread pool, servicer, health, reflection, maintenance timer.

``SeglogService`` owns the life cycle of one service process:

start   storage observer installed (metrics on) -> LogManager.startup() on the pool (recovery
        can take a while) -> security policy (TLS, tokens, ACL, quotas: docs/security.md) ->
        gRPC server with LogService behind the call gate, ClusterService, PartitionMoveService,
        grpc.health.v1 and reflection naming each (health and reflection open) -> SERVING ->
        maintenance timer -> /metrics endpoint (metrics ready file) -> ready file -> a warning
        if the port is reachable from other machines without TLS or tokens.
SIGHUP  the security files are read again; new connections use the new certificates.
stop    (SIGTERM / SIGINT) NOT_SERVING -> long polls answer, Consume streams end UNAVAILABLE,
        new calls are answered UNAVAILABLE, in-flight RPCs get ``shutdown_grace_ms`` and any
        still running after it are cut with UNAVAILABLE (retriable) -> the gRPC server stops ->
        maintenance finishes its pass -> LogManager.shutdown() (flush, checkpoints, clean-shutdown
        marker) -> thread pool joined -> ready file removed. Exit code 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import moves_pb2
from seglog_server.config import ServiceConfig, parse_listen_address, remote_storage_location, security_policy
from seglog_server.groups.coordinator import GroupCoordinator
from seglog_server.listen_check import GRPC_LISTEN_FLAG, METRICS_LISTEN_FLAG, bind_problem, describe_bind_error
from seglog_server.groups import GroupError
from seglog_server.metrics import Metrics
from seglog_server.metrics.server import MetricsServer
from seglog_server.rpc.admission import AdmissionLimits
from seglog_server.rpc.call_gate import CallGate
from seglog_server.rpc.cluster_rpcs import CLUSTER_SERVICE_NAME, ClusterRpcs, add_cluster_service
from seglog_server.rpc.move_rpcs import PartitionMoveRpcs, add_move_service
from seglog_server.rpc.log_dir_names import LogDirNames
from seglog_server.resource_limits import open_segments_budget
from seglog_server.rpc.log_service import LogServicer, LogServicerLimits
from seglog_server.rpc.reflection import enable_reflection
from seglog_server.rpc.registration import add_log_service
from seglog_server.rpc.storage_calls import StorageCalls
from seglog_server.rpc.tls_credentials import ReloadableTlsCredentials
from seglog_server.security import SecurityError, SecurityPolicy
from seglog_server.security.exposure import ExposedSettings, exposure_warnings
from seglog_server.storage.base.errors import StorageError
from seglog_server.storage.manager.log_manager import LogManager
from seglog_server.storage import SYSTEM_CLOCK, install_observer

__all__ = ["LOG_SERVICE_NAME", "SeglogService", "StartupError", "run"]

LOG_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["LogService"].full_name
MOVE_SERVICE_NAME = moves_pb2.DESCRIPTOR.services_by_name["PartitionMoveService"].full_name

_log = logging.getLogger("seglog_server")

# After the servicer has drained, how long gRPC's own calls get before the server stops. 1 s: a
# call that arrived during the drain is answered UNAVAILABLE within microseconds.
_SERVER_STOP_GRACE_S = 1.0


class StartupError(Exception):
    """The service could not start (port in use, storage failed to load)."""


def _default_manager_factory(config: ServiceConfig) -> Any:
    return LogManager(
        list(config.data_dirs),
        default_config=config.log_config,
        open_segments_max=open_segments_budget(config.open_segments_max),
        snapshot_ttl_ms=config.snapshot_ttl_ms,
        remote_storage=_remote_storage(config),
        remote_fetch_cache_bytes=config.remote_fetch_cache_bytes,
        remote_orphan_grace_ms=config.remote_orphan_grace_ms,
    )


def _remote_storage(config: ServiceConfig) -> Any:
    """The tiered storage's RemoteStorageManager over ``--remote-storage`` (None without it).
    boto3 is imported only here, so a service without the remote extra runs without it."""
    location = remote_storage_location(config)
    if location is None:
        return None
    from seglog_server.storage.remote import ObjectStore, ObjectStoreConfig, RemoteStorageManager

    bucket, prefix = location
    store_config = ObjectStoreConfig(bucket, prefix, endpoint_url=config.s3_endpoint)
    read_config = store_config.for_reads(config.remote_read_timeout_ms / 1000)
    return RemoteStorageManager(ObjectStore(store_config), read_store=ObjectStore(read_config))


class SeglogService:
    def __init__(
        self,
        config: ServiceConfig,
        *,
        manager_factory: Callable[[ServiceConfig], Any] = _default_manager_factory,
    ) -> None:
        self._config = config
        self._manager_factory = manager_factory
        self._calls = StorageCalls(config.storage_threads, config.inline_io_bytes_max)
        self._manager: Any = None
        self._server: grpc.aio.Server | None = None
        self._servicer: LogServicer | None = None
        self._health = health.aio.HealthServicer()
        self._maintenance: asyncio.Task[None] | None = None
        self._sessions: asyncio.Task[None] | None = None
        self._coordinator: GroupCoordinator | None = None
        self._cluster: Any = None  # cluster_node.ClusterNode with --etcd
        # Empties local copies of partitions etcd gives another instance (move_rpcs.py), --etcd.
        self._stale_copies: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._stopped = False
        self._policy: SecurityPolicy | None = None
        self._gate: CallGate | None = None
        self._tls: ReloadableTlsCredentials | None = None
        self._serving = True
        self.address: str | None = None
        self.metrics_address: str | None = None
        self._metrics: Metrics | None = None
        self._metrics_server: MetricsServer | None = None
        if config.metrics_listen is not None:
            self._metrics = Metrics(
                partition_series_max=config.metrics_partition_series_max,
                residency_interval_s=config.metrics_residency_interval_ms / 1000,
            )

    # -- start --------------------------------------------------------------------------------
    async def start(self) -> str:
        """Loads the storage and starts serving; returns the bound ``host:port``."""
        if self._metrics is not None:
            install_observer(self._metrics.observer)
        try:
            manager = self._manager_factory(self._config)
            await self._calls.blocking(manager.startup)
        except StorageError as exc:
            raise StartupError(f"storage failed to start: {exc}") from exc
        self._manager = manager
        self._coordinator = await self._start_coordinator(manager)
        try:
            self._policy = security_policy(self._config)
        except SecurityError as exc:
            raise StartupError(f"security settings: {exc}") from exc
        if self._policy.tls is not None:
            self._tls = ReloadableTlsCredentials(self._policy.tls)
        self._gate = CallGate(self._policy)
        admission = self._admission_limits()
        self._servicer = LogServicer(manager, self._calls, self._limits(), admission,
                                     LogDirNames(self._config.data_dirs), gate=self._gate,
                                     metrics=self._metrics, coordinator=self._coordinator)
        server = grpc.aio.server(
            options=self._server_options(),
            maximum_concurrent_rpcs=self._concurrent_rpcs_max(),  # a backstop only
        )
        add_log_service(self._servicer, server)
        cluster_rpcs = ClusterRpcs(self._servicer.core)  # Metadata, with or without --etcd
        add_cluster_service(cluster_rpcs, server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        moves = PartitionMoveRpcs(self._servicer.core)
        add_move_service(moves, server)  # refused without --etcd
        # Every service registered above (a test compares this with the services that answer).
        enable_reflection((LOG_SERVICE_NAME, CLUSTER_SERVICE_NAME, MOVE_SERVICE_NAME, health.SERVICE_NAME), server)
        port = self._bind(server)
        self._server = server
        host = self._config.listen_host
        cluster_rpcs.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if self._config.etcd:  # before the first call: produce is fenced and routed from the start
            await self._start_cluster(manager, cluster_rpcs.address)
            self._stale_copies = asyncio.create_task(moves.drop_stale_copies_forever(), name="seglog-stale-copies")
        await server.start()
        for name in ("", LOG_SERVICE_NAME):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._maintenance = asyncio.create_task(self._maintain(), name="seglog-maintenance")
        start_uploader = getattr(manager, "start_remote_uploader", None)
        if start_uploader is not None:  # uploads on a thread of their own, at the same period
            start_uploader(self._config.maintenance_interval_ms)
        self._sessions = asyncio.create_task(self._expire_group_sessions(), name="seglog-group-sessions")
        host = self._config.listen_host
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._start_metrics(manager)
        _log.info(
            "seglog serving %s on %s (data dirs: %s; %s)",
            LOG_SERVICE_NAME, self.address, ", ".join(self._config.data_dirs), self._security_summary(),
        )
        self._warn_if_exposed()
        # Last: whoever waits for the ready file finds the start's log lines already written.
        self._write_ready_file()
        return self.address

    async def _start_cluster(self, manager: Any, bound_address: str) -> None:
        """Cluster mode (docs/cluster.md): registered under a lease, the metadata cache watched,
        the service core routing and fencing through them. Imported only here: a single
        process loads no etcd code."""
        from seglog_server.cluster import ClusterError
        from seglog_server.cluster_node import ClusterNode

        try:
            node = ClusterNode.from_service_config(self._config, bound_address, manager, self._calls)
        except ClusterError as exc:
            raise StartupError(f"cluster settings: {exc}") from exc
        self._cluster = node
        # The ACL stays one file per instance (reloaded on SIGHUP); its digest goes into the
        # registration, and every instance reports one whose rules differ from its own.
        policy = self._policy
        node.acl_digest = lambda: "" if policy is None or policy.acl is None else policy.acl.digest()
        await node.start()
        assert self._servicer is not None
        self._servicer.core.cluster = node.routing

    async def _start_coordinator(self, manager: Any) -> GroupCoordinator:
        """The group coordinator: __consumer_offsets created when missing, every partition
        replayed into memory before the service answers a call."""
        config = self._config
        coordinator = GroupCoordinator(
            manager, SYSTEM_CLOCK, partitions=config.offsets_topic_partitions,
            session_timeout_ms=config.group_session_timeout_ms,
            heartbeat_interval_ms=config.group_heartbeat_interval_ms,
            retention_ms=config.offsets_retention_minutes * 60_000,
        )
        try:
            await self._calls.blocking(coordinator.start)
        except (StorageError, GroupError, ValueError) as exc:
            await self._calls.blocking(manager.shutdown)
            raise StartupError(f"group coordinator failed to start: {exc}") from exc
        return coordinator

    async def _expire_group_sessions(self) -> None:
        """Removes group members whose session ran out, a tenth of the timeout after at most."""
        coordinator = self._coordinator
        assert coordinator is not None
        interval_s = min(1.0, coordinator.session_timeout_ms / 10_000)
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval_s)
            if self._stopping.is_set():
                return
            try:
                for group, member in await self._calls.blocking(coordinator.expire_sessions):
                    _log.info("group %r: member %s removed, its session timed out", group, member)
            except Exception:  # noqa: BLE001 - one failed pass must not stop the next ones
                _log.exception("group session expiry failed")
            await self._sync_group_partitions()

    async def _sync_group_partitions(self) -> None:
        """Cluster mode: drops the offsets partitions (and their groups) this instance lost."""
        routing = None if self._servicer is None else self._servicer.groups.routing
        if routing is None:
            return
        try:
            for partition in await self._calls.blocking(routing.sync):
                _log.info("__consumer_offsets-%d is no longer coordinated here: its groups unloaded", partition)
        except Exception:  # noqa: BLE001 - one failed pass must not stop the next ones
            _log.exception("offsets partitions' ownership check failed")

    def _security_summary(self) -> str:
        policy = self._policy
        assert policy is not None
        transport = "mutual TLS" if policy.mutual_tls else "TLS" if policy.tls else "plaintext"
        tokens = "tokens" if policy.tokens is not None else "no tokens"
        acl = f"ACL of {policy.acl.rule_count} rules" if policy.acl is not None else "no ACL"
        return f"{transport}, {tokens}, {acl}"

    def _warn_if_exposed(self) -> None:
        """Ports other machines can reach without encryption or credentials (security/exposure.py)."""
        policy = self._policy
        assert policy is not None
        config = self._config
        metrics_host = parse_listen_address(config.metrics_listen)[0] if config.metrics_listen else None
        for warning in exposure_warnings(ExposedSettings(
            listen=config.listen, listen_host=config.listen_host, tls=policy.tls is not None,
            mutual_tls=policy.mutual_tls, tokens=policy.tokens is not None,
            metrics_listen=config.metrics_listen, metrics_host=metrics_host,
            metrics_require_token=config.metrics_require_token,
        )):
            _log.warning("%s", warning)

    def reload_security(self) -> bool:
        """SIGHUP: reads the TLS, token, ACL and quota files again. On any error nothing changes
        (the old files stay in force) and the error is logged. Established streams are kept."""
        if self._policy is None:
            return False
        try:
            material = self._policy.reload()
        except SecurityError as exc:
            _log.error("SIGHUP: security files not reloaded, the previous ones stay: %s", exc)
            return False
        if self._tls is not None and material is not None:
            self._tls.replace(material)
        _log.info("SIGHUP: security files reloaded (%s)", self._security_summary())
        return True

    def _limits(self) -> LogServicerLimits:
        return LogServicerLimits(
            fetch_bytes_max=self._config.fetch_bytes_max,
            fetch_wait_ms_max=self._config.fetch_wait_ms_max,
            response_bytes_max=self._config.response_bytes_max,
            message_bytes_max=self._config.message_bytes_max,
            batch_records_max=self._config.batch_records_max,
            consume_buffer_bytes_max=self._config.consume_buffer_bytes_max,
            consume_response_bytes_min=self._config.consume_response_bytes_min,
        )

    def _admission_limits(self) -> AdmissionLimits:
        config = self._config
        return AdmissionLimits(
            request_max=config.rpc_concurrency_max,
            waiter_max=config.long_poll_waiters_max,
            waiter_per_client_max=config.long_poll_waiters_per_client_max,
            stream_max=config.consume_streams_max,
            stream_per_client_max=config.consume_streams_per_client_max,
        )

    def _server_options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.max_receive_message_length", self._config.request_bytes_max),
            ("grpc.max_send_message_length", self._config.response_bytes_max),
            # gRPC sets SO_REUSEPORT by default: a second service on the same port would bind
            # "successfully" and steal half the connections. One port, one service.
            ("grpc.so_reuseport", 0),
            # Connections that never finish their handshake, or sit idle, give their descriptor
            # back (config.py says why each value).
            ("grpc.server_handshake_timeout_ms", self._config.handshake_timeout_ms),
            ("grpc.max_connection_idle_ms", self._config.connection_idle_ms),
            # Calls that arrived but the server has not yet taken up wait in gRPC core's queue;
            # past its defaults (1,000, hard limit 3,000) core cancels them itself: a burst of
            # 3,000 Produces got ~500 CANCELLED without a seglog trailer, which clients do not
            # retry. Sized like the backstop, every call within the service's limits reaches
            # admission, which answers the ones over a limit RESOURCE_EXHAUSTED (retriable).
            ("grpc.server.max_pending_requests", self._concurrent_rpcs_max()),
            ("grpc.server.max_pending_requests_hard_limit", self._concurrent_rpcs_max()),
        ]

    def _concurrent_rpcs_max(self) -> int:
        """gRPC's backstop: the servicer admits requests, waiters and streams by their own limits
        (rpc/admission.py); room above their sum for health checks, reflection and calls on
        their way to being refused with a clear message."""
        return self._admission_limits().total_max + self._config.rpc_concurrency_max

    def _bind(self, server: grpc.aio.Server) -> int:
        problem = bind_problem(self._config.listen, GRPC_LISTEN_FLAG)  # why, and the flag (listen_check)
        if problem is not None:
            raise StartupError(problem)
        try:
            if self._tls is not None:
                port = server.add_secure_port(self._config.listen, self._tls.server_credentials)
            else:
                port = server.add_insecure_port(self._config.listen)
        except RuntimeError as exc:
            raise StartupError(
                f"cannot listen on {self._config.listen}: {exc}; choose another with {GRPC_LISTEN_FLAG}") from exc
        if port == 0:
            raise StartupError(f"cannot listen on {self._config.listen}; choose another with {GRPC_LISTEN_FLAG}")
        return port

    def _start_metrics(self, manager: Any) -> None:
        """Serves /metrics. A port that cannot be bound is logged, not fatal: the data plane
        matters more than its view (Prometheus then shows the target down)."""
        if self._metrics is None or self._config.metrics_listen is None:
            return
        self._metrics.manager = manager
        self._metrics.servicer = self._servicer
        try:
            verify = self._policy.verify_bearer if self._config.metrics_require_token and self._policy else None
            topics = self._policy.describable_topics if verify is not None and self._policy else None
            self._metrics_server = MetricsServer.start(self._config.metrics_listen, self._metrics,
                                                       verify, topics)
        except OSError as exc:
            _log.error("metrics endpoint off: %s",
                       describe_bind_error(self._config.metrics_listen, exc, METRICS_LISTEN_FLAG))
            return
        self.metrics_address = self._metrics_server.address
        _write_atomically(self._config.metrics_ready_file, self.metrics_address)
        _log.info("seglog metrics on http://%s/metrics%s", self.metrics_address,
                  " (a bearer token required)" if self._config.metrics_require_token else "")

    def _write_ready_file(self) -> None:
        _write_atomically(self._config.ready_file, self.address)

    async def _maintain(self) -> None:
        """LogManager.run_maintenance() every maintenance_interval_ms, on the pool."""
        interval_s = self._config.maintenance_interval_ms / 1000
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval_s)
            if self._stopping.is_set():
                return
            try:
                await self._calls.blocking(self._manager.run_maintenance)
            except Exception:  # noqa: BLE001 - one failed pass must not stop the next ones
                _log.exception("maintenance pass failed")
            if self._coordinator is not None:
                try:  # offsets of groups without members, after offsets_retention_minutes
                    await self._calls.blocking(self._coordinator.expire_offsets)
                except Exception:  # noqa: BLE001 - as above
                    _log.exception("committed offsets expiry failed")
            await self._update_health()

    async def _update_health(self) -> None:
        """NOT_SERVING only when nothing can be served (every log directory offline); a full
        disk or a single offline directory leaves the rest serving, so health says SERVING."""
        can_serve = getattr(self._manager, "can_serve", None)
        serving = can_serve() if can_serve is not None else True
        if serving == self._serving or self._stopping.is_set():
            return
        self._serving = serving
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", LOG_SERVICE_NAME):
            await self._health.set(name, status)
        _log.warning("health: %s", "SERVING again" if serving else "NOT_SERVING: no log directory is online")

    # -- stop ---------------------------------------------------------------------------------
    def request_stop(self, reason: str = "requested") -> None:
        if self._stopping.is_set():
            _log.info("%s: already stopping", reason)
        else:
            _log.info("%s: stopping", reason)
        self._stopping.set()

    async def wait_stop_requested(self) -> None:
        await self._stopping.wait()

    async def stop(self) -> None:
        """Graceful shutdown; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        _log.info("seglog stopping: grace %d ms for in-flight requests",
                  self._config.shutdown_grace_ms)
        await self._health.enter_graceful_shutdown()
        grace_s = self._config.shutdown_grace_ms / 1000
        if self._servicer is not None:
            # Our calls finish (or are cut with UNAVAILABLE) while gRPC still serves normally:
            # stopping the server under them would answer CANCELLED, which clients do not retry.
            cut_count = await self._servicer.drain(grace_s)
            if cut_count:
                _log.warning("%d calls were still running after the grace period: answered "
                             "UNAVAILABLE", cut_count)
        if self._server is not None:
            # What is left is gRPC's own (health watches, reflection) and calls arriving now,
            # which the servicer answers UNAVAILABLE at once.
            await self._server.stop(min(grace_s, _SERVER_STOP_GRACE_S))
        if self._maintenance is not None:
            await self._maintenance
        if self._sessions is not None:
            await self._sessions
        if self._stale_copies is not None:
            self._stale_copies.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stale_copies
        if self._cluster is not None:  # the lease revoked: the others see this instance go now
            await self._cluster.stop()
        if self._manager is not None:
            await self._calls.blocking(self._manager.shutdown)
        self._calls.shutdown()
        if self._metrics_server is not None:
            self._metrics_server.stop()
        if self._metrics is not None:
            install_observer(None)
        if self._gate is not None:
            self._gate.close()
        for path in (self._config.ready_file, self._config.metrics_ready_file):
            if path is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        if self._manager is not None and not self._manager.stopped_cleanly:
            _log.warning(
                "seglog stopped, but without a clean-shutdown marker in %s: those directories "
                "recover at the next start", ", ".join(self._manager.unclean_dirs))
        else:
            _log.info("seglog stopped cleanly")

    @property
    def servicer(self) -> LogServicer | None:
        return self._servicer


def _write_atomically(path: str | None, address: str | None) -> None:
    """Writes ``address`` and a newline to ``path``, aside then renamed, so a reader polling for
    the file never sees half an address."""
    if path is None:
        return
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="ascii") as file:
        file.write(f"{address}\n")
    os.replace(temporary, path)


async def serve(config: ServiceConfig) -> int:
    """Runs the service until SIGTERM or SIGINT; returns the process exit code."""
    service = SeglogService(config)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, service.request_stop, signal.Signals(signum).name)
    loop.add_signal_handler(signal.SIGHUP, service.reload_security)
    try:
        try:
            await service.start()
        except StartupError as exc:
            _log.error("%s", exc)
            return 1
        await service.wait_stop_requested()
    finally:
        await service.stop()
    return 0


def run(config: ServiceConfig) -> int:
    import uvloop

    return uvloop.run(serve(config))
