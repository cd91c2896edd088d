"""Tiered storage's settings (--remote-storage, --s3-endpoint, --remote-fetch-cache-bytes) and
topic configs (remote.storage.enable, local.retention.ms/bytes): off by default, checked at start
and at CreateTopic with one line naming what is wrong."""

import pytest

from seglog_server.config import ConfigError, ServiceConfig, build_arg_parser, load_config, remote_storage_location
from seglog_server.storage.base.errors import InvalidConfigError
from seglog_server.storage.base.log_config import LogConfig
from seglog_server.storage.manager.log_manager import LogManager


def test_tiering_is_off_by_default_and_changes_nothing():
    config = load_config([], environ={})
    assert config == ServiceConfig() and config.remote_storage is None
    assert remote_storage_location(config) is None
    assert LogConfig().remote_storage_enable is False
    assert LogConfig().local_retention_ms == -2 and LogConfig().local_retention_bytes == -2


def test_flags_environment_and_file_spell_the_same_settings(tmp_path):
    file = tmp_path / "seglog.toml"
    file.write_text('remote_storage = "s3://from-file/a/b"\n[limits]\nremote_fetch_cache_bytes = 1048576\n')
    config = load_config(["--config", str(file)], environ={"SEGLOG_S3_ENDPOINT": "http://127.0.0.1:8333"})
    assert remote_storage_location(config) == ("from-file", "a/b")
    assert config.s3_endpoint == "http://127.0.0.1:8333" and config.remote_fetch_cache_bytes == 1048576
    flags = load_config(["--remote-storage", "s3://bucket-1"], environ={})
    assert remote_storage_location(flags) == ("bucket-1", "")
    text = build_arg_parser().format_help()
    for flag in ("--remote-storage", "--s3-endpoint", "--remote-fetch-cache-bytes", "--remote-read-timeout-ms"):
        assert flag in text


def test_the_remote_read_deadline_is_its_own_one_attempt_bounded_by_it():
    config = load_config(["--remote-storage", "s3://bucket", "--remote-read-timeout-ms", "1500"], environ={})
    assert config.remote_read_timeout_ms == 1500 and ServiceConfig().remote_read_timeout_ms == 5000
    from seglog_server.storage.remote import ObjectStoreConfig

    uploads = ObjectStoreConfig("b")
    reads = uploads.for_reads(config.remote_read_timeout_ms / 1000)
    assert (reads.attempts_max, reads.read_timeout_s, reads.connect_timeout_s) == (1, 1.5, 1.5)
    assert (uploads.attempts_max, uploads.read_timeout_s) == (3, 10.0)  # the uploader's stays


@pytest.mark.parametrize("argv, pattern", [
    (["--s3-endpoint", "http://h:1"], r"^s3_endpoint \(from --s3-endpoint\) requires remote_storage"),
    (["--remote-fetch-cache-bytes", "5"], r"^remote_fetch_cache_bytes \(from .*\) requires remote_storage"),
    (["--remote-read-timeout-ms", "5"], r"^remote_read_timeout_ms \(from .*\) requires remote_storage"),
    (["--remote-orphan-grace-ms", "5"], r"^remote_orphan_grace_ms \(from .*\) requires remote_storage"),
    (["--remote-storage", "s3://ok-bucket", "--remote-read-timeout-ms", "0"], r"remote_read_timeout_ms"),
    (["--remote-storage", "http://bucket"], r"invalid remote_storage .*must be s3://BUCKET"),
    (["--remote-storage", "s3://B_ad"], r"invalid remote_storage .*bucket must be"),
    (["--remote-storage", "s3://ok-bucket", "--s3-endpoint", "http://key:secret@h:1"],
     r"invalid s3_endpoint .*must not hold credentials"),
    (["--remote-storage", "s3://ok-bucket", "--s3-endpoint", "ftp://h"], r"invalid s3_endpoint .*http"),
    (["--topic-default", "remote.storage.enable=true"], r"remote.storage.enable=true .*requires remote_storage"),
])
def test_bad_settings_are_refused_in_one_line(argv, pattern):
    with pytest.raises(ConfigError, match=pattern) as info:
        load_config(argv, environ={})
    assert "\n" not in str(info.value)


def test_local_retention_resolves_minus_two_to_the_whole_logs():
    config = LogConfig.from_properties({"retention.ms": "1000", "retention.bytes": "500"})
    assert (config.local_retention_ms_effective, config.local_retention_bytes_effective) == (1000, 500)
    tiered = LogConfig.from_properties({"remote.storage.enable": "true", "local.retention.ms": "10",
                                        "local.retention.bytes": "20"})
    assert (tiered.local_retention_ms_effective, tiered.local_retention_bytes_effective) == (10, 20)
    assert tiered.to_properties()["remote.storage.enable"] == "true"
    assert LogConfig.from_properties(tiered.to_properties()) == tiered


@pytest.mark.parametrize("props, pattern", [
    ({"remote.storage.enable": "true", "cleanup.policy": "compact"}, r"not supported on a compacted topic"),
    ({"remote.storage.enable": "true", "cleanup.policy": "compact,delete"}, r"not supported on a compacted topic"),
    ({"retention.ms": "100", "local.retention.ms": "200"}, r"local.retention.ms \(200\) must not exceed retention.ms"),
    ({"retention.bytes": "100", "local.retention.bytes": "-1"}, r"local.retention.bytes \(-1\) must not exceed"),
    ({"local.retention.ms": "-3"}, r"local.retention.ms must be at least -2"),
    ({"remote.storage.enable": "yes"}, r"remote.storage.enable must be true or false"),
])
def test_bad_topic_configs_are_refused(props, pattern):
    with pytest.raises(InvalidConfigError, match=pattern):
        LogConfig.from_properties(props)


def test_a_service_without_a_store_refuses_a_tiered_topic(tmp_path):
    manager = LogManager([str(tmp_path / "d")])
    manager.startup()
    try:
        with pytest.raises(InvalidConfigError, match=r"remote.storage.enable=true needs a service started with --remote-storage"):
            manager.create_topic("t", 1, {"remote.storage.enable": "true"})
        assert manager.list_topics() == []
        manager.create_topic("plain", 1, {"local.retention.ms": "1000", "retention.ms": "2000"})
    finally:
        manager.shutdown()
