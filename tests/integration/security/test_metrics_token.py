"""``--metrics-require-token``: /metrics answers only a bearer token from the service's token file."""

from __future__ import annotations

import gzip
import urllib.error
import urllib.request

import pytest
from tests.support.integration_helpers import ServiceProcess, make_batch

from seglog.v1 import log_service_pb2 as pb

from seglog_server.config import ConfigError, load_config
from seglog_server.security.token_file import create_token, format_entry

pytestmark = pytest.mark.integration


def _get(url: str, token: str | None = None, *, gzipped: bool = False) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if gzipped:
        request.add_header("Accept-Encoding", "gzip")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
            if response.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            return response.status, body
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


_SCRAPE_ACL = """
[[allow]]
principals = ["root"]
operations = ["admin", "write"]
topics = ["*"]

[[allow]]
principals = ["scraper"]
operations = ["describe"]
topics = ["seen"]
"""


def test_metrics_show_a_principal_only_the_topics_its_acl_lets_it_describe(tmp_path):
    tokens, lines = {}, []
    for name in ("root", "scraper", "operator"):
        tokens[name], entry = create_token(name)
        lines.append(format_entry(entry))
    (tmp_path / "tokens").write_text("".join(lines))
    (tmp_path / "acl.toml").write_text(_SCRAPE_ACL + '\n[[allow]]\nprincipals = ["operator"]\n'
                                       'operations = ["describe"]\ntopics = ["*"]\n')
    service = ServiceProcess(tmp_path, [tmp_path / "data"], [
        "--auth-tokens", str(tmp_path / "tokens"), "--acl", str(tmp_path / "acl.toml"),
        "--metrics-require-token"]).start()
    root = (("authorization", f"Bearer {tokens['root']}"),)
    try:
        for topic in ("seen", "hidden"):
            service.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1), timeout=10,
                                     metadata=root)
            service.stub.Produce(pb.ProduceRequest(topic=topic, partition=0, records=make_batch([b"x"])),
                                 timeout=10, metadata=root)
        url = f"http://{service.metrics_address}/metrics"
        for gzipped in (False, True):
            status, body = _get(url, tokens["scraper"], gzipped=gzipped)
            assert status == 200
            assert b'topic="seen"' in body and b'topic="hidden"' not in body
            assert b"seglog_rpc_duration_seconds" in body  # series without a topic stay
        status, body = _get(url, tokens["operator"])  # describe on "*": every topic
        assert status == 200 and b'topic="seen"' in body and b'topic="hidden"' in body
    finally:
        assert service.stop() == 0, service.log()
