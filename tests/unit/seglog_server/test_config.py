import pytest

from seglog_server.config import (
    REQUEST_OVERHEAD_BYTES,
    ConfigError,
    ServiceConfig,
    load_config,
    parse_listen_address,
)


def _write(tmp_path, text):
    path = tmp_path / "seglog.toml"
    path.write_text(text)
    return str(path)


def test_defaults_are_the_embedded_ones():
    config = load_config([], environ={})
    assert config == ServiceConfig()
    assert config.data_dirs == ("./data",)
    assert (config.listen_host, config.listen_port) == ("127.0.0.1", 50551)
    assert config.log_config.segment_bytes == 1_073_741_824


def test_flag_beats_environment_beats_file_beats_default(tmp_path):
    path = _write(tmp_path, 'listen = "127.0.0.1:1"\n[limits]\nfetch_bytes_max = 1000\n'
                  'storage_threads = 3\n')
    environ = {"SEGLOG_LISTEN": "127.0.0.1:2", "SEGLOG_FETCH_BYTES_MAX": "2000"}
    config = load_config(["--config", path, "--listen", "127.0.0.1:3"], environ=environ)
    assert config.listen == "127.0.0.1:3"  # flag
    assert config.fetch_bytes_max == 2000  # environment over file
    assert config.storage_threads == 3  # file over default
    assert config.shutdown_grace_ms == ServiceConfig().shutdown_grace_ms  # default


def test_topic_defaults_merge_per_key_with_the_same_precedence(tmp_path):
    path = _write(tmp_path, '[topic_defaults]\n"segment.bytes" = 4096\n"retention.ms" = 10\n'
                  '"flush.messages" = 7\n')
    environ = {"SEGLOG_TOPIC_DEFAULT_RETENTION_MS": "20", "SEGLOG_TOPIC_DEFAULT_FLUSH_MS": "30"}
    config = load_config(
        ["--config", path, "--topic-default", "flush.ms=40"], environ=environ
    )
    assert config.log_config.segment_bytes == 4096
    assert config.log_config.retention_ms == 20
    assert config.log_config.flush_ms == 40
    assert config.log_config.flush_messages == 7
    assert config.topic_defaults["segment.bytes"] == "4096"


def test_data_dirs_accept_repeated_flags_and_comma_lists():
    config = load_config(["--data-dir", "/a,/b", "--data-dir", "/c"], environ={})
    assert config.data_dirs == ("/a", "/b", "/c")
    assert load_config([], environ={"SEGLOG_DATA_DIRS": "/x, /y"}).data_dirs == ("/x", "/y")


def test_data_dirs_from_file_as_list(tmp_path):
    path = _write(tmp_path, 'data_dirs = ["/d1", "/d2"]\n')
    assert load_config(["--config", path], environ={}).data_dirs == ("/d1", "/d2")


def test_same_data_dir_twice_is_refused():
    with pytest.raises(ConfigError, match="data_dirs.*twice"):
        load_config(["--data-dir", "/a,/a"], environ={})


def test_malloc_tuning_flag_and_environment():
    assert load_config(["--no-malloc-tuning"], environ={}).malloc_tuning is False
    assert load_config([], environ={"SEGLOG_MALLOC_TUNING": "false"}).malloc_tuning is False
    assert load_config([], environ={}).malloc_tuning is True


@pytest.mark.parametrize(
    ("argv", "environ", "pattern"),
    [
        (["--fetch-bytes-max", "lots"], {}, r"fetch_bytes_max \(from --fetch-bytes-max\).*integer"),
        ([], {"SEGLOG_STORAGE_THREADS": "0"}, r"storage_threads \(from SEGLOG_STORAGE_THREADS\)"),
        (["--listen", "localhost"], {}, r"listen .*HOST:PORT"),
        (["--listen", "127.0.0.1:70000"], {}, r"listen .*0\.\.65535"),
        (["--listen", "::1:5"], {}, r"listen .*brackets"),
        (["--log-level", "LOUD"], {}, r"log_level"),
        (["--topic-default", "segment.bytes=tiny"], {}, r"topic default.*segment\.bytes"),
        (["--topic-default", "no.such.config=1"], {}, r"topic default.*no\.such\.config"),
        (["--topic-default", "segment.bytes"], {}, r"--topic-default must be NAME=VALUE"),
        ([], {"SEGLOG_TOPIC_DEFAULT_NO_SUCH": "1"}, r"SEGLOG_TOPIC_DEFAULT_NO_SUCH"),
        (["--no-such-flag"], {}, r"unrecognized arguments: --no-such-flag"),
    ],
)
def test_invalid_setting_names_the_setting_and_its_source(argv, environ, pattern):
    with pytest.raises(ConfigError, match=pattern) as info:
        load_config(argv, environ=environ)
    assert "\n" not in str(info.value)


def test_unknown_file_setting_is_refused(tmp_path):
    path = _write(tmp_path, "fetch_bytes_max = 1\n")  # a limit outside [limits]
    with pytest.raises(ConfigError, match=r"unknown setting fetch_bytes_max in .*seglog\.toml"):
        load_config(["--config", path], environ={})


def test_unreadable_or_malformed_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="cannot read --config"):
        load_config(["--config", str(tmp_path / "missing.toml")], environ={})
    path = _write(tmp_path, "listen = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(["--config", path], environ={})


def test_response_limit_below_request_limit_is_refused():
    with pytest.raises(ConfigError, match=r"response_bytes_max=1000000 .* >= request_bytes_max"):
        load_config(
            ["--request-bytes-max", "2000000", "--response-bytes-max", "1000000",
             "--fetch-bytes-max", "1000"],
            environ={},
        )


def test_fetch_limit_above_response_limit_is_refused():
    with pytest.raises(ConfigError, match=r"fetch_bytes_max=16777216 \(from SEGLOG_FETCH"):
        load_config([], environ={"SEGLOG_FETCH_BYTES_MAX": str(16 * 1024 * 1024)})


def test_default_max_message_bytes_must_fit_a_request():
    with pytest.raises(ConfigError, match=r"max\.message\.bytes=2000000 \(from --topic-default\)"):
        load_config(
            ["--topic-default", "max.message.bytes=2000000", "--request-bytes-max", "1500000"],
            environ={},
        )


def test_max_message_bytes_exactly_at_the_request_limit_is_accepted():
    config = load_config(
        ["--topic-default", f"max.message.bytes={1_500_000 - REQUEST_OVERHEAD_BYTES}",
         "--request-bytes-max", "1500000"],
        environ={},
    )
    assert config.message_bytes_max == config.log_config.max_message_bytes


def test_other_programs_seglog_variables_are_ignored():
    assert load_config([], environ={"SEGLOG_CLIENT_TARGET": "x:1"}) == ServiceConfig()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:50551", ("::1", 50551)),
     ("0.0.0.0:9", ("0.0.0.0", 9)), ("localhost:1", ("localhost", 1))],
)
def test_listen_address_parses_hosts_and_ports(text, expected):
    assert parse_listen_address(text) == expected


def test_snapshot_ttl_is_a_named_limit_checked_against_the_maintenance_period():
    assert load_config(["--snapshot-ttl-ms", "60000"], environ={}).snapshot_ttl_ms == 60_000
    assert load_config([], environ={"SEGLOG_SNAPSHOT_TTL_MS": "5000"}).snapshot_ttl_ms == 5000
    with pytest.raises(ConfigError, match="snapshot_ttl_ms=500 .*must be >= maintenance_interval_ms=1000"):
        load_config(["--snapshot-ttl-ms", "500"], environ={})
    with pytest.raises(ConfigError, match="snapshot_ttl_ms"):
        load_config(["--snapshot-ttl-ms", "0"], environ={})


def test_metrics_listen_defaults_to_loopback_9551_and_none_turns_it_off():
    assert load_config([], environ={}).metrics_listen == "127.0.0.1:9551"
    assert load_config(["--metrics-listen", "none"], environ={}).metrics_listen is None
    assert load_config([], environ={"SEGLOG_METRICS_LISTEN": "0.0.0.0:0"}).metrics_listen == "0.0.0.0:0"


def test_a_malformed_metrics_listen_names_the_setting():
    with pytest.raises(ConfigError, match="metrics_listen"):
        load_config(["--metrics-listen", "9551"], environ={})
# -- security settings --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (["--tls-cert", "c.pem"], "tls_cert .* requires tls_key"),
        (["--tls-key", "k.pem"], "tls_key .* requires tls_cert"),
        (["--tls-client-ca", "ca.pem"], "tls_client_ca .* requires tls_cert and tls_key"),
        (["--principal-requests-max", "2000"], "principal_requests_max=2000 .* rpc_concurrency_max"),
        (["--principal-streams-max", "20000"], "principal_streams_max=20000 .* consume_streams_max"),
    ],
)
def test_security_settings_are_checked_together(argv, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config(argv, environ={})


def test_a_bad_security_file_stops_the_start_naming_the_setting(tmp_path):
    acl = tmp_path / "acl.toml"
    acl.write_text("[[allow]]\nprincipals = ['a']\n")
    with pytest.raises(ConfigError, match="security file: ACL rule 1"):
        load_config(["--acl", str(acl)], environ={})
    with pytest.raises(ConfigError, match="auth_tokens: cannot read"):
        load_config(["--auth-tokens", str(tmp_path / "missing")], environ={})


@pytest.mark.parametrize(
    ("listen", "loopback"),
    [("127.0.0.1:1", True), ("[::1]:1", True), ("localhost:1", True), ("0.0.0.0:1", False),
     ("[::]:1", False), ("10.1.2.3:1", False), ("example.com:1", False)],
)
def test_loopback_listen_addresses(listen, loopback):
    assert load_config(["--listen", listen], environ={}).listens_on_loopback is loopback


@pytest.mark.parametrize("line, message", [
    ("data_dirs = 5", r"data_dirs in .*: must be an array of strings or a string, found 5"),
    ("data_dirs = [1, 2]", r"data_dirs in .*: must be an array of strings"),
    ("listen = 50551", r"listen in .*: must be a string, found 50551"),
    ("malloc_tuning = \"yes\"", r"malloc_tuning in .*: must be true or false"),
    ("log_level = 3", r"log_level in .*: must be a string"),
    ("ready_file = false", r"ready_file in .*: must be a string"),
    ("[limits]\nfetch_bytes_max = \"2M\"", r"limits.fetch_bytes_max in .*: must be an integer"),
    ("[limits]\nrpc_concurrency_max = true", r"limits.rpc_concurrency_max in .*: must be an integer"),
    ("[limits]\nshutdown_grace_ms = 1.5", r"limits.shutdown_grace_ms in .*: must be an integer"),
])
def test_a_toml_value_of_the_wrong_type_is_refused_naming_the_setting(tmp_path, line, message):
    path = _write(tmp_path, line + "\n")
    with pytest.raises(ConfigError, match=message):
        load_config(["--config", path], environ={})


def test_every_setting_declares_its_toml_types():
    from seglog_server.config import _SETTINGS

    for setting in _SETTINGS:
        assert setting.toml_types, setting.name


def test_per_client_waiter_and_stream_limits_fit_the_service_wide_ones():
    with pytest.raises(ConfigError, match=r"long_poll_waiters_per_client_max=50 .* <= long_poll_waiters_max=10"):
        load_config(["--long-poll-waiters-max", "10", "--long-poll-waiters-per-client-max", "50"],
                    environ={})
    with pytest.raises(ConfigError, match=r"consume_streams_per_client_max=20000 .* <= consume_streams_max"):
        load_config(["--consume-streams-per-client-max", "20000"], environ={})
    config = load_config(["--long-poll-waiters-max", "10", "--long-poll-waiters-per-client-max", "10"],
                         environ={})
    assert config.long_poll_waiters_per_client_max == 10


def test_batch_records_max_must_leave_room_to_fetch_such_a_batch_decoded():
    assert load_config([], environ={}).batch_records_max == 131_072
    # 8 MiB between the limits holds the decoded overhead of 174,762 records, not of 200,000.
    with pytest.raises(ConfigError, match=r"batch_records_max=200000 \(from SEGLOG_BATCH_RECORDS_MAX\).*"
                                          r"fetched decoded"):
        load_config([], environ={"SEGLOG_BATCH_RECORDS_MAX": "200000"})
    assert load_config(["--batch-records-max", "174762"], environ={}).batch_records_max == 174_762


def test_the_consume_buffer_is_checked_against_the_fetch_limit_and_its_minimum():
    with pytest.raises(ConfigError, match=r"consume_buffer_bytes_max=1000000 \(from --consume-buffer"
                                          r".* >= fetch_bytes_max=2097152"):
        load_config(["--consume-buffer-bytes-max", "1000000"], environ={})
    with pytest.raises(ConfigError, match=r"consume_response_bytes_min=4194304 .* <= consume_buffer_bytes_max=2097152"):
        load_config(["--consume-buffer-bytes-max", str(2 * 1024 * 1024),
                     "--consume-response-bytes-min", str(4 * 1024 * 1024)], environ={})
    config = load_config(["--consume-buffer-bytes-max", str(16 * 1024 * 1024)], environ={})
    assert (config.consume_buffer_bytes_max, config.consume_response_bytes_min) == (16 * 1024 * 1024, 65536)
