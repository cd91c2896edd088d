"""The warnings a service logs at start for ports other machines can reach."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog_server.security.exposure import ExposedSettings, exposure_warnings, is_loopback_host


def _settings(host="0.0.0.0", *, tls=False, mutual_tls=False, tokens=False,
              metrics_host="127.0.0.1", metrics_require_token=False) -> ExposedSettings:
    return ExposedSettings(
        listen=f"{host}:50551", listen_host=host, tls=tls, mutual_tls=mutual_tls, tokens=tokens,
        metrics_listen=None if metrics_host is None else f"{metrics_host}:9551",
        metrics_host=metrics_host, metrics_require_token=metrics_require_token,
    )


def test_plaintext_without_tokens_beyond_loopback_warns_that_anyone_can_do_everything():
    [warning] = exposure_warnings(_settings())
    assert "0.0.0.0:50551 without TLS or tokens" in warning and "delete every topic" in warning


def test_tls_without_tokens_or_client_certificates_beyond_loopback_warns():
    [warning] = exposure_warnings(_settings(tls=True))
    assert "with TLS but without tokens or client certificates" in warning
    assert "--auth-tokens or --tls-client-ca" in warning


def test_tokens_over_plaintext_beyond_loopback_warns_that_tokens_travel_in_clear():
    [warning] = exposure_warnings(_settings(tokens=True))
    assert "tokens over plaintext" in warning and "clear text" in warning


def test_metrics_beyond_loopback_without_a_token_warn_even_when_grpc_is_protected():
    [warning] = exposure_warnings(_settings(tls=True, tokens=True, metrics_host="0.0.0.0"))
    assert "metrics on 0.0.0.0:9551 without a token" in warning
    assert "--metrics-require-token" in warning


@pytest.mark.parametrize("settings", [
    _settings(tls=True, tokens=True),
    _settings(tls=True, mutual_tls=True),
    _settings(tls=True, tokens=True, metrics_host="0.0.0.0", metrics_require_token=True),
    _settings(tls=True, tokens=True, metrics_host=None),  # metrics off
    _settings("127.0.0.1", metrics_host="::1"),
    _settings("localhost", tokens=True, metrics_host="localhost"),
], ids=["tls+tokens", "mutual tls", "metrics token", "metrics off", "loopback", "localhost"])
def test_protected_or_loopback_settings_start_quietly(settings):
    assert exposure_warnings(settings) == []


def test_a_host_name_other_than_localhost_is_not_taken_for_loopback():
    assert not is_loopback_host("seglog.internal")
    assert is_loopback_host("127.8.9.10") and is_loopback_host("[::1]")


@given(host=st.sampled_from(["0.0.0.0", "10.0.0.7", "::", "127.0.0.1", "localhost"]),
       tls=st.booleans(), mutual_tls=st.booleans(), tokens=st.booleans(),
       metrics_host=st.sampled_from([None, "0.0.0.0", "127.0.0.1"]), metrics_token=st.booleans())
def test_a_port_is_quiet_exactly_when_it_is_loopback_or_fully_protected(
        host, tls, mutual_tls, tokens, metrics_host, metrics_token):
    mutual_tls = mutual_tls and tls  # a client CA needs TLS
    settings = _settings(host, tls=tls, mutual_tls=mutual_tls, tokens=tokens,
                         metrics_host=metrics_host, metrics_require_token=metrics_token)
    warnings = exposure_warnings(settings)
    grpc_quiet = is_loopback_host(host) or (tls and (tokens or mutual_tls))
    metrics_quiet = metrics_host is None or is_loopback_host(metrics_host) or metrics_token
    assert len(warnings) == (not grpc_quiet) + (not metrics_quiet)
