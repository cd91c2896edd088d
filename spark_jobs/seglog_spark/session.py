"""A SparkSession set up for seglog's cleaner on this kind of machine
(reference/platform-notes.md section 2):
- the Python workers run this interpreter (PYSPARK_PYTHON), not whatever ``python3`` is on
  PATH, so they import seglog and crc32c from the same environment;
- Spark binds to loopback (SPARK_LOCAL_IP) unless told otherwise: the hostname may resolve to
  an address nothing listens on;
- no UI port, no console progress bars; scratch files under `tmp_dir` when given.
"""

from __future__ import annotations

import os
import sys

__all__ = ["build_session", "configure_environment"]

DRIVER_MEMORY = "1g"  # the driver only plans and collects bitmaps; the work is in Python workers


def configure_environment() -> None:
    """Environment Spark reads when its JVM and workers start; set before the first session."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def build_session(master: str = "local[*]", *, app_name: str = "seglog-cleaner", tmp_dir: str | None = None):
    configure_environment()
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", DRIVER_MEMORY)
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config("spark.driver.bindAddress", os.environ["SPARK_LOCAL_IP"])
        .config("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
        # The job passes its own partition counts everywhere; this only bounds stray shuffles.
        .config("spark.sql.shuffle.partitions", "8")
    )
    java_options = "-XX:-UsePerfData"
    if tmp_dir is not None:
        os.makedirs(tmp_dir, exist_ok=True)
        builder = builder.config("spark.local.dir", tmp_dir)
        java_options += f" -Djava.io.tmpdir={tmp_dir}"
    builder = builder.config("spark.driver.extraJavaOptions", java_options)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
