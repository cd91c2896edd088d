"""Cluster mode's figures (``--etcd``): what one instance knows of the cluster and of its etcd.

Counted as they happen (``ClusterInstruments``, held by cluster_node.py): every unary etcd call's
round trip by operation and the calls that failed at every endpoint, the produces and group commits
refused because this instance is fenced (reason ``lease``), because the partition is in a move's
final catch-up (``moving``) or because its epoch moved on under the append (``epoch``). Read at
scrape time from the instance's own cluster objects (``cluster_families``): partitions owned here,
partitions whose owner is gone, instances alive, epoch changes the watched cache has seen, the
records it found malformed (and those it holds malformed now) and the reloads or watches a bug
ended, its lease renewals that failed, the checks of its own registration record (and the failed
ones, and the revisions of it found held under another lease), the time left before the instance
fences itself, and whether the cache is current.

Nothing here exists in a single process: the families are built only when the service core holds a
cluster routing, so a single process exports none of them and no cluster alert can fire there.
Nothing here imports the cluster core (which loads etcd3gw): the objects are read by duck typing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import Metric

from seglog_server.metrics.families import new_family
from seglog_server.metrics.instruments import Histograms

__all__ = ["ETCD_BUCKETS_SECONDS", "ETCD_OPERATIONS", "REFUSAL_REASONS", "ClusterInstruments", "cluster_families"]

# From a loopback round trip (about 1 ms) to a call that waits out the gateway's timeout (seconds).
ETCD_BUCKETS_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# The unary calls the cluster core makes (cluster/etcd_gateway.py OPERATIONS' values).
ETCD_OPERATIONS = ("range", "txn", "delete", "compact", "grant", "keepalive", "revoke")
REFUSAL_REASONS = ("lease", "moving", "epoch")


class ClusterInstruments:
    """The counted figures. ``etcd_call`` is the gateway's observer; ``refused`` the routing's."""

    def __init__(self) -> None:
        self.etcd_durations = Histograms(ETCD_BUCKETS_SECONDS)
        self.etcd_errors = dict.fromkeys(ETCD_OPERATIONS, 0)
        self.refusals = dict.fromkeys(REFUSAL_REASONS, 0)

    def etcd_call(self, operation: str, seconds: float, succeeded: bool) -> None:
        self.etcd_durations.child(operation).observe(seconds)
        if not succeeded:
            self.etcd_errors[operation] = self.etcd_errors.get(operation, 0) + 1

    def refused(self, reason: str) -> None:
        self.refusals[reason] += 1


def cluster_families(routing: Any) -> Iterator[Metric]:
    """Every cluster family of one instance. ``routing``: the core's cluster routing as
    cluster_node.py builds it (``instance_id``, ``membership``, ``cache``, ``instruments``)."""
    cache, instruments = routing.cache, routing.instruments
    instances = cache.instances()
    owned = offline = 0
    for topic, partition_count in cache.topics().items():
        for partition in range(partition_count):
            record = cache.owner_of(topic, partition)
            if record is None:
                continue
            if record.owner == routing.instance_id:
                owned += 1
            else:
                info = instances.get(record.owner)
                offline += info is None or not info.alive
    statistics = cache.statistics()
    yield _single("seglog_cluster_owned_partitions", owned)
    yield _single("seglog_cluster_offline_partitions", offline)
    yield _single("seglog_cluster_instances_alive", sum(1 for info in instances.values() if info.alive))
    yield _single("seglog_cluster_metadata_current", 1 if statistics.connected else 0)
    yield _single("seglog_cluster_malformed_records_held", statistics.malformed_held_count)
    yield _single("seglog_cluster_lease_remaining_seconds", routing.membership.acknowledge_time_left_s())
    mismatches = getattr(routing, "acl_mismatches", None)
    yield _single("seglog_cluster_acl_mismatched_instances", 0 if mismatches is None else len(mismatches()))
    unapplied = getattr(routing, "configs_unapplied", None)
    yield _single("seglog_cluster_topic_configs_unapplied", 0 if unapplied is None else len(unapplied()))
    membership = routing.membership.statistics()
    for name, value in (
        ("seglog_cluster_epoch_changes", statistics.epoch_change_count),
        ("seglog_cluster_malformed_records", statistics.malformed_count),
        ("seglog_cluster_metadata_errors", statistics.unexpected_count),
        ("seglog_cluster_record_checks", membership.record_check_count),
        ("seglog_cluster_record_check_failures", membership.record_check_failure_count),
        ("seglog_cluster_lease_renewal_failures", membership.renewal_failure_count),
        ("seglog_cluster_record_held_elsewhere", membership.record_held_elsewhere_count),
    ):
        yield _single(name, value)
    refused = new_family("seglog_cluster_fenced_appends_refused")
    for reason, count in sorted(instruments.refusals.items()):
        refused.add_metric([reason], count)
    yield refused
    durations = new_family("seglog_cluster_etcd_request_duration_seconds")
    for (operation,), histogram in sorted(instruments.etcd_durations.by_labels.items()):
        durations.add_metric([operation], histogram.buckets(), histogram.total)
    yield durations
    errors = new_family("seglog_cluster_etcd_errors")
    for operation, count in sorted(instruments.etcd_errors.items()):
        errors.add_metric([operation], count)
    yield errors


def _single(name: str, value: float) -> Metric:
    """The family ``name`` with its one unlabelled sample (a gauge or a counter, as declared)."""
    family = new_family(name)
    family.add_metric([], value)
    return family
