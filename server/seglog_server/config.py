"""The service's settings: one table, four sources, checked together at start.

Every setting has a snake_case name with its unit last (``fetch_bytes_max``), a default, a reason
for that default, and three spellings, one per source:

    TOML file       ``fetch_bytes_max = 8388608``   (limits under ``[limits]``, topic defaults
                                                      under ``[topic_defaults]`` by Kafka's names)
    environment     ``SEGLOG_FETCH_BYTES_MAX=8388608``, ``SEGLOG_TOPIC_DEFAULT_SEGMENT_BYTES=...``
    flags           ``--fetch-bytes-max 8388608``, ``--topic-default segment.bytes=...``

Precedence is flags > environment > file > defaults, per setting (and per topic-default key).
``load_config`` returns a frozen ``ServiceConfig`` or raises ``ConfigError`` whose one-line message
names the setting, where its value came from, and what is wrong. Limits are checked against each
other (``_check_limits``) so that, for example, any batch Produce accepts can be returned by Fetch.

A settings file::

    data_dirs = ["/var/lib/seglog/a", "/var/lib/seglog/b"]
    listen = "0.0.0.0:50551"

    [limits]
    fetch_bytes_max = 2097152
    shutdown_grace_ms = 5000

    [topic_defaults]
    "retention.ms" = 86400000
    "segment.bytes" = 268435456
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from seglog_server.storage.base.errors import InvalidConfigError
from seglog_server.storage.base.log_config import LogConfig

__all__ = [
    "DECODED_RECORD_OVERHEAD_BYTES",
    "ENV_PREFIX",
    "REQUEST_OVERHEAD_BYTES",
    "RESPONSE_OVERHEAD_BYTES",
    "ConfigError",
    "ServiceConfig",
    "build_arg_parser",
    "load_config",
    "parse_listen_address",
    "remote_storage_location",
    "security_policy",
]

ENV_PREFIX = "SEGLOG_"
TOPIC_DEFAULT_ENV_PREFIX = "SEGLOG_TOPIC_DEFAULT_"

# A ProduceRequest around its batch: the topic name (at most 249 bytes by Kafka's rules), the
# partition, acks and compression enums, protobuf tags and lengths and gRPC framing. 1 KiB covers
# it with room to spare; the batch itself is bounded by max.message.bytes.
REQUEST_OVERHEAD_BYTES = 1024
# A FetchResponse around its records: topic, partition, four int64 offsets, tags and framing.
RESPONSE_OVERHEAD_BYTES = 1024
# Protobuf bytes of one DecodedRecord (decode=true) beyond its key, value and header bytes: field
# tags, length prefixes, and the offset and timestamp varints (up to 10 bytes each for an int64).
DECODED_RECORD_OVERHEAD_BYTES = 48

MIB = 1024 * 1024

# Names a process may set that are ours but are not settings (the entry point's re-exec guard).
_RESERVED_ENV = frozenset({"SEGLOG_MALLOC_REEXEC"})


class ConfigError(Exception):
    """A setting is missing, malformed, out of range, or contradicts another one."""


@dataclass(frozen=True)
class ServiceConfig:
    """The validated settings of one service process."""

    data_dirs: tuple[str, ...] = ("./data",)
    listen: str = "127.0.0.1:50551"
    ready_file: str | None = None
    log_level: str = "INFO"
    malloc_tuning: bool = True
    # Largest gRPC message the service accepts (a ProduceRequest, mostly its one batch). 8 MiB:
    # room for topics that raise max.message.bytes well above Kafka's 1 MiB default, while one
    # request's buffer stays small next to the 24 GiB of this machine kind.
    request_bytes_max: int = 8 * MIB
    # Largest gRPC message the service sends (a FetchResponse). 16 MiB: at least
    # request_bytes_max (any accepted batch must be fetchable alone) and room for decode=true,
    # whose decoded copy of the records roughly doubles a response.
    response_bytes_max: int = 16 * MIB
    # Most records one produced batch may declare (its header's recordCount), checked before any
    # of its records is decompressed or decoded. 131,072: above the ~118,000 smallest records
    # (7-9 bytes each) an uncompressed batch of Kafka's default max.message.bytes (1 MiB) holds,
    # so no batch of that size is refused for its count; a compressed batch can claim no more,
    # which bounds the per-record work its validation and a decode=true fetch do (1.2 M empty
    # records in 1 MB of zstd took 4.4 s to validate; this many take a tenth of that).
    batch_records_max: int = 131_072
    # Largest `records` of one Fetch/Consume response (a request's max_bytes 0 means this).
    # 2 MiB: a response this size stays in a core's L2 cache (2 MiB here) through its copies;
    # measured with bench_service-style catch-up: 1-4 MiB best, 8 MiB 15-35 % slower.
    fetch_bytes_max: int = 2 * MIB
    # Longest a Fetch may wait at the tail; longer max_wait_ms are cut to this. 5 minutes: far
    # above any useful long poll (Kafka consumers use 500 ms), short enough that a forgotten
    # request does not hold its slot for ever.
    fetch_wait_ms_max: int = 300_000
    # Concurrent RPCs *doing work* before the service answers RESOURCE_EXHAUSTED. A Fetch waiting
    # at the tail and a Consume stream do not count here: they have their own limits below, so
    # idle long polls can never lock Produce and admin calls out. 1000: each costs a coroutine
    # and at most one request or response buffer.
    rpc_concurrency_max: int = 1000
    # Fetches waiting at the tail of a log (long polls), service-wide. 10,000: an idle waiter is
    # a coroutine, a gRPC call and a share of one future per partition, about 20 KB here
    # (measured by tests/integration/test_service_admission.py's RSS figure), so 200 MB at most.
    long_poll_waiters_max: int = 10_000
    # ... and per client (the peer's host address; a principal once authentication exists). 2,000:
    # one misbehaving client host can take a fifth of the waiters, never all of them.
    long_poll_waiters_per_client_max: int = 2_000
    # Streams open at once (Consume, ProduceStream, LookupStream), service-wide and per client:
    # the same costs and reasoning.
    consume_streams_max: int = 10_000
    consume_streams_per_client_max: int = 2_000
    # Bytes of Consume responses the service holds at once, over all streams: read, built, or
    # written and waiting for the client's HTTP/2 window (rpc/consume_buffer.py). A client that
    # never reads parks one response in gRPC's transport until its stream ends; before this
    # budget 500 such streams held 4.5 GB. 256 MiB: 128 streams catching up at fetch_bytes_max
    # at once (more than two cores can fill), about 0.5 GiB of memory at most (each held byte is
    # the response and gRPC's copy of it). When it is spent, responses shrink, streams go on.
    consume_buffer_bytes_max: int = 256 * MIB
    # The size a Consume response is cut to when that budget is spent (still at least one whole
    # batch). 64 KiB: HTTP/2's initial stream window, so a stream of a client that reads keeps
    # going at a useful rate, while 10,000 streams (consume_streams_max) at this size add at
    # most 640 MiB to the budget.
    consume_response_bytes_min: int = 64 * 1024
    # Threads for storage calls that block (fsync, large reads and appends, topic creation and
    # deletion, maintenance). 4: fsyncs wait in the kernel, so a few overlap usefully; more
    # threads than that only contend for the GIL on two cores.
    storage_threads: int = 4
    # Appends and reads up to this many bytes run on the event loop instead of the pool. 64 KiB:
    # measured (bench_service placement rows) a small append costs ~60 us inline and ~160-230 us
    # through the pool; at 500 KB the two placements give the same throughput, and the pool keeps
    # the loop free during the copy.
    inline_io_bytes_max: int = 65536
    # A connection that has not completed its handshake this long after it was accepted (TLS,
    # then the client's HTTP/2 preface and SETTINGS) is closed: gRPC's
    # grpc.server_handshake_timeout_ms. 10 s: a client on any network finishes it in well under
    # a second; gRPC's own 120 s let sockets that never speak hold a descriptor each for two
    # minutes (1,100 of them at a 1,024 limit refused every storage call for lack of descriptors).
    handshake_timeout_ms: int = 10_000
    # A connection with no call in flight for this long is closed with a GOAWAY; a client's
    # channel reconnects on its next call: gRPC's grpc.max_connection_idle_ms. 5 min: a client
    # that calls at least that often keeps its connection (an open stream or long poll is a call
    # in flight), while clients that went quiet give their descriptor back. (gRPC has no
    # per-peer connection cap: connections are accepted in its core, below any Python hook.)
    connection_idle_ms: int = 300_000
    # Time in-flight RPCs get to finish once SIGTERM arrives. 5 s: an fsync or a large fetch
    # finishes well within it, and container stop timeouts (Docker: 10 s) leave room for the
    # storage shutdown after it.
    shutdown_grace_ms: int = 5000
    # Period of LogManager.run_maintenance() (retention, flush.ms, checkpoints, delayed
    # deletes). 1 s: the pass itself applies Kafka's intervals; this is only how often it looks.
    maintenance_interval_ms: int = 1000
    # Age at which a cleaning snapshot nobody committed or dropped is removed by maintenance. 6 h:
    # a cleaning job reads tens of MB/s, so even a partition of hundreds of GiB finishes well
    # within it; an abandoned snapshot pins the disk space of the segments it links that long.
    snapshot_ttl_ms: int = 6 * 3600 * 1000
    # -- consumer groups (docs/consumer-groups.md), Kafka's defaults and names. -----------------
    # Partitions of __consumer_offsets (offsets.topic.num.partitions): fixed once the topic
    # exists (a group's partition is hash(group) % this); a start with another count fails.
    offsets_topic_partitions: int = 50
    # A member that sends no heartbeat for this long leaves its group (group.consumer.session.timeout.ms).
    group_session_timeout_ms: int = 45_000
    # How often members heartbeat, told in each answer (group.consumer.heartbeat.interval.ms).
    group_heartbeat_interval_ms: int = 5_000
    # Offsets of a group without members expire this long after it became empty (7 days).
    offsets_retention_minutes: int = 7 * 24 * 60
    # Prometheus endpoint (HTTP, text format) or None ("none" turns it off). Loopback by default,
    # like the gRPC listener; 9551 is free in Prometheus's list of exporter default ports. A busy
    # port does not stop the service: the error is logged and the data plane keeps serving.
    metrics_listen: str | None = "127.0.0.1:9551"
    # File that receives the metrics endpoint's host:port once it serves (port 0 picks one).
    metrics_ready_file: str | None = None
    # Partitions with their own series (offsets, size, segments, residency), the first ones in
    # (topic, partition) order. 1000: about 7,000 series, a load any Prometheus carries; beyond
    # it series are omitted and the omission counted (seglog_partition_series_omitted). The
    # scrape itself is cheap either way (10,000 partitions in about 100 ms, with every series:
    # bench/bench_metrics_scrape.py); the cap bounds what Prometheus stores. 0 turns them off.
    metrics_partition_series_max: int = 1000
    # Index residency (mincore) is sampled at most this often, on a thread of its own (a scrape
    # that finds the sample stale starts the next one and answers with the last). 10 s: a sample
    # maps up to 2,000 index files (tens of microseconds each), under 1 % of a core.
    metrics_residency_interval_ms: int = 10_000
    # /metrics answers only requests with a bearer token from the auth_tokens file (401
    # otherwise). Off by default: the endpoint listens on loopback only unless moved.
    metrics_require_token: bool = False
    # -- security (docs/security.md). Every file is read at start and again on SIGHUP. ---------
    tls_cert: str | None = None  # PEM chain: serve gRPC over TLS (with tls_key)
    tls_key: str | None = None
    tls_client_ca: str | None = None  # PEM CAs: require client certificates (mutual TLS)
    auth_tokens: str | None = None  # token file: every call needs a token or client certificate
    acl: str | None = None  # ACL file: deny by default, allow rules per principal
    quotas: str | None = None  # per-principal overrides of the quota_* and principal_* limits
    # Per-principal produce and fetch byte rates; 0 is unlimited (Kafka's default too).
    quota_produce_bytes_per_s: int = 0
    quota_fetch_bytes_per_s: int = 0
    # Credit a principal can bank while idle: a burst of rate x 1 s passes at once (Kafka
    # measures rates over 1 s samples for the same reason: smooth over single large requests).
    quota_window_ms: int = 1000
    # Longest a response is held back for a principal over its rate; past it, calls are refused
    # with RESOURCE_EXHAUSTED and retry-after-ms. 1 s: well inside any client deadline (30 s by
    # default), and a refused call costs the service nothing while the client waits.
    quota_delay_ms_max: int = 1000
    # Concurrent calls per principal (unary requests, Fetch long polls, Consume streams); 0 is
    # no cap beyond rpc_concurrency_max. Off by default: without credentials every caller is the
    # one principal ANONYMOUS, and a cap would be a second global limit.
    principal_requests_max: int = 0
    principal_waiters_max: int = 0
    principal_streams_max: int = 0
    # Verified tokens remembered (by keyed digest) so the slow hash runs once per token. 4096:
    # ~100 bytes each; far more distinct tokens than a deployment has clients.
    auth_token_cache_max: int = 4096
    # Segments (of every partition together) that may hold descriptors at once; 0 derives it
    # from RLIMIT_NOFILE (raised to its hard limit at start) and vm.max_map_count: a quarter of
    # the descriptors (at least 256) stay for sockets and short-lived files, and a segment holds
    # up to 4 (storage/segment/open_segments.py). Beyond it the least recently used segment closes.
    open_segments_max: int = 0
    # -- cluster mode (docs/cluster.md): off unless etcd endpoints are given ------------------
    # etcd v3 endpoints (http://HOST:PORT); none: one process owning every partition, as always.
    etcd: tuple[str, ...] = ()
    # The etcd key prefix: several clusters may share one etcd.
    cluster_name: str = "seglog"
    # None: the id recorded in the first data dir's instance.id (written there the first time),
    # so a restart with the same data is the same instance.
    instance_id: str | None = None
    # HOST:PORT clients dial for this instance; None: the bound listen address.
    advertise: str | None = None
    # etcd lease of the instance's registration. 10 s: a dead instance's partitions answer
    # UNAVAILABLE within 10 s, while an etcd fsync stall of a second or two fences nothing; produce
    # is refused from TTL - 2 x TTL/5 - TTL/10 (5 s) without a renewal (cluster/config.py).
    lease_ttl_ms: int = 10_000
    # A file holding the token this instance presents to the others (a move's CopyPartition);
    # None: no token (peers with --auth-tokens refuse the copy). rpc/peer_security.py.
    cluster_token_file: str | None = None
    # PEM CA(s) the other instances' server certificates are checked against when TLS is served;
    # None: the system roots. This instance's --tls-cert/--tls-key are its client certificate.
    cluster_tls_ca: str | None = None
    # -- tiered storage (docs/tiered-storage.md): off unless a store is given -----------------
    # s3://BUCKET[/PREFIX] of the object store closed segments of remote.storage.enable topics
    # are copied to. Credentials come from the environment or a credentials file (boto3's chain),
    # never from a setting, so never from a command line.
    remote_storage: str | None = None
    # The store's endpoint URL (an S3-compatible server); None: AWS S3 of the environment's region.
    s3_endpoint: str | None = None
    # Bytes of remote segments' chunks kept in memory for reads below the local log start.
    # 64 MiB: 16 chunks of 4 MiB, a few consumers catching up at once, small beside the host.
    remote_fetch_cache_bytes: int = 64 * MIB
    # How long one object-store call of a read below the local log start may take (one attempt:
    # connecting and each silence), separate from the uploader's deadline (3 attempts of 2 + 10 s).
    # 5 s: a healthy store answers a ranged GET in milliseconds, a consumer retries UNAVAILABLE.
    remote_read_timeout_ms: int = 5_000
    # An orphan remote segment (a copy a crash interrupted) is deleted once its record is this
    # old, at the first remote pass after a start and every 5 minutes. 10 minutes: no copy of a
    # segment still in flight (a previous owner's, in a cluster) is that old.
    remote_orphan_grace_ms: int = 600_000
    topic_defaults: Mapping[str, str] = field(default_factory=dict)
    log_config: LogConfig = field(default_factory=LogConfig)

    @property
    def listen_host(self) -> str:
        return parse_listen_address(self.listen)[0]

    @property
    def listen_port(self) -> int:
        return parse_listen_address(self.listen)[1]

    @property
    def listens_on_loopback(self) -> bool:
        """Whether only this machine can reach the port (127.0.0.0/8, ::1 or localhost)."""
        host = self.listen_host
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False  # a name: it may resolve to anything

    @property
    def message_bytes_max(self) -> int:
        """The largest max.message.bytes a topic may have: its batches must fit one request."""
        return self.request_bytes_max - REQUEST_OVERHEAD_BYTES


# -- value parsers: each takes a TOML value or a string and raises ValueError with a reason -----


def _parse_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"must be an integer, found {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip().replace("_", ""))
    except ValueError:
        raise ValueError(f"must be an integer, found {value!r}") from None


def _positive_int(value: Any) -> int:
    number = _parse_int(value)
    if number < 1:
        raise ValueError(f"must be at least 1, found {number}")
    return number


def _non_negative_int(value: Any) -> int:
    number = _parse_int(value)
    if number < 0:
        raise ValueError(f"must be at least 0, found {number}")
    return number


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be true or false, found {value!r}")


def _parse_dirs(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list | tuple) else [value]
    dirs = [part.strip() for item in items for part in str(item).split(",") if part.strip()]
    if not dirs:
        raise ValueError("needs at least one directory")
    if len(set(dirs)) != len(dirs):
        raise ValueError(f"lists a directory twice: {dirs}")
    return tuple(dirs)


def _parse_listen(value: Any) -> str:
    parse_listen_address(str(value))
    return str(value).strip()


def _parse_optional_path(value: Any) -> str | None:
    text = str(value).strip()
    return text or None


def _parse_log_level(value: Any) -> str:
    level = str(value).strip().upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError(f"must be DEBUG, INFO, WARNING, ERROR or CRITICAL, found {value!r}")
    return level


def _parse_optional_listen(value: Any) -> str | None:
    text = str(value).strip()
    if text.lower() == "none":
        return None
    parse_listen_address(text)
    return text


def _parse_endpoints(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list | tuple) else [value]
    return tuple(part.strip() for item in items for part in str(item).split(",") if part.strip())


def _parse_optional_text(value: Any) -> str | None:
    text = str(value).strip()
    return text or None


def _parse_text(value: Any) -> str:
    text = str(value).strip()
    if not text:
        raise ValueError("must not be empty")
    return text


def parse_listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[IPv6]:PORT`` -> (host, port); port 0 asks for any free port."""
    text = text.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"must be HOST:PORT, found {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"an IPv6 host must be in brackets ([::1]:50551), found {text!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"port must be an integer, found {port_text!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be in 0..65535, found {port}")
    return host, port


@dataclass(frozen=True)
class _Setting:
    name: str
    parse: Callable[[Any], Any]
    help: str
    section: str = ""  # TOML table holding it ("" is the top level)

    @property
    def toml_types(self) -> tuple[type, ...]:
        """The TOML value types this setting accepts (a file says what it means: ``data_dirs =
        5`` or ``fetch_bytes_max = "2M"`` is a mistake, not a directory named 5 or a number)."""
        return _TOML_TYPES[self.parse]

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def _parse_remote_storage(value: Any) -> str | None:
    text = str(value).strip()
    if not text or text.lower() == "none":
        return None
    if not text.startswith("s3://"):
        raise ValueError(f"must be s3://BUCKET[/PREFIX], found {text!r}")
    bucket = text[len("s3://"):].partition("/")[0]
    # S3's bucket rules: 3-63 lowercase letters, digits, dots and hyphens.
    if not (3 <= len(bucket) <= 63 and all(c.islower() or c.isdigit() or c in ".-" for c in bucket)
            and bucket[0].isalnum() and bucket[-1].isalnum()):
        raise ValueError(f"the bucket must be 3-63 lowercase letters, digits, dots or hyphens, found {bucket!r}")
    return text


def _parse_optional_url(value: Any) -> str | None:
    text = str(value).strip()
    if not text or text.lower() == "none":
        return None
    if not (text.startswith("http://") or text.startswith("https://")) or len(text) <= len("https://"):
        raise ValueError(f"must be an http:// or https:// URL, found {text!r}")
    if "@" in text.split("/", 3)[2]:
        raise ValueError("must not hold credentials: they come from the environment or a credentials file")
    return text


_TOML_TYPES: Mapping[Callable[[Any], Any], tuple[type, ...]] = {
    _parse_dirs: (list, str),
    _parse_listen: (str,),
    _parse_optional_listen: (str,),
    _parse_optional_path: (str,),
    _parse_log_level: (str,),
    _parse_bool: (bool,),
    _positive_int: (int,),
    _non_negative_int: (int,),
    _parse_endpoints: (list, str),
    _parse_optional_text: (str,),
    _parse_text: (str,),
    _parse_remote_storage: (str,),
    _parse_optional_url: (str,),
}
_TOML_TYPE_NAMES = {list: "an array of strings", str: "a string", bool: "true or false",
                    int: "an integer"}

# Defaults live on ServiceConfig (with the reason for each); this table says how to read them.
_SETTINGS: tuple[_Setting, ...] = (
    _Setting("data_dirs", _parse_dirs, "log directories (JBOD), repeatable or comma-separated"),
    _Setting("listen", _parse_listen, "gRPC address HOST:PORT (port 0: any free port)"),
    _Setting("ready_file", _parse_optional_path, "file that receives host:port once serving"),
    _Setting("log_level", _parse_log_level, "DEBUG, INFO, WARNING or ERROR"),
    _Setting("malloc_tuning", _parse_bool, "set glibc MALLOC_* thresholds (re-exec once)"),
    _Setting("request_bytes_max", _positive_int, "largest gRPC request, bytes", "limits"),
    _Setting("response_bytes_max", _positive_int, "largest gRPC response, bytes", "limits"),
    _Setting("batch_records_max", _positive_int, "most records in one produced batch, count", "limits"),
    _Setting("fetch_bytes_max", _positive_int, "largest records per response, bytes", "limits"),
    _Setting("fetch_wait_ms_max", _non_negative_int, "longest long-poll wait, ms", "limits"),
    _Setting("rpc_concurrency_max", _positive_int, "concurrent working RPCs, count", "limits"),
    _Setting("long_poll_waiters_max", _positive_int, "waiting Fetches, count", "limits"),
    _Setting("long_poll_waiters_per_client_max", _positive_int,
             "waiting Fetches per client host, count", "limits"),
    _Setting("consume_streams_max", _positive_int, "open streams (Consume, ProduceStream, LookupStream), count", "limits"),
    _Setting("consume_streams_per_client_max", _positive_int,
             "open streams per client host, count", "limits"),
    _Setting("consume_buffer_bytes_max", _positive_int,
             "Consume response bytes held at once, all streams, bytes", "limits"),
    _Setting("consume_response_bytes_min", _positive_int,
             "a Consume response's size when that budget is spent, bytes", "limits"),
    _Setting("storage_threads", _positive_int, "storage thread pool size, count", "limits"),
    _Setting("inline_io_bytes_max", _non_negative_int, "inline I/O bound, bytes", "limits"),
    _Setting("handshake_timeout_ms", _positive_int,
             "close a connection whose TLS/HTTP/2 handshake is unfinished after this long, ms", "limits"),
    _Setting("connection_idle_ms", _positive_int,
             "close a connection with no call in flight for this long, ms", "limits"),
    _Setting("shutdown_grace_ms", _non_negative_int, "in-flight grace at shutdown, ms", "limits"),
    _Setting("maintenance_interval_ms", _positive_int, "retention/flush pass period, ms", "limits"),
    _Setting("snapshot_ttl_ms", _positive_int, "age at which a cleaning snapshot is removed, ms", "limits"),
    _Setting("offsets_topic_partitions", _positive_int, "partitions of __consumer_offsets, count (fixed once created)"),
    _Setting("group_session_timeout_ms", _positive_int, "a silent group member is removed after this, ms"),
    _Setting("group_heartbeat_interval_ms", _positive_int, "how often group members heartbeat, ms"),
    _Setting("offsets_retention_minutes", _positive_int, "committed offsets of an empty group expire after, minutes"),
    _Setting("metrics_listen", _parse_optional_listen,
             "Prometheus /metrics address HOST:PORT, or none (port 0: any free port)"),
    _Setting("metrics_ready_file", _parse_optional_path,
             "file that receives the metrics host:port once serving"),
    _Setting("metrics_partition_series_max", _non_negative_int,
             "partitions with their own metric series, count (0: none)", "limits"),
    _Setting("metrics_residency_interval_ms", _positive_int,
             "shortest time between two index residency samples, ms", "limits"),
    _Setting("metrics_require_token", _parse_bool, "/metrics needs a bearer token (with --auth-tokens)"),
    _Setting("tls_cert", _parse_optional_path, "PEM certificate chain: serve TLS (with --tls-key)"),
    _Setting("tls_key", _parse_optional_path, "PEM private key of --tls-cert"),
    _Setting("tls_client_ca", _parse_optional_path, "PEM CA(s): require client certificates"),
    _Setting("auth_tokens", _parse_optional_path, "token file (seglog token create NAME --file F)"),
    _Setting("acl", _parse_optional_path, "ACL file (TOML [[allow]] rules; deny by default)"),
    _Setting("quotas", _parse_optional_path, "per-principal quota overrides (TOML)"),
    _Setting("quota_produce_bytes_per_s", _non_negative_int, "produce rate per principal, bytes/s",
             "limits"),
    _Setting("quota_fetch_bytes_per_s", _non_negative_int, "fetch rate per principal, bytes/s",
             "limits"),
    _Setting("quota_window_ms", _positive_int, "quota burst window, ms", "limits"),
    _Setting("quota_delay_ms_max", _non_negative_int, "longest quota delay, ms", "limits"),
    _Setting("principal_requests_max", _non_negative_int, "concurrent calls per principal", "limits"),
    _Setting("principal_waiters_max", _non_negative_int, "long polls per principal", "limits"),
    _Setting("principal_streams_max", _non_negative_int, "streams per principal", "limits"),
    _Setting("auth_token_cache_max", _positive_int, "verified tokens cached, count", "limits"),
    _Setting("etcd", _parse_endpoints, "etcd endpoints URL[,URL...]: cluster mode (off without)"),
    _Setting("cluster_name", _parse_text, "cluster name, the etcd key prefix (with --etcd)"),
    _Setting("instance_id", _parse_optional_text, "this instance's id (with --etcd; default: recorded in the first data dir)"),
    _Setting("advertise", _parse_optional_text, "HOST:PORT clients dial (with --etcd; default: the bound listen address)"),
    _Setting("lease_ttl_ms", _positive_int, "etcd lease of the registration, whole seconds in ms (with --etcd)"),
    _Setting("cluster_token_file", _parse_optional_path,
             "file with the token this instance presents to the other instances (with --etcd)"),
    _Setting("cluster_tls_ca", _parse_optional_path,
             "PEM CA(s) of the other instances' server certificates (with --etcd and --tls-cert)"),
    _Setting("remote_storage", _parse_remote_storage, "s3://BUCKET[/PREFIX]: tiered storage (off without)"),
    _Setting("s3_endpoint", _parse_optional_url, "object store endpoint URL (with --remote-storage)"),
    _Setting("remote_fetch_cache_bytes", _positive_int, "cache of remote chunks, bytes (with --remote-storage)", "limits"),
    _Setting("remote_read_timeout_ms", _positive_int, "deadline of a remote read's store call, ms (with --remote-storage)", "limits"),
    _Setting("remote_orphan_grace_ms", _positive_int, "age of an interrupted copy's record before it is deleted, ms (with --remote-storage)", "limits"),
    _Setting("open_segments_max", _non_negative_int, "segments holding descriptors, count (0: from RLIMIT_NOFILE)", "limits"),
)
_BY_NAME = {setting.name: setting for setting in _SETTINGS}
_BY_ENV = {setting.env: setting for setting in _SETTINGS}


def build_arg_parser() -> argparse.ArgumentParser:
    parser = _OneLineErrorParser(
        prog="seglog-server",
        description="The seglog log-segment storage service (gRPC seglog.v1.LogService).",
        epilog="Precedence: flags > SEGLOG_* environment variables > --config file > defaults. "
        "Each setting's environment variable and default are shown with it; its TOML key is its "
        "name (limits under [limits]). Topic defaults: --topic-default segment.bytes=N, "
        "SEGLOG_TOPIC_DEFAULT_SEGMENT_BYTES=N, or [topic_defaults] \"segment.bytes\" = N.",
    )
    parser.add_argument("--config", metavar="FILE.toml", help="TOML settings file")
    defaults = ServiceConfig()
    for setting in _SETTINGS:
        default = getattr(defaults, setting.name)
        if isinstance(default, tuple):
            default = ",".join(default)
        text = f"{setting.help} [{setting.env}; default {default}]"
        if setting.name == "data_dirs":
            parser.add_argument("--data-dir", dest="data_dirs", action="append", metavar="DIR",
                                help=text)
        elif setting.parse is _parse_bool:
            parser.add_argument(
                setting.flag, dest=setting.name, action=argparse.BooleanOptionalAction,
                default=None, help=text,
            )
        else:
            parser.add_argument(setting.flag, dest=setting.name, metavar="N"
                                if setting.section == "limits" else "VALUE", help=text)
    parser.add_argument(
        "--topic-default", dest="topic_defaults", action="append", metavar="NAME=VALUE",
        help="default topic config by Kafka's name, repeatable [SEGLOG_TOPIC_DEFAULT_<NAME>]",
    )
    return parser


class _OneLineErrorParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{message} (see --help)")


# -- loading ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Value:
    raw: Any
    origin: str  # where it came from, as a user would write it


def load_config(
    argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> ServiceConfig:
    """Reads flags, environment and the TOML file, applies precedence, validates everything."""
    environ = os.environ if environ is None else environ
    args = build_arg_parser().parse_args(list(argv))
    values: dict[str, _Value] = {}
    topic_values: dict[str, _Value] = {}
    if args.config:
        _read_file(args.config, values, topic_values)
    _read_environ(environ, values, topic_values)
    _read_flags(args, values, topic_values)
    parsed = {name: _parse(_BY_NAME[name], value) for name, value in values.items()}
    topic_defaults = {key: str(value.raw) for key, value in topic_values.items()}
    log_config = _parse_topic_defaults(topic_values)
    config = ServiceConfig(**parsed, topic_defaults=topic_defaults, log_config=log_config)
    _check_limits(config, values, topic_values)
    _check_security(config, values)
    _check_cluster(config, values)
    _check_remote_storage(config, values, topic_values)
    return config


def _read_file(path: str, values: dict[str, _Value], topic_values: dict[str, _Value]) -> None:
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"cannot read --config {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path} is not valid TOML: {exc}") from exc
    for key, raw in document.items():
        if key == "topic_defaults" and isinstance(raw, dict):
            for name, value in raw.items():
                topic_values[name] = _Value(_toml_scalar(value), f"[topic_defaults] in {path}")
        elif key == "limits" and isinstance(raw, dict):
            for name, value in raw.items():
                _set_file_value(path, "limits", name, value, values)
        else:
            _set_file_value(path, "", key, raw, values)


def _set_file_value(path: str, section: str, key: str, raw: Any, values: dict[str, _Value]) -> None:
    where = f"{section}.{key}" if section else key
    setting = _BY_NAME.get(key)
    if setting is None or setting.section != section:
        raise ConfigError(f"unknown setting {where} in {path}")
    expected = setting.toml_types
    wrong_type = not isinstance(raw, expected) or (isinstance(raw, bool) and bool not in expected)
    if isinstance(raw, list) and not wrong_type:
        wrong_type = not all(isinstance(item, str) for item in raw)
    if wrong_type:
        names = " or ".join(_TOML_TYPE_NAMES[t] for t in expected)
        raise ConfigError(f"invalid {where} in {path}: must be {names}, found {raw!r}")
    values[key] = _Value(raw, f"{where} in {path}")


def _toml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


def _read_environ(
    environ: Mapping[str, str], values: dict[str, _Value], topic_values: dict[str, _Value]
) -> None:
    known_topic = {name.upper().replace(".", "_"): name for name in LogConfig.known_names()}
    for env_name, raw in environ.items():
        if not env_name.startswith(ENV_PREFIX) or env_name in _RESERVED_ENV:
            continue
        if env_name.startswith(TOPIC_DEFAULT_ENV_PREFIX):
            suffix = env_name[len(TOPIC_DEFAULT_ENV_PREFIX):]
            if suffix not in known_topic:
                raise ConfigError(f"unknown topic config in environment variable {env_name}")
            topic_values[known_topic[suffix]] = _Value(raw, env_name)
        elif env_name in _BY_ENV:
            values[_BY_ENV[env_name].name] = _Value(raw, env_name)
        # Other SEGLOG_* variables belong to other programs (the client, the CLI): not ours.


def _read_flags(
    args: argparse.Namespace, values: dict[str, _Value], topic_values: dict[str, _Value]
) -> None:
    for setting in _SETTINGS:
        raw = getattr(args, setting.name)
        if raw is not None:
            flag = "--data-dir" if setting.name == "data_dirs" else setting.flag
            values[setting.name] = _Value(raw, flag)
    for item in args.topic_defaults or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--topic-default must be NAME=VALUE, found {item!r}")
        topic_values[name.strip()] = _Value(value.strip(), "--topic-default")


def _parse(setting: _Setting, value: _Value) -> Any:
    try:
        return setting.parse(value.raw)
    except ValueError as exc:
        raise ConfigError(f"invalid {setting.name} (from {value.origin}): {exc}") from None


def _parse_topic_defaults(topic_values: Mapping[str, _Value]) -> LogConfig:
    props = {name: str(value.raw) for name, value in topic_values.items()}
    try:
        return LogConfig.from_properties(props)
    except InvalidConfigError as exc:
        origins = sorted({value.origin for value in topic_values.values()})
        raise ConfigError(f"invalid topic default (from {', '.join(origins)}): {exc}") from None


def _origin(values: Mapping[str, _Value], name: str) -> str:
    value = values.get(name)
    return value.origin if value is not None else "default"


def _check_limits(
    config: ServiceConfig, values: Mapping[str, _Value], topic_values: Mapping[str, _Value]
) -> None:
    """The limits' relations. Each failure names both settings and where each came from."""

    def fail(name: str, relation: str, other: str) -> None:
        raise ConfigError(
            f"invalid {name}={getattr(config, name)} (from {_origin(values, name)}): must be "
            f"{relation} {other}"
        )

    # Any batch Produce accepts must come back from Fetch alone (a fetch returns at least one
    # whole batch), so the response limit covers the request limit.
    if config.response_bytes_max < config.request_bytes_max:
        fail("response_bytes_max", ">=", f"request_bytes_max={config.request_bytes_max} "
             f"(from {_origin(values, 'request_bytes_max')})")
    if config.fetch_bytes_max + RESPONSE_OVERHEAD_BYTES > config.response_bytes_max:
        fail("fetch_bytes_max", "<=", f"response_bytes_max - {RESPONSE_OVERHEAD_BYTES} = "
             f"{config.response_bytes_max - RESPONSE_OVERHEAD_BYTES} "
             f"(from {_origin(values, 'response_bytes_max')})")
    # A batch of that many records (the smallest ones, a few bytes each) must come back from a
    # decode=true Fetch alone: its decoded records' overhead fits the room the response limit
    # keeps above the request limit.
    decoded_overhead_bytes = config.batch_records_max * DECODED_RECORD_OVERHEAD_BYTES
    if decoded_overhead_bytes > config.response_bytes_max - config.request_bytes_max:
        fail("batch_records_max", "<=", f"(response_bytes_max - request_bytes_max) / "
             f"{DECODED_RECORD_OVERHEAD_BYTES} = "
             f"{(config.response_bytes_max - config.request_bytes_max) // DECODED_RECORD_OVERHEAD_BYTES} "
             f"(from {_origin(values, 'response_bytes_max')} and {_origin(values, 'request_bytes_max')}): "
             "a batch of that many records could not be fetched decoded")
    for name in ("long_poll_waiters", "consume_streams"):
        per_client, total = f"{name}_per_client_max", f"{name}_max"
        if getattr(config, per_client) > getattr(config, total):
            fail(per_client, "<=", f"{total}={getattr(config, total)} "
                 f"(from {_origin(values, total)})")
    # A budget below one full response would cut every stream's responses, and a minimum above
    # the budget would be no budget (a minimum above fetch_bytes_max is simply never reached).
    if config.consume_response_bytes_min > config.consume_buffer_bytes_max:
        fail("consume_response_bytes_min", "<=", f"consume_buffer_bytes_max={config.consume_buffer_bytes_max} "
             f"(from {_origin(values, 'consume_buffer_bytes_max')})")
    if config.consume_buffer_bytes_max < config.fetch_bytes_max:
        fail("consume_buffer_bytes_max", ">=", f"fetch_bytes_max={config.fetch_bytes_max} "
             f"(from {_origin(values, 'fetch_bytes_max')})")
    if config.request_bytes_max <= REQUEST_OVERHEAD_BYTES:
        fail("request_bytes_max", ">", f"the request overhead {REQUEST_OVERHEAD_BYTES}")
    # Expiry runs in the maintenance pass: a limit below its period could not be honoured.
    if config.snapshot_ttl_ms < config.maintenance_interval_ms:
        fail("snapshot_ttl_ms", ">=", f"maintenance_interval_ms={config.maintenance_interval_ms} "
             f"(from {_origin(values, 'maintenance_interval_ms')})")
    # A member heartbeats every interval; one at or above the session timeout would be removed.
    if config.group_heartbeat_interval_ms >= config.group_session_timeout_ms:
        fail("group_heartbeat_interval_ms", "<", f"group_session_timeout_ms={config.group_session_timeout_ms} "
             f"(from {_origin(values, 'group_session_timeout_ms')})")
    message_bytes = config.log_config.max_message_bytes
    if message_bytes > config.message_bytes_max:
        origin = topic_values["max.message.bytes"].origin if "max.message.bytes" in topic_values \
            else "default"
        raise ConfigError(
            f"invalid topic default max.message.bytes={message_bytes} (from {origin}): must be <= "
            f"request_bytes_max - {REQUEST_OVERHEAD_BYTES} = {config.message_bytes_max} (from "
            f"{_origin(values, 'request_bytes_max')}), or Produce could not carry such a batch"
        )


def _check_security(config: ServiceConfig, values: Mapping[str, _Value]) -> None:
    """TLS settings come in pairs, per-principal caps fit the global one, and every security file
    loads (read again by the service; here so a bad file stops it with a one-line message)."""
    if bool(config.tls_cert) != bool(config.tls_key):
        given, missing = ("tls_cert", "tls_key") if config.tls_cert else ("tls_key", "tls_cert")
        raise ConfigError(f"{given} (from {_origin(values, given)}) requires {missing}")
    if config.tls_client_ca and not config.tls_cert:
        raise ConfigError(
            f"tls_client_ca (from {_origin(values, 'tls_client_ca')}) requires tls_cert and "
            "tls_key: client certificates are only asked for over TLS"
        )
    if config.metrics_require_token and not config.auth_tokens:
        raise ConfigError(
            f"metrics_require_token (from {_origin(values, 'metrics_require_token')}) requires "
            "auth_tokens: the token file is where /metrics looks tokens up"
        )
    # A per-principal cap above the service-wide limit of its kind could never be reached.
    for name, limit in (("principal_requests_max", "rpc_concurrency_max"),
                        ("principal_waiters_max", "long_poll_waiters_max"),
                        ("principal_streams_max", "consume_streams_max")):
        if getattr(config, name) > getattr(config, limit):
            raise ConfigError(
                f"invalid {name}={getattr(config, name)} (from {_origin(values, name)}): must be "
                f"<= {limit}={getattr(config, limit)} (from {_origin(values, limit)})"
            )
    from seglog_server.security import SecurityError

    try:
        security_policy(config)
    except SecurityError as exc:
        raise ConfigError(f"invalid security file: {exc}") from None


_CLUSTER_SETTINGS = ("cluster_name", "instance_id", "advertise", "lease_ttl_ms", "cluster_token_file",
                     "cluster_tls_ca")


def _check_cluster(config: ServiceConfig, values: Mapping[str, _Value]) -> None:
    """Cluster settings need --etcd; with it, they are checked as the cluster core will use them
    (cluster/config.py), so a wrong one stops the start with one line naming it."""
    if not config.etcd:
        for name in _CLUSTER_SETTINGS:
            if name in values:
                raise ConfigError(f"{name} (from {_origin(values, name)}) requires etcd: cluster mode is "
                                  "off without --etcd URL[,URL...]")
        return
    _check_peer_security(config, values)
    if config.lease_ttl_ms % 1000:
        raise ConfigError(f"invalid lease_ttl_ms={config.lease_ttl_ms} (from {_origin(values, 'lease_ttl_ms')}): "
                          "must be whole seconds (etcd leases are granted in seconds)")
    from seglog_server.cluster.config import ClusterConfig
    from seglog_server.cluster.errors import ClusterConfigError

    try:  # the placeholders stand for what only the start knows (the recorded id, the bound port)
        ClusterConfig(config.etcd, config.advertise or "127.0.0.1:1", instance_id=config.instance_id or "unset",
                      cluster_name=config.cluster_name, lease_ttl_s=config.lease_ttl_ms // 1000)
    except ClusterConfigError as exc:
        setting = str(exc).split(":", 1)[0].replace("-", "_").replace("lease_ttl", "lease_ttl_ms")
        raise ConfigError(f"invalid cluster setting (from {_origin(values, setting)}): {exc}") from None


def _check_peer_security(config: ServiceConfig, values: Mapping[str, _Value]) -> None:
    """The credentials an instance presents to the others (rpc/peer_security.py), read now."""
    from seglog_server.rpc.peer_security import read_token_file

    if config.cluster_token_file:
        try:
            read_token_file(config.cluster_token_file)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"invalid cluster_token_file (from {_origin(values, 'cluster_token_file')}): "
                              f"{exc}") from None
    if config.cluster_tls_ca and not config.tls_cert:
        raise ConfigError(f"cluster_tls_ca (from {_origin(values, 'cluster_tls_ca')}) requires tls_cert and "
                          "tls_key: the other instances are dialed over TLS only when this one serves TLS")


_REMOTE_SETTINGS = ("s3_endpoint", "remote_fetch_cache_bytes", "remote_read_timeout_ms", "remote_orphan_grace_ms")


def _check_remote_storage(config: ServiceConfig, values: Mapping[str, _Value],
                          topic_values: Mapping[str, _Value]) -> None:
    """The store's settings need --remote-storage, and so does a topic default of
    remote.storage.enable=true (a topic could not be tiered without a store)."""
    if config.remote_storage:
        return
    for name in _REMOTE_SETTINGS:
        if name in values:
            raise ConfigError(f"{name} (from {_origin(values, name)}) requires remote_storage: tiered "
                              "storage is off without --remote-storage s3://BUCKET[/PREFIX]")
    if config.log_config.remote_storage_enable:
        raise ConfigError(
            f"topic default remote.storage.enable=true (from {topic_values['remote.storage.enable'].origin}) "
            "requires remote_storage: tiered storage is off without --remote-storage s3://BUCKET[/PREFIX]")


def remote_storage_location(config: ServiceConfig) -> tuple[str, str] | None:
    """(bucket, prefix) of ``--remote-storage``, or None when tiered storage is off."""
    if not config.remote_storage:
        return None
    bucket, _, prefix = config.remote_storage[len("s3://"):].partition("/")
    return bucket, prefix.strip("/")


def security_policy(config: ServiceConfig) -> Any:
    """The SecurityPolicy the settings describe (reads every file they name)."""
    from seglog_server.security import PrincipalQuota, SecurityPaths, SecurityPolicy

    paths = SecurityPaths(
        tls_cert=config.tls_cert, tls_key=config.tls_key, tls_client_ca=config.tls_client_ca,
        auth_tokens=config.auth_tokens, acl=config.acl, quotas=config.quotas,
    )
    defaults = PrincipalQuota(
        produce_bytes_per_s=config.quota_produce_bytes_per_s,
        fetch_bytes_per_s=config.quota_fetch_bytes_per_s,
        requests_max=config.principal_requests_max,
        waiters_max=config.principal_waiters_max,
        streams_max=config.principal_streams_max,
    )
    return SecurityPolicy(
        paths, defaults, token_cache_max=config.auth_token_cache_max,
        quota_window_ms=config.quota_window_ms, quota_delay_ms_max=config.quota_delay_ms_max,
    )
