"""The names the deployment files and the README use, checked against the one declaration of what
seglog exports (``FAMILIES`` in server/seglog_server/metrics/families.py), without a running service: the
README's metrics table lists every family, and the dashboard and the alert rules name only
declared series. (tests/integration/test_prometheus.py checks the same expressions with promtool
and against a running service's /metrics.)"""

from __future__ import annotations

import itertools
import json
import pathlib
import re

from seglog_server.metrics import FAMILIES

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "seglog.json"
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
METRIC_NAME = re.compile(r"\bseglog_[a-z0-9_]+")
# What Prometheus appends to a family's name: counters' _total, histograms' series.
SUFFIXES = ("", "_total", "_bucket", "_count", "_sum")
TABLE_HEADER = "| family | labels | what it shows |"


def expand_braces(text: str) -> list[str]:
    """``seglog_log_{start,end}_offset`` -> both names (shell-style, one or more groups)."""
    parts = re.split(r"\{([^{}]*)\}", text)
    choices = [[part] if number % 2 == 0 else part.split(",") for number, part in enumerate(parts)]
    return ["".join(combination) for combination in itertools.product(*choices)]


def readme_table_names() -> set[str]:
    """Every name in the first column of the README's metrics table."""
    lines = README.read_text().splitlines()
    assert TABLE_HEADER in lines, f"the README's metrics table ({TABLE_HEADER}) is missing"
    names: set[str] = set()
    for line in itertools.takewhile(lambda text: text.startswith("|"), lines[lines.index(TABLE_HEADER) + 2:]):
        first_column = line.split("|")[1]
        for quoted in re.findall(r"`([^`]+)`", first_column):
            names.update(expand_braces(quoted))
    return names


def declared_series() -> set[str]:
    return {f"{name}{suffix}" for name in FAMILIES for suffix in SUFFIXES}


def test_brace_expansion_reads_the_readme_shorthand():
    assert expand_braces("seglog_log_{start,end}_offset") == ["seglog_log_start_offset", "seglog_log_end_offset"]
    assert expand_braces("a_{b,c}_{d,e}") == ["a_b_d", "a_b_e", "a_c_d", "a_c_e"]
    assert expand_braces("seglog_partitions") == ["seglog_partitions"]


def test_the_readme_table_lists_every_declared_family():
    listed = readme_table_names()
    missing = [name for name in FAMILIES if not {name, f"{name}_total"} & listed]
    assert missing == [], f"add these families to the README's metrics table: {missing}"


def test_the_readme_table_names_only_declared_families():
    unknown = sorted(readme_table_names() - declared_series())
    assert unknown == [], f"the README's metrics table names series seglog does not declare: {unknown}"


def test_the_dashboard_names_only_declared_series():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    named = {name for expr in exprs for name in METRIC_NAME.findall(expr)}
    assert named, "the dashboard names no seglog series"
    assert sorted(named - declared_series()) == []


def test_the_dashboard_shows_the_health_panels():
    """Offline partitions, internal errors, descriptors and the cleaner each have a panel."""
    dashboard = json.loads(DASHBOARD.read_text())
    named = {name for panel in dashboard["panels"] for target in panel.get("targets", ())
             for name in METRIC_NAME.findall(target["expr"])}
    wanted = {"seglog_offline_partitions", "seglog_rpc_internal_errors_total", "seglog_descriptors_in_use",
              "seglog_descriptors_budget", "seglog_cleaner_dirty_ratio", "seglog_cleaner_bytes_reclaimed_total",
              "seglog_cleaner_last_run_timestamp_seconds"}
    assert sorted(wanted - named) == []


# Series of trouble an operator acts on: each has a dashboard panel and an alert over it. The
# malformed records are alerted on the gauge of those held now, not on the total's increase
# (a new instance counts the ones already in etcd before its first scrape).
ALERTED_SERIES = ("seglog_log_dir_offset_index_rebuilds_total", "seglog_cluster_malformed_records_held",
                  "seglog_cluster_metadata_errors_total", "seglog_cluster_record_check_failures_total")
# Shown on the dashboard, with no alert of their own (the inline refusals move with the rebuilds).
PANELLED_COUNTERS = ALERTED_SERIES + ("seglog_storage_calls_inline_refused_total", "seglog_cluster_record_checks_total",
                                      "seglog_cluster_malformed_records_total")


def test_the_integrity_and_cluster_record_counters_have_panels_and_alerts():
    dashboard = json.loads(DASHBOARD.read_text())
    named = {name for panel in dashboard["panels"] for target in panel.get("targets", ())
             for name in METRIC_NAME.findall(target["expr"])}
    assert sorted(set(PANELLED_COUNTERS) - named) == []
    rules = "\n".join(line for line in RULES.read_text().splitlines() if not line.lstrip().startswith("#"))
    assert sorted(set(ALERTED_SERIES) - set(METRIC_NAME.findall(rules))) == []


def test_a_panel_by_log_directory_keeps_the_instance():
    """Instances of one cluster use the same data path (docker-compose.cluster.yml: /var/lib/seglog
    in each), so a sum by dir alone would add their directories together."""
    dashboard = json.loads(DASHBOARD.read_text())
    merged = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())
              for by in re.findall(r"\bby\s*\(([^)]*)\)", target["expr"])
              if "dir" in {label.strip() for label in by.split(",")}
              and "instance" not in {label.strip() for label in by.split(",")}]
    assert merged == []


def test_panel_ids_are_unique_and_panels_do_not_overlap():
    panels = json.loads(DASHBOARD.read_text())["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], int] = {}
    for panel in panels:
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, (panel["id"], cells.get((x, y)))
                cells[x, y] = panel["id"]


def test_a_panel_titled_p99_plots_p99_only():
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        if "p99" not in panel["title"]:
            continue
        quantiles = {quantile for target in panel["targets"]
                     for quantile in re.findall(r"histogram_quantile\(\s*([0-9.]+)", target["expr"])}
        assert quantiles == {"0.99"}, (panel["title"], quantiles)


def test_recording_rules_are_named_level_metric_operations():
    """Prometheus' convention for a recorded series: the labels it keeps, the series it is computed
    from (one seglog declares), the operations, each part separated by a colon."""
    names = re.findall(r"^\s*- record: (\S+)$", RULES.read_text(), re.M)
    assert names, "rules.yml records no series"
    for name in names:
        level, metric, operations = name.split(":")
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", level) and re.fullmatch(r"[a-z0-9_]+", operations), name
        assert metric in declared_series(), name


def test_the_alert_rules_name_only_declared_series():
    text = "\n".join(line for line in RULES.read_text().splitlines() if not line.lstrip().startswith("#"))
    named = set(METRIC_NAME.findall(text))
    assert named and sorted(named - declared_series()) == []
