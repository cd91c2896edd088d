"""One real etcd (Debian's etcd-server) on free loopback ports for the cluster tests, stopped after.

Most modules share one etcd per session (a start costs ~1 s on this machine): each gets it with
every key deleted and every lease revoked, so it sees nothing an earlier module wrote, and its
services run under cluster names of their own. The modules that freeze, stop or compact etcd
(OWN_ETCD) get one of their own per module, as before; the shared one refuses pause, stop and
restart, so a module that starts doing so fails until it is listed there.
"""

from __future__ import annotations

import os

import pytest

from seglog import Admin
from tests.integration.cluster.test_cluster_client_routing import _holds
from tests.integration.cluster.test_service_cluster import _cluster_args, _start, _until
from tests.support.etcd_server import EtcdServer, SharedEtcdServer, free_port

# Modules that pause, stop or restart etcd, or compact its history: an etcd of their own each.
OWN_ETCD = frozenset({
    "test_cluster_metrics.py",
    "test_cluster_topic_configs.py",
    "test_cluster_topic_deletion.py",
    "test_etcd_membership.py",
    "test_etcd_metadata_cache.py",
    "test_etcd_producer_id_blocks.py",
    "test_etcd_watch_compaction.py",
    "test_fenced_acknowledgement.py",
    "test_partition_moves.py",
    "test_service_cluster.py",
})


@pytest.fixture(scope="session")
def _shared_etcd(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("etcd-shared"))
    server = SharedEtcdServer(directory, free_port(), free_port())
    EtcdServer.launch(server)  # healthy on return
    yield server
    server.shut_down()


@pytest.fixture(scope="module")
def etcd(request, tmp_path_factory):
    if os.path.basename(str(request.module.__file__)) in OWN_ETCD:
        server = EtcdServer.start(str(tmp_path_factory.mktemp("etcd")))
        yield server
        server.stop()
        return
    shared = request.getfixturevalue("_shared_etcd")
    shared.wipe()
    yield shared
    if _last_sharing_module(request.session) == request.module.__file__:
        shared.shut_down()  # not kept idle through the rest of the session


def _last_sharing_module(session) -> str | None:
    last = None
    for item in session.items:
        module = getattr(item, "module", None)
        if "etcd" in getattr(item, "fixturenames", ()) and module is not None \
                and os.path.basename(str(module.__file__)) not in OWN_ETCD:
            last = module.__file__
    return last


@pytest.fixture
def two_instances(tmp_path, etcd, services, closing):
    """Starts a fresh cluster of instances a and b on the module's etcd and creates a topic of one
    partition there, owned by a and seen by b: ``start(cluster, topic, configs=None, b_env=None)``
    gives ``(a, b, admin)``, the admin reaching both. ``b_env`` adds to b's
    environment (a fault seam). Needs the module's ``services`` fixture (test_service_cluster)."""

    def start(cluster: str, topic: str, configs: dict[str, str] | None = None,
              b_env: dict[str, str] | None = None):
        a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
        services.append(a)
        b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"), env=b_env)
        services.append(b)
        admin = closing(Admin(f"{a.address},{b.address}"))
        _until(lambda: {i.instance_id for i in admin.metadata().instances if i.alive} == {"a", "b"},
               what="a sees b")
        admin.create_topic(topic, partitions=1, configs=configs)
        assert admin.metadata([topic]).owner_of(topic, 0).owner_id == "a"
        _until(lambda: _holds(b, topic), what="b holding the topic")
        return a, b, admin

    return start
