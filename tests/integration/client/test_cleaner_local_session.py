"""``seglog cleaner run`` with an in-process Spark session (``--master local[1]``): the terminal
shows the round's figures and nothing of the JVM's, and a cleaner killed with SIGKILL mid-round
takes its driver JVM (and the JVM's Python workers) with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from tests.support.integration_helpers import service_environment
from seglog import Admin
from test_cleaner_cli import compacted, workload

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

ROUND_TIMEOUT_S = 240
KILL_WAIT_S = 60  # a bound, not a speed: the JVM exits when its stdin closes


def command(service, topic: str) -> list[str]:
    return [sys.executable, "-m", "seglog_cli", "cleaner", "run", "--once", "--server", service.address,
            "--master", "local[1]", "--topic", topic]


def test_a_spark_round_prints_its_figures_and_nothing_of_the_jvm(start_service, tmp_path):
    service = start_service()
    compacted(service.stub, "quiet")
    workload(service.stub, "quiet", seed=5)
    log_file = tmp_path / "spark.log"
    finished = subprocess.run(command(service, "quiet"), capture_output=True, text=True, timeout=ROUND_TIMEOUT_S,
                              env=service_environment({"SPARK_LOG_FILE": str(log_file)}))
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert finished.stderr == ""
    [line] = finished.stdout.splitlines()
    assert line.startswith("cleaner round 1: 1 cleaned, 0 refused, 0 failed; ")
    assert "Using incubator modules" in log_file.read_text()  # the JVM's own lines went to its log


def test_a_cleaner_killed_mid_round_takes_its_jvm_with_it(start_service, tmp_path):
    service = start_service()
    compacted(service.stub, "killed-local")
    workload(service.stub, "killed-local", seed=6)
    env = service_environment({"SPARK_LOG_FILE": str(tmp_path / "spark.log")})
    with open(tmp_path / "cleaner.log", "wb") as log:
        cleaner = subprocess.Popen(command(service, "killed-local"), stdout=log, stderr=subprocess.STDOUT, env=env)
    with Admin(service.address) as admin:
        try:
            deadline = time.monotonic() + ROUND_TIMEOUT_S
            while not (open_snapshots(admin, "killed-local") and java_children(cleaner.pid)):
                assert cleaner.poll() is None and time.monotonic() < deadline, (tmp_path / "cleaner.log").read_text()
                time.sleep(0.2)
            children = psutil.Process(cleaner.pid).children(recursive=True)
            os.kill(cleaner.pid, signal.SIGKILL)
            cleaner.wait()
        finally:
            if cleaner.poll() is None:
                cleaner.kill()
                cleaner.wait()
    _, alive = psutil.wait_procs(children, timeout=KILL_WAIT_S)
    assert alive == [], [(process.pid, process.name()) for process in alive]


def open_snapshots(admin: Admin, topic: str) -> list[str]:
    return [snapshot for partition in admin.list_cleanable(topic) for snapshot in partition.open_snapshot_ids]


def java_children(pid: int) -> list[psutil.Process]:
    try:
        return [child for child in psutil.Process(pid).children(recursive=True) if child.name() == "java"]
    except psutil.NoSuchProcess:
        return []
