"""One real etcd (Debian's etcd-server) per test module, on free loopback ports, stopped after."""

from __future__ import annotations

import pytest

from tests.support.etcd_server import EtcdServer


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    server = EtcdServer.start(str(tmp_path_factory.mktemp("etcd")))
    yield server
    server.stop()
