"""The /metrics HTTP endpoint: prometheus_client's WSGI server on its own daemon thread.

Scrapes run on that thread, so a slow scrape never holds the event loop; the collector reads
statistics snapshots, which take the storage's locks briefly, one log at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import make_server

from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler

from seglog_server.security.http_bearer import require_bearer

from seglog_server.config import parse_listen_address
from seglog_server.metrics.text import make_wsgi_app

__all__ = ["MetricsServer"]


@dataclass
class MetricsServer:
    address: str  # host:port actually bound (port 0 resolved)
    _httpd: Any
    _thread: threading.Thread

    @classmethod
    def start(
        cls, listen: str, metrics: Any, verify_bearer: Callable[[str | None], str | None] | None = None,
        topic_filter: Callable[[str], Callable[[str], bool] | None] | None = None,
    ) -> MetricsServer:
        """Binds ``listen`` (HOST:PORT, port 0 for any) and serves ``metrics.registry``; with
        ``verify_bearer``, only to requests whose ``Authorization: Bearer`` token it accepts
        (401 otherwise), and with ``topic_filter`` only the series of topics the token's
        principal may describe (security/http_bearer.py). The same server prometheus_client's
        ``start_http_server`` builds: a threading WSGI server, quiet request log, on a daemon
        thread."""
        host, port = parse_listen_address(listen)
        app = make_wsgi_app(metrics.registry)
        if verify_bearer is not None:
            app = require_bearer(app, verify_bearer, topic_filter)
        httpd = make_server(host, port, app, ThreadingWSGIServer, handler_class=_SilentHandler)
        thread = threading.Thread(target=httpd.serve_forever, name="seglog-metrics", daemon=True)
        thread.start()
        bound_port = httpd.server_address[1]
        address = f"[{host}]:{bound_port}" if ":" in host else f"{host}:{bound_port}"
        return cls(address, httpd, thread)

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
