"""A move between instances that require tokens (--auth-tokens): the target presents its
--cluster-token-file to the source's CopyPartition, so the move commits; an instance given no
cluster token is refused by the source (UNAUTHENTICATED), its move fails cleanly with the source
still the owner. Real etcd, real processes (conftest.py)."""

from __future__ import annotations

import grpc
import pytest

from seglog import Admin, Producer
from seglog.errors import SeglogError
from seglog_server.security.token_file import create_token, format_entry
from tests.integration.cluster.test_service_cluster import _cluster_args, _names, _start, _until, services

__all__ = ["services"]

TOPIC = "guarded"


@pytest.mark.slow  # three service processes and two moves: ~10 s
def test_a_move_between_instances_requiring_tokens_presents_the_cluster_token(tmp_path, etcd, services):
    tokens, lines = {}, []
    for principal in ("admin", "cluster"):
        tokens[principal], entry = create_token(principal)
        lines.append(format_entry(entry))
    token_file = tmp_path / "tokens"
    token_file.write_text("".join(lines))
    cluster_token = tmp_path / "cluster.token"
    cluster_token.write_text(tokens["cluster"] + "\n")
    cluster = f"guarded{next(_names)}"
    guarded = ["--auth-tokens", str(token_file)]
    with_token = guarded + ["--cluster-token-file", str(cluster_token)]
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a") + with_token)
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b") + with_token)
    services.append(b)
    c = _start(tmp_path, "c", _cluster_args(etcd, cluster, "c") + guarded)  # no token for its peers
    services.append(c)
    admin = Admin(f"{a.address},{b.address},{c.address}", token=tokens["admin"])
    _until(lambda: {i.instance_id for i in admin.metadata().instances if i.alive} == {"a", "b", "c"},
           what="a sees b and c")
    admin.create_topic(TOPIC, partitions=1)
    source = admin.metadata([TOPIC]).owner_of(TOPIC, 0).owner_id
    assert source == "a"  # fewest partitions, then the id
    for service in (a, b, c):
        with Admin(service.address, token=tokens["admin"]) as one:
            _until(lambda: TOPIC in {t.topic for t in one.list_topics()}, what="the topic held everywhere")
    with Producer(a.address, token=tokens["admin"], linger_ms=1) as producer:
        for future in [producer.send(TOPIC, f"r{n}".encode(), partition=0) for n in range(50)]:
            future.result(timeout=30)

    with pytest.raises(SeglogError) as refused:
        admin.move_partition(TOPIC, 0, to="c")
    assert refused.value.code == grpc.StatusCode.ABORTED, refused.value
    assert "UNAUTHENTICATED" in str(refused.value) and "'a' still owns it" in str(refused.value)
    assert admin.metadata([TOPIC]).owner_of(TOPIC, 0).owner_id == "a"

    move = admin.move_partition(TOPIC, 0, to="b")
    assert (move.from_instance, move.to_instance, move.log_end_offset) == ("a", "b", 50)
    assert admin.metadata([TOPIC]).owner_of(TOPIC, 0).owner_id == "b"
    admin.close()
