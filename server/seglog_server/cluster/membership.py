"""Membership: this instance's registration under an etcd lease, and the fencing clock.

A thread registers ``<name>/instances/<id>`` under a lease of ``lease_ttl_s`` and renews it every
``keepalive_interval_s``, at a fixed rate (each keepalive that long after the previous one was
sent, at once when its answer came later): nothing else is on that thread's path, so a slow etcd
delays a renewal by one round trip only. ``may_acknowledge()`` is a pure function of the clock:
True while the last successful renewal (timed from when its request was *sent*) is younger than
``fence_after_s``, which is shorter than the TTL (config.py says by how much and why). So an
instance that can no longer renew stops acknowledging produces before etcd can expire its lease
and let another instance take its partitions, whatever its threads are doing: no thread has to
notice the failure in time.

When etcd says the lease is gone (expired or revoked), the instance is fenced at once and registers
again under a new lease. ``registration_revision()`` is the etcd revision that registration was
written at: whatever changed while the lease was gone (an unclean takeover of its partitions) is
below it, so the service acknowledges nothing until its watched cache has reached it
(rpc/cluster_routing.py, ``check_fence``); a renewed lease alone says nothing of what the cache
has seen, after a pause (SIGSTOP) or a cut longer than the TTL.

A second thread, with a gateway of its own, checks the record every ``keepalive_interval_s`` while
it holds a lease (a pass that begins with none asks etcd nothing and is no check) and writes it
again, under the same lease, when it changes: when the partition count or the ACL digest
changed, at most once per lease TTL when only the bytes did (placement's tie-break needs them
roughly, etcd need not take a write per produce); and when etcd's copy is not the one last written
(an operator's put, malformed or not). A check that fails (etcd slow or away) is counted as such,
never as a failed renewal: the renewals alone decide the fencing. Its record held under another
lease (a put with another registration's lease) is not written over: logged once per revision and
counted (``record_held_elsewhere_count``).

Registration is create-if-absent: an instance key held under another lease
means another live process claims this id (InstanceIdInUseError, logged; retried each interval, so
a restart within the old lease's TTL registers once it expires).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from .config import ClusterConfig
from .errors import ClusterError, InstanceIdInUseError, MalformedRecordError
from .etcd_gateway import EtcdGateway, KeyValue, b64
from .keys import ClusterKeys
from .records import decode_instance

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Capacity:
    partition_count: int
    bytes: int
    disk_free_bytes: int
    # A digest of the instance's ACL rules ("" without an ACL): every instance keeps its own file,
    # and the others compare it with theirs (cluster_node.py).
    acl_digest: str = ""


@dataclass(frozen=True)
class MembershipStatistics:
    registered: bool
    lease: int
    renewed_at: float | None  # clock() when the last successful renewal's request was sent
    registration_count: int
    renewal_failure_count: int
    fenced: bool
    record_check_failure_count: int = 0  # checks of the record in etcd that failed (never renewals)
    # Revisions of its record seen held under another lease (not written over; logged once each).
    record_held_elsewhere_count: int = 0
    # Checks of the record run to their end, failed ones included: passes that began under a lease.
    record_check_count: int = 0


class Membership:
    def __init__(self, config: ClusterConfig, gateway: EtcdGateway, capacity: Callable[[], Capacity],
                 clock: Callable[[], float] = time.monotonic, check_gateway: EtcdGateway | None = None) -> None:
        """``gateway`` renews; ``check_gateway`` (one per thread; ``gateway.another()`` by default,
        closed at stop) checks and writes the record."""
        self._config = config
        self._gateway = gateway
        self._check_gateway = check_gateway
        self._closes_check_gateway = False
        self._capacity = capacity
        self._clock = clock
        self._key = ClusterKeys(config.cluster_name).instance(config.instance_id)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._check_thread: threading.Thread | None = None
        self._lease = 0
        self._renewed_at: float | None = None
        self._registration_revision = 0
        self._registration_count = 0
        self._renewal_failure_count = 0
        self._last_error = ""
        # The record as last written (its JSON, capacity) and when, for ``_refresh_record``.
        self._written: tuple[str, Capacity] | None = None
        self._written_at = 0.0
        self._record_refresh_count = 0
        self._check_failure_count = 0
        self._check_count = 0
        self._last_check_error = ""
        self._held_elsewhere_revision = 0  # the last revision logged as held under another lease
        self._held_elsewhere_count = 0

    # -- the fencing question, answered from memory ----------------------------------------------
    def may_acknowledge(self) -> bool:
        with self._lock:
            renewed_at = self._renewed_at
        return renewed_at is not None and self._clock() - renewed_at < self._config.fence_after_s

    def acknowledge_time_left_s(self) -> float:
        """Seconds until this instance fences itself unless its lease is renewed (0 while fenced
        or not registered): the local deadline ``may_acknowledge`` answers by, read by /metrics."""
        with self._lock:
            renewed_at = self._renewed_at
        if renewed_at is None:
            return 0.0
        return max(0.0, self._config.fence_after_s - (self._clock() - renewed_at))

    def registration_revision(self) -> int:
        """The etcd revision the current registration was written at (0 before the first): a view
        of the cluster older than it may miss changes made while this instance's lease was gone."""
        with self._lock:
            return self._registration_revision

    def statistics(self) -> MembershipStatistics:
        fenced = not self.may_acknowledge()
        with self._lock:
            return MembershipStatistics(registered=self._lease != 0, lease=self._lease, renewed_at=self._renewed_at,
                                        registration_count=self._registration_count,
                                        renewal_failure_count=self._renewal_failure_count, fenced=fenced,
                                        record_check_failure_count=self._check_failure_count,
                                        record_held_elsewhere_count=self._held_elsewhere_count,
                                        record_check_count=self._check_count)

    # -- the thread ---------------------------------------------------------------------------
    def start(self) -> None:
        assert self._thread is None, "started twice"
        if self._check_gateway is None:
            self._check_gateway, self._closes_check_gateway = self._gateway.another(), True
        self._thread = threading.Thread(target=self._run, name=f"seglog-membership-{self._config.instance_id}",
                                        daemon=True)
        self._check_thread = threading.Thread(target=self._run_checks, daemon=True,
                                              name=f"seglog-membership-check-{self._config.instance_id}")
        self._thread.start()
        self._check_thread.start()

    def stop(self, revoke: bool = True) -> None:
        """Stops renewing; with ``revoke`` the lease (and the instance key) goes at once."""
        self._stopping.set()
        for thread in (self._thread, self._check_thread):
            if thread is not None:
                thread.join()
        if self._closes_check_gateway and self._check_gateway is not None:
            self._check_gateway.close()
        with self._lock:
            lease, self._lease, self._renewed_at = self._lease, 0, None
        if revoke and lease:
            try:
                self._gateway.revoke(lease)
            except ClusterError as exc:
                _log.warning("instance %s: lease not revoked (%s); it expires in %s s",
                             self._config.instance_id, exc, self._config.lease_ttl_s)

    def _run(self) -> None:
        """Renews at a fixed rate: the next keepalive ``keepalive_interval_s`` after this one was
        sent (scheduled on the real clock, whatever ``clock`` the fencing reads)."""
        while not self._stopping.is_set():
            started = time.monotonic()
            self._step()
            self._stopping.wait(max(0.0, started + self._config.keepalive_interval_s - time.monotonic()))

    def _step(self) -> None:
        sent_at = self._clock()
        with self._lock:
            lease = self._lease
        try:
            if lease == 0:
                self._register(sent_at)
            elif self._gateway.keepalive(lease) > 0:
                self._renewed(lease, sent_at)
            else:
                self._lost_lease(lease)
        except ClusterError as exc:
            self._failed(exc)
        except Exception as exc:  # a fault of its own (capacity() at a registration): never the thread
            self._failed(exc, unexpected=True)

    def _run_checks(self) -> None:
        """A pass is a check, counted (failed or not), by the lease it *began* with: one that began
        with none (before the first registration, or while the keepalive thread registers again)
        asks etcd nothing and is no check, as counting it would dilute the failed share the alert
        reads while etcd is away; one that began under a lease and found it gone (and fenced) is."""
        while not self._stopping.wait(self._config.keepalive_interval_s):
            with self._lock:
                lease, written, written_at = self._lease, self._written, self._written_at
            if lease == 0 or written is None:
                continue
            try:
                self._refresh_record(lease, written, written_at)
            except ClusterError as exc:
                self._check_ended(exc)
            except Exception as exc:  # a fault of its own: this check fails, never the thread
                self._check_ended(exc, unexpected=True)
            else:
                self._check_ended(None)

    def _register(self, sent_at: float) -> None:
        capacity = self._capacity()  # before the grant: a fault here leaves no lease behind
        lease = self._gateway.grant(self._config.lease_ttl_s)
        record = self._record_of(capacity)
        put = {"request_put": {"key": b64(self._key), "value": b64(record), "lease": lease}}
        absent = {"key": b64(self._key), "result": "EQUAL", "target": "CREATE", "create_revision": 0}
        succeeded, revision = self._gateway.txn([absent], [put])
        if not succeeded:
            self._gateway.revoke(lease)
            raise InstanceIdInUseError(f"instance id {self._config.instance_id!r} is registered by another "
                                       f"process (key {self._key}); waiting for its lease to expire")
        with self._lock:
            self._lease = lease
            self._registration_revision = revision
            self._registration_count += 1
            self._wrote(record, capacity)
        _log.info("instance %s registered at %s under lease %x", self._config.instance_id,
                  self._config.advertise, lease)
        self._renewed(lease, sent_at)

    def _record(self) -> str:
        return self._record_of(self._capacity())

    def _record_of(self, capacity: Capacity) -> str:
        record = json.dumps({"id": self._config.instance_id, "address": self._config.advertise,
                             "data_dirs": list(self._config.data_dirs), "acl_digest": capacity.acl_digest,
                             "capacity": {"partition_count": capacity.partition_count, "bytes": capacity.bytes,
                                          "disk_free_bytes": capacity.disk_free_bytes}}, sort_keys=True)
        return record

    def _refresh_record(self, lease: int, written: tuple[str, Capacity], written_at: float) -> None:
        """On the check thread, under ``lease`` (the one the pass began with), the record last
        ``written`` at ``written_at``. Writes the record again under that lease if it changed: at
        once for the partition count or the ACL digest, at most once per lease TTL for the bytes
        and free disk; at once too when etcd's copy is not what this instance last wrote (an
        operator's etcdctl put, malformed or not: the others see this instance not registered
        while its record does not decode). Compared on the record as read, and only over a key
        under this lease or none (a put without --lease): never over a registration that is not
        this one (``_held_elsewhere``). The key gone (deleted, or its lease expired) is a lost
        registration: fenced, registered again. Whatever the keepalive thread did meanwhile (the
        lease lost, registered again) wins: nothing here acts on a lease no longer current."""
        capacity = self._capacity()
        record = self._record_of(capacity)
        gateway = self._check_gateway
        assert gateway is not None
        stored = gateway.get(self._key)
        if stored is None:
            # Deleted under its live lease, or the lease expired in etcd before the keepalive
            # thread saw it: then etcd has no lease to revoke, which is done, not a failure.
            if self._lost_lease(lease, f"its record {self._key} was deleted or its lease {lease:x} expired"):
                gateway.revoke(lease)
            return
        if stored.lease not in (0, lease):
            self._held_elsewhere(stored, lease)
            return
        damaged = stored.value != written[0].encode() or stored.lease != lease
        if not damaged and written[0] == record:
            return
        urgent = damaged or (capacity.partition_count, capacity.acl_digest) != (
            written[1].partition_count, written[1].acl_digest)
        if not urgent and self._clock() - written_at < self._config.lease_ttl_s:
            return
        put = {"request_put": {"key": b64(self._key), "value": b64(record), "lease": lease}}
        as_read = {"key": b64(self._key), "result": "EQUAL", "target": "MOD", "mod_revision": stored.mod_revision}
        succeeded, _ = gateway.txn([as_read], [put])
        if not succeeded:
            return
        with self._lock:
            if self._lease != lease:
                return
            self._wrote(record, capacity)
            self._record_refresh_count += 1
        if damaged:
            _log.warning("instance %s: its record %s in etcd was not the one it wrote (revision %d); "
                         "written again", self._config.instance_id, self._key, stored.mod_revision)

    def _held_elsewhere(self, stored: KeyValue, lease: int) -> None:
        """Its record under another lease than this registration's (an etcdctl put with another
        lease; another process cannot register over it): not written over, as it may be another
        registration's. Logged once per revision, with what the others see, and counted: a
        malformed one makes this instance look not registered to every other instance. Nothing
        when ``lease`` is no longer current or the record read is under the current one: the
        keepalive thread lost ``lease`` and registered again between the check's read of its lease
        and of the key, which answered this instance's own new registration."""
        with self._lock:
            if self._lease != lease or stored.lease == self._lease:
                return
            if stored.mod_revision == self._held_elsewhere_revision:
                return
            self._held_elsewhere_revision = stored.mod_revision
            self._held_elsewhere_count += 1
        try:
            decode_instance(stored.key, stored.value)
            seen = "every other instance reads that record as this one's"
        except MalformedRecordError as exc:
            seen = f"it is malformed ({exc.reason}): every other instance sees this instance as not registered"
        _log.error("instance %s: its record %s (revision %d) is held under lease %x, not under its own lease %x, "
                   "and is not written over: %s. If no other process runs as %s, delete the key (this instance "
                   "then registers again) or revoke lease %x", self._config.instance_id, self._key,
                   stored.mod_revision, stored.lease, lease, seen, self._config.instance_id, stored.lease)

    def _wrote(self, record: str, capacity: Capacity) -> None:
        """With the lock held."""
        self._written, self._written_at = (record, capacity), self._clock()

    def record_refresh_count(self) -> int:
        """How many times the record was written again since start (tests)."""
        with self._lock:
            return self._record_refresh_count

    def _renewed(self, lease: int, sent_at: float) -> None:
        with self._lock:
            if self._lease != lease:
                return  # lost meanwhile (the check found its key deleted): registered again first
            self._renewed_at = sent_at
        if self._last_error:
            _log.warning("instance %s: lease renewed again after: %s", self._config.instance_id, self._last_error)
            self._last_error = ""

    def _lost_lease(self, lease: int, why: str = "") -> bool:
        """Fences and forgets ``lease`` if it is still the current one (the keepalive thread then
        registers again); whether it was."""
        with self._lock:
            if self._lease != lease:
                return False
            self._lease, self._renewed_at = 0, None
        _log.error("instance %s: %s: fenced, registering again", self._config.instance_id,
                   why or f"etcd no longer has lease {lease:x}")
        return True

    def _failed(self, exc: Exception, unexpected: bool = False) -> None:
        """A renewal or registration failed: counted, logged once per distinct error (anything
        but a cluster error as an ERROR with its traceback); the next step runs at its time."""
        with self._lock:
            self._renewal_failure_count += 1
        error = f"{type(exc).__name__}: {exc}" if unexpected else str(exc)
        if error != self._last_error:
            if unexpected:
                _log.error("instance %s: %s", self._config.instance_id, error, exc_info=exc)
            else:
                _log.warning("instance %s: %s", self._config.instance_id, exc)
            self._last_error = error

    def _check_ended(self, exc: Exception | None, unexpected: bool = False) -> None:
        """A check of the record ended, failed with ``exc`` or not: counted as a check and as a
        failed one in one section of the lock, so no statistics() (no scrape) sees a failure
        before its check (failures <= checks: the failed share the alert reads is at most 1).
        A failure is logged once per distinct error (anything but a cluster error as an ERROR with
        its traceback); the lease is not touched, the renewals alone fence, and the next check runs
        at its time."""
        with self._lock:
            self._check_count += 1
            if exc is not None:
                self._check_failure_count += 1
        if exc is None:
            if self._last_check_error:
                _log.warning("instance %s: its record checked again after: %s", self._config.instance_id,
                             self._last_check_error)
                self._last_check_error = ""
            return
        error = f"{type(exc).__name__}: {exc}" if unexpected else str(exc)
        if error != self._last_check_error:
            if unexpected:
                _log.error("instance %s: its record %s not checked: %s", self._config.instance_id, self._key, error,
                           exc_info=exc)
            else:
                _log.warning("instance %s: its record %s not checked: %s", self._config.instance_id, self._key, exc)
            self._last_check_error = error
