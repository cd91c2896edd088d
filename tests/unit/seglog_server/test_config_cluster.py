"""Cluster settings (--etcd, --cluster-name, --instance-id, --advertise, --lease-ttl-ms): off by
default, the same three spellings as every setting, checked at start with one line naming them."""

import pytest

from seglog_server.config import ConfigError, ServiceConfig, build_arg_parser, load_config


def test_cluster_mode_is_off_by_default():
    config = load_config([], environ={})
    assert config.etcd == () and config == ServiceConfig()
    assert config.cluster_name == "seglog" and config.lease_ttl_ms == 10_000
    assert config.instance_id is None and config.advertise is None


def test_flags_environment_and_file_spell_the_same_settings(tmp_path):
    file = tmp_path / "seglog.toml"
    file.write_text('etcd = ["http://127.0.0.1:2379", "http://127.0.0.1:2380"]\ncluster_name = "from-file"\n'
                    'lease_ttl_ms = 4000\n')
    environ = {"SEGLOG_INSTANCE_ID": "a-1", "SEGLOG_CLUSTER_NAME": "from-env"}
    config = load_config(["--config", str(file), "--advertise", "a.example:50551"], environ=environ)
    assert config.etcd == ("http://127.0.0.1:2379", "http://127.0.0.1:2380")
    assert (config.cluster_name, config.instance_id, config.advertise, config.lease_ttl_ms) == \
        ("from-env", "a-1", "a.example:50551", 4000)
    flags = load_config(["--etcd", "http://e1:2379,http://e2:2379", "--cluster-name", "c"], environ=environ)
    assert flags.etcd == ("http://e1:2379", "http://e2:2379") and flags.cluster_name == "c"


def test_every_cluster_flag_is_in_the_help():
    text = build_arg_parser().format_help()
    for flag, env in (("--etcd", "SEGLOG_ETCD"), ("--cluster-name", "SEGLOG_CLUSTER_NAME"),
                      ("--instance-id", "SEGLOG_INSTANCE_ID"), ("--advertise", "SEGLOG_ADVERTISE"),
                      ("--lease-ttl-ms", "SEGLOG_LEASE_TTL_MS")):
        assert flag in text and env in text


@pytest.mark.parametrize("argv, pattern", [
    (["--cluster-name", "x"], r"^cluster_name \(from --cluster-name\) requires etcd"),
    (["--instance-id", "x"], r"^instance_id \(from --instance-id\) requires etcd"),
    (["--advertise", "h:1"], r"^advertise \(from --advertise\) requires etcd"),
    (["--lease-ttl-ms", "4000"], r"^lease_ttl_ms \(from --lease-ttl-ms\) requires etcd"),
    (["--etcd", "ftp://h:1"], r"^invalid cluster setting \(from --etcd\): etcd: 'ftp://h:1'"),
    (["--etcd", "http://h:1", "--lease-ttl-ms", "2500"], r"^invalid lease_ttl_ms=2500 .*whole seconds"),
    (["--etcd", "http://h:1", "--lease-ttl-ms", "1000"], r"^invalid cluster setting \(from --lease-ttl-ms\): lease-ttl"),
    (["--etcd", "http://h:1", "--advertise", "nope"], r"^invalid cluster setting \(from --advertise\): advertise"),
    (["--etcd", "http://h:1", "--instance-id", "a/b"], r"^invalid cluster setting \(from --instance-id\): instance-id"),
    (["--etcd", "http://h:1", "--cluster-name", "a b"], r"^invalid cluster setting \(from --cluster-name\): cluster-name"),
])
def test_a_wrong_cluster_setting_stops_the_start_with_one_line_naming_it(argv, pattern):
    with pytest.raises(ConfigError, match=pattern) as info:
        load_config(argv, environ={})
    assert "\n" not in str(info.value)


def test_an_unknown_cluster_key_in_the_file_is_refused(tmp_path):
    file = tmp_path / "seglog.toml"
    file.write_text('etcd_endpoints = "http://h:1"\n')
    with pytest.raises(ConfigError, match="unknown setting etcd_endpoints"):
        load_config(["--config", str(file)], environ={})
