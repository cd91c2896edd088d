"""docker-compose.cluster.yml, three seglog instances on a three-member etcd with Prometheus
scraping all three, checked without a container runtime: a real Compose implementation validates
and normalises it, and the normalised topology must hold together (every member knows the
others, every instance knows every member, ids and advertised addresses unique and reachable,
Prometheus's targets the instances' metrics ports, the etcd image the version the tests run).
tests/integration/test_compose_cluster_processes.py runs the same commands on loopback."""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
COMPOSE = ROOT / "docker-compose.cluster.yml"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus-cluster.yml"
MEMBERS = ("etcd-0", "etcd-1", "etcd-2")
INSTANCES = ("seglog-a", "seglog-b", "seglog-c")


def _compose(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "docker-compose"), "-f", str(COMPOSE), *args], capture_output=True,
                          text=True, cwd=ROOT, env={"PATH": "/usr/bin:/bin", **(env or {})}, timeout=60)


@pytest.fixture(scope="module")
def services() -> dict:
    result = _compose("config", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr
    return json.loads(result.stdout)["services"]


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_topology_is_three_etcd_members_three_instances_prometheus_and_grafana(services):
    assert set(services) == {*MEMBERS, *INSTANCES, "prometheus", "grafana"}


def test_every_etcd_member_is_one_of_the_same_three(services):
    peers = {f"{member}=http://{member}:2380" for member in MEMBERS}
    for member in MEMBERS:
        service = services[member]
        environment, command = service["environment"], service["command"]
        assert set(environment["ETCD_INITIAL_CLUSTER"].split(",")) == peers
        assert _flag(command, "--name") == member == service["hostname"]
        assert _flag(command, "--initial-advertise-peer-urls") == f"http://{member}:2380"
        assert _flag(command, "--advertise-client-urls") == f"http://{member}:2379"
        assert {volume["target"] for volume in service["volumes"]} == {environment["ETCD_DATA_DIR"]}
        assert "healthcheck" in service
    assert len({services[member]["volumes"][0]["source"] for member in MEMBERS}) == 3


def test_the_etcd_image_is_the_version_the_tests_run(services):
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.skip("etcd is not installed (scripts/test installs Debian's etcd-server as root)")
    version = re.search(r"etcd Version: ([0-9.]+)", subprocess.run([etcd, "--version"], capture_output=True,
                                                                   text=True, timeout=30).stdout)
    assert version is not None
    assert {services[member]["image"] for member in MEMBERS} == {f"quay.io/coreos/etcd:v{version.group(1)}"}


def test_every_instance_knows_every_member_and_has_its_own_id_address_and_data(services):
    endpoints = {f"http://{member}:2379" for member in MEMBERS}
    ids, volumes = set(), set()
    for name in INSTANCES:
        service, environment = services[name], services[name]["environment"]
        assert set(environment["SEGLOG_ETCD"].split(",")) == endpoints
        port = environment["SEGLOG_LISTEN"].rsplit(":", 1)[1]
        # Advertised as its own name and listening port: what clients and the other instances dial.
        assert environment["SEGLOG_ADVERTISE"] == f"{service['hostname']}:{port}" == f"{name}:{port}"
        # Published on the same port, so a host that resolves the name reaches it there.
        assert [(p["target"], p["published"], p["host_ip"]) for p in service["ports"]] == [
            (int(port), port, "127.0.0.1")]
        assert _flag(service["healthcheck"]["test"], "--server") == f"127.0.0.1:{port}"
        ids.add(environment["SEGLOG_INSTANCE_ID"])
        (volume,) = service["volumes"]
        assert volume["target"] == environment["SEGLOG_DATA_DIRS"]
        volumes.add(volume["source"])
        assert {service["depends_on"][member]["condition"] for member in MEMBERS} == {"service_healthy"}
    assert len(ids) == len(volumes) == 3
    assert len({services[name]["environment"]["SEGLOG_ADVERTISE"] for name in INSTANCES}) == 3


def test_every_seglog_setting_the_file_sets_is_real(services):
    from seglog_server.config import _SETTINGS

    known = {setting.env for setting in _SETTINGS}
    for name in INSTANCES:
        unknown = [key for key in services[name]["environment"] if key.startswith("SEGLOG_") and key not in known]
        assert unknown == [], (name, unknown)


def test_prometheus_scrapes_the_three_instances_with_the_rules(services):
    command = services["prometheus"]["command"]
    assert "--config.file=/etc/prometheus/prometheus-cluster.yml" in command
    assert {volume["target"]: volume["source"] for volume in services["prometheus"]["volumes"]}[
        "/etc/prometheus"] == str(ROOT / "deploy" / "prometheus")
    text = PROMETHEUS_CONFIG.read_text()
    targets = set(json.loads(re.search(r"targets: (\[.*\])", text).group(1)))
    assert targets == {f"{name}:{services[name]['environment']['SEGLOG_METRICS_LISTEN'].rsplit(':', 1)[1]}"
                       for name in INSTANCES}
    assert "rules.yml" in text
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (scripts/test installs Debian's prometheus)")
    result = subprocess.run([promtool, "check", "config", str(PROMETHEUS_CONFIG)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_published_port_binds_to_loopback_by_default(services):
    for name, service in services.items():
        for port in service.get("ports", ()):
            assert port["host_ip"] == "127.0.0.1", name
