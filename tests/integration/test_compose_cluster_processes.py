"""docker-compose.cluster.yml run without Docker: the processes it names, with its commands and
environments, on loopback (the names etcd-N and seglog-X translated to 127.0.0.1 and a port each).

Three etcd members from the file's etcd command and environment form one etcd cluster; three
seglog instances from the file's environments (etcd endpoints, cluster name, instance id,
advertised address) register there and spread a topic over themselves; a real Prometheus with
deploy/prometheus/prometheus-cluster.yml (targets pointed at the three) scrapes every instance and
serves each one's seglog_cluster_owned_partitions back.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from seglog import Admin
from tests.integration.cluster.test_service_cluster import _until
from tests.support.etcd_server import EtcdServer, free_port, require_etcd
from tests.support.integration_helpers import ServiceProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
PROMETHEUS_S = 90.0
MEMBERS = ("etcd-0", "etcd-1", "etcd-2")
INSTANCES = ("seglog-a", "seglog-b", "seglog-c")


def compose_services() -> dict:
    result = subprocess.run([str(pathlib.Path(sys.executable).parent / "docker-compose"), "-f",
                             str(ROOT / "docker-compose.cluster.yml"), "config", "--format", "json"],
                            capture_output=True, text=True, cwd=ROOT, env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["services"]


class Translation:
    """compose's names and ports -> loopback ports of this run."""

    def __init__(self) -> None:
        self.client = {member: free_port() for member in MEMBERS}
        self.peer = {member: free_port() for member in MEMBERS}
        self.grpc = {name: free_port() for name in INSTANCES}

    def etcd_text(self, text: str, member: str) -> str:
        for other in MEMBERS:
            text = text.replace(f"http://{other}:2379", f"http://127.0.0.1:{self.client[other]}")
            text = text.replace(f"http://{other}:2380", f"http://127.0.0.1:{self.peer[other]}")
        text = text.replace("http://0.0.0.0:2379", f"http://127.0.0.1:{self.client[member]}")
        return text.replace("http://0.0.0.0:2380", f"http://127.0.0.1:{self.peer[member]}")

    def seglog_environment(self, environment: dict[str, str]) -> dict[str, str]:
        translated = {}
        for key, value in environment.items():
            if key in ("SEGLOG_LISTEN", "SEGLOG_METRICS_LISTEN", "SEGLOG_DATA_DIRS"):
                continue  # given as flags: loopback ports and a temporary directory
            for member in MEMBERS:
                value = value.replace(f"http://{member}:2379", f"http://127.0.0.1:{self.client[member]}")
            for name in INSTANCES:
                value = value.replace(f"{name}:", "127.0.0.1:") if key == "SEGLOG_ADVERTISE" else value
            translated[key] = value
        return translated


@pytest.fixture
def running(tmp_path):
    services, where = compose_services(), Translation()
    members: list[subprocess.Popen] = []
    instances: list[ServiceProcess] = []
    try:
        for member in MEMBERS:
            spec = services[member]
            env = {key: where.etcd_text(value, member) for key, value in spec["environment"].items()}
            env["ETCD_DATA_DIR"] = str(tmp_path / member)
            command = [require_etcd(), *(where.etcd_text(arg, member) for arg in spec["command"][1:])]
            log = open(tmp_path / f"{member}.log", "wb")
            members.append(subprocess.Popen(command, env={**os.environ, **env}, stdout=log, stderr=log))
            log.close()
        for member in MEMBERS:
            _until(EtcdServer(str(tmp_path), where.client[member]).healthy, what=f"{member} healthy")
        for name in INSTANCES:
            environment = where.seglog_environment(services[name]["environment"])
            port = where.grpc[name]
            assert environment["SEGLOG_ADVERTISE"].endswith(":" + services[name]["environment"]["SEGLOG_LISTEN"]
                                                            .rsplit(":", 1)[1])
            environment["SEGLOG_ADVERTISE"] = f"127.0.0.1:{port}"  # the published port, here a free one
            data = tmp_path / name / "data"
            data.mkdir(parents=True)
            instances.append(ServiceProcess(tmp_path / name, [data], ["--listen", f"127.0.0.1:{port}"],
                                            env=environment).start())
        yield services, instances
    finally:
        for instance in instances:  # all at once: each revokes its lease and drains in parallel
            instance.signal()
        for instance in instances:
            instance.stop()
        for process in members:
            process.terminate()
            process.wait(timeout=30)


def test_the_cluster_compose_file_forms_a_cluster_that_prometheus_scrapes_whole(running, tmp_path):
    services, instances = running
    with Admin(instances[0].address) as admin:  # one address: any instance bootstraps
        _until(lambda: {i.instance_id for i in admin.metadata().instances if i.alive} == {"a", "b", "c"},
               what="the three instances registered")
        admin.create_topic("composed", partitions=3)
        metadata = admin.metadata(["composed"])
    assert collections.Counter(metadata.owner_of("composed", p).owner_id for p in range(3)) == {
        "a": 1, "b": 1, "c": 1}

    # Prometheus, as the file runs it: deploy/prometheus mounted, the three targets pointed here.
    config = (PROMETHEUS_DIR / "prometheus-cluster.yml").read_text()
    targets = '["seglog-a:9551", "seglog-b:9551", "seglog-c:9551"]'
    assert config.count(targets) == 1
    config = config.replace(targets, json.dumps([instance.metrics_address for instance in instances]))
    config = config.replace("scrape_interval: 15s", "scrape_interval: 1s").replace(
        "scrape_timeout: 10s", "scrape_timeout: 1s")
    prometheus_dir = tmp_path / "prometheus"
    prometheus_dir.mkdir()
    (prometheus_dir / "prometheus-cluster.yml").write_text(config)
    shutil.copy(PROMETHEUS_DIR / "rules.yml", prometheus_dir / "rules.yml")
    port = free_port()
    command = [shutil.which("prometheus") or "prometheus"]
    for arg in services["prometheus"]["command"]:
        command.append(arg.replace("/etc/prometheus/", f"{prometheus_dir}/")
                       .replace("--storage.tsdb.path=/prometheus", f"--storage.tsdb.path={tmp_path / 'tsdb'}")
                       .replace("0.0.0.0:9090", f"127.0.0.1:{port}"))
    log = open(tmp_path / "prometheus.log", "wb")
    process = subprocess.Popen(command, stdout=log, stderr=log)
    log.close()
    try:
        query = urllib.parse.urlencode({"query": "seglog_cluster_owned_partitions"})
        deadline = time.monotonic() + PROMETHEUS_S
        result: list = []
        while len(result) < 3:
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()
            time.sleep(0.25)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{query}", timeout=10) as answer:
                    result = json.loads(answer.read())["data"]["result"]
            except OSError:
                continue  # not listening yet
        assert sorted(series["metric"]["instance"] for series in result) == sorted(
            instance.metrics_address for instance in instances)
        assert sum(float(series["value"][1]) for series in result) == 3
    finally:
        process.terminate()
        process.wait(timeout=30)
