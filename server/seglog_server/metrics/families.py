"""The one table of what seglog exports: every Prometheus family, its type, labels and help.

Tests, the dashboard checks (tests/deploy/test_metrics_names.py) and the collector read it; a
family not declared here cannot be built (``new_family`` looks the name up), so every metric name
lives in this one module (STYLE rule 12).

Bounded label sets: method x code, operation x phase, index x zone, path x kind are fixed sets;
per-partition and per-topic series are capped by the collector (collector.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

__all__ = ["FAMILIES", "family_names", "new_family"]

# name -> (type, labels, help). The one list of what seglog exports; tests and the dashboard
# checks read it. Counters are listed by their family name (without ``_total``).
FAMILIES: dict[str, tuple[str, tuple[str, ...], str]] = {
    # -- latency ----------------------------------------------------------------------------
    "seglog_rpc_duration_seconds": (
        "histogram", ("method", "code"), "Unary RPC latency, server side, by method and status code."),
    "seglog_storage_phase_duration_seconds": (
        "histogram", ("operation", "phase"),
        "Time of each storage phase inside Produce, Fetch, OffsetsForTimes and flushes."),
    # -- traffic ----------------------------------------------------------------------------
    "seglog_produced_bytes": ("counter", ("topic",), "Bytes of record batches appended, by topic."),
    "seglog_produced_records": ("counter", ("topic",), "Records appended, by topic."),
    "seglog_fetched_bytes": (
        "counter", ("topic",), "Bytes of record batches sent by Fetch and Consume, by topic."),
    "seglog_fetched_records": (
        "counter", ("topic",), "Offsets delivered by Fetch and Consume, by topic."),
    # -- the page cache ----------------------------------------------------------------------
    "seglog_index_lookups": (
        "counter", ("index", "zone"),
        "Index lookups by index (offset, time) and zone (warm: newest 8 KiB; cold: the rest; "
        "none: no section searched, the index empty or the target below its first entry)."),
    "seglog_index_lookup_pages": (
        "histogram", ("index",), "Distinct index pages one search probed."),
    "seglog_page_faults": (
        "counter", ("path", "kind"),
        "Page faults taken by the storage thread around index lookups, log reads and appends."),
    "seglog_index_resident_ratio": (
        "gauge", ("topic", "partition", "index"),
        "Share of a partition's index pages (valid entries) in the page cache (mincore sample)."),
    "seglog_index_residency_sample_age_seconds": (
        "gauge", (), "Age of the residency sample the ratio series come from."),
    "seglog_fetch_read_age_bytes": (
        "histogram", (), "Bytes of log between where a read starts and the log end."),
    "seglog_fetch_read_age_offsets": (
        "histogram", (), "Offsets between where a read starts and the log end."),
    # -- partitions and directories ----------------------------------------------------------
    "seglog_log_start_offset": ("gauge", ("topic", "partition"), "First readable offset."),
    "seglog_log_end_offset": ("gauge", ("topic", "partition"), "Offset the next record gets."),
    "seglog_log_size_bytes": ("gauge", ("topic", "partition"), "Bytes of the partition's log."),
    "seglog_log_segments": ("gauge", ("topic", "partition"), "Segments of the partition's log."),
    "seglog_log_unflushed_records": (
        "gauge", ("topic", "partition"), "Offsets above the recovery point (not yet fsynced)."),
    "seglog_log_lost_offsets": (
        "gauge", ("topic", "partition"),
        "Offsets recovery cut from damaged closed segments, at or above the log start: reads there answer DATA_LOSS."),
    "seglog_partitions": ("gauge", (), "Online partitions."),
    "seglog_offline_partitions": ("gauge", (), "Partitions that exist but cannot be served."),
    "seglog_partition_series_omitted": (
        "gauge", (), "Partitions beyond partition_series_max, left out of per-partition series."),
    "seglog_log_dir_online": ("gauge", ("dir",), "1 while the log directory is online."),
    "seglog_log_dir_size_bytes": ("gauge", ("dir",), "Bytes of logs in the directory."),
    "seglog_log_dir_partitions": ("gauge", ("dir",), "Online partitions in the directory."),
    "seglog_log_flushes": ("counter", (), "Log flushes (fsync passes) since start."),
    "seglog_log_dir_offset_index_rebuilds": (
        "counter", ("dir",),
        "Offset indexes a read found disagreeing with their log (rot on the disk or a change from outside) "
        "and rebuilt from it, or tried to (each logged with its segment), by log directory."),
    # -- start-up and recovery ---------------------------------------------------------------
    "seglog_log_dir_clean_shutdown": (
        "gauge", ("dir",), "1 when the clean-shutdown marker was found at start."),
    "seglog_recovery_ran": (
        "gauge", (), "1 when start-up recovered a log (its directory had no clean-shutdown marker)."),
    "seglog_recovery_logs_recovered": ("gauge", (), "Logs loaded through recovery at start."),
    "seglog_recovery_segments_recovered": (
        "gauge", (), "Segments CRC-checked and reindexed by recovery (online partitions)."),
    "seglog_recovery_truncated_bytes": (
        "gauge", (), "Bytes cut from torn or corrupt tails by recovery (online partitions)."),
    "seglog_recovery_logs_reloaded": (
        "gauge", (), "Logs whose load failed and that were loaded again with recovery at start."),
    "seglog_recovery_logs_offline": (
        "gauge", (), "Logs kept offline alone at start: not loadable even with recovery."),
    "seglog_startup_duration_seconds": ("gauge", (), "Time the storage took to load at start."),
    # -- the service -------------------------------------------------------------------------
    "seglog_fetch_waiters": ("gauge", (), "Long polls and streams waiting for an append."),
    "seglog_consume_streams": ("gauge", (), "Open Consume streams."),
    "seglog_consume_buffered_bytes": (
        "gauge", (), "Bytes of Consume responses held: read, built, or waiting for the client's "
        "flow-control window (budget consume_buffer_bytes_max)."),
    "seglog_consume_buffer_bytes_max": ("gauge", (), "The budget of Consume response bytes."),
    "seglog_consume_responses_shrunk": (
        "counter", (), "Consume responses made smaller than asked because the budget was spent."),
    "seglog_storage_calls": (
        "counter", ("placement",), "Storage calls by where they ran (inline, pooled, busy)."),
    "seglog_storage_calls_inline_refused": (
        "counter", (), "Inline storage calls of reads by offset (Fetch, Consume) that met a step too long for the "
        "event loop (an offset index rebuild, a scan past a lying index entry) and ran again on the storage pool "
        "(counted inline and pooled). Not OffsetsForTimes or LookupStream lookups: their bounded search refuses any step past its "
        "budget the same way, most often a cold search, and those go to the pool uncounted here."),
    "seglog_rpc_internal_errors": ("counter", (), "RPCs that failed with an unexpected error."),
    "seglog_partitions_skipped": (
        "gauge", (), "Partitions whose figures this scrape could not read (an error, logged)."),
    "seglog_metrics_collect_errors": (
        "counter", (), "Parts of /metrics scrapes left out because building them raised (logged)."),
    # -- consumer groups ---------------------------------------------------------------------
    "seglog_consumer_group_lag": (
        "gauge", ("group", "topic", "partition"),
        "Consumer lag in records: log end offset minus the group's committed offset, per committed "
        "partition (at most partition_series_max series)."),
    "seglog_consumer_group_lag_seconds": (
        "gauge", ("group", "topic", "partition"),
        "Consumer lag in seconds: now minus the timestamp of the batch holding the first uncommitted "
        "record (0 without lag; at most partition_series_max series)."),
    "seglog_consumer_group_members": (
        "gauge", ("group",), "Members of the group now (at most partition_series_max groups)."),
    "seglog_consumer_group_state": (
        "gauge", ("group", "state"),
        "1 for the group's state now (Stable, Reconciling, Empty), 0 for the others."),
    "seglog_consumer_group_rebalances": (
        "counter", ("group",),
        "Rebalances of the group (group epoch bumps: a member joined, left or timed out) since start."),
    # -- cluster mode (--etcd only; cluster_metrics.py) ---------------------------------------
    "seglog_cluster_owned_partitions": (
        "gauge", (), "Partitions whose owner record in etcd names this instance."),
    "seglog_cluster_offline_partitions": (
        "gauge", (), "Partitions of the cluster whose owner is not registered (gone), as this instance sees "
        "them: they answer UNAVAILABLE until the owner returns or an operator moves them."),
    "seglog_cluster_instances_alive": (
        "gauge", (), "Instances registered in etcd (live leases), as this instance's watched cache sees them."),
    "seglog_cluster_metadata_current": (
        "gauge", (), "1 while this instance's cache of the cluster's metadata is kept current by etcd."),
    "seglog_cluster_lease_remaining_seconds": (
        "gauge", (), "Seconds until this instance stops acknowledging produces unless etcd renews its lease "
        "(the local deadline, shorter than the lease TTL); 0 while fenced."),
    "seglog_cluster_acl_mismatched_instances": (
        "gauge", (), "Live instances whose ACL rules (the digest in their registration) differ from this "
        "instance's: a call may be allowed by one instance and refused by another until the files agree."),
    "seglog_cluster_topic_configs_unapplied": (
        "gauge", (), "Topics whose configs in etcd this instance failed to apply to its copy (a full disk, an "
        "offline directory, a value it refuses) and has not applied since; every pass tries again."),
    "seglog_cluster_epoch_changes": (
        "counter", (), "Partition owner records seen at a new epoch (moves, takeovers) since start."),
    "seglog_cluster_malformed_records": (
        "counter", (), "Keys or values under the cluster's prefix in etcd that are not records seglog writes "
        "(each key's revision once): not applied, logged with the key (docs/cluster.md)."),
    "seglog_cluster_malformed_records_held": (
        "gauge", (), "Keys under the cluster's prefix whose latest value in etcd, as this instance's watched cache "
        "read it, is malformed (not applied): 0 again once each is written well or deleted."),
    "seglog_cluster_metadata_errors": (
        "counter", (), "Reloads or watches of the cluster's metadata ended by an unexpected error (a bug, "
        "logged with its traceback); the cache is not current until a reload succeeds."),
    "seglog_cluster_record_checks": (
        "counter", (), "Checks of this instance's own registration record in etcd (rewritten when it is not "
        "the one last written, or its figures changed), run to their end, failed ones included; a pass that began "
        "with no lease to check (before the first registration, or while registering again) is none."),
    "seglog_cluster_record_check_failures": (
        "counter", (), "Checks of this instance's own registration record that failed (etcd slow or away, or a "
        "fault, logged): the record may be stale; the lease renewals alone decide fencing."),
    "seglog_cluster_lease_renewal_failures": (
        "counter", (), "Renewals of this instance's etcd lease that failed, registrations (again) included: etcd "
        "slow or away, its instance id held by another process, or a fault (logged); fenced once they fail for "
        "longer than the fence deadline. A lease etcd says is gone (a keepalive answered with TTL 0, or a check "
        "finding the record deleted) is no failed renewal: fenced at once, registered again."),
    "seglog_cluster_record_held_elsewhere": (
        "counter", (), "Revisions of this instance's own registration record seen held under another lease than "
        "its own (each once, logged): not written over, as it may be another registration's; the other instances "
        "read that record as this one's, or as not registered while it is malformed."),
    "seglog_cluster_fenced_appends_refused": (
        "counter", ("reason",),
        "Produces and group commits refused by fencing: lease (not renewed in time), moving (a move's final "
        "catch-up), epoch (the partition's epoch moved on under the append)."),
    "seglog_cluster_etcd_request_duration_seconds": (
        "histogram", ("operation",), "Round trip of each unary etcd call by operation, failed ones included."),
    "seglog_cluster_etcd_errors": (
        "counter", ("operation",), "etcd calls that failed at every endpoint, by operation."),
    # -- hooks: exported once the statistics exist -------------------------------------------
    "seglog_descriptors_in_use": ("gauge", (), "File descriptors the process holds (/proc/self/fd)."),
    "seglog_descriptors_budget": ("gauge", (), "The process's descriptor limit (RLIMIT_NOFILE, soft)."),
    "seglog_open_segments": ("gauge", (), "Segments holding descriptors and mappings now."),
    "seglog_open_segments_max": (
        "gauge", (), "Segments that may hold descriptors at once (one budget for every log)."),
    "seglog_cleaner_dirty_ratio": ("gauge", ("topic", "partition"), "Cleanable share of a log."),
    "seglog_cleaner_bytes_reclaimed": ("counter", (), "Bytes the cleaner reclaimed."),
    "seglog_cleaner_last_run_timestamp_seconds": ("gauge", (), "When the cleaner last committed."),
    "seglog_cleaner_offset_map_utilization_ratio": ("gauge", (), "Offset map fill of the last run."),
    "seglog_cleaner_offset_map_collision_ratio": ("gauge", (), "Digest collisions of the last run."),
    "seglog_cleaner_partitions_skipped": (
        "gauge", (), "Compacted partitions this scrape could not describe (an error, logged)."),
    # -- the remote tier (docs/tiered-storage.md): zeros without --remote-storage -------------
    "seglog_remote_uploaded_segments": ("counter", (), "Closed segments copied to the object store."),
    "seglog_remote_uploaded_bytes": ("counter", (), "Bytes of segment logs copied to the object store."),
    "seglog_remote_upload_lag_bytes": (
        "gauge", (), "Bytes of closed segments not uploaded yet (local retention cannot delete them)."),
    "seglog_remote_upload_lag_seconds": (
        "gauge", (), "Age of the oldest closed segment not uploaded yet (now - its largest timestamp); 0 when none."),
    "seglog_remote_fetches": ("counter", (), "Ranged GETs of remote reads (segment bytes and indexes)."),
    "seglog_remote_fetch_bytes": ("counter", (), "Bytes remote reads fetched from the object store."),
    "seglog_remote_fetch_seconds": (
        "counter", (), "Time spent in remote reads' GETs (with seglog_remote_fetches: the mean latency)."),
    "seglog_remote_cache_hits": ("counter", (), "Remote reads' chunks found in the chunk cache."),
    "seglog_remote_cache_misses": ("counter", (), "Remote reads' chunks fetched from the object store."),
    "seglog_remote_store_errors": ("counter", ("operation",), "Object store calls that failed, by operation."),
    "seglog_remote_orphans_deleted": (
        "counter", (), "Orphan remote segments (copies a crash interrupted) deleted."),
}


def new_family(name: str, labels: Sequence[str] | None = None) -> Any:
    """An empty family of the declared ``name`` (its declared labels unless ``labels``)."""
    kind, declared, text = FAMILIES[name]
    labels = declared if labels is None else labels
    if kind == "counter":
        return CounterMetricFamily(name, text, labels=labels)
    if kind == "gauge":
        return GaugeMetricFamily(name, text, labels=labels)
    return HistogramMetricFamily(name, text, labels=labels)


def family_names(families: Iterable[str] = FAMILIES) -> list[str]:
    """Sample names as they appear on /metrics (counters with ``_total``)."""
    return [f"{name}_total" if FAMILIES[name][0] == "counter" else name for name in families]

