"""MetadataCache: the cluster's instances and partition owners, in memory, kept current by a watch.

A thread loads everything under the cluster's prefix at one revision, then watches the prefix from
the next revision and applies each event. When etcd fails (stopped, paused past the read timeout,
restarted) it reloads in full and watches again; an idle stream is reopened from the revision it
reached. A watch etcd cancels because its history is compacted past our revision
(``WatchCompactedError``) goes back to a full reload at once, without counting as disconnected.
The watch asks for etcd's progress notifications, whose header revision the cache adopts, so an
idle prefix in a busy etcd keeps its revision near the store's and is rarely compacted past.
Attempts that end quickly without news (a reload or watch that fails, a stream cancelled at once)
back off: ``retry_interval_s`` doubling up to ``max_backoff_s``; anything received resets it.
``owner_of`` and ``instances`` answer from memory and never block on etcd; ``connected`` says
whether the answers are being kept current.

Every key and value is decoded by records.py: a malformed one is logged once, counted
(``malformed_count``, seglog_cluster_malformed_records_total) and applied on the safe side
(``_apply_malformed``), and the thread goes on with the next. The keys held malformed now are
counted too (``malformed_held_count``, seglog_cluster_malformed_records_held): a new instance
whose first reload finds one already in etcd counts it before any scrape, so only this figure,
not the total's increase, tells an alert it is there, and it falls back when the key is repaired. Any other error ending a reload or
a watch is logged with its traceback, counted (``unexpected_count``) and makes ``connected``
False until a reload succeeds; ``connected`` is False too if the thread is no longer running.

Instances are remembered once seen, alive or not: an instance whose key went (lease expired) stays
known with ``alive=False`` and the wall time it was seen gone, so routing can say since when a
partition's owner is down. Owners naming an instance never seen are known as not alive too.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable

from .errors import ClusterError, MalformedRecordError, WatchCompactedError
from .etcd_gateway import EtcdGateway, KeyValue, WatchBatch, WatchEvent
from .keys import OWNERS, ClusterKeys
from .ownership import UNREADABLE_OWNER, PartitionOwner, parse_owner
from .records import decode_instance, decode_move, decode_topic, repair_advice

_log = logging.getLogger(__name__)
# An idle watch is reopened after this long without a byte; a paused etcd is noticed as soon.
WATCH_READ_TIMEOUT_S = 5.0
# The longest wait between two failing attempts to reload or watch.
MAX_BACKOFF_S = 5.0
# Test only: a watch batch carrying an owner record is applied this many ms late, so this instance
# learns a move (to it or away from it) after the others: the race a client following a move meets.
# Unset (always, outside tests) it costs one attribute test per watch batch.
WATCH_OWNER_DELAY_ENV = "SEGLOG_TEST_FAULT_OWNER_WATCH_DELAY_MS"
# Malformed keys remembered so each is logged once per revision; past this many, forgotten at once
# (a flood of bad keys is then logged again at the next reload, never held without bound).
MALFORMED_KEYS_REMEMBERED = 10_000


@dataclass(frozen=True)
class InstanceInfo:
    instance_id: str
    address: str  # "" when never seen registered
    alive: bool
    gone_since_ms: int | None = None  # wall time the cache saw it go
    data_dirs: tuple[str, ...] = ()
    partition_count: int = 0
    bytes: int = 0
    acl_digest: str = ""  # of the instance's ACL rules, "" without an ACL (cluster_node.py compares them)


@dataclass(frozen=True)
class CacheStatistics:
    connected: bool
    revision: int
    reload_count: int
    event_count: int
    compacted_count: int = 0  # watches etcd cancelled as compacted (each followed by a reload)
    epoch_change_count: int = 0  # owner records seen at another epoch than the one held before
    malformed_count: int = 0  # keys or values not applied as malformed (each key revision once; records.py)
    unexpected_count: int = 0  # reloads or watches ended by an unexpected error (a bug; logged with a traceback)
    # keys whose value etcd holds malformed now, as this view last read them: 0 again once each is
    # rewritten well or deleted (what an alert waits on; malformed_count only ever grows)
    malformed_held_count: int = 0



def owner_watch_delay_s(spec: str | None) -> float:
    """The test seam ``WATCH_OWNER_DELAY_ENV``: how long the watch holds a batch that changes an
    owner record before applying it (0 when unset). A value that is not a whole number of
    milliseconds above 0 is refused by name: a negative one would end the watch thread at its
    first owner change (``time.sleep`` refuses it), leaving the instance a frozen owner map."""
    if not spec:
        return 0.0
    try:
        delay_ms = int(spec)
    except ValueError:
        delay_ms = 0
    if delay_ms <= 0:
        raise ValueError(f"{WATCH_OWNER_DELAY_ENV}={spec!r}: expected a whole number of milliseconds above 0")
    _log.warning("test fault seam active: %s=%s", WATCH_OWNER_DELAY_ENV, spec)
    return delay_ms / 1000

class MetadataCache:
    def __init__(self, gateway: EtcdGateway, keys: ClusterKeys, *, retry_interval_s: float = 0.5,
                 read_timeout_s: float = WATCH_READ_TIMEOUT_S, max_backoff_s: float = MAX_BACKOFF_S,
                 wall_clock_ms: Callable[[], int] | None = None) -> None:
        self._gateway = gateway
        self._keys = keys
        self._retry_interval_s = retry_interval_s
        self._read_timeout_s = read_timeout_s
        self._max_backoff_s = max(max_backoff_s, retry_interval_s)
        self._failures = 0  # attempts in a row that ended quickly with nothing received
        self._wall_clock_ms = wall_clock_ms or (lambda: int(time.time() * 1000))
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._instances: dict[str, InstanceInfo] = {}
        self._owners: dict[tuple[str, int], PartitionOwner] = {}
        self._topics: dict[str, int] = {}
        self._moves: dict[tuple[str, int], dict] = {}  # partition moves in progress (partition_moves.py)
        self._topic_generations: dict[str, int] = {}  # topic -> its key's create revision (topic_records.py)
        # topic -> its record's configs (topic_configs.py) and the record's mod revision
        self._topic_configs: dict[str, tuple[dict[str, str], int]] = {}
        # topic -> (generation, partition count, (configs, mod revision)) of its last record that
        # decoded: what the view keeps while a later record of that generation is malformed.
        self._last_good_topics: dict[str, tuple[int, int, tuple[dict[str, str], int]]] = {}
        self._revision = 0
        self._connected = False
        self._reload_count = 0
        self._event_count = 0
        self._compacted_count = 0
        self._epoch_change_count = 0
        self._unexpected_count = 0
        # key -> the mod revision last seen malformed there (each logged and counted once).
        self._malformed_lock = threading.Lock()
        self._malformed_seen: dict[str, int] = {}
        self._malformed_count = 0
        # keys whose latest value this view read is malformed (under ``_changed``, as the view is)
        self._malformed_held: set[str] = set()
        self._owner_delay_s = owner_watch_delay_s(os.environ.get(WATCH_OWNER_DELAY_ENV))

    # -- answers from memory ------------------------------------------------------------------
    def owner_of(self, topic: str, partition: int) -> PartitionOwner | None:
        with self._changed:
            return self._owners.get((topic, partition))

    def instances(self) -> dict[str, InstanceInfo]:
        with self._changed:
            known = dict(self._instances)
            for owner in self._owners.values():
                if owner.readable:
                    known.setdefault(owner.owner, InstanceInfo(owner.owner, "", alive=False))
            return known

    def topics(self) -> dict[str, int]:
        with self._changed:
            return dict(self._topics)

    def owners(self) -> dict[tuple[str, int], PartitionOwner]:
        """Every partition's owner record, (topic, partition) -> owner, whether or not the topic's
        own record is readable: what the owner threads walk (offset ceilings, epochs pushed into
        the logs), so a partition its owner serves is never left out of them."""
        with self._changed:
            return dict(self._owners)

    def topic_generations(self) -> dict[str, int]:
        """topic -> the etcd create revision of its key: a topic deleted and created again is a
        new generation (topic_records.py)."""
        with self._changed:
            return dict(self._topic_generations)

    def topic_generation(self, topic: str) -> int | None:
        """The topic's generation (``topic_generations``) without copying them all: asked on
        every partition request (rpc/cluster_routing.py)."""
        with self._changed:
            return self._topic_generations.get(topic)

    def topic_configs(self, topic: str) -> dict[str, str] | None:
        """The configs (overrides) of the topic's record, None for a topic the cache does not show."""
        found = self.topic_configs_at(topic)
        return None if found is None else found[0]

    def topic_configs_at(self, topic: str) -> tuple[dict[str, str], int] | None:
        """(the configs of the topic's record, the record's mod revision), None for a topic the
        cache does not show: an instance applies a record's configs only over older ones."""
        with self._changed:
            found = self._topic_configs.get(topic)
            return None if found is None else (dict(found[0]), found[1])

    def move_of(self, topic: str, partition: int) -> dict | None:
        """The partition's move record (JSON, with ``mod_revision`` added), or None."""
        with self._changed:
            return self._moves.get((topic, partition))

    def moves(self) -> dict[tuple[str, int], dict]:
        with self._changed:
            return dict(self._moves)

    def statistics(self) -> CacheStatistics:
        with self._changed:
            connected = self._connected and self._thread is not None and self._thread.is_alive()
            with self._malformed_lock:
                malformed = self._malformed_count
            return CacheStatistics(connected, self._revision, self._reload_count, self._event_count,
                                   self._compacted_count, self._epoch_change_count, malformed,
                                   self._unexpected_count, len(self._malformed_held))

    def wait_until(self, predicate: Callable[["MetadataCache"], bool], timeout_s: float) -> bool:
        """Waits until ``predicate(self)`` holds after a change (True) or ``timeout_s`` passes (False)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                # The predicate reads through the public methods, which take the (reentrant-free)
                # condition's lock: evaluate it with the lock released.
                self._changed.release()
                try:
                    if predicate(self):
                        return True
                finally:
                    self._changed.acquire()
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)

    # -- the thread ---------------------------------------------------------------------------
    def start(self) -> None:
        assert self._thread is None, "started twice"
        self._thread = threading.Thread(target=self._run, name="seglog-metadata-cache", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._gateway.close()  # ends a stream being read
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    self._reload()
                    self._follow()
                except WatchCompactedError as exc:
                    self._failures += 1
                    with self._changed:
                        self._compacted_count += 1
                    _log.info("cluster metadata watch at revision %d compacted (%s): reloading",
                              self._revision + 1, exc)
                except ClusterError as exc:
                    self._failures += 1
                    self._disconnected(exc)
                except Exception as exc:  # a bug: the view is no longer current; a reload starts it again
                    self._failures += 1
                    with self._changed:
                        self._unexpected_count += 1
                    _log.exception("cluster metadata watch failed unexpectedly; reloading")
                    self._disconnected(exc)
                self._back_off()
        finally:
            if not self._stopping.is_set():  # ended by something no handler above takes: say so
                self._disconnected(ClusterError("the cluster metadata thread ended"))

    def _back_off(self) -> None:
        """Waits before the next attempt: ``retry_interval_s`` doubling per failure in a row (a
        reload or watch that failed, a watch compacted or ended at once) up to ``max_backoff_s``."""
        if self._failures:
            self._stopping.wait(min(self._retry_interval_s * 2 ** (self._failures - 1), self._max_backoff_s))

    def _reload(self) -> None:
        """The view built afresh from everything under the prefix, replacing the one held only once
        complete: an error part way (a bug) leaves the view held before, never a half-built one
        (a partition missing its owner there would be served by whoever holds a copy)."""
        revision, kvs = self._gateway.range_prefix(self._keys.prefix)
        now_ms = self._wall_clock_ms()
        with self._changed:
            held = (self._instances, self._owners, self._topics, self._moves, self._topic_generations,
                    self._topic_configs, self._malformed_held)
            previous, previous_owners = self._instances, self._owners
            self._instances, self._owners, self._topics, self._moves = {}, {}, {}, {}
            self._topic_generations, self._topic_configs, self._malformed_held = {}, {}, set()
            try:
                for kv in kvs:
                    self._apply_put(kv, previous_owners, now_ms)
                for instance_id, info in previous.items():
                    if instance_id not in self._instances:
                        self._instances[instance_id] = self._gone(info, now_ms)
            except BaseException:
                (self._instances, self._owners, self._topics, self._moves, self._topic_generations,
                 self._topic_configs, self._malformed_held) = held
                raise
            for topic in [topic for topic in self._last_good_topics if topic not in self._topic_generations]:
                del self._last_good_topics[topic]  # deleted meanwhile
            self._revision = revision
            self._connected = True
            self._reload_count += 1
            self._changed.notify_all()

    def _follow(self) -> None:
        """Applies watch events until the stream fails; an idle stream is reopened where it was.

        Raises ``WatchCompactedError`` when etcd cancels the watch (the caller reloads), and any
        other ``ClusterError`` when etcd does not answer."""
        while not self._stopping.is_set():
            opened, received = time.monotonic(), False
            try:
                for batch in self._gateway.watch_prefix(self._keys.prefix, self._revision + 1, self._read_timeout_s):
                    if self._stopping.is_set():
                        return  # a stream kept busy (progress notifications) never times out
                    received = received or bool(batch.events or batch.progress_revision)
                    if self._owner_delay_s and any(e.kv.key.startswith(self._keys.prefix + OWNERS)
                                                   for e in batch.events):
                        self._stopping.wait(self._owner_delay_s)  # the test seam (a stop ends it)
                    self._apply(batch)
            except WatchCompactedError:
                raise
            except ClusterError:
                if self._stopping.is_set():
                    return
                # A read timeout on a healthy idle stream and a dead etcd look alike here: ask.
                self._gateway.range_prefix(self._keys.owners_of("\x00"))
                _log.debug("watch reopened at revision %d", self._revision + 1)
            # A healthy idle stream lasts its read timeout; one that ends sooner with nothing
            # received is failing (an endpoint answering and closing at once): back off.
            if received or time.monotonic() - opened >= self._read_timeout_s / 2:
                self._failures = 0
            else:
                self._failures += 1
                self._back_off()

    def _apply(self, batch: WatchBatch) -> None:
        events: list[WatchEvent] = batch.events
        now_ms = self._wall_clock_ms()
        with self._changed:
            for event in events:
                if event.kind == "DELETE":
                    self._apply_delete(event.kv, now_ms)
                else:
                    self._apply_put(event.kv, self._owners, now_ms)
                self._revision = max(self._revision, event.kv.mod_revision)
                self._event_count += 1
            self._revision = max(self._revision, batch.progress_revision)
            self._changed.notify_all()

    def _apply_put(self, kv: KeyValue, held: dict[tuple[str, int], PartitionOwner], now_ms: int) -> None:
        """Applies one key; an owner record at another epoch than ``held``'s (the owners before
        this reload or event) is an epoch change (a move or a takeover bumps it in one etcd
        transaction); a new topic's records are not changes. A malformed key or value
        (records.py) is applied as ``_apply_malformed`` says, never raised."""
        parsed = None
        self._malformed_held.discard(kv.key)  # this value replaces the one held; malformed again below if so
        try:
            parsed = self._keys.parse(kv.key)
            if parsed is None:
                return
            kind, name, partition = parsed
            if kind == "instance":
                record = decode_instance(kv.key, kv.value)
                self._instances[name] = InstanceInfo(
                    name, record.address, alive=True, data_dirs=record.data_dirs,
                    partition_count=record.partition_count, bytes=record.bytes, acl_digest=record.acl_digest)
            elif kind == "topic":
                topic = decode_topic(kv.key, kv.value)
                self._topics[name] = topic.partitions
                self._topic_generations[name] = kv.create_revision
                self._topic_configs[name] = (topic.configs, kv.mod_revision)
                self._last_good_topics[name] = (kv.create_revision, topic.partitions, self._topic_configs[name])
            elif kind == "move":
                assert partition is not None
                self._moves[(name, partition)] = decode_move(kv.key, kv.value).as_dict(kv.mod_revision)
            else:
                assert partition is not None
                before = held.get((name, partition))  # read first: ``held`` may be ``_owners``
                owner = self._owners[(name, partition)] = parse_owner(kv.value, kv.mod_revision, kv.key)
                if before is not None and before.epoch != owner.epoch:
                    self._epoch_change_count += 1
        except MalformedRecordError as exc:
            self._apply_malformed(kv, parsed, held, now_ms, exc)

    def _apply_malformed(self, kv: KeyValue, parsed: tuple[str, str, int | None] | None,
                         held: dict[tuple[str, int], PartitionOwner], now_ms: int, exc: MalformedRecordError) -> None:
        """A key or value that is not one seglog writes: logged once (per key and revision),
        counted, and applied on the safe side, the same at a reload (a restart) as in the watch:

        - a key seglog would not write (``parsed`` None): skipped; it names nothing the view holds;
        - an instance record: the instance is not registered (seen gone if it was): nothing is
          placed on it or routed to it;
        - a topic record: the topic keeps its generation (the key's create revision, etcd's own).
          A later version of a record this view decoded (same generation) keeps the last good
          one's partition count and configs: the topic is listed and followed as it was until the
          record is readable again. With none (a restart or a new generation over a malformed
          record), the topic has no partition count or configs here: its local copies are neither
          dropped nor made, its configs not followed, its partitions not listed; its owners serve
          it all the same (owner records decide that), and their offset ceilings and epochs follow
          the owner records (``owners``), not this list;
        - an owner record: owned by ``UNREADABLE_OWNER`` at the epoch held before (0 if none), not
          absent: absent means "served by whoever holds a copy" (a topic from before cluster mode),
          which for a partition placed in the cluster would be every instance at once. Every
          instance refuses it (UNAVAILABLE, owner not registered) until the record is written again;
        - a move record: absent. A move record only ever fences its source; the move's own steps
          read it from etcd (refused, naming the key) and its commit compares its mod revision.
        """
        self._malformed_held.add(kv.key)
        with self._malformed_lock:
            new = self._malformed_seen.get(kv.key) != kv.mod_revision
            if new:
                if len(self._malformed_seen) >= MALFORMED_KEYS_REMEMBERED:
                    self._malformed_seen.clear()
                self._malformed_seen[kv.key] = kv.mod_revision
                self._malformed_count += 1
        if new:
            _log.error("cluster record %r (revision %d) is malformed and not applied: %s; %s", kv.key,
                       kv.mod_revision, exc.reason, repair_advice(kv.key, key_malformed=parsed is None))
        if parsed is None:
            return
        kind, name, partition = parsed
        if kind == "instance":
            if name in self._instances:
                self._instances[name] = self._gone(self._instances[name], now_ms)
        elif kind == "topic":
            last = self._last_good_topics.get(name)
            if last is not None and last[0] == kv.create_revision:
                self._topics[name], self._topic_configs[name] = last[1], last[2]
            else:
                self._topics.pop(name, None)
                self._topic_configs.pop(name, None)
            self._topic_generations[name] = kv.create_revision
        elif kind == "move":
            self._moves.pop((name, partition), None)
        else:
            assert partition is not None
            before = held.get((name, partition))
            self._owners[(name, partition)] = PartitionOwner(
                UNREADABLE_OWNER, before.epoch if before is not None else 0, kv.mod_revision)

    def _apply_delete(self, kv: KeyValue, now_ms: int) -> None:
        self._malformed_held.discard(kv.key)
        try:
            parsed = self._keys.parse(kv.key)
        except MalformedRecordError:
            return  # never applied: nothing to forget
        if parsed is None:
            return
        kind, name, partition = parsed
        if kind == "instance" and name in self._instances:
            self._instances[name] = self._gone(self._instances[name], now_ms)
        elif kind == "topic":
            self._topics.pop(name, None)
            self._topic_generations.pop(name, None)
            self._topic_configs.pop(name, None)
            self._last_good_topics.pop(name, None)
        elif kind == "owner":
            self._owners.pop((name, partition), None)
        elif kind == "move":
            self._moves.pop((name, partition), None)

    @staticmethod
    def _gone(info: InstanceInfo, now_ms: int) -> InstanceInfo:
        return info if not info.alive else replace(info, alive=False, gone_since_ms=now_ms)

    def _disconnected(self, exc: Exception) -> None:
        with self._changed:
            was_connected, self._connected = self._connected, False
            self._changed.notify_all()
        if was_connected and not self._stopping.is_set():
            _log.warning("cluster metadata no longer current (%s); reloading when etcd answers", exc)
