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
from tests.support.integration_helpers import ServiceProcess, keeping_records
from tests.support.s3_server import CREDENTIALS_ENV, WeedServer
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
    """A service shared by a module's tests (each test uses its own topics), keeping its records
    whatever their timestamps (``keeping_records`` says why)."""
    workdir = tmp_path_factory.mktemp("shared-service")
    process = ServiceProcess(workdir, [workdir / "data0", workdir / "data1"], keeping_records()).start()
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


# Engines shared by the session's tests, each stopped after the last test that uses it rather than
# kept idle through the rest of the session: fixture name -> where the fixture keeps it.
_SHARED_ENGINES = {"spark_standalone": pytest.StashKey[SparkStandalone](), "s3_store": pytest.StashKey[WeedServer]()}
_LAST_USERS = pytest.StashKey[dict]()


@pytest.fixture(scope="session")
def spark_standalone(request, tmp_path_factory):
    """One Spark standalone master and worker for the session's tests that submit to spark://
    (each submits its own application): their JVM starts took tens of seconds per test."""
    cluster = SparkStandalone.start(tmp_path_factory.mktemp("spark-standalone"))
    request.session.stash[_SHARED_ENGINES["spark_standalone"]] = cluster
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def s3_store(request, tmp_path_factory):
    """One real S3-compatible server (weed) for the session's modules that use the object store
    (each test keys its objects under its own prefix): its start and graceful stop took about
    3.5 s per module. The fixtures that use it put the credentials in the environment."""
    with pytest.MonkeyPatch.context() as patch:  # weed mini adopts the key pair in its environment
        for name, value in CREDENTIALS_ENV.items():
            patch.setenv(name, value)
        server = WeedServer.start(str(tmp_path_factory.mktemp("weed")))
    request.session.stash[_SHARED_ENGINES["s3_store"]] = server
    yield server
    server.stop()


def pytest_collection_finish(session):
    last_users = {}
    for item in session.items:
        for name in _SHARED_ENGINES:
            if name in getattr(item, "fixturenames", ()):
                last_users[name] = item.nodeid
    session.stash[_LAST_USERS] = last_users


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # the test's own fixtures (a service still using the store) are torn down first
    session = item.session
    for name, nodeid in session.stash.get(_LAST_USERS, {}).items():
        if nodeid == item.nodeid and _SHARED_ENGINES[name] in session.stash:
            session.stash[_SHARED_ENGINES[name]].stop()
