"""The cluster tests' shared etcd (conftest.py): a module gets it empty (no key, no lease an earlier
module left) and cannot pause, stop or restart it (such a module is listed in OWN_ETCD instead)."""

from __future__ import annotations

import base64

import pytest

from tests.support.etcd_server import SharedEtcdServer

pytestmark = pytest.mark.integration


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def test_a_wipe_leaves_no_key_and_no_lease(etcd):
    assert isinstance(etcd, SharedEtcdServer)
    lease = etcd._post("lease/grant", {"TTL": 60})["ID"]
    etcd._post("kv/put", {"key": _b64(b"an-earlier-cluster/instances/a"), "value": _b64(b"x"), "lease": lease})
    etcd._post("kv/put", {"key": _b64(b"an-earlier-cluster/topics/t"), "value": _b64(b"y")})
    etcd.wipe()
    everything = _b64(b"\0")
    assert "kvs" not in etcd._post("kv/range", {"key": everything, "range_end": everything})
    assert etcd._post("lease/leases", {}).get("leases", []) == []
    assert etcd.healthy()


@pytest.mark.parametrize("action", ["pause", "resume", "stop", "launch"])
def test_the_shared_etcd_refuses_to_be_paused_stopped_or_restarted(etcd, action):
    with pytest.raises(pytest.fail.Exception, match="list the module in OWN_ETCD"):
        getattr(etcd, action)()
    assert etcd.healthy()
