"""/metrics of a running service after real traffic: every family with its documented labels,
moving the right way (a read far behind the tail is a cold-zone lookup with a large read age, a
tail read a warm one), and ExplainLookup / ``seglog explain`` laying out the same paths."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import grpc
import pytest
from tests.support.integration_helpers import make_batch
from prometheus_client.parser import text_string_to_metric_families

from seglog.v1 import log_service_pb2 as pb
from seglog_server.metrics import FAMILIES

pytestmark = pytest.mark.integration

# The offset index's warm section holds 1024 entries (8 KiB); with an entry per batch, 2500
# batches put the first ~1475 offsets (about three pages of entries) in the cold section.
BATCH_COUNT = 2500
HOOK_FAMILIES = {name for name in FAMILIES if name.startswith(("seglog_descriptors_", "seglog_cleaner_"))}
# Exported in cluster mode only (--etcd): tests/integration/cluster/test_cluster_metrics.py scrapes
# them from cluster-mode processes, and checks a single process exports none of them.
CLUSTER_FAMILIES = {name for name in FAMILIES if name.startswith("seglog_cluster_")}


def scrape(address: str) -> dict[str, dict[tuple, float]]:
    """name -> {sorted label items: value} for every sample on /metrics."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples.get(name, {}).get(tuple(sorted(labels.items())), 0.0)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """A service with one partition holding BATCH_COUNT one-record batches, each indexed."""
    from tests.support.integration_helpers import ServiceProcess

    workdir = tmp_path_factory.mktemp("metrics-service")
    # No maintenance pass during the module: a pass is a pooled storage call of its own, and the
    # tests here read counters before and after a request (one landed inside a placement test's
    # window and counted as that request's pooled call).
    quiet = ["--maintenance-interval-ms", str(3_600_000)]
    service = ServiceProcess(workdir, [workdir / "data"], quiet).start()
    service.stub.CreateTopic(pb.CreateTopicRequest(
        topic="paged", partitions=1, configs={"index.interval.bytes": "1"}), timeout=10)
    for number in range(BATCH_COUNT):
        service.stub.Produce(pb.ProduceRequest(
            topic="paged", partition=0, records=make_batch([b"v%05d" % number])), timeout=10)
    yield service
    assert service.stop() == 0, service.log()


def fetch(service, offset: int) -> None:
    service.stub.Fetch(pb.FetchRequest(topic="paged", partition=0, offset=offset, max_bytes=1), timeout=10)


def test_a_read_far_behind_the_tail_is_a_cold_lookup_with_a_large_read_age(loaded):
    before = scrape(loaded.metrics_address)
    fetch(loaded, 10)
    after = scrape(loaded.metrics_address)
    cold = "seglog_index_lookups_total"
    assert value(after, cold, index="offset", zone="cold") > value(before, cold, index="offset", zone="cold")
    assert value(after, cold, index="offset", zone="warm") == value(before, cold, index="offset", zone="warm")
    age = value(after, "seglog_fetch_read_age_offsets_sum") - value(before, "seglog_fetch_read_age_offsets_sum")
    assert age == BATCH_COUNT - 10
    age_bytes = value(after, "seglog_fetch_read_age_bytes_sum") - value(before, "seglog_fetch_read_age_bytes_sum")
    assert age_bytes > 1000 * (BATCH_COUNT - 10) / 100  # tens of bytes per batch, behind
    pages = value(after, "seglog_index_lookup_pages_sum", index="offset") - value(
        before, "seglog_index_lookup_pages_sum", index="offset")
    assert pages >= 2  # a cold binary search over 12 KiB of entries crosses pages


def test_a_tail_read_is_a_warm_lookup_with_a_small_read_age(loaded):
    before = scrape(loaded.metrics_address)
    fetch(loaded, BATCH_COUNT - 1)
    after = scrape(loaded.metrics_address)
    lookups = "seglog_index_lookups_total"
    assert value(after, lookups, index="offset", zone="warm") > value(before, lookups, index="offset", zone="warm")
    assert value(after, lookups, index="offset", zone="cold") == value(before, lookups, index="offset", zone="cold")
    age = value(after, "seglog_fetch_read_age_offsets_sum") - value(before, "seglog_fetch_read_age_offsets_sum")
    assert age == 1
    pages_count = value(after, "seglog_index_lookup_pages_count", index="offset") - value(
        before, "seglog_index_lookup_pages_count", index="offset")
    pages = value(after, "seglog_index_lookup_pages_sum", index="offset") - value(
        before, "seglog_index_lookup_pages_sum", index="offset")
    assert pages_count >= 1 and pages <= 3 * pages_count  # the warm section spans <= 3 pages


def test_reads_of_a_young_partition_are_lookups_in_no_zone_not_cold(loaded):
    """A partition smaller than index.interval.bytes has an empty index: its reads search no
    section, so a small setup does not read 100 % cold (and the cold-lookup alert stays quiet)."""
    loaded.stub.CreateTopic(pb.CreateTopicRequest(topic="young", partitions=1), timeout=10)
    for number in range(3):
        loaded.stub.Produce(pb.ProduceRequest(
            topic="young", partition=0, records=make_batch([b"y%d" % number])), timeout=10)
    before = scrape(loaded.metrics_address)
    for offset in range(3):
        loaded.stub.Fetch(pb.FetchRequest(topic="young", partition=0, offset=offset), timeout=10)
    after = scrape(loaded.metrics_address)
    lookups = "seglog_index_lookups_total"
    assert value(after, lookups, index="offset", zone="none") >= value(before, lookups, index="offset", zone="none") + 3
    for zone in ("warm", "cold"):
        assert value(after, lookups, index="offset", zone=zone) == value(before, lookups, index="offset", zone=zone)


def test_every_family_appears_with_its_documented_labels(loaded):
    stub = loaded.stub
    stub.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic="paged", partition=0, timestamp_ms=0)]), timeout=10)
    # The lookup above answers from the time-step table its appends fed ("index_search"); a time
    # lookup scans the log ("log_scan") where no table answers: here, after DeleteRecords dropped it.
    stub.CreateTopic(pb.CreateTopicRequest(topic="scanned", partitions=1), timeout=10)
    stub.Produce(pb.ProduceRequest(topic="scanned", partition=0, records=make_batch(
        [b"a", b"b", b"c"], timestamps=[1_000, 2_000, 3_000])), timeout=10)
    stub.DeleteRecords(pb.DeleteRecordsRequest(topic="scanned", partition=0, offset=1), timeout=10)
    found = stub.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic="scanned", partition=0, timestamp_ms=0)]), timeout=10)
    assert [(result.offset, result.timestamp_ms) for result in found.results] == [(1, 2_000)]
    stub.Produce(pb.ProduceRequest(topic="paged", partition=0, records=make_batch([b"x"]),
                                   acks=pb.ACKS_FSYNCED), timeout=10)
    fetch(loaded, 0)
    with pytest.raises(grpc.RpcError):
        stub.Fetch(pb.FetchRequest(topic="no-such-topic", partition=0, offset=0), timeout=10)
    stub.CommitOffsets(pb.CommitOffsetsRequest(group="lagging", offsets=[
        pb.OffsetToCommit(topic="paged", partition=0, offset=5)]), timeout=10)
    samples = scrape(loaded.metrics_address)
    for name, (kind, labels, _) in FAMILIES.items():
        if name in HOOK_FAMILIES or name in CLUSTER_FAMILIES:
            continue
        sample = {"counter": f"{name}_total", "histogram": f"{name}_count"}.get(kind, name)
        assert sample in samples, f"{sample} missing from /metrics"
        for label_items in samples[sample]:
            assert {key for key, _ in label_items} == set(labels) | ({"le"} if kind == "histogram" and sample.endswith("_bucket") else set()), (name, label_items)
    codes = {dict(items)["code"] for items in samples["seglog_rpc_duration_seconds_count"]}
    assert {"OK", "NOT_FOUND"} <= codes
    phases = {(dict(i)["operation"], dict(i)["phase"]) for i in samples["seglog_storage_phase_duration_seconds_count"]}
    assert {("produce", "validation"), ("produce", "append"), ("flush", "fsync"), ("fetch", "segment_lookup"),
            ("fetch", "index_search"), ("fetch", "log_scan"), ("fetch", "log_read"),
            ("offsets_for_times", "index_search"), ("offsets_for_times", "log_scan")} <= phases
    assert value(samples, "seglog_log_end_offset", topic="paged", partition="0") >= BATCH_COUNT + 1
    assert value(samples, "seglog_produced_records_total", topic="paged") >= BATCH_COUNT + 1
    # Consumer lag: the log end minus the group's committed offset.
    assert value(samples, "seglog_consumer_group_lag", group="lagging", topic="paged", partition="0") == (
        value(samples, "seglog_log_end_offset", topic="paged", partition="0") - 5)
    assert value(samples, "seglog_fetched_records_total", topic="paged") >= 1
    ratio = value(samples, "seglog_index_resident_ratio", topic="paged", partition="0", index="offset")
    assert 0.0 < ratio <= 1.0  # just written and searched: resident
    assert value(samples, "seglog_log_dir_online", dir=str(loaded.data_dirs[0])) == 1
    assert {dict(items)["path"] for items in samples["seglog_page_faults_total"]} == {
        "index_lookup", "log_read", "append"}


def test_explain_lookup_lays_out_a_cold_and_a_warm_path(loaded):
    cold = loaded.stub.ExplainLookup(pb.ExplainLookupRequest(topic="paged", partition=0, offset=10), timeout=10)
    assert cold.segment_base_offset == 0 and cold.segment_count == 1
    (search,) = cold.searches
    assert search.index == "offset" and search.zone == "cold" and search.entry_count >= BATCH_COUNT - 1
    assert len(search.probed_slots) >= 2 and len(search.pages) >= 2
    assert len(search.pages_resident) == len(search.pages) and all(search.pages_resident)
    assert cold.found_offset == 10 and cold.found_position >= cold.index_position
    assert cold.scanned_bytes == cold.found_position - cold.index_position
    warm = loaded.stub.ExplainLookup(
        pb.ExplainLookupRequest(topic="paged", partition=0, offset=BATCH_COUNT - 1), timeout=10)
    assert warm.searches[0].zone == "warm" and len(warm.searches[0].pages) <= 3
    by_time = loaded.stub.ExplainLookup(
        pb.ExplainLookupRequest(topic="paged", partition=0, timestamp_ms=0), timeout=10)
    assert [s.index for s in by_time.searches] == ["time", "offset"]
    assert by_time.found_offset == 0


def test_explain_lookup_refuses_a_missing_target_and_an_offset_out_of_range(loaded):
    with pytest.raises(grpc.RpcError) as info:
        loaded.stub.ExplainLookup(pb.ExplainLookupRequest(topic="paged", partition=0), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as info:
        loaded.stub.ExplainLookup(pb.ExplainLookupRequest(topic="paged", partition=0, offset=10**9), timeout=10)
    assert info.value.code() == grpc.StatusCode.OUT_OF_RANGE
    loaded.stub.ListTopics(pb.ListTopicsRequest(), timeout=10)


def test_seglog_explain_prints_the_path(loaded):
    command = [sys.executable, "-m", "seglog_cli", "--server", loaded.address, "explain", "paged",
               "--partition", "0", "--offset", "10"]
    text = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60).stdout
    assert "segment map: 1 segments -> segment 0" in text
    assert "offset index:" in text and "zone cold" in text and "bytes scanned" in text
    row = json.loads(subprocess.run([*command, "--format", "json"], capture_output=True, text=True,
                                    check=True, timeout=60).stdout)
    assert row["searches"][0]["zone"] == "cold" and int(row["found_offset"]) == 10


def test_metrics_none_serves_no_endpoint(start_service):
    service = start_service(["--metrics-listen", "none"])
    assert service.metrics_address is None
    service.stub.ListTopics(pb.ListTopicsRequest(), timeout=10)


def test_a_busy_metrics_port_does_not_stop_the_service(loaded, start_service):
    service = start_service(["--metrics-listen", loaded.metrics_address])
    service.stub.ListTopics(pb.ListTopicsRequest(), timeout=10)
    assert service.metrics_address is None
    assert (f"metrics endpoint off: cannot listen on {loaded.metrics_address}: the port is in use" in service.log())
    assert "choose another with --metrics-listen HOST:PORT" in service.log()


def test_each_stream_message_is_one_rpc_duration_observation_under_the_stream_and_its_code(loaded):
    before = scrape(loaded.metrics_address)
    requests = [
        pb.ProduceStreamRequest(correlation_id=i, produce=pb.ProduceRequest(
            topic="paged" if i != 1 else "no-such-topic", partition=0, records=make_batch([b"s%d" % i]),
        )) for i in range(3)
    ]
    answers = list(loaded.stub.ProduceStream(iter(requests), timeout=30))
    assert [a.HasField("error") for a in answers] == [False, True, False]
    after = scrape(loaded.metrics_address)
    count = "seglog_rpc_duration_seconds_count"
    ok = value(after, count, method="ProduceStream", code="OK") - value(before, count, method="ProduceStream", code="OK")
    missing = (value(after, count, method="ProduceStream", code="NOT_FOUND")
               - value(before, count, method="ProduceStream", code="NOT_FOUND"))
    assert (ok, missing) == (2, 1)


def test_many_lookups_of_one_partition_go_to_the_storage_pool_a_few_stay_inline(loaded):
    """A request's lookups of one partition run inline on the event loop up to the cap of them;
    more go to the storage pool (one call), so a request of thousands cannot hold the loop."""
    from seglog_server.rpc.lookup_rpcs import _INLINE_LOOKUPS_MAX as cap

    base = [1_700_000_000_000 + number for number in range(cap + 1)]  # below every record's time

    def lookups(count: int) -> None:
        response = loaded.stub.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[
            pb.PartitionTimestamp(topic="paged", partition=0, timestamp_ms=timestamp_ms)
            for timestamp_ms in base[:count]
        ]), timeout=10)
        assert [result.offset for result in response.results] == [0] * count

    def calls(count: int) -> dict[str, float]:
        """The storage calls, by placement, of a request of ``count`` lookups."""
        before = scrape(loaded.metrics_address)
        lookups(count)
        after = scrape(loaded.metrics_address)
        return {
            placement: value(after, "seglog_storage_calls_total", placement=placement)
            - value(before, "seglog_storage_calls_total", placement=placement)
            for placement in ("inline", "pooled")
        }

    # Warmed first: a log's first lookup by time after a start checks its segments, and a call
    # that would build a time-step table or a batch directory, go to the pool whatever their count.
    lookups(cap + 1)
    # The counters are the service's, not the request's: a background pooled call (a flush, a
    # checkpoint) landing between the two scrapes counts too, and a loaded machine widens that
    # window. So the capped request is asked up to three times: one of them must have run wholly
    # inline, which a request sent to the pool every time (the regression guarded) never does.
    few = [calls(cap) for _ in range(3)]
    assert any(one["inline"] >= 1 and one["pooled"] == 0 for one in few), few
    many = calls(cap + 1)
    assert many["pooled"] >= 1


def test_a_lying_offset_index_met_by_a_fetch_moves_the_rebuild_and_inline_refusal_counters(tmp_path):
    """A clean stop, a mid-file .index entry rotted on disk (the load checks only the tail), a
    restart: the first small Fetch past the entry runs inline, meets the lie, is refused there
    and rebuilt on the pool. /metrics shows both: the rebuild under the partition's directory
    (once), the inline refusal; the Fetch answers the right records."""
    from tests.support.index_rot import rot_mid_entry
    from tests.support.integration_helpers import ServiceProcess

    data = tmp_path / "data"
    first = ServiceProcess(tmp_path, [data], []).start()
    first.stub.CreateTopic(pb.CreateTopicRequest(
        topic="rotted", partitions=1, configs={"index.interval.bytes": "1"}), timeout=10)
    for number in range(200):
        first.stub.Produce(pb.ProduceRequest(
            topic="rotted", partition=0, records=make_batch([b"v%03d" % number])), timeout=10)
    assert first.stop() == 0, first.log()
    slot = rot_mid_entry(data / "rotted-0")  # out of order: the read guard sees it
    service = ServiceProcess(tmp_path, [data], []).start()
    try:
        before = scrape(service.metrics_address)
        # Present at 0 before any rebuild (value() would read a missing series as 0 too): the
        # first rebuild must be an increase from 0, or increase() never sees it.
        assert before["seglog_log_dir_offset_index_rebuilds_total"] == {(("dir", str(data)),): 0}
        for offset in range(slot - 5, slot + 20):
            response = service.stub.Fetch(pb.FetchRequest(
                topic="rotted", partition=0, offset=offset, max_bytes=1), timeout=10)
            assert response.records  # the batch holding ``offset``, not one past it
        after = scrape(service.metrics_address)
        assert value(after, "seglog_log_dir_offset_index_rebuilds_total", dir=str(data)) == 1
        refused = "seglog_storage_calls_inline_refused_total"
        assert value(after, refused) - value(before, refused) >= 1
    finally:
        assert service.stop() == 0, service.log()
