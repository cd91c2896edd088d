"""Bearer tokens for an HTTP endpoint of the service (the metrics port): a WSGI wrapper.

``require_bearer(app, policy.verify_bearer)`` answers 401 with ``WWW-Authenticate: Bearer`` unless
the request's ``Authorization: Bearer <token>`` names a principal in the service's token file (the
same file and cache as gRPC calls). The message is the same whatever was wrong. WSGI servers run
each request on a worker thread, so the slow hash of a token not seen before blocks only that
thread; such hashes count against the bound the gRPC gate's share (``TokenStore``), and a request
that finds it full is answered 503 with ``Retry-After`` (a cached token never is). Wiring, where the metrics server builds its app::

    app = make_wsgi_app(registry)
    if require_token:
        app = require_bearer(app, policy.verify_bearer, policy.describable_topics)

With ``topic_filter`` (the ACL's describe rights of the principal: ``topic -> bool``, or None
when it may describe every topic), series labelled with a topic the principal may not describe
are left out of the exposition text, as ListTopics leaves such topics out. The body is then
filtered as plain text (the request's ``Accept-Encoding`` is dropped, so it is not compressed).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from .errors import AuthenticationBusyError

__all__ = ["filter_topic_series", "require_bearer"]

_UNAUTHORIZED = b"authentication failed: send Authorization: Bearer <token>\n"
_BUSY = b"too many new credentials being checked: retry after Retry-After seconds\n"
# A sample line's topic label: ``name{topic="orders",...} 1`` or ``name{...,topic="orders"} 1``.
# Topic names are [A-Za-z0-9._-] (storage checks them), so the value holds no escapes.
_TOPIC_LABEL = re.compile(rb'[{,]topic="([^"\\]*)"')

TopicFilter = Callable[[str], "Callable[[str], bool] | None"]


def require_bearer(app: Callable[..., Iterable[bytes]],
                   verify: Callable[[str | None], str | None],
                   topic_filter: TopicFilter | None = None) -> Callable[..., Iterable[bytes]]:
    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            principal = verify(environ.get("HTTP_AUTHORIZATION"))
        except AuthenticationBusyError as busy:
            start_response("503 Service Unavailable", [
                ("Retry-After", str(max(1, math.ceil(busy.retry_after_ms / 1000)))),
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(_BUSY))),
            ])
            return [_BUSY]
        if principal is None:
            start_response("401 Unauthorized", [
                ("WWW-Authenticate", 'Bearer realm="seglog"'),
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(_UNAUTHORIZED))),
            ])
            return [_UNAUTHORIZED]
        may_describe = topic_filter(principal) if topic_filter is not None else None
        if may_describe is None:
            return app(environ, start_response)
        return _filtered(app, environ, start_response, may_describe)

    return guarded


def filter_topic_series(text: bytes, may_describe: Callable[[str], bool]) -> bytes:
    """Exposition ``text`` without the sample lines of topics ``may_describe`` refuses (HELP and
    TYPE lines stay, so every family is still declared)."""
    kept = []
    for line in text.splitlines(keepends=True):
        match = _TOPIC_LABEL.search(line) if not line.startswith(b"#") else None
        if match is None or may_describe(match.group(1).decode("utf-8", "replace")):
            kept.append(line)
    return b"".join(kept)


def _filtered(app: Callable[..., Iterable[bytes]], environ: dict[str, Any],
              start_response: Callable[..., Any], may_describe: Callable[[str], bool]) -> Iterable[bytes]:
    environ = {key: value for key, value in environ.items() if key != "HTTP_ACCEPT_ENCODING"}
    answered: list[Any] = []

    def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        answered[:] = [status, headers]
        return lambda _data: None

    result = app(environ, capture)
    try:
        body = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    status, headers = answered
    if status.startswith("200"):
        body = filter_topic_series(body, may_describe)
    headers = [(name, value) for name, value in headers if name.lower() != "content-length"]
    start_response(status, [*headers, ("Content-Length", str(len(body)))])
    return [body]
