"""Safe defaults: an exposed port without TLS or tokens is announced at start."""

from __future__ import annotations

import pytest

from seglog_server.security.token_file import create_token, format_entry

pytestmark = pytest.mark.integration

WARNING = "without TLS or tokens"


def test_listening_beyond_loopback_without_credentials_logs_a_warning(start_service):
    service = start_service(args=["--listen", "0.0.0.0:0"])
    assert WARNING in service.log()
    assert "plaintext, no tokens, no ACL" in service.log()


def test_loopback_or_tokens_start_quietly(start_service, tmp_path):
    assert WARNING not in start_service().log()
    _, entry = create_token("ops")
    tokens = tmp_path / "tokens"
    tokens.write_text(format_entry(entry))
    service = start_service(args=["--listen", "0.0.0.0:0", "--auth-tokens", str(tokens)])
    assert WARNING not in service.log()


def test_tokens_over_plaintext_and_open_metrics_beyond_loopback_are_announced(start_service, tmp_path):
    _, entry = create_token("ops")
    tokens = tmp_path / "tokens"
    tokens.write_text(format_entry(entry))
    service = start_service(args=["--listen", "0.0.0.0:0", "--auth-tokens", str(tokens),
                                  "--metrics-listen", "0.0.0.0:0"])
    log = service.log()
    assert "with tokens over plaintext" in log
    assert "without a token: anyone who can reach the port reads every topic" in log
