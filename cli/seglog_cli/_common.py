"""Helpers shared by the ``seglog`` subcommands: parsing values, printing records, progress bars."""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import sys
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any, Protocol, TextIO

from seglog import DEFAULT_SERVER, ConsumerRecord

__all__ = [
    "SERVER_ENV",
    "SERVER_EXTRA",
    "CliError",
    "Progress",
    "add_server_option",
    "decode_record_json",
    "epilog",
    "parse_key_value",
    "parse_time_ms",
    "progress",
    "record_to_json",
    "security_of",
    "server_missing",
    "server_of",
    "text_of",
]

SERVER_ENV = "SEGLOG_SERVER"
# What a client-only install lacks for `seglog serve` and `seglog token` (the `server` extra of
# pyproject.toml); the cleaner's engines name `seglog[spark]` (cleaner.SPARK_EXTRA).
SERVER_EXTRA = "pip install 'seglog[server]'"

_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# "now-15m" (or "-15m", which argparse only accepts attached: --time=-15m)
_RELATIVE_TIME = re.compile(r"^(?:now)?-(\d+)(ms|s|m|h|d)$")


class CliError(Exception):
    """An expected failure the command reports in one line (bad input, missing file, ...)."""


def server_missing(command: str, error: ImportError) -> CliError:
    """The one line for a command of the service's run where the service cannot be imported."""
    return CliError(f"{command} needs the seglog service, which this install lacks ({error}): {SERVER_EXTRA}")


def epilog(text: str) -> str:
    """An epilog as written in the source, minus the common indentation."""
    lines = text.strip("\n").splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines)


def add_server_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server",
        metavar="HOST:PORT",
        default=argparse.SUPPRESS,
        help=f"the seglog service (default: ${SERVER_ENV} or {DEFAULT_SERVER})",
    )
    parser.add_argument("--tls", action="store_true", default=argparse.SUPPRESS,
                        help="use TLS, verifying the service against the system's CAs [$SEGLOG_TLS]")
    parser.add_argument("--tls-ca", metavar="FILE", default=argparse.SUPPRESS,
                        help="use TLS, verifying the service against these PEM CAs [$SEGLOG_TLS_CA]")
    parser.add_argument("--tls-cert", metavar="FILE", default=argparse.SUPPRESS,
                        help="client certificate for mutual TLS [$SEGLOG_TLS_CLIENT_CERT]")
    parser.add_argument("--tls-key", metavar="FILE", default=argparse.SUPPRESS,
                        help="private key of --tls-cert [$SEGLOG_TLS_CLIENT_KEY]")
    parser.add_argument("--token", metavar="TOKEN", default=argparse.SUPPRESS,
                        help="bearer token (prefer $SEGLOG_TOKEN: arguments show in ps)")


def server_of(args: argparse.Namespace) -> str:
    return getattr(args, "server", None) or os.environ.get(SERVER_ENV) or DEFAULT_SERVER


def security_of(args: argparse.Namespace) -> dict[str, Any]:
    """The client's TLS and token options from the flags (unset ones fall back to SEGLOG_*);
    options that do not fit together are a one-line CliError here, before connecting."""
    from seglog._security import ConnectionSecurity

    options = {
        "tls": True if getattr(args, "tls", False) else None,
        "tls_ca": getattr(args, "tls_ca", None),
        "tls_cert": getattr(args, "tls_cert", None),
        "tls_key": getattr(args, "tls_key", None),
        "token": getattr(args, "token", None),
    }
    try:
        ConnectionSecurity.resolve(**options)
    except ValueError as error:
        raise CliError(str(error)) from None
    return options


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0 (partitions, offsets, counts), else a usage error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (sizes, partition counts), else a usage error."""
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be >= 1, got 0")
    return value


def parse_key_value(text: str) -> tuple[str, str]:
    """``key=value`` (the value may contain '=' and may be empty)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def parse_time_ms(text: str, *, now_ms: int | None = None) -> int:
    """Milliseconds since the epoch from: an integer, an ISO-8601 time (UTC unless it carries an
    offset; 'Z' accepted), ``now``, or a time relative to now: ``now-15m`` (also ``-15m``), with
    units ms, s, m, h, d."""
    text = text.strip()
    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if re.fullmatch(r"\d+", text):
        return int(text)
    if text == "now":
        return now_ms
    relative = _RELATIVE_TIME.match(text)
    if relative:
        return now_ms - int(relative.group(1)) * _DURATION_UNITS_MS[relative.group(2)]
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected milliseconds since the epoch, an ISO time like 2026-11-22T10:00:00Z, 'now' or "
            f"a relative time like now-15m; got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return round(moment.timestamp() * 1000)


def text_of(data: bytes | None) -> str:
    """Bytes for a terminal: UTF-8, undecodable bytes escaped; None prints as 'null'."""
    return "null" if data is None else data.decode("utf-8", "backslashreplace")


def _json_bytes(name: str, data: bytes | None, out: dict[str, Any]) -> None:
    if data is None:
        out[name] = None
        return
    try:
        out[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        out[f"{name}_base64"] = base64.b64encode(data).decode("ascii")


def record_to_json(record: ConsumerRecord) -> str:
    """One JSON line per record. Keys/values that are not UTF-8 appear as ``key_base64`` /
    ``value_base64``; headers are an object, or a list of [key, value] pairs when keys repeat."""
    out: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp_ms": record.timestamp_ms,
    }
    _json_bytes("key", record.key, out)
    _json_bytes("value", record.value, out)
    headers = [(k, None if v is None else v.decode("utf-8", "backslashreplace")) for k, v in record.headers]
    keys = [k for k, _ in headers]
    out["headers"] = dict(headers) if len(set(keys)) == len(keys) else [list(h) for h in headers]
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"))


def _bytes_field(obj: dict[str, Any], name: str) -> bytes | None:
    if f"{name}_base64" in obj:
        return base64.b64decode(obj[f"{name}_base64"], validate=True)
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":")).encode()  # a JSON value is sent as its JSON text


def decode_record_json(line: str) -> dict[str, Any]:
    """A produce input line: ``{"key":..,"value":..,"headers":{..},"timestamp_ms":..,"partition":..}``.

    Returns keyword arguments for ``Producer.send`` (key, value, headers, timestamp_ms, partition).
    """
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as error:
        raise CliError(f"not valid JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(obj, dict):
        raise CliError(f"expected a JSON object, got {type(obj).__name__}")
    unknown = set(obj) - {"key", "value", "key_base64", "value_base64", "headers", "timestamp_ms", "partition"}
    if unknown:
        raise CliError(f"unknown fields {sorted(unknown)}")
    fields: dict[str, Any] = {"key": _bytes_field(obj, "key"), "value": _bytes_field(obj, "value")}
    headers = obj.get("headers") or {}
    pairs: Iterable[Any] = headers.items() if isinstance(headers, dict) else headers
    try:
        fields["headers"] = [(str(k), None if v is None else str(v).encode()) for k, v in pairs]
    except (TypeError, ValueError):
        raise CliError("headers must be an object or a list of [key, value] pairs") from None
    for name in ("timestamp_ms", "partition"):
        value = obj.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise CliError(f"{name} must be an integer, got {value!r}")
        fields[name] = value
    return fields


class Progress(Protocol):
    def update(self, n: int = 1) -> object: ...
    def close(self) -> None: ...


class _NoProgress:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress(*, total: int | None, desc: str, unit: str, stream: TextIO | None = None) -> Progress:
    """A tqdm bar on stderr when stderr is a terminal; otherwise nothing at all."""
    stream = stream or sys.stderr
    if not stream.isatty():
        return _NoProgress()
    from tqdm import tqdm  # imported only when a bar is shown

    scale = unit == "B"
    bar: Progress = tqdm(total=total, desc=desc, unit=unit, unit_scale=scale, unit_divisor=1024 if scale else 1000, file=stream, leave=False)
    return bar
