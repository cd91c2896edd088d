"""What ``seglog cleaner run`` shows on a terminal: one line when a client-only install lacks the
engine's packages (pyspark and numpy made unimportable by a sitecustomize shim, as in an install
without the ``spark`` extra), and one line, with no JVM started, when nothing is eligible."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from tests.support.integration_helpers import service_environment
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration

# Installed as sitecustomize.py: pyspark, numpy and tqdm (the `spark` extra) cannot be imported.
WITHOUT_SPARK_EXTRA = textwrap.dedent("""
    import sys

    class WithoutSparkExtra:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in {"pyspark", "numpy", "tqdm"}:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, WithoutSparkExtra())
""")


def cleaner(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seglog_cli", "cleaner", "run", "--once", *args],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def client_only(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(WITHOUT_SPARK_EXTRA)
    env = service_environment()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *filter(None, [env.get("PYTHONPATH")])])
    shim = subprocess.run([sys.executable, "-c", "import numpy"], capture_output=True, text=True, env=env)
    assert "No module named 'numpy'" in shim.stderr  # the shim is in force
    return env


@pytest.mark.parametrize(("engine", "missing"), [("spark", "pyspark and numpy"), ("python", "numpy")])
def test_a_client_only_install_names_the_extra_in_one_line(client_only, engine, missing):
    finished = cleaner(["--engine", engine, "--server", "127.0.0.1:1"], client_only)
    assert finished.returncode == 1
    assert finished.stdout == ""
    assert finished.stderr.splitlines() == [
        f"seglog: error: the cleaner's {engine} engine needs {missing}, which a client-only install lacks: "
        f"pip install 'seglog[spark]'"]


def test_nothing_eligible_says_so_in_one_line_and_starts_no_jvm(start_service, tmp_path):
    service = start_service()
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="not-dirty", partitions=1, configs={
        "cleanup.policy": "compact"}))
    log_file = tmp_path / "spark.log"
    env = service_environment({"SPARK_LOG_FILE": str(log_file)})
    finished = cleaner(["--server", service.address, "--master", "local[1]"], env)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout == ("cleaner round 1: nothing to clean (1 compacted partitions, none eligible); "
                               "Spark not used\n")
    assert finished.stderr == ""
    assert not log_file.exists()  # the driver JVM writes there from its first line
