"""The side-by-side benchmark (python -m bench.peers) end to end at a tiny size: real servers on
loopback, real files, the JSON, the PNG and the generated page. Speed is not asserted here (it
lives in the benchmark's own output); what is asserted is that every figure was measured, the
records really went through each system, and the page is built from them."""

import json
import shutil

import pytest

from bench.peers import __main__ as peers_main
from bench.peers import report, workloads
from bench.peers.common import KEY_BYTES, VALUE_BYTES
from bench.peers.figures import FIGURES

pytestmark = pytest.mark.integration

RECORDS = 2000
LATENCY_RECORDS = 100
LOOKUPS = 50
TINY = ["--records", str(RECORDS), "--repeats", "1", "--latency-records", str(LATENCY_RECORDS),
        "--lookups", str(LOOKUPS), "--limits-disk-mib", "4", "--limits-calls", "20", "--floor-calls", "20"]
PEERS_MISSING = [binary for binary in ("redis-server", "nats-server") if shutil.which(binary) is None]


def _run(tmp_path, systems: str, *extra: str) -> dict:
    out = tmp_path / "results" / "peers.json"
    returned = peers_main.main([*TINY, "--systems", systems, "--out", str(out), "--data-dir", str(tmp_path / "data"), *extra])
    written = json.loads(out.read_text())
    assert written["median"].keys() == returned["median"].keys()
    return written


def _assert_measured(figures: dict) -> None:
    for figure in FIGURES:
        assert figure.key in figures, figure.key
    for key in ("produce_records_per_s", "read_records_per_s", "batched_lookups_per_s", "lookup_p50_ms",
                "latency_p50_ms", "server_rss_mb", "server_rss_idle_mb"):
        assert figures[key] > 0, key
    assert figures["lookup_p50_ms"] <= figures["lookup_p99_ms"]
    # The batched-rate figure starts warm: a call's worth of lookups asked before its clock.
    assert figures["batched_lookups_warm_up_ms"] > 0
    assert figures["latency_p50_ms"] <= figures["latency_p99_ms"] <= figures["latency_max_ms"]
    assert figures["latency_received"] == LATENCY_RECORDS
    # Every system keeps at least each record's key and value on disk, durably after its stop.
    assert figures["disk_bytes_per_record"] >= KEY_BYTES + VALUE_BYTES
    # Each latency beside the same repeat's floor, and its distribution for the CDF plot.
    for key in ("lookup_p50_over_floor", "lookup_p99_over_floor", "latency_p50_over_floor", "latency_p99_over_floor"):
        assert figures[key] > 0, key
    for key in ("distribution_lookup_ms", "distribution_latency_ms"):
        assert len(figures[key]) == 201 and figures[key] == sorted(figures[key]), key


def test_seglog_alone_end_to_end_writes_the_json_the_plot_and_a_page(tmp_path):
    result = _run(tmp_path, "seglog")

    assert list(result["median"]) == ["seglog"]
    _assert_measured(result["median"]["seglog"])
    assert result["advantage"] == {}
    assert result["machine"]["nproc"] >= 1
    assert result["machine"]["load_1min"]["samples"] >= 1
    for key in ("empty_grpc_call_p50_ms", "disk_write_fsync_mb_s", "disk_read_mb_s", "crc32c_mb_s",
                "floor_p50_ms", "floor_p99_ms"):
        assert result["limits"][key] > 0, key
    assert len(result["limits"]["distribution_floor_ms"]) == 201
    # The small-batch log of the batched lookups: measured, its batches about 100 records.
    assert result["median"]["seglog"]["batched_lookups_small_batches_per_s"] > 0
    assert result["median"]["seglog"]["batched_lookups_small_batches_warm_up_ms"] > 0
    # Produce and read again with every client default (the 'any harness' figures).
    for key in ("produce_defaults_records_per_s", "read_defaults_records_per_s"):
        assert result["median"]["seglog"][key] > 0, key
    assert (tmp_path / "results" / "peers-cdf.png").read_bytes().startswith(b"\x89PNG")
    assert ".log" in result["disk_by_kind_last_repeat"]["seglog"]
    assert result["median"]["seglog"]["records_per_batch"] > 100  # the 512 KiB batches of the bulk producer
    assert (tmp_path / "results" / "peers.png").read_bytes().startswith(b"\x89PNG")

    page = report.render(result)
    assert f"{RECORDS:,} records instead of 1,000,000" in page
    assert "| produce ★, records/s |" in page
    assert "Not judged: the run had no peer to compare with." in page


def test_an_absent_peer_is_skipped_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no redis-server on this PATH
    result = _run(tmp_path, "seglog,redis", "--no-plot", "--seglog-batch-bytes", "16384")

    assert list(result["median"]) == ["seglog"]
    # The producer's batch size reached the log: a 16 KiB batch holds at most 141 such records.
    assert 1 < result["median"]["seglog"]["records_per_batch"] <= 16384 // (KEY_BYTES + VALUE_BYTES)
    assert not (tmp_path / "results" / "peers.png").exists()
    assert "redis-server" in result["skipped"]["redis"]
    assert "scripts/peers-setup" in result["skipped"]["redis"]
    assert "Redis Streams skipped:" in report.render(result)


@pytest.mark.slow  # two repeats, each a server and the floor's server started: about 40 s here
def test_the_latency_workload_alone_beside_the_floor(tmp_path):
    result = _run(tmp_path, "seglog", "--workloads", "latency", "--repeats", "2")

    figures = result["median"]["seglog"]
    assert result["workloads"] == "latency"
    assert figures["latency_received"] == LATENCY_RECORDS
    assert 0 < figures["latency_p50_ms"] <= figures["latency_p99_ms"] <= figures["latency_max_ms"]
    assert figures["latency_p50_over_floor"] > 0 and figures["latency_p99_over_floor"] > 0
    assert [len(sample) for sample in result["samples"]["seglog"]] == [len(figures)] * 2
    # Only the latency: no bulk produce, reads, lookups or machine limits; the floor of each repeat.
    assert "produce_records_per_s" not in figures and "lookup_p50_ms" not in figures
    assert "disk_write_fsync_mb_s" not in result["limits"] and result["limits"]["floor_p50_ms"] > 0
    assert not (tmp_path / "results" / "peers.png").exists()


@pytest.mark.slow  # two servers and Redis, each producing: about 20 s here
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed: scripts/peers-setup installs it")
def test_the_batched_lookups_alone_on_both_logs_with_their_ratio(tmp_path):
    """``--workloads batched``: goal 1's figures only, seglog's on both logs (the bulk one and the
    100-record batches), Redis's beside them and the ratio; nothing else measured."""
    result = _run(tmp_path, "seglog,redis", "--workloads", "batched")

    seglog, redis = result["median"]["seglog"], result["median"]["redis"]
    assert result["workloads"] == "batched" and result["records"] == RECORDS
    for figures in (seglog, redis):
        assert figures["batched_lookups_per_s"] > 0 and figures["batched_lookups_warm_up_ms"] > 0
        assert "produce_records_per_s" not in figures and "lookup_p50_ms" not in figures
        assert "latency_p50_ms" not in figures
    assert seglog["batched_lookups_small_batches_per_s"] > 0
    assert "batched_lookups_small_batches_per_s" not in redis
    assert result["advantage"]["redis"]["batched_lookups_per_s"] > 0
    assert "disk_write_fsync_mb_s" not in result["limits"]
    assert not (tmp_path / "results" / "peers.png").exists()
    # Each batched figure asks its own count, the same for seglog's logs and Redis.
    assert seglog["batched_lookups_count"] == redis["batched_lookups_count"] == workloads.BATCHED_LOOKUPS
    assert seglog["batched_lookups_small_batches_count"] == workloads.BATCHED_LOOKUPS
    # Its page: the figures it measured and their ratio, nothing it did not measure.
    page = report.render(result)
    assert "| batched time lookups, lookups/s |" in page and "produce" not in page.split("## Results")[1]


@pytest.mark.skipif(bool(PEERS_MISSING), reason=f"{PEERS_MISSING} not installed: scripts/peers-setup installs them (as root)")
def test_all_three_systems_end_to_end_with_ratios_to_seglog(tmp_path):
    result = _run(tmp_path, "seglog,redis,nats")

    assert set(result["median"]) == {"seglog", "redis", "nats"}
    for figures in result["median"].values():
        _assert_measured(figures)
    assert set(result["advantage"]) == {"redis", "nats"}
    seglog, redis = result["median"]["seglog"], result["median"]["redis"]
    assert result["advantage"]["redis"]["produce_records_per_s"] == pytest.approx(
        seglog["produce_records_per_s"] / redis["produce_records_per_s"])
    assert result["advantage"]["redis"]["disk_bytes_per_record"] == pytest.approx(
        redis["disk_bytes_per_record"] / seglog["disk_bytes_per_record"])
    assert result["skipped"] == {}
    page = report.render(result)
    for title in ("### seglog", "### Redis Streams", "### NATS JetStream", "## Goals", "## Lookups and latency at the floor"):
        assert title in page
