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
