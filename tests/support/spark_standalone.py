"""A Spark standalone cluster on loopback (a Master and one Worker process from the installed
PySpark distribution, started with spark-class), for the tests that submit jobs to ``spark://``.

Starting the two JVMs is the costly part (tens of seconds on two busy shared cores), so the
integration suite starts one per session (``spark_standalone`` in tests/integration/conftest.py)
and every standalone test submits its own application to it; ``application_dirs()`` names the
applications whose executors the worker ran, so a test can tell its own job ran there.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time
from dataclasses import dataclass, field

from tests.support.integration_helpers import service_environment
from tests.support.s3_server import CREDENTIALS_ENV
from tests.support.ports import free_port

# A JVM start on a loaded 2-core machine can take minutes.
REGISTER_TIMEOUT_S = 400.0
STOP_TIMEOUT_S = 30.0


def spark_class() -> str:
    from pyspark.find_spark_home import _find_spark_home

    return os.path.join(_find_spark_home(), "bin", "spark-class")


@dataclass
class SparkStandalone:
    directory: pathlib.Path
    master_url: str = ""
    env: dict[str, str] = field(default_factory=dict)  # for the cluster and the jobs submitted to it
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def work_dir(self) -> pathlib.Path:
        """Where the worker runs executors: one directory per application."""
        return self.directory / "work"

    @classmethod
    def start(cls, directory: pathlib.Path) -> "SparkStandalone":
        cluster = cls(directory)
        try:
            cluster._launch()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _launch(self) -> None:
        # The worker holds the test object store's credentials in its environment, as compose's
        # spark-worker holds the store's: executors reading a snapshot from the store take them there.
        self.env = service_environment({
            **CREDENTIALS_ENV, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
            "SPARK_NO_DAEMONIZE": "1", "SPARK_LOG_DIR": str(self.directory), "SPARK_WORKER_DIR": str(self.work_dir)})
        port = free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        deadline = time.monotonic() + REGISTER_TIMEOUT_S
        self._spawn("master.log", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(port), "--webui-port", str(free_port())])
        self._wait_for("master.log", b"I have been elected leader", deadline)
        self._spawn("worker.log", ["org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                                   "--cores", "2", "--memory", "1g", "--webui-port", str(free_port()),
                                   "--work-dir", str(self.work_dir)])
        self._wait_for("worker.log", b"Successfully registered with master", deadline)

    def _spawn(self, log_name: str, arguments: list[str]) -> None:
        with open(self.directory / log_name, "wb") as log:
            self.processes.append(subprocess.Popen([spark_class(), *arguments], stdout=log,
                                                   stderr=subprocess.STDOUT, env=self.env))

    def _wait_for(self, log_name: str, text: bytes, deadline: float) -> None:
        path, process = self.directory / log_name, self.processes[-1]
        while text not in path.read_bytes():
            assert process.poll() is None, f"{log_name}: exited {process.returncode}\n{path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{text!r} not in {log_name}:\n{path.read_text()[-3000:]}"
            time.sleep(0.5)

    def application_dirs(self) -> set[str]:
        """The applications the worker has run executors for (its work dir's entries)."""
        return set(os.listdir(self.work_dir)) if self.work_dir.exists() else set()

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in reversed(self.processes):
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()
