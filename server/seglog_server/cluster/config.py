"""ClusterConfig: where etcd is, who this instance is, and the lease and fencing timings.

Cluster mode is off unless etcd endpoints are given; this module only describes the settings and
checks them together (each error one line naming the setting, as ``seglog_server.config`` does).

The fencing rule (DESIGN.md section 8): an instance stops acknowledging produces when its last
successful lease renewal is older than ``fence_after_s``, which is shorter than the lease TTL:

    fence_after_s = lease_ttl_s - 2 * keepalive_interval_s - fence_margin_s

A renewal's clock starts when the request is *sent*, so etcd's expiry of the lease is at least
``lease_ttl_s`` after it; the two keepalive intervals leave room for an in-flight renewal that
etcd already counted but we have not seen answered, and the margin covers clock-rate differences
between the machines and an acknowledgement already being written when the deadline passes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .errors import ClusterConfigError
from .instance_identity import instance_id_for

DEFAULT_CLUSTER_NAME = "seglog"
# Ten seconds: an instance that dies is noticed (its partitions answer UNAVAILABLE) within 10 s,
# while a GC pause or a slow etcd fsync of a second or two costs no fencing.
DEFAULT_LEASE_TTL_S = 10
# etcd refuses to keep leases shorter than about 1.5 election timeouts (2 s with its defaults) and
# silently lengthens them, which would break the fencing arithmetic.
LEASE_TTL_MIN_S = 2
LEASE_TTL_MAX_S = 300
# Renew five times per TTL: two renewals may fail before the fencing deadline comes near.
KEEPALIVE_PER_TTL = 5
# A tenth of the TTL for clock-rate differences and an acknowledgement in flight (1 s at 10 s).
FENCE_MARGIN_PER_TTL = 0.1
# Kafka's legal topic characters; the name is also the etcd key prefix, so no "/" in it.
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$")


@dataclass(frozen=True)
class ClusterConfig:
    etcd_endpoints: tuple[str, ...]
    advertise: str  # host:port clients dial
    data_dirs: tuple[str, ...] = ()
    instance_id: str = ""  # "": the id recorded in the first data dir (instance_identity.py)
    cluster_name: str = DEFAULT_CLUSTER_NAME
    lease_ttl_s: int = DEFAULT_LEASE_TTL_S
    keepalive_interval_s: float = field(default=0.0)  # 0: lease_ttl_s / KEEPALIVE_PER_TTL
    fence_margin_s: float = field(default=-1.0)  # < 0: lease_ttl_s * FENCE_MARGIN_PER_TTL

    def __post_init__(self) -> None:
        object.__setattr__(self, "etcd_endpoints", tuple(self.etcd_endpoints))
        object.__setattr__(self, "data_dirs", tuple(str(d) for d in self.data_dirs))
        if not self.instance_id:
            if not self.data_dirs:
                raise ClusterConfigError("instance-id: not given and no data dir to derive it from")
            object.__setattr__(self, "instance_id", instance_id_for(self.data_dirs[0]))
        if not self.keepalive_interval_s:
            object.__setattr__(self, "keepalive_interval_s", self.lease_ttl_s / KEEPALIVE_PER_TTL)
        if self.fence_margin_s < 0:
            object.__setattr__(self, "fence_margin_s", self.lease_ttl_s * FENCE_MARGIN_PER_TTL)
        self._validate()

    @property
    def fence_after_s(self) -> float:
        return self.lease_ttl_s - 2 * self.keepalive_interval_s - self.fence_margin_s

    def _validate(self) -> None:
        if not self.etcd_endpoints:
            raise ClusterConfigError("etcd: at least one endpoint is needed (--etcd URL[,URL...])")
        for endpoint in self.etcd_endpoints:
            parse_endpoint(endpoint)
        if not _NAME.match(self.cluster_name):
            raise ClusterConfigError(
                f"cluster-name: {self.cluster_name!r} must be 1-64 of [A-Za-z0-9._-]")
        if not _NAME.match(self.instance_id):
            raise ClusterConfigError(
                f"instance-id: {self.instance_id!r} must be 1-64 of [A-Za-z0-9._-]")
        if not _HOST_PORT.match(self.advertise) or not 0 < int(self.advertise.rsplit(":", 1)[1]) < 65536:
            raise ClusterConfigError(f"advertise: {self.advertise!r} is not HOST:PORT with a port 1-65535")
        if not (isinstance(self.lease_ttl_s, int) and LEASE_TTL_MIN_S <= self.lease_ttl_s <= LEASE_TTL_MAX_S):
            raise ClusterConfigError(
                f"lease-ttl: {self.lease_ttl_s!r} must be whole seconds in {LEASE_TTL_MIN_S}..{LEASE_TTL_MAX_S}")
        if not (math.isfinite(self.keepalive_interval_s) and self.keepalive_interval_s > 0):
            raise ClusterConfigError(f"keepalive-interval: {self.keepalive_interval_s!r} must be > 0 s")
        if not math.isfinite(self.fence_margin_s):
            raise ClusterConfigError(f"fence-margin: {self.fence_margin_s!r} must be a finite number of seconds")
        # A deadline shorter than one renewal interval would fence a healthy instance between renewals.
        if self.fence_after_s <= self.keepalive_interval_s:
            raise ClusterConfigError(
                f"lease-ttl: {self.lease_ttl_s} s leaves a fencing deadline of {self.fence_after_s:.2f} s, not more "
                f"than the keepalive interval {self.keepalive_interval_s:.2f} s (TTL - 2 x keepalive - margin)")


def parse_endpoint(endpoint: str) -> tuple[str, str, int]:
    """"http://host:port" -> ("http", host, port); ClusterConfigError naming the endpoint otherwise."""
    scheme, sep, rest = endpoint.partition("://")
    if not sep:
        scheme, rest = "http", endpoint
    match = _HOST_PORT.match(rest.rstrip("/"))
    if scheme not in ("http", "https") or not match or not 0 < int(match.group(2)) < 65536:
        raise ClusterConfigError(f"etcd: {endpoint!r} is not http(s)://HOST:PORT")
    return scheme, match.group(1).strip("[]"), int(match.group(2))
