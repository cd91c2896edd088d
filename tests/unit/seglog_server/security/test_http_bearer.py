import threading
import urllib.error
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

from seglog_server.security import PrincipalQuota, SecurityPaths, SecurityPolicy
from seglog_server.security.http_bearer import require_bearer
from seglog_server.security.token_file import create_token, format_entry


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def _metrics_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"seglog_up 1\n"]


@pytest.fixture
def served(tmp_path):
    token, entry = create_token("prometheus")
    (tmp_path / "tokens").write_text(format_entry(entry))
    policy = SecurityPolicy(SecurityPaths(auth_tokens=str(tmp_path / "tokens")), PrincipalQuota(),
                            token_cache_max=8, quota_window_ms=1000, quota_delay_ms_max=0)
    server = make_server("127.0.0.1", 0, require_bearer(_metrics_app, policy.verify_bearer),
                         handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/metrics", token
    server.shutdown()
    server.server_close()


def _get(url, header=None):
    request = urllib.request.Request(url, headers={"Authorization": header} if header else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.read()


def test_an_http_endpoint_serves_only_requests_with_a_token_from_the_file(served):
    url, token = served
    assert _get(url, f"Bearer {token}") == (200, b"seglog_up 1\n")
    for header in (None, "Bearer wrong", f"Basic {token}"):
        with pytest.raises(urllib.error.HTTPError) as info:
            _get(url, header)
        assert info.value.code == 401
        assert info.value.headers["WWW-Authenticate"].startswith("Bearer")
