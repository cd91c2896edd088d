import threading
import urllib.error
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog_server.security import PrincipalQuota, SecurityPaths, SecurityPolicy
from seglog_server.security.http_bearer import filter_topic_series, require_bearer
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


# -- per-principal topic filtering ---------------------------------------------------------------
_TOPICS = st.text(alphabet="abcxyz._-0", min_size=1, max_size=8)


@given(series=st.lists(st.tuples(_TOPICS, st.booleans(), st.integers(0, 9)), max_size=20),
       allowed=st.sets(_TOPICS))
def test_filtering_keeps_exactly_the_series_of_allowed_topics_and_every_declaration(series, allowed):
    lines = [b"# HELP seglog_x Something.\n", b"# TYPE seglog_x gauge\n", b"seglog_up 1\n"]
    for topic, topic_first, partition in series:
        labels = (f'topic="{topic}",partition="{partition}"' if topic_first
                  else f'partition="{partition}",topic="{topic}"')
        lines.append(f"seglog_x{{{labels}}} {partition}\n".encode())
    kept = filter_topic_series(b"".join(lines), allowed.__contains__)
    expected = lines[:3] + [line for line, (topic, _, _) in zip(lines[3:], series, strict=True)
                            if topic in allowed]
    assert kept == b"".join(expected)


def test_a_principal_limited_by_the_acl_gets_only_its_topics_series_over_http(tmp_path):
    token, entry = create_token("scraper")
    (tmp_path / "tokens").write_text(format_entry(entry))
    (tmp_path / "acl.toml").write_text(
        '[[allow]]\nprincipals = ["scraper"]\noperations = ["describe"]\ntopics = ["a"]\n')
    policy = SecurityPolicy(SecurityPaths(auth_tokens=str(tmp_path / "tokens"), acl=str(tmp_path / "acl.toml")),
                            PrincipalQuota(), token_cache_max=8, quota_window_ms=1000, quota_delay_ms_max=0)

    def app(environ, start_response):
        body = b'seglog_x{topic="a"} 1\nseglog_x{topic="b"} 2\n'
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]

    server = make_server("127.0.0.1", 0, require_bearer(app, policy.verify_bearer, policy.describable_topics),
                         handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert _get(f"http://127.0.0.1:{server.server_port}/metrics", f"Bearer {token}") == \
            (200, b'seglog_x{topic="a"} 1\n')
    finally:
        server.shutdown()
        server.server_close()
