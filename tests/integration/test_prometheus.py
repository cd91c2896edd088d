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
# promtool here is 2.42 (Debian's prometheus package): a range [t - d, t] and an instant
# selector's lookback include both ends. docker-compose runs Prometheus 3.5, whose ranges and
# lookback are left-open, (t - d, t]: there an alert held by max_over_time(...[W - 1m]) lasts one
# evaluation less at these tests' 1 min interval (15 s less at prometheus.yml's 15 s). The models
# below are promtool 2.42's.
# An instant selector sees the newest sample up to 5 minutes old (its oldest minute included),
# unless that newest one is a failed scrape's stale marker.
LOOKBACK_MIN = 5
STALE = "stale"
# Cases per promtool call: a call costs more to start than a case to run.
CASES_PER_CALL = 10


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


def rules_under_test(alerts) -> str:
    """rules.yml cut to the given alerts and the recording rules they read: promtool evaluates every
    rule at each step, and the others took about 60 % of a call's CPU time (10 cases of the
    property below: 6.2 s with the whole file, 2.4 s cut)."""
    text = (PROMETHEUS_DIR / "rules.yml").read_text()
    header, *blocks = re.split(r"(?m)^(?=      - (?:alert|record): )", text)
    alert_blocks = [block for block in blocks
                    if block.startswith("      - alert: ") and re.match(r"      - alert: (\w+)", block).group(1) in alerts]
    assert len(alert_blocks) == len(alerts)
    read = [block for block in blocks if block.startswith("      - record: ")
            and any(re.match(r"      - record: (\S+)", block).group(1) in alert for alert in alert_blocks)]
    return header + "".join(read + alert_blocks)


def _seen_at(entries: list, minute: int) -> bool:
    """Whether an instant selector sees the series at the minute: promtool 2.42's lookback, the
    5 minutes before and the minute itself (Prometheus 3.5 leaves the oldest minute out)."""
    newest = [entry for entry in entries[max(0, minute - LOOKBACK_MIN):minute + 1] if entry is not None]
    return bool(newest) and newest[-1] != STALE


def _run_unit_test(cases: list) -> None:
    """Cases of (alert, entries, firing_at) in one promtool call and one unit test, on the
    first-seen alerts' part of rules.yml: each case's series under an instance of its own (those
    rules keep every series apart), its ALERTS checked at every minute of the series and of the
    lookback after. (A unit test apiece cost twice the time: promtool builds a TSDB for each.)"""
    input_series, queries = [], []
    for number, (alert, entries, firing_at) in enumerate(cases):
        series, _ = FIRST_SEEN_ALERTS[alert]
        instance = f"case{number}:9551"
        assert series.count('instance="a:9551"') == 1
        input_series.append({"series": series.replace('instance="a:9551"', f'instance="{instance}"'),
                             "values": " ".join("_" if entry is None else str(entry) for entry in entries)})
        query = f'count(ALERTS{{alertname="{alert}",alertstate="firing",instance="{instance}"}}) or vector(0)'
        queries += [{"expr": query, "eval_time": f"{minute}m",
                     "exp_samples": [{"labels": "{}", "value": int(firing_at(minute))}]}
                    for minute in range(len(entries) + LOOKBACK_MIN + 1)]
    unit_test = {"interval": "1m", "input_series": input_series, "promql_expr_test": queries}
    with tempfile.TemporaryDirectory() as directory:
        (pathlib.Path(directory) / "rules.yml").write_text(rules_under_test(FIRST_SEEN_ALERTS))
        path = pathlib.Path(directory) / "first_seen_test.yml"
        path.write_text(json.dumps({"rule_files": ["rules.yml"], "evaluation_interval": "1m",
                                    "tests": [unit_test]}))  # JSON is YAML
        promtool("test", "rules", str(path))


def first_seen_alert_and(series_strategy):
    """(alert, entries): one of FIRST_SEEN_ALERTS and a series drawn for its window in minutes."""
    return st.sampled_from(sorted(FIRST_SEEN_ALERTS)).flatmap(
        lambda alert: st.tuples(st.just(alert), series_strategy(FIRST_SEEN_ALERTS[alert][1])))


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


@settings(max_examples=5, deadline=None)
@given(st.lists(first_seen_alert_and(flat_count_with_gaps), min_size=CASES_PER_CALL, max_size=CASES_PER_CALL))
def test_a_flat_count_first_seen_above_0_fires_only_in_its_first_window_whatever_the_gaps(cases):
    # The arm for a series first seen above 0 once looked one window back at one instant: a gap
    # or one failed scrape there made a count flat for days look new, and fired again.
    def case(alert: str, entries: list) -> tuple:
        window_min = FIRST_SEEN_ALERTS[alert][1]
        return alert, entries, lambda minute: minute < window_min and _seen_at(entries, minute)
    _run_unit_test([case(alert, entries) for alert, entries in cases])


@st.composite
def count_changed_after_a_gap(draw, window_min: int) -> tuple[list, int]:
    """(entries, minute of the change): a counter at one value (0 included) for up to two windows,
    then a gap of 0 to three windows (a failed scrape's marker first, or not), then another value
    above 0 (a rise, or a restart's count) for one to two windows."""
    before, after = draw(st.lists(st.integers(0, 5), min_size=2, max_size=2, unique=True).filter(lambda pair: pair[1]))
    entries = [before] * draw(st.integers(1, 2 * window_min))
    gap_min = draw(st.integers(0, 3 * window_min))
    if gap_min:
        entries += [STALE if draw(st.booleans()) else None] + [None] * (gap_min - 1)
    changed_at = len(entries)
    return entries + [after] * draw(st.integers(window_min, 2 * window_min)), changed_at


@settings(max_examples=5, deadline=None)
@given(st.lists(first_seen_alert_and(count_changed_after_a_gap), min_size=CASES_PER_CALL, max_size=CASES_PER_CALL))
def test_a_count_that_changes_after_a_gap_of_any_length_fires_for_its_window(cases):
    # A restart after a downtime between one and two windows, with a count before its first
    # scrape, once fired for less than the window (increase() until the count before the restart
    # left it) or not at all (a look for the series over the window before the last).
    def case(alert: str, entries: list, changed_at: int) -> tuple:
        window_min = FIRST_SEEN_ALERTS[alert][1]
        first_seen = entries[0] > 0
        # The window from the change, in promtool 2.42 (a minute less in Prometheus 3.5).
        return alert, entries, lambda minute: (
            changed_at <= minute < changed_at + window_min
            or (first_seen and minute < window_min and _seen_at(entries, minute)))
    _run_unit_test([case(alert, entries, changed_at) for alert, (entries, changed_at) in cases])


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
