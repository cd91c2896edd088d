"""EtcdGateway: the few etcd v3 calls the cluster core makes, over etcd's HTTP gateway (etcd3gw).

etcd3gw is synchronous (requests underneath): every call here blocks, so callers run it on a thread
of their own, never on the event loop. One gateway per thread (a requests session is not meant to
be shared across threads). Errors are translated once, here: any failure to reach etcd becomes
``EtcdUnavailableError`` naming the endpoints, with the cause chained; the gateway then tries the
next endpoint, so a cluster of several etcd members survives one member down.

Values are JSON; etcd's int64 fields arrive as strings through the gateway (proto3 JSON), and
``false``/``0`` fields are omitted, so every read goes through ``_int`` and ``.get``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import requests
from etcd3gw import exceptions as etcd_exceptions
from etcd3gw.client import Etcd3Client

from .config import parse_endpoint
from .errors import EtcdUnavailableError, WatchCompactedError
from .records import key_text

# The gateway path of etcd >= 3.4 (etcd3gw would otherwise ask /version first, one more round trip
# and one more way to fail).
API_PATH = "/v3/"
# Every etcd3gw failure (an HTTP error answer included) and every transport error is one
# EtcdUnavailableError to the callers: they retry or fence, whatever the cause.
_UNREACHABLE = (etcd_exceptions.Etcd3Exception, requests.RequestException)
# The operation each unary call is observed as (seglog_cluster_etcd_* metrics): a fixed, small set.
OPERATIONS = {"kv/range": "range", "kv/txn": "txn", "kv/deleterange": "delete", "kv/compaction": "compact",
              "lease/grant": "grant", "lease/keepalive": "keepalive", "kv/lease/revoke": "revoke"}
# (operation, seconds, succeeded) -> None: told of every unary call's round trip, failed or not.
EtcdObserver = Callable[[str, float, bool], None]


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    mod_revision: int
    create_revision: int
    lease: int


@dataclass(frozen=True)
class WatchEvent:
    kind: str  # "PUT" or "DELETE"
    kv: KeyValue


@dataclass(frozen=True)
class WatchBatch:
    """One message of a watch stream: its events, and for a progress notification (no events,
    etcd's ``progress_notify``) the store revision every event up to which has been sent, else 0."""

    events: list[WatchEvent]
    progress_revision: int = 0


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode("ascii")


def prefix_end(prefix: str) -> str:
    """The first key after every key starting with ``prefix`` (etcd's range_end for a prefix)."""
    raw = bytearray(prefix.encode())
    assert raw and raw[-1] < 0xFF, prefix
    raw[-1] += 1
    return raw.decode()


def _int(value: Any) -> int:
    return int(value or 0)


def _kv(raw: dict[str, Any]) -> KeyValue:
    # A key not in UTF-8 (written by another tool) is escaped, never raised: records.key_text.
    return KeyValue(key=key_text(base64.b64decode(raw["key"])), value=base64.b64decode(raw.get("value", "")),
                    mod_revision=_int(raw.get("mod_revision")), create_revision=_int(raw.get("create_revision")),
                    lease=_int(raw.get("lease")))


class EtcdGateway:
    def __init__(self, endpoints: tuple[str, ...], timeout_s: float, observe: EtcdObserver | None = None) -> None:
        assert endpoints and timeout_s > 0
        self.endpoints = tuple(endpoints)
        self.timeout_s = timeout_s
        self._observe = observe
        self._clients = [Etcd3Client(host=host, port=port, protocol=scheme, timeout=timeout_s, api_path=API_PATH)
                         for scheme, host, port in map(parse_endpoint, self.endpoints)]
        self._current = 0
        self._stream: Any = None  # the watch response being read, for close() to shut down

    def another(self) -> EtcdGateway:
        """A new gateway to the same endpoints, timeout and observer, for another thread."""
        return EtcdGateway(self.endpoints, self.timeout_s, self._observe)

    def close(self) -> None:
        """Closes the sessions, and shuts down a watch stream being read on another thread: its
        blocked read returns at once instead of after the read timeout (a stopping instance)."""
        stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):  # already closed, or urllib3 without shutdown()
                stream.raw.shutdown()
        for client in self._clients:
            client.session.close()

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._observe is None:
            return self._call_endpoints(path, body)
        started, succeeded = time.monotonic(), False
        try:
            answer = self._call_endpoints(path, body)
            succeeded = True
            return answer
        finally:
            self._observe(OPERATIONS[path], time.monotonic() - started, succeeded)

    def _call_endpoints(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        last: Exception | None = None
        for attempt in range(len(self._clients)):
            client = self._clients[(self._current + attempt) % len(self._clients)]
            try:
                answer = client.post(client.get_url(path), data=json.dumps(body))
            except _UNREACHABLE as exc:
                last = exc
                continue
            self._current = (self._current + attempt) % len(self._clients)
            return answer
        raise EtcdUnavailableError(
            f"etcd unavailable at {','.join(self.endpoints)}: {type(last).__name__}: {last}") from last

    # -- keys ---------------------------------------------------------------------------------
    def range_prefix(self, prefix: str) -> tuple[int, list[KeyValue]]:
        """(the store's revision, every key under ``prefix``), read at one revision."""
        answer = self._call("kv/range", {"key": b64(prefix), "range_end": b64(prefix_end(prefix))})
        return _int(answer["header"].get("revision")), [_kv(raw) for raw in answer.get("kvs", ())]

    def get(self, key: str) -> KeyValue | None:
        answer = self._call("kv/range", {"key": b64(key)})
        kvs = answer.get("kvs", ())
        return _kv(kvs[0]) if kvs else None

    def txn(self, compare: list[dict], success: list[dict], failure: list[dict] = ()) -> tuple[bool, int]:
        """(succeeded, the revision after) of one etcd transaction."""
        answer = self._call("kv/txn", {"compare": compare, "success": success, "failure": list(failure)})
        return bool(answer.get("succeeded")), _int(answer["header"].get("revision"))

    def delete(self, key: str) -> None:
        self._call("kv/deleterange", {"key": b64(key)})

    def compact(self, revision: int) -> None:
        """Discards the history before ``revision`` (etcd's compaction; operators and tests)."""
        self._call("kv/compaction", {"revision": revision, "physical": True})

    # -- leases -------------------------------------------------------------------------------
    def grant(self, ttl_s: int) -> int:
        return _int(self._call("lease/grant", {"TTL": ttl_s, "ID": 0})["ID"])

    def keepalive(self, lease: int) -> int:
        """The TTL granted again, or -1 when etcd no longer has the lease (expired or revoked)."""
        answer = self._call("lease/keepalive", {"ID": lease})
        ttl = _int(answer.get("result", {}).get("TTL"))
        return ttl if ttl > 0 else -1

    def revoke(self, lease: int) -> bool:
        """Whether etcd had the lease: False when it has it no longer (expired or revoked: etcd's
        "requested lease not found", an HTTP 404), which is no failure to reach etcd."""
        try:
            self._call("kv/lease/revoke", {"ID": lease})
        except EtcdUnavailableError as exc:
            cause = exc.__cause__
            if isinstance(cause, etcd_exceptions.Etcd3Exception) and "lease not found" in str(cause.detail_text):
                return False
            raise
        return True

    # -- watch --------------------------------------------------------------------------------
    def watch_prefix(self, prefix: str, start_revision: int, read_timeout_s: float) -> Iterator[WatchBatch]:
        """Yields each batch of events under ``prefix`` from ``start_revision``, and each progress
        notification (``progress_notify``: an idle watch learns the revision it has reached).

        etcd3gw's ``Watcher`` hands events to a callback from a pool thread and gives no sign when
        its stream ends, and it reads with no timeout: a paused or restarted etcd would leave a
        cache silently stale. This opens the same gateway stream (etcd3gw's session and URL) and
        reads it here, so the end of the stream and a read timeout reach the caller as
        ``EtcdUnavailableError``, and a watch etcd cancelled because its history is compacted past
        ``start_revision`` as ``WatchCompactedError`` (only a full reload helps then).
        """
        client = self._clients[self._current]
        request = {"create_request": {"key": b64(prefix), "range_end": b64(prefix_end(prefix)),
                                      "start_revision": start_revision, "progress_notify": True}}
        try:
            response = client.session.post(client.get_url("watch"), json=request, stream=True,
                                           timeout=(self.timeout_s, read_timeout_s))
            with response:
                self._stream = response
                if response.status_code != 200:
                    raise EtcdUnavailableError(f"etcd watch at {self.endpoints[self._current]}: "
                                               f"HTTP {response.status_code} {response.text[:200]}")
                for line in response.iter_lines():
                    if line.strip():
                        yield self._watch_events(json.loads(line))
        except _UNREACHABLE + (ValueError,) as exc:
            self._current = (self._current + 1) % len(self._clients)
            raise EtcdUnavailableError(f"etcd watch stream ended: {type(exc).__name__}: {exc}") from exc
        finally:
            self._stream = None
        raise EtcdUnavailableError("etcd watch stream ended")

    @staticmethod
    def _watch_events(chunk: dict[str, Any]) -> WatchBatch:
        if "error" in chunk:
            raise EtcdUnavailableError(f"etcd watch error: {chunk['error']}")
        result = chunk.get("result", {})
        compact_revision = _int(result.get("compact_revision"))
        if compact_revision:
            raise WatchCompactedError(f"etcd cancelled the watch: history compacted to revision "
                                      f"{compact_revision}", compact_revision)
        if result.get("canceled"):
            raise EtcdUnavailableError(f"etcd cancelled the watch: {result.get('cancel_reason', '')}")
        events = [WatchEvent(kind=raw.get("type", "PUT"), kv=_kv(raw["kv"])) for raw in result.get("events", ())]
        # A message with no events that is not the creation answer is a progress notification: every
        # event up to its header revision has been sent. (The creation answer's header revision is
        # the store's, which events still to come may precede.)
        progress = 0 if events or result.get("created") else _int(result.get("header", {}).get("revision"))
        return WatchBatch(events, progress)
