"""``--metrics-require-token``: /metrics answers only a bearer token from the service's token file."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from integration_helpers import ServiceProcess

from seglog_server.config import ConfigError, load_config
from seglog_server.security.token_file import create_token, format_entry

pytestmark = pytest.mark.integration


def _get(url: str, token: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_metrics_need_a_token_from_the_token_file_when_asked(tmp_path):
    token, entry = create_token("prometheus")
    (tmp_path / "tokens").write_text(format_entry(entry))
    service = ServiceProcess(tmp_path, [tmp_path / "data"], [
        "--auth-tokens", str(tmp_path / "tokens"), "--metrics-require-token"]).start()
    try:
        url = f"http://{service.metrics_address}/metrics"
        assert _get(url)[0] == 401
        assert _get(url, "seglog_nokey_notasecret")[0] == 401
        status, body = _get(url, token)
        assert status == 200 and b"seglog_rpc_duration_seconds" in body
    finally:
        assert service.stop() == 0, service.log()


def test_requiring_a_metrics_token_needs_a_token_file():
    with pytest.raises(ConfigError, match="metrics_require_token .* requires auth_tokens"):
        load_config(["--metrics-require-token"], environ={})
