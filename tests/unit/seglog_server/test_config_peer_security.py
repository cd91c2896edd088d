"""The credentials an instance presents to the others (--cluster-token-file, --cluster-tls-ca;
rpc/peer_security.py): read and checked at start, one line naming the setting when wrong."""

import pytest

from seglog_server.config import ConfigError, build_arg_parser, load_config
from seglog_server.rpc.peer_security import PeerSecurity

ETCD = ["--etcd", "http://h:1"]


def test_the_cluster_token_is_read_and_sent_as_a_bearer_token(tmp_path):
    token = tmp_path / "cluster.token"
    token.write_text("sgt_abc.def\n")
    peers = PeerSecurity.from_config(load_config(ETCD + ["--cluster-token-file", str(token)], environ={}))
    assert peers.metadata() == (("authorization", "Bearer sgt_abc.def"),) and not peers.tls
    assert PeerSecurity.from_config(load_config(ETCD, environ={})).metadata() == ()


def test_both_settings_are_in_the_help():
    text = build_arg_parser().format_help()
    for flag, env in (("--cluster-token-file", "SEGLOG_CLUSTER_TOKEN_FILE"), ("--cluster-tls-ca", "SEGLOG_CLUSTER_TLS_CA")):
        assert flag in text and env in text


@pytest.mark.parametrize("content, pattern", [
    (None, r"invalid cluster_token_file \(from --cluster-token-file\): .*No such file"),
    ("", r"invalid cluster_token_file \(from --cluster-token-file\): .*one token on one line"),
    ("a\nb\n", r"invalid cluster_token_file .*one token on one line"),
    ("two words", r"invalid cluster_token_file .*one token on one line"),
])
def test_a_bad_cluster_token_file_stops_the_start(tmp_path, content, pattern):
    path = tmp_path / "cluster.token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=pattern) as info:
        load_config(ETCD + ["--cluster-token-file", str(path)], environ={})
    assert "\n" not in str(info.value)


def test_peer_settings_need_etcd_and_the_ca_needs_tls(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    with pytest.raises(ConfigError, match=r"^cluster_token_file \(from --cluster-token-file\) requires etcd"):
        load_config(["--cluster-token-file", str(ca)], environ={})
    with pytest.raises(ConfigError, match=r"^cluster_tls_ca \(from --cluster-tls-ca\) requires tls_cert"):
        load_config(ETCD + ["--cluster-tls-ca", str(ca)], environ={})
