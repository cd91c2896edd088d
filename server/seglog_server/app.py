"""The composition root: storage, thread pool, servicer, health, reflection, maintenance timer.

``SeglogService`` owns the life cycle of one service process:

start   storage observer installed (metrics on) -> LogManager.startup() on the pool (recovery
        can take a while) -> gRPC server with LogService, grpc.health.v1 and reflection ->
        SERVING -> maintenance timer -> /metrics endpoint (metrics ready file) -> ready file.
stop    (SIGTERM / SIGINT) NOT_SERVING -> long polls answer, Consume streams end UNAVAILABLE ->
        the gRPC server stops accepting and gives in-flight RPCs ``shutdown_grace_ms`` ->
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
from grpc_reflection.v1alpha import reflection

from seglog.v1 import log_service_pb2 as pb
from seglog_server.config import ServiceConfig
from seglog_server.metrics import Metrics
from seglog_server.metrics_server import MetricsServer
from seglog_server.rpc.log_service import LogServicer, LogServicerLimits
from seglog_server.rpc.registration import add_log_service
from seglog_server.rpc.storage_calls import StorageCalls
from seglog_server.storage.errors import StorageError
from seglog_server.storage.log_manager import LogManager
from seglog_server.storage import install_observer

__all__ = ["LOG_SERVICE_NAME", "SeglogService", "StartupError", "run"]

LOG_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["LogService"].full_name

_log = logging.getLogger("seglog_server")


class StartupError(Exception):
    """The service could not start (port in use, storage failed to load)."""


def _default_manager_factory(config: ServiceConfig) -> Any:
    return LogManager(list(config.data_dirs), default_config=config.log_config)


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
        self._stopping = asyncio.Event()
        self._stopped = False
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
        self._servicer = LogServicer(manager, self._calls, self._limits(), metrics=self._metrics)
        server = grpc.aio.server(
            options=self._server_options(),
            maximum_concurrent_rpcs=self._config.rpc_concurrency_max,
        )
        add_log_service(self._servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            (LOG_SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        port = self._bind(server)
        self._server = server
        await server.start()
        for name in ("", LOG_SERVICE_NAME):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._maintenance = asyncio.create_task(self._maintain(), name="seglog-maintenance")
        host = self._config.listen_host
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._start_metrics(manager)
        self._write_ready_file()
        _log.info(
            "seglog serving %s on %s (data dirs: %s)",
            LOG_SERVICE_NAME, self.address, ", ".join(self._config.data_dirs),
        )
        return self.address

    def _limits(self) -> LogServicerLimits:
        return LogServicerLimits(
            fetch_bytes_max=self._config.fetch_bytes_max,
            fetch_wait_ms_max=self._config.fetch_wait_ms_max,
            response_bytes_max=self._config.response_bytes_max,
            message_bytes_max=self._config.message_bytes_max,
        )

    def _server_options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.max_receive_message_length", self._config.request_bytes_max),
            ("grpc.max_send_message_length", self._config.response_bytes_max),
            # gRPC sets SO_REUSEPORT by default: a second service on the same port would bind
            # "successfully" and steal half the connections. One port, one service.
            ("grpc.so_reuseport", 0),
        ]

    def _bind(self, server: grpc.aio.Server) -> int:
        try:
            port = server.add_insecure_port(self._config.listen)
        except RuntimeError as exc:
            raise StartupError(f"cannot listen on {self._config.listen}: {exc}") from exc
        if port == 0:
            raise StartupError(f"cannot listen on {self._config.listen}")
        return port

    def _start_metrics(self, manager: Any) -> None:
        """Serves /metrics. A port that cannot be bound is logged, not fatal: the data plane
        matters more than its view (Prometheus then shows the target down)."""
        if self._metrics is None or self._config.metrics_listen is None:
            return
        self._metrics.manager = manager
        self._metrics.servicer = self._servicer
        try:
            self._metrics_server = MetricsServer.start(self._config.metrics_listen, self._metrics)
        except OSError as exc:
            _log.error("metrics endpoint off: cannot listen on %s: %s",
                       self._config.metrics_listen, exc)
            return
        self.metrics_address = self._metrics_server.address
        _write_atomically(self._config.metrics_ready_file, self.metrics_address)
        _log.info("seglog metrics on http://%s/metrics", self.metrics_address)

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
        if self._servicer is not None:
            self._servicer.begin_shutdown()
        if self._server is not None:
            await self._server.stop(self._config.shutdown_grace_ms / 1000)
        if self._maintenance is not None:
            await self._maintenance
        if self._manager is not None:
            await self._calls.blocking(self._manager.shutdown)
        self._calls.shutdown()
        if self._metrics_server is not None:
            self._metrics_server.stop()
        if self._metrics is not None:
            install_observer(None)
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
