"""The /metrics HTTP endpoint: prometheus_client's WSGI server on its own daemon thread.

Scrapes run on that thread, so a slow scrape never holds the event loop; the collector reads
statistics snapshots, which take the storage's locks briefly, one log at a time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from prometheus_client import start_http_server

from seglog_server.config import parse_listen_address

__all__ = ["MetricsServer"]


@dataclass
class MetricsServer:
    address: str  # host:port actually bound (port 0 resolved)
    _httpd: Any
    _thread: threading.Thread

    @classmethod
    def start(cls, listen: str, metrics: Any) -> MetricsServer:
        """Binds ``listen`` (HOST:PORT, port 0 for any) and serves ``metrics.registry``."""
        host, port = parse_listen_address(listen)
        httpd, thread = start_http_server(port, addr=host, registry=metrics.registry)
        bound_port = httpd.server_address[1]
        address = f"[{host}]:{bound_port}" if ":" in host else f"{host}:{bound_port}"
        return cls(address, httpd, thread)

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
