"""Bearer tokens for an HTTP endpoint of the service (the metrics port): a WSGI wrapper.

``require_bearer(app, policy.verify_bearer)`` answers 401 with ``WWW-Authenticate: Bearer`` unless
the request's ``Authorization: Bearer <token>`` names a principal in the service's token file (the
same file and cache as gRPC calls). The message is the same whatever was wrong. WSGI servers run
each request on a worker thread, so the slow hash of a token not seen before blocks only that
thread. Wiring, where the metrics server builds its app::

    app = make_wsgi_app(registry)
    if require_token:
        app = require_bearer(app, policy.verify_bearer)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["require_bearer"]

_UNAUTHORIZED = b"authentication failed: send Authorization: Bearer <token>\n"


def require_bearer(app: Callable[..., Iterable[bytes]],
                   verify: Callable[[str | None], str | None]) -> Callable[..., Iterable[bytes]]:
    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if verify(environ.get("HTTP_AUTHORIZATION")) is None:
            start_response("401 Unauthorized", [
                ("WWW-Authenticate", 'Bearer realm="seglog"'),
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(_UNAUTHORIZED))),
            ])
            return [_UNAUTHORIZED]
        return app(environ, start_response)

    return guarded
