"""Integration fixtures: real ``python -m seglog_server`` processes on loopback.

Each service listens on 127.0.0.1:0 and writes its bound address to a ready file; tests talk to it
through the generated stubs over a plain synchronous channel (``.future()`` for calls that must be
in flight together). Most tests share one module-scoped service and use their own topic names;
tests about the process itself (shutdown, restart, bad settings) start their own.
"""

from __future__ import annotations

import itertools
import pathlib

import pytest
from tests.support.integration_helpers import ServiceProcess
from tests.support.spark_standalone import SparkStandalone

from seglog.v1 import log_service_pb2 as pb


@pytest.fixture
def start_service(tmp_path):
    """Factory: start_service(args=[...], data_dir_count=1, env={}, credentials=None) ->
    ServiceProcess (credentials: the test channel's, for a TLS service)."""
    started: list[ServiceProcess] = []
    counter = itertools.count()

    def start(args: list[str] | None = None, data_dir_count: int = 1,
              env: dict[str, str] | None = None, data_dirs: list[pathlib.Path] | None = None,
              workdir: pathlib.Path | None = None,
              credentials=None) -> ServiceProcess:
        workdir = workdir or tmp_path / f"service{next(counter)}"
        workdir.mkdir(exist_ok=True)
        dirs = data_dirs or [workdir / f"data{i}" for i in range(data_dir_count)]
        service = ServiceProcess(workdir, dirs, list(args or ()), env, credentials)
        started.append(service)
        return service.start()

    yield start
    for service in started:
        code = service.stop()
        assert code in (0, None) or service.process.returncode is not None


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """A service shared by a module's tests (each test uses its own topics)."""
    workdir = tmp_path_factory.mktemp("shared-service")
    process = ServiceProcess(workdir, [workdir / "data0", workdir / "data1"], []).start()
    yield process
    code = process.stop()
    assert code == 0, process.log()


@pytest.fixture
def stub(service):
    return service.stub


_topic_numbers = itertools.count()


@pytest.fixture
def topic(request, stub):
    """A fresh single-partition topic named after the test."""
    name = f"{request.node.name[:180]}-{next(_topic_numbers)}".replace("[", ".").replace("]", "")
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    stub.CreateTopic(pb.CreateTopicRequest(topic=name, partitions=1))
    return name


_spark_standalone = pytest.StashKey[SparkStandalone]()
_spark_standalone_last_user = pytest.StashKey[str]()


@pytest.fixture(scope="session")
def spark_standalone(request, tmp_path_factory):
    """One Spark standalone master and worker for the session's tests that submit to spark://
    (each submits its own application): their JVM starts took tens of seconds per test."""
    cluster = SparkStandalone.start(tmp_path_factory.mktemp("spark-standalone"))
    request.session.stash[_spark_standalone] = cluster
    yield cluster
    cluster.stop()


def pytest_collection_finish(session):
    users = [item.nodeid for item in session.items if "spark_standalone" in getattr(item, "fixturenames", ())]
    if users:
        session.stash[_spark_standalone_last_user] = users[-1]


def pytest_runtest_teardown(item, nextitem):
    # The master and worker (about 0.5 GB) are stopped after the last test that uses them, not
    # kept idle through the rest of the session.
    session = item.session
    if session.stash.get(_spark_standalone_last_user, None) == item.nodeid and _spark_standalone in session.stash:
        session.stash[_spark_standalone].stop()
