import pytest

from seglog._security import ConnectionSecurity

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_no_options_and_no_environment_is_plaintext_without_metadata():
    security = ConnectionSecurity.resolve(environ={})
    assert not security.tls and security.channel_credentials() is None
    assert security.call_metadata() == ()


def test_a_ca_turns_tls_on_and_a_token_becomes_a_bearer_header(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_bytes(PEM)
    security = ConnectionSecurity.resolve(tls_ca=str(ca), token="seglog_abc", environ={})
    assert security.tls and security.root_certificates == PEM
    assert security.call_metadata() == (("authorization", "Bearer seglog_abc"),)


def test_options_win_over_the_environment_and_the_environment_fills_the_rest(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_bytes(PEM)
    environ = {"SEGLOG_TLS_CA": str(ca), "SEGLOG_TOKEN": "from-env"}
    assert ConnectionSecurity.resolve(token="explicit", environ=environ).token == "explicit"
    security = ConnectionSecurity.resolve(environ=environ)
    assert security.tls and security.token == "from-env"
    assert ConnectionSecurity.resolve(environ={"SEGLOG_TLS": "1"}).tls


def test_the_service_variables_are_not_read_as_the_client_certificate(tmp_path):
    # SEGLOG_TLS_CERT/KEY are the service's own settings: a client never picks them up.
    cert = tmp_path / "c.pem"
    cert.write_bytes(PEM)
    security = ConnectionSecurity.resolve(
        environ={"SEGLOG_TLS_CERT": str(cert), "SEGLOG_TLS_KEY": str(cert)})
    assert not security.tls and security.certificate_chain is None


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"tls_cert": PEM}, "go together"),
        ({"tls_ca": "/nonexistent/ca.pem"}, "cannot read"),
        ({"tls_ca": b"not pem"}, "not a PEM"),
        ({"token": "two\nlines"}, "one line"),
    ],
)
def test_options_that_do_not_fit_are_refused(options, reason):
    with pytest.raises(ValueError, match=reason):
        ConnectionSecurity.resolve(environ={}, **options)
