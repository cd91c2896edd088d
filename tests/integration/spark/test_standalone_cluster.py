"""One cleaning through a real Spark standalone cluster: a Master and a Worker started from the
installed PySpark distribution (spark-class) on loopback, the job submitted with
``python -m seglog_spark --master spark://...``; the output must be the baseline's bytes."""

import filecmp
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from seglog_spark import cleaner_local

from tests.support.snapshot_workloads import BASE_TIME_MS, make_snapshot

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1200)]

REGISTER_TIMEOUT_S = 240  # a JVM start on a loaded 2-core machine can take minutes
JOB_TIMEOUT_S = 600


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_class() -> str:
    from pyspark.find_spark_home import _find_spark_home

    return os.path.join(_find_spark_home(), "bin", "spark-class")


def wait_for(path, text, process, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.path.exists(path) and text in open(path, errors="replace").read():
            return
        if process.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not seen in {path}: {open(path, errors='replace').read()[-2000:]}")


@pytest.fixture
def standalone_cluster(tmp_path):
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_NO_DAEMONIZE": "1", "SPARK_LOG_DIR": str(tmp_path), "_JAVA_OPTIONS": "-XX:-UsePerfData"}
    master_port, worker_port = free_port(), free_port()
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    processes = []
    try:
        with open(master_log, "w") as out:
            processes.append(subprocess.Popen(
                [spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(master_port), "--webui-port", str(free_port())],
                stdout=out, stderr=subprocess.STDOUT, env=env))
        wait_for(master_log, "I have been elected leader", processes[0], REGISTER_TIMEOUT_S)
        url = f"spark://127.0.0.1:{master_port}"
        with open(worker_log, "w") as out:
            processes.append(subprocess.Popen(
                [spark_class(), "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                 "--port", str(worker_port), "--webui-port", str(free_port()), "--cores", "2", "--memory", "1g",
                 "--work-dir", str(tmp_path / "work")],
                stdout=out, stderr=subprocess.STDOUT, env=env))
        wait_for(worker_log, "Successfully registered with master", processes[1], REGISTER_TIMEOUT_S)
        yield url, env
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in reversed(processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_one_cleaning_runs_on_a_standalone_master_and_worker(standalone_cluster, tmp_path):
    url, env = standalone_cluster
    ops = [(b"k%d" % (i % 37), b"value-%d" % i if i % 11 else None) for i in range(2000)]
    make_snapshot(str(tmp_path / "cluster"), ops, batch_size=10, segment_batches=50, cleaning_time_ms=BASE_TIME_MS + 10)
    shutil.copytree(tmp_path / "cluster", tmp_path / "local")
    finished = subprocess.run(
        [sys.executable, "-m", "seglog_spark", str(tmp_path / "cluster"), "--master", url, "--map-bytes", "65536",
         "--range-bytes", "8192"],
        capture_output=True, text=True, env=env, timeout=JOB_TIMEOUT_S)
    (tmp_path / "job.stderr").write_text(finished.stderr)
    assert finished.returncode == 0, finished.stderr[-3000:]
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    assert result["stats"]["engine"] == f"spark {url}"
    assert result == json.load(open(tmp_path / "cluster" / "result.json"))
    cleaner_local.clean_snapshot(str(tmp_path / "local"), map_bytes=65536)
    names = sorted(os.listdir(tmp_path / "local" / "cleaned"))
    assert names == sorted(os.listdir(tmp_path / "cluster" / "cleaned")) and names
    for name in names:
        assert filecmp.cmp(tmp_path / "local" / "cleaned" / name, tmp_path / "cluster" / "cleaned" / name, shallow=False)
    # The executors ran on the worker, not in the driver.
    assert any((tmp_path / "work").iterdir())
