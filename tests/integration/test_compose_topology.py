"""The docker-compose topology, run without Docker: the processes docker-compose.yml names, with
the commands it gives them, on loopback.

No container runtime runs on these machines, so this starts what the compose file would start,
reading the commands from the file itself (through a real Compose implementation's normalised
config) and running the images' processes as the images' uid 10001 with the images' environment
(tests/support/compose_processes.py): a seglog service, a real Prometheus with deploy/prometheus mounted (its scrape target
pointed at the service), a standalone Spark master and worker from the installed PySpark
distribution, and the cleaner's own command with ``--once`` instead of ``--interval``. It checks a
cleaned segment (superseded records gone, the latest value of each key kept at its offset) and a
cleaner series read back through Prometheus.

Both topologies' tests use one Spark master (compose's spark-master is the same in both; its JVM
start is the module's to share); each runs its own topology's worker, service and cleaner in an
image root of its own (the worker beside the data volume it mounts, or without one).
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import shlex
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
from tests.support.compose_processes import (
    ImageRoot,
    ImageService,
    Processes,
    SparkCluster,
    cleaner_command,
    compose_services,
    free_port,
    needs_root,
)

from seglog.records import RecordBatchBuilder, iter_batches
from seglog.v1 import log_service_pb2 as pb
from tests.support.ports import free_port as _free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOPIC = "topology"
KEYS = 30
# JVMs (master, worker, driver, executor) start slowly on two shared cores.
SPARK_START_S = 400
PROMETHEUS_S = 90


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _read_all(stub) -> list[tuple[int, bytes | None, bytes | None]]:
    records, offset = [], 0
    while True:
        response = stub.Fetch(pb.FetchRequest(topic=TOPIC, partition=0, offset=offset, max_wait_ms=0), timeout=30)
        if not response.records:
            return records
        for batch in iter_batches(response.records):
            records += [(r.offset, r.key, r.value) for r in batch.records() if r.offset >= offset]
        offset = response.next_offset


def _fill_compacted_topic(stub, *, seed: int, count: int) -> dict[bytes, tuple[int, bytes]]:
    """TOPIC made compacted with small segments and ``count`` keyed records produced one by one;
    returns each key's latest (offset, value)."""
    stub.CreateTopic(pb.CreateTopicRequest(topic=TOPIC, partitions=1, configs={
        "cleanup.policy": "compact", "segment.bytes": "4096", "file.delete.delay.ms": "0"}), timeout=30)
    rng = random.Random(seed)
    latest: dict[bytes, tuple[int, bytes]] = {}
    for number in range(count):
        builder = RecordBatchBuilder()
        key, value = b"key-%02d" % rng.randrange(KEYS), b"value-%d-" % number + b"x" * 40
        builder.append(value, key=key)
        offset = stub.Produce(pb.ProduceRequest(topic=TOPIC, partition=0, records=builder.build()),
                              timeout=30).base_offset
        latest[key] = (offset, value)
    return latest


@pytest.fixture(scope="module")
def spark_master():
    """compose's spark-master (the same in docker-compose.yml and with docker-compose.store.yml),
    as uid 10001 in an image root of its own; each test registers its own topology's worker."""
    services = compose_services()
    assert compose_services(*STORE_FILES, env=STORE_KEYS)["spark-master"] == services["spark-master"]
    image = ImageRoot()
    processes = Processes(image.path)
    try:
        yield SparkCluster(image, processes, services).start_master()
    finally:
        processes.stop()
        image.remove()


@pytest.mark.timeout(1500)
@needs_root
def test_the_compose_topology_cleans_a_topic_and_prometheus_sees_the_cleaner(tmp_path, spark_master):
    services = compose_services()
    image = ImageRoot()
    processes = Processes(image.path)
    service = ImageService(image, services).start()
    try:
        _clean_and_scrape(tmp_path, services, image, processes, service, spark_master)
    finally:
        processes.stop()
        service.stop()
        image.remove()


def _clean_and_scrape(tmp_path, services, image, processes, service, spark_master) -> None:
    stub = service.stub
    latest = _fill_compacted_topic(stub, seed=12, count=600)
    before = _read_all(stub)

    # Prometheus, as compose runs it: deploy/prometheus mounted, the target pointed here.
    config = (ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text()
    config = config.replace('"seglog:9551"', f'"{service.metrics_address}"').replace(
        "scrape_interval: 15s", "scrape_interval: 1s").replace("scrape_timeout: 10s", "scrape_timeout: 1s")
    prometheus_dir = tmp_path / "prometheus"
    prometheus_dir.mkdir()
    (prometheus_dir / "prometheus.yml").write_text(config)
    shutil.copy(ROOT / "deploy" / "prometheus" / "rules.yml", prometheus_dir / "rules.yml")
    prometheus_port = _free_port()
    mounts = {"--config.file=/etc/prometheus/": f"--config.file={prometheus_dir}/",
              "--storage.tsdb.path=/prometheus": f"--storage.tsdb.path={tmp_path / 'tsdb'}",
              "--web.listen-address=0.0.0.0:9090": f"--web.listen-address=127.0.0.1:{prometheus_port}"}
    command = [shutil.which("prometheus") or "prometheus"]
    for arg in services["prometheus"]["command"]:
        for old, new in mounts.items():
            arg = arg.replace(old, new)
        command.append(arg)
    assert str(prometheus_dir) in " ".join(command) and str(prometheus_port) in " ".join(command)
    processes.start("prometheus", command, dict(os.environ))

    # The Spark master, worker and cleaner: compose's commands and the image's environment,
    # as the images' uid 10001 (tests/support/compose_processes.py); nothing set here that the image lacks.
    cluster = spark_master.start_worker(image, processes, services)
    # The cleaner: compose's command, one round instead of a schedule.
    finished = subprocess.run(
        image.as_service("cleaner", cleaner_command(services, cluster.master_url, service.address, once=True)),
        capture_output=True, text=True, env=image.environment(services["cleaner"].get("environment")),
        timeout=SPARK_START_S + 300, cwd=image.path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "1 cleaned" in finished.stdout, finished.stdout + finished.stderr

    after = _read_all(stub)
    assert len(after) < len(before)
    kept = {key: (offset, value) for offset, key, value in after}
    assert kept == latest  # each key's latest record, at its own offset
    assert [record for record in before if record in after] == after  # offsets and bytes kept

    # Prometheus scraped the cleaner's figures from the service.
    query = urllib.parse.urlencode({"query": "seglog_cleaner_bytes_reclaimed_total"})
    deadline = time.monotonic() + PROMETHEUS_S
    reclaimed = 0.0
    while reclaimed <= 0:
        assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()
        time.sleep(0.5)
        try:
            result = _get_json(f"http://127.0.0.1:{prometheus_port}/api/v1/query?{query}")["data"]["result"]
        except OSError:
            continue
        reclaimed = float(result[0]["value"][1]) if result else 0.0
    assert reclaimed > 0


# -- docker-compose.store.yml: the cleaner and the workers without the data volume ----------------

STORE_FILES = ("docker-compose.yml", "docker-compose.store.yml")
STORE_KEYS = {"S3_ACCESS_KEY": "topologyaccess", "S3_SECRET_KEY": "topologysecret"}


def _s3_command(services: dict, data_dir: pathlib.Path, s3_port: int) -> list[str]:
    """compose's s3 command (its identity file written from the environment, then weed mini),
    with this machine's weed, a data directory here and free ports for every weed listener."""
    from tests.support.s3_server import _PORT_FLAGS, require_weed

    entrypoint, script = services["s3"]["entrypoint"], services["s3"]["command"][0]
    assert entrypoint == ["/bin/sh", "-c"] and "exec weed mini" in script, (entrypoint, script)
    ports = " ".join(f"-{flag}={free_port()}" for flag in _PORT_FLAGS)
    script = (script.replace("$$", "$").replace("exec weed ", f"exec {shlex.quote(require_weed())} ")
              .replace("-dir=/data", f"-dir={shlex.quote(str(data_dir))}")
              .replace("/tmp/s3.json", shlex.quote(str(data_dir / "s3.json")))
              .replace("-ip.bind=0.0.0.0", "-ip=127.0.0.1 -ip.bind=127.0.0.1")
              .replace("-s3.port=8333", f"-s3.port={s3_port} {ports}"))
    return [*entrypoint, script]


@pytest.mark.timeout(1500)
@needs_root
def test_the_store_topology_cleans_through_the_object_store(tmp_path, spark_master):
    """docker-compose.store.yml as its processes: compose's s3 command (a real SeaweedFS with the
    keys as its only identity), its bucket made by s3-init's command, the service exporting to it,
    a Spark master and a worker with no data volume, and the cleaner's --snapshot-store command."""
    services = compose_services(*STORE_FILES, env=STORE_KEYS)
    assert services["cleaner"].get("volumes", []) == [] and services["spark-worker"].get("volumes", []) == []
    s3_port = _free_port()
    endpoint = f"http://s3:{s3_port}"
    for name in ("s3", "s3-init", "seglog", "spark-worker", "cleaner"):
        assert services[name]["environment"]["AWS_ACCESS_KEY_ID"] == STORE_KEYS["S3_ACCESS_KEY"], name
    services["seglog"]["environment"]["SEGLOG_S3_ENDPOINT"] = endpoint
    image = ImageRoot()
    processes = Processes(image.path)
    s3_dir = tmp_path / "s3-data"
    s3_dir.mkdir()
    try:
        process, log = processes.start("s3", _s3_command(services, s3_dir, s3_port),
                                       {**os.environ, **services["s3"]["environment"]})
        deadline = time.monotonic() + PROMETHEUS_S
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{s3_port}/healthz", timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None, log.read_text()
                time.sleep(0.5)
        init = [word.replace("http://s3:8333", f"http://127.0.0.1:{s3_port}") for word in services["s3-init"]["command"]]
        made = subprocess.run([sys.executable, *init[1:]], capture_output=True, text=True, timeout=120,
                              env={**os.environ, **services["s3-init"]["environment"]})
        assert made.returncode == 0, made.stderr
        service = ImageService(image, services).start()
        try:
            _clean_through_the_store(services, image, processes, service, endpoint, spark_master)
        finally:
            service.stop()
    finally:
        processes.stop()
        image.remove()


def _clean_through_the_store(services, image, processes, service, endpoint, spark_master) -> None:
    stub = service.stub
    latest = _fill_compacted_topic(stub, seed=13, count=400)
    before = _read_all(stub)
    cluster = spark_master.start_worker(image, processes, services)
    command = cleaner_command(services, cluster.master_url, service.address, once=True)
    command = [word.replace("http://s3:8333", endpoint) for word in command]
    assert "--snapshot-store" in command
    finished = subprocess.run(
        image.as_service("cleaner", command), capture_output=True, text=True,
        env=image.environment(services["cleaner"].get("environment")), timeout=SPARK_START_S + 300, cwd=image.path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "1 cleaned" in finished.stdout, finished.stdout + finished.stderr
    after = _read_all(stub)
    assert len(after) < len(before)
    assert {key: (offset, value) for offset, key, value in after} == latest
    assert [record for record in before if record in after] == after
