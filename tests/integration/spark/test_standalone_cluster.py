"""One cleaning through a real Spark standalone cluster: a Master and a Worker started from the
installed PySpark distribution (spark-class) on loopback, the session's (spark_standalone in
tests/integration/conftest.py), the job submitted with ``python -m seglog_spark --master
spark://...``; the output must be the baseline's bytes."""

import filecmp
import json
import os
import shutil
import subprocess
import sys

import pytest

from seglog_spark import cleaner_local

from tests.support.snapshot_workloads import BASE_TIME_MS, make_snapshot

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1200)]

JOB_TIMEOUT_S = 600


def test_one_cleaning_runs_on_a_standalone_master_and_worker(spark_standalone, tmp_path):
    url, env = spark_standalone.master_url, {**spark_standalone.env, "_JAVA_OPTIONS": "-XX:-UsePerfData"}
    applications_before = spark_standalone.application_dirs()
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
    # The executors ran on the worker, not in the driver: the worker holds this application's directory.
    assert spark_standalone.application_dirs() - applications_before
