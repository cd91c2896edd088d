"""compose's Spark cluster as it ships: the spark-master, spark-worker and cleaner services' own
commands and environment (docker-compose.yml, deploy/cleaner.Dockerfile), each run as the
images' uid 10001 in its own hostname and mount namespace (tests/support/compose_processes.py), against a
seglog service run as 10001 too (the data volume is 10001's in every container).

Nothing here sets a Spark directory or address itself: what the image and compose give is what
runs. The driver-address test puts a client in another network namespace (as an executor in
another container is) and connects to the address the cleaner's Spark session advertises.
"""

from __future__ import annotations

import os
import pathlib
import random
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from tests.support.compose_processes import (
    ImageRoot,
    ImageService,
    Processes,
    SparkCluster,
    cleaner_command,
    compose_services,
    needs_root,
)
from seglog.records import RecordBatchBuilder
from seglog.v1 import log_service_pb2 as pb

pytestmark = [pytest.mark.integration, pytest.mark.slow, needs_root, pytest.mark.timeout(600)]

KEYS = 20
ROUND_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def image():
    root = ImageRoot()
    yield root
    root.remove()


@pytest.fixture(scope="module")
def services():
    return compose_services()


@pytest.fixture(scope="module")
def cluster(image, services):
    processes = Processes(image.path)
    try:
        yield SparkCluster(image, processes, services).start()
    finally:
        processes.stop()


@pytest.fixture(scope="module")
def seglog(image, services):
    service = ImageService(image, services).start()
    yield service
    service.stop()


def fill_compacted_topic(stub, topic: str, count: int = 400) -> dict[bytes, tuple[int, bytes]]:
    stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1, configs={
        "cleanup.policy": "compact", "segment.bytes": "4096", "file.delete.delay.ms": "0"}), timeout=30)
    rng = random.Random(topic)
    latest = {}
    for number in range(count):
        builder = RecordBatchBuilder()
        key, value = b"key-%02d" % rng.randrange(KEYS), b"value-%d-" % number + b"x" * 40
        builder.append(value, key=key)
        offset = stub.Produce(pb.ProduceRequest(topic=topic, partition=0, records=builder.build()),
                              timeout=30).base_offset
        latest[key] = (offset, value)
    return latest


def latest_records(stub, topic: str) -> dict[bytes, tuple[int, bytes]]:
    """Each key's last record (offset, value) as the service serves the partition now."""
    kept, offset = {}, 0
    while True:
        response = stub.Fetch(pb.FetchRequest(topic=topic, partition=0, offset=offset, max_wait_ms=0, decode=True),
                              timeout=30)
        if not response.decoded_records:
            return kept
        for record in response.decoded_records:
            kept[record.key] = (record.offset, record.value)
        offset = response.next_offset


def open_snapshots(stub, topic: str) -> list[str]:
    response = stub.ListCleanable(pb.ListCleanableRequest(topic=topic), timeout=30)
    return [snapshot for partition in response.partitions for snapshot in partition.open_snapshot_ids]


def test_the_cleaner_service_cleans_on_the_worker_as_the_image_user(image, services, cluster, seglog):
    latest = fill_compacted_topic(seglog.stub, "compose-round")
    env = image.environment(services["cleaner"].get("environment"))
    finished = subprocess.run(image.as_service("cleaner", cleaner_command(services, cluster.master_url, seglog.address, once=True)),
                              capture_output=True, text=True, env=env, timeout=ROUND_TIMEOUT_S, cwd=image.path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "1 cleaned" in finished.stdout, finished.stdout + finished.stderr
    # The executors ran on the worker, in the image's work folder, as 10001.
    work = pathlib.Path(image.environment()["SPARK_WORKER_DIR"])
    applications = list(work.iterdir())
    assert applications and all(path.stat().st_uid == 10001 for path in applications)
    assert latest_records(seglog.stub, "compose-round") == latest


# -- the driver's address, from another network namespace --------------------------------------

NETNS_PREFIX = "seglog-drv"

DRIVER = textwrap.dedent("""
    import sys
    from seglog_spark.session import build_session
    spark = build_session(sys.argv[1])
    conf = spark.sparkContext.getConf()
    print(conf.get("spark.driver.host"), conf.get("spark.driver.port"), flush=True)
    sys.stdin.read()
    spark.stop()
""")

PROBE = textwrap.dedent("""
    import socket, sys
    for host, port in zip(sys.argv[1::2], sys.argv[2::2]):
        try:
            socket.create_connection((host, int(port)), timeout=10).close()
            print(f"{host}:{port} reached")
        except OSError as error:
            print(f"{host}:{port} not reached: {error}")
""")


@pytest.fixture
def other_namespace():
    """A network namespace joined to this one by a veth pair on a /30 of TEST-NET-1 (192.0.2.0/24,
    never routed anywhere), where the name ``cleaner`` resolves to this side's address (as compose's
    DNS resolves it for a worker). Yields (namespace, this side's address)."""
    slot = os.getpid() % 60 + 1
    name, here, there = f"{NETNS_PREFIX}-{os.getpid()}", f"192.0.2.{4 * slot + 1}", f"192.0.2.{4 * slot + 2}"
    link = f"sgd{os.getpid() % 100000}"
    etc = pathlib.Path("/etc/netns") / name
    steps = [["ip", "netns", "add", name],
             ["ip", "link", "add", link + "a", "type", "veth", "peer", "name", link + "b"],
             ["ip", "link", "set", link + "b", "netns", name],
             ["ip", "addr", "add", f"{here}/30", "dev", link + "a"],
             ["ip", "link", "set", link + "a", "up"],
             ["ip", "netns", "exec", name, "ip", "addr", "add", f"{there}/30", "dev", link + "b"],
             ["ip", "netns", "exec", name, "ip", "link", "set", link + "b", "up"],
             ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"]]
    try:
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode != 0:
                pytest.skip(f"cannot make a network namespace here ({' '.join(step)}: {done.stderr.strip()})")
        etc.mkdir(parents=True)
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n{here} cleaner spark-master\n")
        yield name, here
    finally:
        subprocess.run(["ip", "link", "del", link + "a"], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        if etc.exists():
            (etc / "hosts").unlink(missing_ok=True)
            etc.rmdir()


def test_the_cleaners_driver_address_is_reachable_from_another_network_namespace(
        image, services, cluster, other_namespace):
    namespace, _ = other_namespace
    env = image.environment(services["cleaner"].get("environment"))
    # What the cleaner's spark-submitted job builds, in the cleaner's container.
    driver = subprocess.Popen(image.as_service("cleaner", [sys.executable, "-c", DRIVER, cluster.master_url]),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=image.path)
    try:
        line = driver.stdout.readline().split()
        assert len(line) == 2, driver.stderr.read()
        host, port = line
        probe = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", PROBE, host, port],
                               capture_output=True, text=True, timeout=60)
        assert probe.stdout.strip() == f"{host}:{port} reached", (line, probe.stdout, probe.stderr)
    finally:
        driver.stdin.close()
        try:
            driver.wait(timeout=60)
        except subprocess.TimeoutExpired:
            driver.kill()
            driver.wait()


# -- a cleaner killed mid-round ------------------------------------------------------------------

KILL_WAIT_S = 120  # a bound, not a speed: Spark's shutdown hooks stop the application first


def test_a_cleaner_killed_mid_round_leaves_no_spark_process_and_its_restart_drops_its_snapshot(
        image, services, cluster, seglog):
    topic = "compose-killed"
    latest = fill_compacted_topic(seglog.stub, topic)
    env = image.environment(services["cleaner"].get("environment"))
    command = image.as_service("cleaner", cleaner_command(services, cluster.master_url, seglog.address, once=True))
    with open(image.path / "killed-cleaner.log", "wb") as log:
        cleaner = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=image.path)
    try:
        # Mid-round: the snapshot is taken and the job's JVM runs.
        deadline = time.monotonic() + ROUND_TIMEOUT_S
        while not (open_snapshots(seglog.stub, topic) and spark_processes(cleaner.pid)):
            assert cleaner.poll() is None and time.monotonic() < deadline, (image.path / "killed-cleaner.log").read_text()
            time.sleep(0.2)
        [stale] = open_snapshots(seglog.stub, topic)
        children = psutil.Process(cleaner.pid).children(recursive=True)
        os.kill(cleaner.pid, signal.SIGKILL)
        cleaner.wait()
    finally:
        if cleaner.poll() is None:
            cleaner.kill()
            cleaner.wait()
    _, alive = psutil.wait_procs(children, timeout=KILL_WAIT_S)
    assert alive == [], [(process.pid, process.name()) for process in alive]
    # They ended with the cleaner, not by finishing a job nobody would commit (an orphaned
    # spark-submit cleans the snapshot to the end and writes its result last).
    snapshot = pathlib.Path(image.translate("/var/lib/seglog")) / ".seglog-snapshots" / stale
    assert snapshot.is_dir() and not (snapshot / "result.json").exists()

    finished = subprocess.run(command, capture_output=True, text=True, env=env, timeout=ROUND_TIMEOUT_S,
                              cwd=image.path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert f"dropped 1 snapshot(s) left open by an earlier cleaner: {stale}" in finished.stdout, finished.stdout
    assert "1 cleaned" in finished.stdout, finished.stdout + finished.stderr
    assert open_snapshots(seglog.stub, topic) == []
    assert latest_records(seglog.stub, topic) == latest


def spark_processes(pid: int) -> list[psutil.Process]:
    try:
        return [child for child in psutil.Process(pid).children(recursive=True) if child.name() == "java"]
    except psutil.NoSuchProcess:
        return []
