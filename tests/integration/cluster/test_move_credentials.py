"""A move between instances that require tokens (--auth-tokens): the target presents its
--cluster-token-file to the source's CopyPartition, so the move commits; an instance given no
cluster token is refused by the source (UNAUTHENTICATED), its move fails cleanly with the source
still the owner. The same with client certificates required (mutual TLS): the target dials the
source over TLS with its own certificate, checking the source's against --cluster-tls-ca; one
without that CA cannot verify the source, and its move fails the same way. Real etcd, real
processes (conftest.py)."""

from __future__ import annotations

import grpc
import pytest

from seglog import Admin, Producer
from seglog.errors import SeglogError
from seglog_server.security.token_file import create_token, format_entry
from tests.integration.cluster.test_service_cluster import _cluster_args, _names, _start, _until, services
from tests.support.certificate_authority import TestCA
from tests.support.integration_helpers import ServiceProcess

__all__ = ["services"]

TOPIC = "guarded"


@pytest.mark.slow  # three service processes and two moves: ~10 s
def test_a_move_between_instances_requiring_tokens_presents_the_cluster_token(tmp_path, etcd, services, closing):
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
    admin = closing(Admin(f"{a.address},{b.address},{c.address}", token=tokens["admin"]))
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


@pytest.mark.slow  # three TLS service processes and two moves: ~10 s
def test_a_move_between_instances_requiring_client_certificates_presents_the_instance_certificate(
        tmp_path, etcd, services, closing):
    ca = TestCA(tmp_path / "ca")
    instance_cert = ca.server("seglog-instance", client_too=True)  # both usages: serves and dials
    admin_cert = ca.client("admin")
    mutual = ["--tls-cert", str(instance_cert.cert), "--tls-key", str(instance_cert.key),
              "--tls-client-ca", str(ca.ca_file)]
    credentials = grpc.ssl_channel_credentials(ca.ca_file.read_bytes(), admin_cert.key_pem, admin_cert.cert_pem)
    cluster = f"mtls{next(_names)}"

    def start(name: str, args: list[str]) -> ServiceProcess:
        data = tmp_path / name / "data"
        data.mkdir(parents=True)
        service = ServiceProcess(tmp_path / name, [data], _cluster_args(etcd, cluster, name) + args,
                                 credentials=credentials).start()
        services.append(service)
        return service

    a = start("a", mutual + ["--cluster-tls-ca", str(ca.ca_file)])
    b = start("b", mutual + ["--cluster-tls-ca", str(ca.ca_file)])
    c = start("c", mutual)  # checks the others' certificates against the system roots: refused
    security = {"tls_ca": str(ca.ca_file), "tls_cert": str(admin_cert.cert), "tls_key": str(admin_cert.key)}
    admin = closing(Admin(f"{a.address},{b.address},{c.address}", **security))
    _until(lambda: {i.instance_id for i in admin.metadata().instances if i.alive} == {"a", "b", "c"},
           what="a sees b and c")
    admin.create_topic(TOPIC, partitions=1)
    assert admin.metadata([TOPIC]).owner_of(TOPIC, 0).owner_id == "a"
    for service in (a, b, c):
        with Admin(service.address, **security) as one:
            _until(lambda: TOPIC in {t.topic for t in one.list_topics()}, what="the topic held everywhere")
    with Producer(a.address, linger_ms=1, **security) as producer:
        for future in [producer.send(TOPIC, f"r{n}".encode(), partition=0) for n in range(50)]:
            future.result(timeout=30)

    with pytest.raises(SeglogError) as refused:
        admin.move_partition(TOPIC, 0, to="c")
    assert refused.value.code == grpc.StatusCode.ABORTED, refused.value
    assert "UNAVAILABLE" in str(refused.value) and "'a' still owns it" in str(refused.value)
    assert admin.metadata([TOPIC]).owner_of(TOPIC, 0).owner_id == "a"

    move = admin.move_partition(TOPIC, 0, to="b")
    assert (move.from_instance, move.to_instance, move.log_end_offset) == ("a", "b", 50)
