"""Cluster mode in the service (``--etcd``): the cluster core composed for one running instance.

``ClusterNode.start`` records or reads the instance id, registers the instance under its lease
(``Membership``: id, advertised address, data dirs, capacity), starts the watched
``MetadataCache``, and keeps every topic etcd knows held locally (a task that creates, with the
topic's configs from etcd, any topic the cache shows and the storage lacks: an instance holds each
topic's partitions, and serves only those it owns). ``routing`` is what the service core asks on
the request path (rpc/cluster_routing.py). ``stop`` revokes the lease, so the other instances see
this one go at once rather than a TTL later.

This module is the boundary between the cluster core (which knows nothing of gRPC) and the
adapter: the core's errors are translated here, once, into the adapter's and the storage's.
Nothing here is imported without ``--etcd``: a single process loads no etcd code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from seglog_server.cluster import (
    Capacity,
    ClusterConfig,
    ClusterError,
    ClusterKeys,
    EtcdGateway,
    EtcdUnavailableError,
    InstanceLoad,
    Membership,
    MetadataCache,
    NoLiveInstanceError,
    TopicExistsError,
    create_topic,
    place_partitions,
    reserve_producer_id_block,
)
from seglog_server.cluster.ownership import new_topic_id, topic_id_of
from seglog_server.cluster.errors import ConfigsConflictError, MalformedRecordError, UnknownTopicError
from seglog_server.cluster.records import decode_topic, repair_advice
from seglog_server.cluster.topic_configs import write_topic_configs
from seglog_server.cluster.topic_records import HeldTopics, delete_topic_records
from seglog_server.config import ServiceConfig
from seglog_server.metrics.cluster_metrics import ClusterInstruments
from seglog_server.rpc import cluster_routing
from seglog_server.rpc.cluster_routing import ClusterRouting, InstanceFencedError, PartitionMovingError
from seglog_server.rpc.peer_security import PeerSecurity
from seglog_server.storage import LogConfig
from seglog_server.storage.base import errors as storage_errors
from seglog_server.storage.producers.producer_ids import BLOCK_SIZE as PRODUCER_ID_BLOCK_SIZE

__all__ = ["ClusterNode"]

_log = logging.getLogger("seglog_server.cluster")
# How often the local copy of etcd's topics is compared with the storage's (a dict compare).
_MATERIALIZE_INTERVAL_S = 0.2
# How long CreateTopic waits for this instance's watched view to show the topic it just wrote: the
# watch streams a change within milliseconds; past this, etcd is struggling and the answer goes.
_CREATE_VIEW_WAIT_S = 5.0


class _CountedRouting(ClusterRouting):
    """The routing, with each fencing refusal counted by reason (seglog_cluster_fenced_appends_refused):
    ``lease`` (produces and group commits of a fenced instance), ``moving``, ``epoch``."""

    instruments: ClusterInstruments

    def check_fence(self) -> None:
        try:
            super().check_fence()
        except InstanceFencedError:
            self.instruments.refused("lease")
            raise

    def check_not_moving(self, topic: str, partition: int) -> None:
        try:
            super().check_not_moving(topic, partition)
        except PartitionMovingError:
            self.instruments.refused("moving")
            raise

    def fenced_append_error(self, topic: str, partition: int, exc: Exception) -> Any:
        self.instruments.refused("epoch")
        return super().fenced_append_error(topic, partition, exc)


class ClusterNode:
    def __init__(self, config: ClusterConfig, manager: Any, calls: Any) -> None:
        self.config = config
        # etcd round trips and fencing refusals, counted for /metrics (metrics/cluster_metrics.py).
        self.instruments = ClusterInstruments()
        self._manager = manager
        self._calls = calls
        self._keys = ClusterKeys(config.cluster_name)
        # One gateway per thread (etcd3gw's session is not shared): membership's, the cache's, and
        # one per pool thread for CreateTopic.
        self._membership = Membership(config, self._gateway(), self._capacity)
        self._cache = MetadataCache(self._gateway(), self._keys)
        self._local = threading.local()
        self._materialize_lock = threading.Lock()
        self._materializer: asyncio.Task[None] | None = None
        self.routing = _CountedRouting(config.cluster_name, config.instance_id, config.advertise, self._membership,
                                       self._cache, config.fence_after_s, create_topic=self.create_topic)
        self.routing.instruments = self.instruments
        from seglog_server.cluster.partition_moves import MoveStore

        self.routing.moves = MoveStore(self._thread_gateway, self._keys, config.instance_id)
        from seglog_server.cluster.offset_ceilings import OffsetCeilings

        self.routing.ceilings = OffsetCeilings(self._thread_gateway, self._keys, config.instance_id, self._cache,
                                               self._log_end_offset)
        # The generation of each topic held here because etcd has it (topic_records.py); DeleteTopic
        # and CreateTopic ask the node through the routing.
        self._held = HeldTopics(config.data_dirs[0])
        self.routing.topics = self
        self.routing.held_generation = self.served_generation
        # Topics recorded in ``_held`` whose local copy is being made (or failed to be).
        self._making: set[str] = set()
        # topic -> (the record's mod revision, its configs) last applied to the local copy (or found
        # already in force): the RPC thread and the materializer both apply, each only a newer one.
        self._applied_configs: dict[str, tuple[int, dict[str, str]]] = {}
        # topic -> the record revision whose failed apply was last logged (logged once a record).
        self._configs_refused: dict[str, int] = {}  # topic -> the newest revision whose apply failed
        self._refused_lock = threading.Lock()  # the RPC threads and the pool note failures
        # () -> this instance's ACL digest ("" without an ACL), set by app.py; the live instances
        # whose digest differs are logged when they change and exported (acl_mismatches).
        self.acl_digest: Callable[[], str] = lambda: ""
        self._acl_mismatches_logged: tuple[str, ...] = ()
        self.routing.acl_mismatches = self.acl_mismatches
        self.routing.configs_unapplied = self.configs_unapplied
        # Each partition's ownership epoch, pushed into its local log (``follow_epochs``).
        self._epochs_stopping = threading.Event()
        self._epochs_thread: threading.Thread | None = None
        self._pushed_epochs: dict[tuple[str, int], int] = {}

    @classmethod
    def from_service_config(cls, config: ServiceConfig, bound_address: str, manager: Any,
                            calls: Any) -> ClusterNode:
        cluster_config = ClusterConfig(
            config.etcd, config.advertise or bound_address, data_dirs=config.data_dirs,
            instance_id=config.instance_id or "", cluster_name=config.cluster_name,
            lease_ttl_s=config.lease_ttl_ms // 1000)
        node = cls(cluster_config, manager, calls)
        # The credentials a move's CopyPartition presents to the source (rpc/peer_security.py).
        node.routing.peer_security = PeerSecurity.from_config(config)
        return node

    def _gateway(self) -> EtcdGateway:
        return EtcdGateway(self.config.etcd_endpoints, timeout_s=self.config.keepalive_interval_s,
                           observe=self.instruments.etcd_call)

    # -- life cycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Registers and loads the cache, waiting up to one lease TTL for both: an instance that
        cannot reach etcd still starts (reads are served), fenced until it registers."""
        # Producer ids from the cluster's counter, not this instance's files (whose floor is
        # only its own clock: two instances would hand out overlapping ids).
        self._manager.use_producer_id_blocks(self.reserve_producer_id_block)
        # Tiered partitions: the owner alone uploads, cleans and applies retention in the store.
        self._manager.set_remote_owner_check(self.uploads_here)
        self._membership.start()
        self._cache.start()
        ready = await asyncio.to_thread(self._wait_ready, self.config.lease_ttl_s)
        if not ready:
            _log.warning("instance %s: etcd %s not reached yet; produce is refused until it registers",
                         self.config.instance_id, ",".join(self.config.etcd_endpoints))
        self._materializer = asyncio.create_task(self._materialize(), name="seglog-cluster-topics")
        self.routing.ceilings.start()
        self._epochs_thread = threading.Thread(target=self._follow_epochs, name="seglog-cluster-epochs", daemon=True)
        self._epochs_thread.start()
        _log.info("cluster %r: instance %s at %s (lease %d s, produce fenced after %.1f s without renewal)",
                  self.config.cluster_name, self.config.instance_id, self.config.advertise,
                  self.config.lease_ttl_s, self.config.fence_after_s)

    def _wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._membership.may_acknowledge() and self._cache.wait_until(
                    lambda cache: self.config.instance_id in cache.instances()
                    and cache.instances()[self.config.instance_id].alive, 0.1):
                return True
            time.sleep(0.05)
        return False

    async def stop(self) -> None:
        self._epochs_stopping.set()
        if self._materializer is not None:
            self._materializer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._materializer
        await asyncio.to_thread(self.routing.ceilings.stop)
        # Revoked: the instance key goes now, and the others see this instance gone at once.
        await asyncio.to_thread(self._membership.stop, True)
        await asyncio.to_thread(self._cache.stop)

    def uploads_here(self, topic: str, partition: int) -> bool:
        """Whether this instance keeps the partition's remote segments (uploads, orphan cleanup,
        the whole log's retention): its owner in the watched view, and not the source of a move
        in its final catch-up (the target uploads once the move commits, from what the store
        then holds). A copy held for another owner uploads nothing: the store would get each
        segment twice, counted twice by retention.bytes."""
        record = self._cache.owner_of(topic, partition)
        if record is None or record.owner != self.config.instance_id:
            return False
        move = self._cache.move_of(topic, partition)
        return move is None or move.get("state") != "final"

    # -- CreateTopic ----------------------------------------------------------------------------
    def create_topic(self, topic: str, partition_count: int, configs: Mapping[str, str]) -> None:
        """Blocking. Places the partitions over the live instances (fewest partitions, then bytes)
        and writes topic and owners at epoch 0 in one etcd transaction; then holds it locally."""
        try:
            owners = place_partitions(partition_count, self._loads())
            topic_id = new_topic_id()
            # Canonical over this instance's topic defaults, which the RPC validated them against.
            generation = create_topic(self._thread_gateway(), self._keys, topic, owners, configs, topic_id,
                                      defaults=self._manager.default_config)
        except TopicExistsError as exc:
            raise storage_errors.TopicExistsError(str(exc)) from exc
        except NoLiveInstanceError as exc:
            raise cluster_routing.NoLiveInstanceError(str(exc)) from exc
        except EtcdUnavailableError as exc:
            raise cluster_routing.ClusterUnavailableError(
                f"creation of topic {topic!r} not confirmed by etcd ({exc}): if etcd received it, the "
                "topic exists once etcd answers (describe it to know)") from exc
        _log.info("topic %s: %d partitions placed on %s", topic, partition_count, ", ".join(owners))
        self._hold_locally(topic, partition_count, configs, generation, topic_id)
        # Answered once this instance's view has the topic too: a request right after the answer
        # is then routed by owner, not served here as a topic etcd has no record of. Not seen in
        # time (etcd slow to stream it), the topic is created all the same: the view catches up.
        self._cache.wait_until(lambda cache: cache.statistics().revision >= generation, _CREATE_VIEW_WAIT_S)

    # -- DeleteTopic ----------------------------------------------------------------------------
    def delete_topic(self, topic: str) -> None:
        """Blocking. Deletes the topic and its partitions' records from etcd in one transaction,
        then the local copy; every other instance deletes its copy when its cache sees the
        deletion (``reconcile_topics``). A topic etcd does not have is deleted here only (one
        created before cluster mode), or answered NOT_FOUND."""
        try:
            deleted = delete_topic_records(self._thread_gateway(), self._keys, topic)
        except EtcdUnavailableError as exc:
            raise cluster_routing.ClusterUnavailableError(
                f"deletion of topic {topic!r} not confirmed by etcd ({exc}): if etcd received it, every "
                "instance deletes its copy once etcd answers (describe the topic to know)") from exc
        if deleted:
            _log.info("topic %s deleted from the cluster", topic)
            self._drop_local(topic)
            return
        if self._held.get(topic) is not None:  # deleted cluster-wide by another call meanwhile
            self._drop_local(topic)
            raise storage_errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        self._manager.delete_topic(topic)

    def settle_topic(self, topic: str) -> None:
        """Blocking. Deletes the local copy of ``topic`` if etcd no longer has the generation it
        holds (asked of etcd itself, not the cache): CreateTopic asks it first, so a create of a
        name deleted a moment ago is not refused for a local copy this instance has not deleted
        yet. A topic etcd still has, or one not held for etcd's sake, is left alone."""
        generation = self._held.get(topic)
        if generation is None:
            return
        try:
            kv = self._thread_gateway().get(self._keys.topic(topic))
        except EtcdUnavailableError as exc:
            raise cluster_routing.ClusterUnavailableError(f"topic {topic!r}: {exc}") from exc
        if kv is None or kv.create_revision != generation:
            self._drop_local(topic)

    def served_generation(self, topic: str) -> int | None:
        """The generation of the local copy held for etcd's sake once it is made (the record is
        written first), None otherwise: what the routing compares with the cache's."""
        if topic in self._making:
            return None
        return self._held.get(topic)

    def _drop_local(self, topic: str) -> None:
        with self._materialize_lock:
            with contextlib.suppress(storage_errors.UnknownTopicOrPartitionError):
                self._manager.delete_topic(topic)
                _log.info("topic %s: local copy deleted, as etcd no longer has it", topic)
            self._held.forget(topic)
            for key in [key for key in self._pushed_epochs if key[0] == topic]:
                self._pushed_epochs.pop(key, None)

    # -- AlterTopicConfigs ----------------------------------------------------------------------
    def alter_topic_configs(self, topic: str, set_configs: Mapping[str, str], delete_names: Sequence[str]) -> Any:
        """Blocking. Writes the change into the topic's record in etcd, computed from the configs
        etcd holds and compared on the record's revision (cluster/topic_configs.py), then applies
        the record's configs here; every other instance applies them from its watched cache.
        Returns the local copy's config; when applying it here fails once etcd has the change
        (every other instance applies it), the committed configs: the change is made, this copy's
        failure is logged and the next materializer pass applies it again."""
        computed: list[Any] = []

        def change(configs: dict[str, str]) -> dict[str, str]:
            merged = {name: value for name, value in configs.items() if name not in delete_names}
            merged.update(set_configs)
            config = self._manager.alter_topic_configs(topic, merged, _others(merged), validate_only=True)
            computed.append(config)
            canonical = config.to_properties()
            return {name: canonical[name] for name in merged}

        try:
            configs, revision = write_topic_configs(self._thread_gateway(), self._keys, topic, change)
        except UnknownTopicError as exc:
            raise storage_errors.UnknownTopicOrPartitionError(str(exc)) from exc
        except MalformedRecordError as exc:
            raise _unreadable(f"configs of topic {topic!r} not changed", exc) from exc
        except ConfigsConflictError as exc:
            raise cluster_routing.ClusterUnavailableError(str(exc)) from exc
        except EtcdUnavailableError as exc:
            raise cluster_routing.ClusterUnavailableError(
                f"configs of topic {topic!r} not confirmed by etcd ({exc}): if etcd received the change, "
                "every instance applies it once etcd answers (describe the topic to know)") from exc
        _log.info("topic %s: configs changed in the cluster at revision %d: %s", topic, revision, configs)
        try:
            return self._apply_configs(topic, configs, revision)
        except (storage_errors.StorageError, OSError) as exc:
            self._refused(topic, revision)  # exported (configs_unapplied), not logged again
            _log.error("topic %s: configs of revision %d are in etcd but not applied to the local copy yet "
                       "(the next pass retries): %s", topic, revision, exc)
            return computed[-1]

    def _apply_configs(self, topic: str, configs: Mapping[str, str], revision: int) -> Any:
        """Makes the local copy's overrides ``configs``, the record's at ``revision`` (a file
        rewrite only when the effective config changes); returns the copy's config. Configs of a
        revision at or below the one last applied are not applied: the RPC thread (the revision it
        committed) and the materializer (the cache's, which may lag it or be ahead of it) race,
        and the older of two must never overwrite the newer one."""
        with self._materialize_lock:
            applied = self._applied_configs.get(topic)
            if applied is not None and applied[0] >= revision:
                self._settle_refused(topic, applied[0])
                return self._manager.describe_topic(topic).config
            wanted = self._manager.alter_topic_configs(topic, configs, _others(configs), validate_only=True)
            if wanted != self._manager.describe_topic(topic).config:
                self._manager.alter_topic_configs(topic, configs, _others(configs))
                _log.info("topic %s: configs from etcd (revision %d) applied to the local copy: %s",
                          topic, revision, dict(configs))
            self._applied_configs[topic] = (revision, dict(configs))
            self._settle_refused(topic, revision)
            return wanted

    def _refused(self, topic: str, revision: int) -> None:
        """Notes that the configs of ``revision`` failed to apply here (the newest such revision
        is kept: a late failure of an older one never hides a newer one)."""
        with self._refused_lock:
            self._configs_refused[topic] = max(revision, self._configs_refused.get(topic, revision))

    def _settle_refused(self, topic: str, applied_revision: int) -> None:
        """Configs at ``applied_revision`` applied: a failure at or below it is over."""
        with self._refused_lock:
            refused = self._configs_refused.get(topic)
            if refused is not None and refused <= applied_revision:
                del self._configs_refused[topic]

    def _configs_behind(self, topic: str) -> bool:
        """Whether the cached record is newer than the configs last applied (on the loop: the pool
        is asked only when there is something to apply)."""
        found = self._cache.topic_configs_at(topic)
        applied = self._applied_configs.get(topic)
        return found is not None and (applied is None or found[1] > applied[0])

    def _follow_configs(self, topic: str) -> None:
        """Applies the cached record's configs when the record is newer than the configs last
        applied. A record this instance cannot apply (configs it refuses, a partition on an
        offline directory, a write that failed) is not marked applied: every pass tries it again,
        and it is logged once per record."""
        found = self._cache.topic_configs_at(topic)
        if found is None:
            return
        configs, revision = found
        try:
            self._apply_configs(topic, configs, revision)
        except (storage_errors.StorageError, OSError) as exc:
            if self._configs_refused.get(topic) != revision:
                self._refused(topic, revision)
                _log.error("topic %s: the configs etcd holds are refused here (revision %d), the local copy keeps "
                           "its own; every pass tries them again: %s", topic, revision, exc)

    # -- InitProducerId -------------------------------------------------------------------------
    def reserve_producer_id_block(self) -> int:
        """Blocking. The first id of a block no instance of the cluster got (an etcd counter,
        cluster/producer_id_blocks.py); UNAVAILABLE (retriable) when etcd does not answer."""
        try:
            return reserve_producer_id_block(self._thread_gateway(), self._keys, PRODUCER_ID_BLOCK_SIZE,
                                             lambda: time.time_ns() // 1_000_000)
        except EtcdUnavailableError as exc:
            raise cluster_routing.ClusterUnavailableError(f"no producer id reserved: {exc}") from exc
        except MalformedRecordError as exc:
            raise _unreadable("no producer id reserved", exc) from exc

    def _loads(self) -> list[InstanceLoad]:
        counts: dict[str, int] = {}
        for topic, partition_count in self._cache.topics().items():
            for partition in range(partition_count):
                owner = self._cache.owner_of(topic, partition)
                if owner is not None:
                    counts[owner.owner] = counts.get(owner.owner, 0) + 1
        return [InstanceLoad(info.instance_id, info.alive, counts.get(info.instance_id, 0), info.bytes)
                for info in self._cache.instances().values()]

    def _thread_gateway(self) -> EtcdGateway:
        gateway = getattr(self._local, "gateway", None)
        if gateway is None:
            gateway = self._local.gateway = self._gateway()
        return gateway

    def _hold_locally(self, topic: str, partition_count: int, configs: Mapping[str, str], generation: int,
                      topic_id: str) -> None:
        """The local copy takes etcd's topic id: every instance's copy of a topic is one topic id,
        which keys its remote segments in the object store."""
        with self._materialize_lock:
            if topic in dict(self._manager.list_topics()):
                return
            self._making.add(topic)  # recorded, not made yet: not served (served_generation)
            self._held.record(topic, generation)  # before the copy: never a copy without its record
            self._manager.create_topic(topic, partition_count, dict(configs), topic_id=topic_id)
            self._making.discard(topic)  # kept on a failure: the next pass makes it

    # -- the other instances' topics --------------------------------------------------------------
    async def _materialize(self) -> None:
        while True:
            await asyncio.sleep(_MATERIALIZE_INTERVAL_S)
            self._log_acl_mismatches()
            for topic in self._stale_topics():
                try:
                    await self._calls.blocking(self.settle_topic, topic)
                except (cluster_routing.ClusterUnavailableError, storage_errors.StorageError, OSError) as exc:
                    _log.warning("topic %s deleted from etcd, local copy not deleted yet: %s", topic, exc)
            local = dict(self._manager.list_topics())
            for topic, partition_count in self._cache.topics().items():
                if topic in local and self._configs_behind(topic) and self.served_generation(topic) is not None:
                    try:
                        await self._calls.blocking(self._follow_configs, topic)
                    except (storage_errors.StorageError, OSError) as exc:
                        _log.warning("topic %s: configs from etcd not applied yet: %s", topic, exc)
                if topic not in local:
                    try:
                        await self._calls.blocking(self._materialize_topic, topic, partition_count)
                    except (ClusterError, storage_errors.StorageError, OSError) as exc:
                        _log.warning("topic %s from etcd not held locally yet: %s", topic, exc)

    def _stale_topics(self) -> list[str]:
        """Local topics held for etcd's sake whose generation the cache no longer shows (deleted,
        or deleted and created again). Only a loaded cache at or past the generation's revision is
        believed (a copy just created is not mistaken for a deleted one); ``settle_topic`` asks
        etcd before anything is deleted. A held topic with no record yet (a copy made before the
        records were kept) is recorded at the generation etcd has."""
        statistics = self._cache.statistics()
        if not statistics.connected:
            return []
        generations = self._cache.topic_generations()
        stale = []
        for topic, _ in self._manager.list_topics():
            held = self._held.get(topic)
            if held is None:
                if topic in generations:
                    with contextlib.suppress(OSError):
                        self._held.record(topic, generations[topic])
            elif statistics.revision >= held and generations.get(topic) != held:
                stale.append(topic)
        return stale

    def _materialize_topic(self, topic: str, partition_count: int) -> None:
        kv = self._thread_gateway().get(self._keys.topic(topic))
        if kv is None:
            return  # deleted meanwhile
        record = decode_topic(kv.key, kv.value)  # MalformedRecordError: a ClusterError, logged by the pass
        topic_id = topic_id_of(self._keys.cluster_name, topic, record.record, kv.create_revision)
        self._hold_locally(topic, record.partitions, record.configs, kv.create_revision, topic_id)
        _log.info("topic %s (%d partitions) held locally, as etcd has it", topic, partition_count)

    # -- ownership epochs into the logs ---------------------------------------------------------
    def _follow_epochs(self) -> None:
        """Thread: after each change the cache sees (and every half second, for partitions held
        locally only since), each local log is told its partition's epoch. From then on the log
        refuses an append admitted under an older one, even one admitted before the change
        (UnifiedLog.advance_leader_epoch takes the log's lock): the epoch rule in the append
        itself, beside the owner checks at admission and before the OK."""
        revision = -1
        while not self._epochs_stopping.is_set():
            self._cache.wait_until(lambda cache: cache.statistics().revision != revision, 0.5)
            revision = self._cache.statistics().revision
            try:
                self.push_epochs()
            except Exception:  # a bug: logged, and the next change tries again
                _log.exception("ownership epochs not pushed into the logs")

    def push_epochs(self) -> int:
        """Blocking. Tells each locally held log whose epoch in the cache changed since the last
        push; returns how many were told."""
        told = 0
        # Every owner record, whether or not its topic's record is readable (metadata_cache.py):
        # a partition served here always has its epoch in its log.
        for (topic, partition), record in self._cache.owners().items():
            if not record.readable or self._pushed_epochs.get((topic, partition)) == record.epoch:
                continue  # an unreadable owner record carries no epoch to push (metadata_cache.py)
            try:
                log = self._manager.get_log(topic, partition)
            except storage_errors.StorageError:
                continue  # not held here yet (materialize) or deleted meanwhile
            log.advance_leader_epoch(record.epoch)
            self._pushed_epochs[(topic, partition)] = record.epoch
            told += 1
        return told

    def _log_end_offset(self, topic: str, partition: int) -> int | None:
        """The local log's end (offset_ceilings.py), None when not held here."""
        try:
            return self._manager.get_log(topic, partition).log_end_offset
        except storage_errors.StorageError:
            return None

    def _capacity(self) -> Capacity:
        """The registration's figures (Membership writes them again when they change): the
        bytes are those of the partitions this instance serves (placement's tie-break)."""
        topics = self._manager.list_topics()
        free = 0
        with contextlib.suppress(OSError):
            free = shutil.disk_usage(self.config.data_dirs[0]).free
        return Capacity(partition_count=sum(count for _, count in topics), bytes=self._owned_bytes(topics),
                        disk_free_bytes=free, acl_digest=self.acl_digest())

    def _owned_bytes(self, topics: list[tuple[str, int]]) -> int:
        total = 0
        for topic, partition_count in topics:
            for partition in range(partition_count):
                record = self._cache.owner_of(topic, partition)
                if record is not None and record.owner != self.config.instance_id:
                    continue  # a copy held for another owner (empty, or left by a move)
                with contextlib.suppress(storage_errors.StorageError):
                    total += self._manager.get_log(topic, partition).size_in_bytes
        return total

    def configs_unapplied(self) -> tuple[str, ...]:
        """The topics whose configs in etcd this instance failed to apply to its copy and has not
        applied since (every materializer pass tries again): exported for an operator to see.
        Exactly those: a topic leaves once configs at or past the failed revision are applied
        (a newer record merely not applied yet is not a failure), and a failed call counts at
        once, before the watched cache shows its record; a topic etcd no longer has leaves too."""
        with self._refused_lock:
            refused = list(self._configs_refused.items())
        unapplied = []
        for topic, revision in refused:
            applied = self._applied_configs.get(topic)
            if (applied is None or applied[0] < revision) and self._cache.topic_configs_at(topic) is not None:
                unapplied.append(topic)
        return tuple(sorted(unapplied))

    # -- the ACL, one file per instance -----------------------------------------------------------
    def acl_mismatches(self) -> tuple[str, ...]:
        """The live instances whose ACL digest (in their registration) differs from this one's:
        a request would be allowed by one instance and refused by another."""
        own = self.acl_digest()
        return tuple(sorted(info.instance_id for info in self._cache.instances().values()
                            if info.alive and info.instance_id != self.config.instance_id
                            and info.acl_digest != own))

    def _log_acl_mismatches(self) -> None:
        mismatches = self.acl_mismatches()
        if mismatches == self._acl_mismatches_logged:
            return
        self._acl_mismatches_logged = mismatches
        if mismatches:
            _log.warning("ACL differs from this instance's on %s: the same call may be allowed by one instance "
                         "and refused by another; give every instance the same --acl file and send SIGHUP",
                         ", ".join(mismatches))
        else:
            _log.info("ACL: every live instance has the same rules as this one")


def _unreadable(what: str, exc: MalformedRecordError) -> Exception:
    """The answer to a call that met a record etcd holds malformed (cluster/records.py):
    UNAVAILABLE naming the key, as an etcd that does not answer; it succeeds once an operator
    repairs the record as ``repair_advice`` says for its kind."""
    return cluster_routing.ClusterUnavailableError(f"{what}: {exc}; {repair_advice(exc.key)}")


def _others(configs: Mapping[str, str]) -> list[str]:
    """Every known config name not in ``configs``: deleted, so the overrides become exactly them."""
    return [name for name in LogConfig.known_names() if name not in configs]
