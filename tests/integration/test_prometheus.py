"""deploy/: promtool accepts the Prometheus config and rules, the rules' unit tests pass, every
PromQL expression of the Grafana dashboard parses and names only series a running seglog exports,
and a real Prometheus on loopback scrapes a running seglog and serves a seglog series back."""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.etcd_server import EtcdServer
from tests.support.integration_helpers import ServiceProcess, make_batch

from seglog.v1 import log_service_pb2 as pb
from seglog_server.metrics import FAMILIES
from tests.support.ports import free_port as _free_port

pytestmark = pytest.mark.integration

DEPLOY = pathlib.Path(__file__).resolve().parents[2] / "deploy"
PROMETHEUS_DIR = DEPLOY / "prometheus"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "seglog.json"
# The first scraped sample shows about 5.3 s after Prometheus starts (platform-notes.md 3).
PROMETHEUS_TIMEOUT_S = 60.0
POLL_S = 0.25
METRIC_NAME = re.compile(r"\bseglog_[a-z0-9_]+")
# The alerts that also fire for a counter first seen above 0 (counted before its first scrape):
# their series and their window in minutes.
FIRST_SEEN_ALERTS = {
    "SeglogOffsetIndexRebuilt": (
        'seglog_log_dir_offset_index_rebuilds_total{job="seglog",instance="a:9551",dir="/data/a"}', 60),
    "SeglogClusterMetadataErrors": ('seglog_cluster_metadata_errors_total{job="seglog",instance="a:9551"}', 10),
    "SeglogClusterRecordHeldElsewhere": (
        'seglog_cluster_record_held_elsewhere_total{job="seglog",instance="a:9551"}', 10),
}
# Prometheus' default lookback: an instant selector sees the newest sample up to 5 minutes old,
# unless that newest one is a failed scrape's stale marker.
LOOKBACK_MIN = 5
STALE = "stale"


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed: scripts/test installs the Debian prometheus package"
    return path


def promtool(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([tool("promtool"), *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    assert len(exprs) >= 10
    return exprs


def test_promtool_checks_the_config_and_the_rules():
    promtool("check", "config", str(PROMETHEUS_DIR / "prometheus.yml"))
    promtool("check", "rules", str(PROMETHEUS_DIR / "rules.yml"))


def test_every_alert_has_a_unit_test_and_they_pass():
    # (No YAML parser among the pinned packages: the two keys are read by pattern.)
    alerts = set(re.findall(r"^\s*- alert: (\w+)$", (PROMETHEUS_DIR / "rules.yml").read_text(), re.M))
    tested = set(re.findall(r"^\s*alertname: (\w+)$", (PROMETHEUS_DIR / "rules_test.yml").read_text(), re.M))
    assert len(alerts) >= 10 and alerts == tested
    promtool("test", "rules", str(PROMETHEUS_DIR / "rules_test.yml"))


@st.composite
def flat_count_with_gaps(draw, window_min: int) -> list:
    """One entry a minute from minute 0: a counter flat at one value above 0 (None: not scraped;
    STALE: a failed scrape's marker, then None), each gap shorter than the window."""
    value = draw(st.integers(1, 5))
    entries = [value] * draw(st.integers(1, window_min))
    for _ in range(draw(st.integers(0, 3))):
        gap_min = draw(st.integers(1, window_min - 1))
        entries += [STALE if draw(st.booleans()) else None] + [None] * (gap_min - 1)
        entries += [value] * draw(st.integers(1, window_min))
    return entries


def _seen_at(entries: list, minute: int) -> bool:
    newest = [entry for entry in entries[max(0, minute - LOOKBACK_MIN):minute + 1] if entry is not None]
    return bool(newest) and newest[-1] != STALE


def _alert_firing_test(alert: str, series: str, entries: list, firing_at) -> dict:
    values = " ".join("_" if entry is None else str(entry) for entry in entries)
    query = f'count(ALERTS{{alertname="{alert}",alertstate="firing"}}) or vector(0)'
    return {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": series, "values": values}],
        "promql_expr_test": [
            {"expr": query, "eval_time": f"{minute}m",
             "exp_samples": [{"labels": "{}", "value": int(firing_at(minute))}]}
            for minute in range(len(entries) + LOOKBACK_MIN + 1)]}]}


@settings(max_examples=40)
@given(st.sampled_from(sorted(FIRST_SEEN_ALERTS)).flatmap(
    lambda alert: st.tuples(st.just(alert), flat_count_with_gaps(FIRST_SEEN_ALERTS[alert][1]))))
def test_a_flat_count_first_seen_above_0_fires_only_in_its_first_window_whatever_the_gaps(case):
    # The arm for a series first seen above 0 once looked one window back at one instant: a gap
    # or one failed scrape there made a count flat for days look new, and fired again.
    alert, entries = case
    series, window_min = FIRST_SEEN_ALERTS[alert]
    unit_test = _alert_firing_test(alert, series, entries,
                                   lambda minute: minute < window_min and _seen_at(entries, minute))
    with tempfile.TemporaryDirectory() as directory:
        shutil.copy(PROMETHEUS_DIR / "rules.yml", pathlib.Path(directory) / "rules.yml")
        path = pathlib.Path(directory) / "first_seen_test.yml"
        path.write_text(json.dumps(unit_test))  # JSON is YAML
        promtool("test", "rules", str(path))


def test_rules_name_only_declared_families():
    lines = (PROMETHEUS_DIR / "rules.yml").read_text().splitlines()
    text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    declared = {f"{name}{suffix}" for name in FAMILIES for suffix in ("", "_total", "_bucket", "_count", "_sum")}
    assert set(METRIC_NAME.findall(text)) <= declared


def test_every_dashboard_expression_parses(tmp_path):
    # Grafana's $__rate_interval is not PromQL; any range stands in for the parse.
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr_{number}", "expr": expr.replace("$__rate_interval", "5m")}
        for number, expr in enumerate(dashboard_expressions())]}]}
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    promtool("check", "rules", str(path))


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def seglog_with_traffic(tmp_path_factory):
    """One service with traffic of every kind the dashboard shows, for the module: its tests only
    read its /metrics (one process start and its traffic, not one per test)."""
    workdir = tmp_path_factory.mktemp("scraped")
    service = ServiceProcess(workdir, [workdir / "data"], []).start()
    try:
        _traffic(service.stub)
        yield service
    finally:
        service.stop()


def _traffic(stub) -> None:
    stub.CreateTopic(pb.CreateTopicRequest(topic="scraped", partitions=1, configs={"index.interval.bytes": "1"}),
                     timeout=10)
    for number in range(20):
        stub.Produce(pb.ProduceRequest(topic="scraped", partition=0, records=make_batch([b"%d" % number])),
                     timeout=10)
    stub.Fetch(pb.FetchRequest(topic="scraped", partition=0, offset=0), timeout=10)
    stub.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic="scraped", partition=0, timestamp_ms=0)]), timeout=10)
    # A compacted topic, for the cleaner's per-partition series (the dashboard's cleaner panels).
    stub.CreateTopic(pb.CreateTopicRequest(topic="compacted", partitions=1, configs={"cleanup.policy": "compact"}),
                     timeout=10)
    stub.Produce(pb.ProduceRequest(topic="compacted", partition=0, records=make_batch([b"v"], keys=[b"k"])),
                 timeout=10)
    # A consumer group with a member and a commit, for the group series (the dashboard's group row).
    joined = stub.Heartbeat(pb.HeartbeatRequest(group="watched", member_epoch=0, subscribed_topics=["scraped"]),
                            timeout=10)
    stub.CommitOffsets(pb.CommitOffsetsRequest(group="watched", member_id=joined.member_id,
                                               member_epoch=joined.member_epoch,
                                               offsets=[pb.OffsetToCommit(topic="scraped", partition=0, offset=10)]),
                       timeout=10)


@pytest.fixture
def seglog_in_a_cluster(start_service, tmp_path):
    """A cluster-mode seglog (a real etcd) with a topic: the Cluster row's series exist only with
    --etcd (a single process exports none, so no cluster alert can fire on one)."""
    etcd = EtcdServer.start(str(tmp_path))
    try:
        service = start_service(["--etcd", etcd.endpoint, "--instance-id", "scraped"])
        service.stub.CreateTopic(pb.CreateTopicRequest(topic="placed", partitions=2), timeout=10)
        yield service
    finally:
        etcd.stop()


def _exported(service) -> set[str]:
    with urllib.request.urlopen(f"http://{service.metrics_address}/metrics", timeout=10) as response:
        return {line.split("{")[0].split(" ")[0] for line in response.read().decode().splitlines()
                if line and not line.startswith("#")}


def test_dashboard_names_only_series_a_running_seglog_exports(seglog_with_traffic, seglog_in_a_cluster):
    single, clustered = _exported(seglog_with_traffic), _exported(seglog_in_a_cluster)
    assert not {name for name in single if name.startswith("seglog_cluster_")}
    named = {name for expr in dashboard_expressions() for name in METRIC_NAME.findall(expr)}
    cluster_named = {name for name in named if name.startswith("seglog_cluster_")}
    assert cluster_named and cluster_named <= clustered, sorted(cluster_named - clustered)
    assert named - cluster_named <= single, sorted(named - cluster_named - single)


def test_a_real_prometheus_scrapes_seglog_and_serves_a_series_back(seglog_with_traffic, tmp_path):
    # The loopback variant of the compose file: the running service, scraped every second.
    config = (PROMETHEUS_DIR / "prometheus.yml").read_text()
    assert config.count('"seglog:9551"') == 1
    config = config.replace('"seglog:9551"', f'"{seglog_with_traffic.metrics_address}"')
    config = config.replace("scrape_interval: 15s", "scrape_interval: 1s").replace(
        "scrape_timeout: 10s", "scrape_timeout: 1s")
    shutil.copy(PROMETHEUS_DIR / "rules.yml", tmp_path / "rules.yml")
    (tmp_path / "prometheus.yml").write_text(config)
    port = _free_port()
    log = open(tmp_path / "prometheus.log", "wb")
    process = subprocess.Popen(
        [tool("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=log)
    try:
        query = urllib.parse.urlencode({"query": 'seglog_log_end_offset{topic="scraped"}'})
        deadline = time.monotonic() + PROMETHEUS_TIMEOUT_S
        result: list = []
        while not result:
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()
            time.sleep(POLL_S)
            try:
                result = _get_json(f"http://127.0.0.1:{port}/api/v1/query?{query}")["data"]["result"]
            except OSError:
                continue  # not listening yet
        assert result[0]["metric"]["partition"] == "0"
        assert float(result[0]["value"][1]) == 20
        targets = _get_json(f"http://127.0.0.1:{port}/api/v1/targets")["data"]["activeTargets"]
        assert [target["health"] for target in targets] == ["up"]
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
