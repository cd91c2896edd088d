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


# -- the metrics port shares the gate's bound on slow checks ---------------------------------------


def _cheap_line(principal: str, key_id: str, secret: str):
    """A token and its entry hashed with scrypt's smallest cost (n=2): the bound is under test."""
    from seglog_server.security.token_file import TOKEN_PREFIX, TokenEntry, hash_token

    token = f"{TOKEN_PREFIX}{key_id}_{secret * 43}"
    return token, TokenEntry(principal, key_id, hash_token(token, n=2))


def test_a_full_slow_check_bound_answers_503_to_a_new_token_and_200_to_a_cached_one(tmp_path):
    """/metrics through the real metrics server, the bound at 1: while one slow check is held in
    flight, a second token not seen before is answered 503 with Retry-After (no hash, no thread
    waiting for one), and a token already verified is served."""
    from seglog_server.metrics import Metrics
    from seglog_server.metrics.server import MetricsServer
    from seglog_server.security.token_store import TokenStore

    (cached, first), (held, second), (new, third) = (
        _cheap_line(name, f"{index:012x}", "s") for index, name in enumerate(("a", "b", "c"), start=1))
    (tmp_path / "tokens").write_text("".join(format_entry(e) for e in (first, second, third)))
    policy = SecurityPolicy(SecurityPaths(auth_tokens=str(tmp_path / "tokens")), PrincipalQuota(),
                            token_cache_max=8, quota_window_ms=1000, quota_delay_ms_max=0,
                            slow_checks_max=1)

    class Holding(TokenStore):
        """The slow check of ``held`` waits for the test once it is under way."""
        started, finish = threading.Event(), threading.Event()

        def verify_entry(self, token):
            if token == held:
                self.started.set()
                self.finish.wait(10)
            return super().verify_entry(token)

    policy.tokens = Holding({e.key_id: e for e in (first, second, third)}, 8, slow_checks_max=1)
    server = MetricsServer.start("127.0.0.1:0", Metrics(), policy.verify_bearer)
    url = f"http://{server.address}/metrics"
    try:
        assert _get(url, f"Bearer {cached}")[0] == 200  # verified once: cached from now on
        answers = []
        waiting = threading.Thread(target=lambda: answers.append(_get(url, f"Bearer {held}")[0]))
        waiting.start()
        assert Holding.started.wait(10)
        with pytest.raises(urllib.error.HTTPError) as info:
            _get(url, f"Bearer {new}")
        assert info.value.code == 503
        assert int(info.value.headers["Retry-After"]) >= 1
        assert _get(url, f"Bearer {cached}")[0] == 200
        Holding.finish.set()
        waiting.join(10)
        assert answers == [200]
        assert _get(url, f"Bearer {new}")[0] == 200  # the bound is free again
        assert policy.tokens.statistics().slow_check_count == 3
    finally:
        Holding.finish.set()
        server.stop()
