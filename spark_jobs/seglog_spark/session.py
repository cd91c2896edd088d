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
- the JVM logs WARN and above to a file, nothing to the terminal (``log4j2.properties`` beside
  this module); no UI port, no console progress bars; scratch files under `tmp_dir` when given.
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
    "is_local_master",
]

DRIVER_MEMORY = "1g"  # the driver only plans and collects bitmaps; the work is in Python workers
LOOPBACK = "127.0.0.1"
EVERY_INTERFACE = "0.0.0.0"
LOG4J_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
# Where the JVM's log goes (log4j2.properties reads it as a system property); SPARK_LOG_FILE moves it.
LOG_FILE_DEFAULT = os.path.join(tempfile.gettempdir(), "seglog-cleaner-spark.log")


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


def driver_java_options(tmp_dir: str | None = None) -> str:
    """The driver JVM's options: our log4j2 configuration (WARN and above to a file, nothing on
    the terminal) and no perf-data file in /tmp."""
    log_file = os.environ.get("SPARK_LOG_FILE") or LOG_FILE_DEFAULT
    options = f"-XX:-UsePerfData -Dlog4j.configurationFile=file:{LOG4J_CONFIG} -Dseglog.spark.log.file={log_file}"
    if tmp_dir is not None:
        options += f" -Djava.io.tmpdir={tmp_dir}"
    return options


def build_session(master: str = "local[*]", *, app_name: str = "seglog-cleaner", tmp_dir: str | None = None):
    configure_environment(master)
    from pyspark.sql import SparkSession

    address = driver_address(master)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", DRIVER_MEMORY)
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config("spark.driver.bindAddress", address.bind)
        .config("spark.driver.host", address.host)
        # The job passes its own partition counts everywhere; this only bounds stray shuffles.
        .config("spark.sql.shuffle.partitions", "8")
    )
    if tmp_dir is not None:
        os.makedirs(tmp_dir, exist_ok=True)
        builder = builder.config("spark.local.dir", tmp_dir)
    builder = builder.config("spark.driver.extraJavaOptions", driver_java_options(tmp_dir))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
