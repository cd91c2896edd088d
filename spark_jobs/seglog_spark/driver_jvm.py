"""The in-process SparkSession's driver JVM, started by us instead of by pyspark.

pyspark starts its JVM (``spark-submit pyspark-shell``) itself, with the terminal as its
stdout/stderr and a Python ``preexec_fn``; we start the same command with three differences:

- its stdout and stderr go to a log file (``log_path``): the JVM's own lines ("Using incubator
  modules", log4j's start-up chatter) never reach the cleaner's terminal;
- no Python code runs between fork and exec (no ``preexec_fn``), so a JVM can be started safely
  after gRPC's threads run, that is, only once a round knows it has something to clean; a new
  session (``start_new_session``) keeps the terminal's Ctrl-C away from it, as pyspark's
  SIG_IGN did;
- it still exits when this process dies, however it dies: its stdin is a pipe from us, and the
  JVM's gateway server exits on EOF (pyspark's own mechanism; the kernel closes the pipe when
  this process is killed, even with SIGKILL).

pyspark then connects to it as it connects to a JVM spark-submit started
(PYSPARK_GATEWAY_PORT/SECRET), so SparkSession.builder works unchanged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from .errors import CleanerError

__all__ = ["DriverJvm", "DriverStartError", "start_driver_jvm"]

# How often to look for the JVM's connection file while it starts (pyspark polls as often).
_POLL_S = 0.1
# How long a JVM whose stdin closed gets to exit before it is killed.
_EXIT_WAIT_S = 30.0


class DriverStartError(CleanerError):
    """The driver JVM exited before it was ready; its log says why."""


class DriverJvm:
    """A running driver JVM: the process, and the gateway's port and secret."""

    def __init__(self, process: subprocess.Popen, port: int, secret: str, log_path: str) -> None:
        self.process = process
        self.port = port
        self.secret = secret
        self.log_path = log_path

    @contextmanager
    def connected(self) -> Iterator[None]:
        """Within: pyspark's launch_gateway connects to this JVM instead of starting one."""
        saved = {name: os.environ.get(name) for name in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")}
        os.environ["PYSPARK_GATEWAY_PORT"] = str(self.port)
        os.environ["PYSPARK_GATEWAY_SECRET"] = self.secret
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def close(self) -> None:
        """Close its stdin (the JVM exits on EOF) and wait for it."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_driver_jvm(conf: Mapping[str, str], log_path: str) -> DriverJvm:
    """Start ``spark-submit pyspark-shell`` with `conf`, its output appended to `log_path`."""
    from pyspark.find_spark_home import _find_spark_home
    from pyspark.serializers import UTF8Deserializer, read_int

    command = [os.path.join(_find_spark_home(), "bin", "spark-submit")]
    for name, value in conf.items():
        command += ["--conf", f"{name}={value}"]
    command.append("pyspark-shell")
    info_dir = tempfile.mkdtemp(prefix="seglog-gateway-")
    info_path = os.path.join(info_dir, "connection")
    env = {**os.environ, "SPARK_CONNECT_MODE": "0", "_PYSPARK_DRIVER_CONN_INFO_PATH": info_path}
    env.pop("PYSPARK_GATEWAY_PORT", None)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
        with open(log_path, "ab") as log:
            process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=log, stderr=log, env=env,
                                       start_new_session=True)
        # The JVM writes the file elsewhere and renames it: once it exists, it is whole.
        while process.poll() is None and not os.path.isfile(info_path):
            time.sleep(_POLL_S)
        if not os.path.isfile(info_path):
            raise DriverStartError(f"the Spark driver JVM exited with status {process.returncode} before it was "
                                   f"ready; its log: {log_path}")
        with open(info_path, "rb") as info:
            port = read_int(info)
            secret = UTF8Deserializer().loads(info)
    finally:
        shutil.rmtree(info_dir, ignore_errors=True)
    return DriverJvm(process, port, secret, log_path)
