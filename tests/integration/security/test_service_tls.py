"""TLS and mutual TLS against real service processes, with certificates from a test CA."""

from __future__ import annotations

import signal
import socket
import ssl
import time

import grpc
import pytest
from tests.support.certificate_authority import common_name_of
from tests.support.integration_helpers import CHANNEL_OPTIONS, make_batch, records_of

from seglog import Admin, Producer
from seglog.errors import AuthorizationError, ServiceUnavailableError
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration


def _credentials(ca, client=None) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        ca.ca_file.read_bytes(),
        client.key_pem if client else None,
        client.cert_pem if client else None,
    )


def _stub(address, credentials):
    channel = grpc.secure_channel(address, credentials, options=CHANNEL_OPTIONS)
    return channel, pb_grpc.LogServiceStub(channel)


def _tls_args(server, ca=None):
    args = ["--tls-cert", str(server.cert), "--tls-key", str(server.key)]
    return args + (["--tls-client-ca", str(ca.ca_file)] if ca else [])


def _presented_common_name(address: str) -> str:
    """The CN of the certificate the service presents to a new connection."""
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with context.wrap_socket(raw) as tls:
            return common_name_of(tls.getpeercert(binary_form=True))


# -- server-only TLS ------------------------------------------------------------------------------


def test_tls_serves_clients_that_verify_it_with_the_ca(ca, start_service):
    server = ca.server()
    service = start_service(args=_tls_args(server), credentials=_credentials(ca))
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="tls-events", partitions=1), timeout=10)
    with Producer(service.address, tls_ca=ca.ca_file) as producer:
        assert producer.send("tls-events", b"over tls").result(timeout=10).offset == 0
    with Admin(service.address, tls_ca=ca.ca_file) as admin:
        assert [t.topic for t in admin.list_topics()] == ["tls-events"]


def test_plaintext_client_cannot_talk_to_a_tls_service(ca, start_service):
    service = start_service(args=_tls_args(ca.server()), credentials=_credentials(ca))
    with grpc.insecure_channel(service.address) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.ListTopics(pb.ListTopicsRequest(), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    service.stub.ListTopics(pb.ListTopicsRequest(), timeout=10)  # still serving TLS clients


def test_client_verifies_the_service_by_default(ca, other_ca, start_service):
    service = start_service(args=_tls_args(ca.server()), credentials=_credentials(ca))
    # Trusting another CA (or only the system's CAs): the handshake fails, nothing is sent.
    for options in ({"tls_ca": other_ca.ca_file}, {"tls": True}):
        with Admin(service.address, request_timeout_ms=5000, **options) as admin:
            with pytest.raises(ServiceUnavailableError):
                admin.list_topics()


# -- mutual TLS -----------------------------------------------------------------------------------


@pytest.fixture
def mtls_service(ca, start_service, tmp_path):
    acl = tmp_path / "acl.toml"
    acl.write_text('[[allow]]\nprincipals = ["alice"]\noperations = ["admin", "read", "write"]\n'
                   'topics = ["*"]\n')
    admin = ca.client("seglog-test-admin")
    acl.write_text(acl.read_text() + '[[allow]]\nprincipals = ["seglog-test-admin"]\n'
                   'operations = ["admin"]\ntopics = ["*"]\n')
    return start_service(args=[*_tls_args(ca.server(), ca), "--acl", str(acl)],
                         credentials=_credentials(ca, admin))


def test_mutual_tls_takes_the_principal_from_the_client_certificate(ca, mtls_service):
    alice, bob = ca.client("alice"), ca.client("bob")
    with Admin(mtls_service.address, tls_ca=ca.ca_file, tls_cert=alice.cert, tls_key=alice.key) as admin:
        admin.create_topic("mtls-events")
        assert "mtls-events" in [t.topic for t in admin.list_topics()]
    # bob's certificate is good, but the ACL names only alice: the denial names bob.
    with Admin(mtls_service.address, tls_ca=ca.ca_file, tls_cert=bob.cert, tls_key=bob.key) as admin:
        with pytest.raises(AuthorizationError, match="'bob'.*admin.*'other'"):
            admin.create_topic("other")
        assert admin.list_topics() == []  # describes nothing


@pytest.mark.parametrize("which", ["expired", "wrongly signed", "missing"])
def test_mutual_tls_refuses_bad_client_certificates(ca, other_ca, mtls_service, which):
    client = {"expired": lambda: ca.client("alice", expired=True),
              "wrongly signed": lambda: other_ca.client("alice"),
              "missing": lambda: None}[which]()
    channel, stub = _stub(mtls_service.address, _credentials(ca, client))
    with channel, pytest.raises(grpc.RpcError) as info:
        stub.ListTopics(pb.ListTopicsRequest(), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE  # the handshake failed
    mtls_service.stub.ListTopics(pb.ListTopicsRequest(), timeout=10)  # others unaffected


def test_health_and_reflection_stay_open_to_any_tls_client_with_a_certificate(ca, mtls_service):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    channel, _ = _stub(mtls_service.address, _credentials(ca, ca.client("nobody-in-the-acl")))
    with channel:
        health = health_pb2_grpc.HealthStub(channel)
        response = health.Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert response.status == health_pb2.HealthCheckResponse.SERVING


# -- SIGHUP reload --------------------------------------------------------------------------------


def test_sighup_reloads_certificates_without_dropping_a_live_stream(ca, start_service, tmp_path):
    first = ca.server("seglog-one", file_stem="live")
    service = start_service(args=_tls_args(first), credentials=_credentials(ca))
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="reload", partitions=1), timeout=10)
    assert _presented_common_name(service.address) == "seglog-one"
    stream = stub.Consume(pb.ConsumeRequest(topic="reload", partition=0,
                                            position=pb.START_POSITION_EARLIEST), timeout=60)
    stub.Produce(pb.ProduceRequest(topic="reload", partition=0, records=make_batch([b"before"])),
                 timeout=10)
    assert [r.value for r in records_of(next(stream))] == [b"before"]

    ca.server("seglog-two", file_stem="live")  # overwrites the files the service was given
    service.signal(signal.SIGHUP)
    _wait_for_log(service, "security files reloaded")

    stub.Produce(pb.ProduceRequest(topic="reload", partition=0, records=make_batch([b"after"])),
                 timeout=10)
    assert [r.value for r in records_of(next(stream))] == [b"after"]  # same stream, same connection
    assert _presented_common_name(service.address) == "seglog-two"  # new connections: new cert
    stream.cancel()


def test_sighup_with_a_broken_file_keeps_the_previous_certificates(ca, start_service):
    server = ca.server("seglog-kept", file_stem="kept")
    service = start_service(args=_tls_args(server), credentials=_credentials(ca))
    server.key.write_text("not a key\n")
    service.signal(signal.SIGHUP)
    _wait_for_log(service, "not reloaded")
    assert _presented_common_name(service.address) == "seglog-kept"
    service.stub.ListTopics(pb.ListTopicsRequest(), timeout=10)


def _wait_for_log(service, text: str, timeout_s: float = 20.0) -> None:
    # A signal's effect can only be seen in the log; poll it (the one thing we cannot await).
    deadline = time.monotonic() + timeout_s
    while text not in service.log():
        assert time.monotonic() < deadline, f"{text!r} not logged:\n{service.log()}"
        time.sleep(0.05)


def test_cli_takes_tls_and_token_flags_and_environment(ca, start_service, tmp_path):
    import os
    import subprocess
    import sys

    from seglog_server.security.token_file import create_token, format_entry

    token, entry = create_token("cli-user")
    (tmp_path / "tokens").write_text(format_entry(entry))
    server = ca.server()
    service = start_service(args=[*_tls_args(server), "--auth-tokens", str(tmp_path / "tokens")],
                            credentials=_credentials(ca))

    def cli(*args, env=None):
        environ = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
        environ.update(env or {})
        return subprocess.run([sys.executable, "-m", "seglog_cli", *args], capture_output=True,
                              text=True, timeout=60, env=environ)

    created = cli("topic", "create", "cli-tls", "--server", service.address,
                  "--tls-ca", str(ca.ca_file), "--token", token)
    assert created.returncode == 0, created.stderr
    listed = cli("topic", "list", "--server", service.address,
                 env={"SEGLOG_TLS_CA": str(ca.ca_file), "SEGLOG_TOKEN": token})
    assert listed.returncode == 0 and "cli-tls" in listed.stdout, listed.stderr
    refused = cli("topic", "list", "--server", service.address, "--tls-ca", str(ca.ca_file))
    assert refused.returncode == 1 and "authentication failed" in refused.stderr
    mismatched = cli("topic", "list", "--server", service.address, "--tls-cert", str(server.cert))
    assert mismatched.returncode == 1
    assert mismatched.stderr.strip() == "seglog: error: tls_cert and tls_key go together (a client " \
        "certificate and its key)"
