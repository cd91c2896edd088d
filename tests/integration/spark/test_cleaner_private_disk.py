"""The cleaner cannot see the service's disk: the service runs in a mount namespace of its own
(``unshare --mount``) with its data directory a tmpfs only it sees, and a standalone Spark cluster
on loopback (a master and a worker process) cleans a compacted topic through the object store (a
real weed). The only thing the two sides share is the store; the compaction invariant holds.

Needs root for ``unshare --mount`` (the test runner is root here, as in CI's container); without it
the test fails naming why rather than skipping."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import pytest
from tests.support.integration_helpers import ServiceProcess
from tests.support.s3_server import CREDENTIALS_ENV

from seglog import Admin

from tests.integration.client.test_cleaner_cli import spark_cluster  # noqa: F401 - a fixture
from tests.integration.remote.conftest import BUCKET, weed  # noqa: F401 - a fixture
from tests.integration.remote.test_cleaner_snapshot_store import (
    check_invariant,
    compacted_workload,
    keys_under,
    read_all,
)

pytestmark = pytest.mark.integration


class PrivateDiskService(ServiceProcess):
    """The service in a private mount namespace whose data directory is a fresh tmpfs: outside
    the namespace the directory stays empty (the ready file lives beside it, outside)."""

    def command(self) -> list[str]:
        data = str(self.data_dirs[0])
        inner = " ".join(_quote(part) for part in super().command())
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                f"mount -t tmpfs -o size=256m seglog-private {_quote(data)} && exec {inner}"]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _check_namespaces_work() -> None:
    if os.geteuid() != 0:
        pytest.fail("unshare --mount needs root (CAP_SYS_ADMIN): run the slow suite as root, as CI does")
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is not installed")


@pytest.mark.slow
@pytest.mark.timeout(600)  # a master, a worker, a driver and an executor JVM start in this test
def test_a_standalone_cluster_cleans_a_service_whose_disk_it_cannot_see(tmp_path, weed, spark_cluster):  # noqa: F811
    _check_namespaces_work()
    data = tmp_path / "private-data"
    data.mkdir()
    root = f"s3://{BUCKET}/private-{uuid.uuid4().hex[:10]}"
    service = PrivateDiskService(tmp_path, [data], [
        "--remote-storage", root, "--s3-endpoint", weed.endpoint], env=CREDENTIALS_ENV).start()
    try:
        compacted_workload(service.stub, "private", seed=41, count=300)
        assert os.listdir(data) == [], "the service's data must be invisible outside its namespace"
        before = read_all(service.stub, "private")
        with Admin(service.address) as admin:
            [listed] = admin.list_cleanable("private")
        finished = subprocess.run(
            [sys.executable, "-m", "seglog_cli", "cleaner", "run", "--once", "--server", service.address,
             "--topic", "private", "--snapshot-store", root, "--s3-endpoint", weed.endpoint,
             "--engine", "spark", "--master", spark_cluster],
            capture_output=True, text=True, timeout=500,
            env={**{k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}, **CREDENTIALS_ENV})
        assert finished.returncode == 0, finished.stdout + finished.stderr
        assert "1 cleaned, 0 refused, 0 failed" in finished.stdout, finished.stdout + finished.stderr
        check_invariant(before, read_all(service.stub, "private"), listed.first_uncleanable_offset)
        assert os.listdir(data) == []
        assert keys_under(weed, root + "/cleaning-snapshots/") == []
    finally:
        service.stop()
