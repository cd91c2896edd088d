"""A SparkSession set up for seglog's cleaner on this kind of machine
(reference/platform-notes.md section 2):
- the Python workers run this interpreter (PYSPARK_PYTHON), not whatever ``python3`` is on
  PATH, so they import seglog and crc32c from the same environment;
- the driver's address (``driver_address``): a local master, or one on a loopback address, runs
  every executor on this machine, so the driver binds to loopback (SPARK_LOCAL_IP, default
  127.0.0.1: the hostname may resolve to an address nothing listens on). A cluster master's
  executors run elsewhere (other containers, other machines) and connect back to the driver, so
  it listens on every interface and advertises a name they can reach: SPARK_DRIVER_HOST, else
  SPARK_LOCAL_HOSTNAME (what compose sets to the cleaner's service name), else a non-loopback
  SPARK_LOCAL_IP, else this machine's hostname. Never 127.0.0.1: that is the executor's own
  loopback;
- the JVM is ours (driver_jvm.py): its output, log4j at WARN (``log4j2.properties`` beside this
  module) and the JVM's own lines, goes to a log file (SPARK_LOG_FILE, default
  $TMPDIR/seglog-cleaner-spark.log), nothing to the terminal, and it exits when this process
  dies; no UI port, no console progress bars; scratch files under `tmp_dir` when given.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import tempfile
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "DriverAddress",
    "build_session",
    "configure_environment",
    "driver_address",
    "driver_java_options",
    "driver_log_file",
    "is_local_master",
    "session_conf",
]

DRIVER_MEMORY = "1g"  # the driver only plans and collects bitmaps; the work is in Python workers
LOOPBACK = "127.0.0.1"
EVERY_INTERFACE = "0.0.0.0"
LOG4J_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
# Where the in-process driver JVM's output goes; SPARK_LOG_FILE moves it.
LOG_FILE_DEFAULT = os.path.join(tempfile.gettempdir(), "seglog-cleaner-spark.log")
# The JVM this process started for its sessions (pyspark reuses one gateway across sessions); held
# here because its stdin pipe is what keeps it alive.
_driver_jvm = None


@dataclass(frozen=True)
class DriverAddress:
    bind: str  # spark.driver.bindAddress: the interface the driver's ports listen on
    host: str  # spark.driver.host: the name or address executors connect back to


def is_local_master(master: str) -> bool:
    """True when every executor runs on this machine: ``local[...]``, or a master on loopback."""
    if master.startswith("local"):
        return True
    host = urllib.parse.urlsplit(master.split(",")[0]).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def driver_address(master: str, environ: Mapping[str, str] = os.environ) -> DriverAddress:
    """Where the driver listens and what it advertises, for `master` (see the module docstring)."""
    local_ip = environ.get("SPARK_LOCAL_IP", "")
    if is_local_master(master):
        address = local_ip or LOOPBACK
        return DriverAddress(bind=address, host=address)
    for candidate in (environ.get("SPARK_DRIVER_HOST", ""), environ.get("SPARK_LOCAL_HOSTNAME", ""),
                      "" if _is_loopback(local_ip) else local_ip):
        if candidate:
            return DriverAddress(bind=EVERY_INTERFACE, host=candidate)
    return DriverAddress(bind=EVERY_INTERFACE, host=socket.gethostname())


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def configure_environment(master: str = "local[*]") -> None:
    """Environment Spark reads when its JVM and workers start; set before the first session."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if is_local_master(master):
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)


def driver_log_file() -> str:
    return os.environ.get("SPARK_LOG_FILE") or LOG_FILE_DEFAULT


def driver_java_options(tmp_dir: str | None = None) -> str:
    """The driver JVM's options: our log4j2 configuration (WARN and above) and no perf-data
    file in /tmp."""
    options = f"-XX:-UsePerfData -Dlog4j.configurationFile=file:{LOG4J_CONFIG}"
    if tmp_dir is not None:
        options += f" -Djava.io.tmpdir={tmp_dir}"
    return options


def session_conf(master: str, app_name: str, tmp_dir: str | None = None) -> dict[str, str]:
    """The session's Spark configuration (also the driver JVM's command line)."""
    address = driver_address(master)
    conf = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": DRIVER_MEMORY,
        "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
        "spark.driver.bindAddress": address.bind,
        "spark.driver.host": address.host,
        # The job passes its own partition counts everywhere; this only bounds stray shuffles.
        "spark.sql.shuffle.partitions": "8",
        "spark.driver.extraJavaOptions": driver_java_options(tmp_dir),
    }
    if tmp_dir is not None:
        conf["spark.local.dir"] = tmp_dir
    return conf


def build_session(master: str = "local[*]", *, app_name: str = "seglog-cleaner", tmp_dir: str | None = None):
    """A SparkSession for `master`. Outside spark-submit, on a JVM of our own (driver_jvm.py)."""
    global _driver_jvm
    configure_environment(master)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if tmp_dir is not None:
        os.makedirs(tmp_dir, exist_ok=True)
    conf = session_conf(master, app_name, tmp_dir)
    builder = SparkSession.builder
    for name, value in conf.items():
        builder = builder.config(name, value)
    if SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        from .driver_jvm import start_driver_jvm

        _driver_jvm = start_driver_jvm(conf, driver_log_file())
        with _driver_jvm.connected():
            spark = builder.getOrCreate()
    else:  # under spark-submit, or a JVM this process started before
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
