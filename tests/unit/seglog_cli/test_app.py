"""The ``seglog`` command's arguments and help, without a service."""

from __future__ import annotations

import argparse
import json

import pytest

import grpc

from seglog import ServiceOverloadedError, ServiceUnavailableError
from seglog.structs import ConsumerRecord
from seglog_cli import _common, main
from seglog_cli._app import _unreachable, build_parser

SUBCOMMANDS = [
    ["topic"],
    ["topic", "create"],
    ["topic", "list"],
    ["topic", "describe"],
    ["topic", "delete"],
    ["produce"],
    ["consume"],
    ["offsets"],
    ["delete-records"],
    ["dump"],
]


@pytest.mark.parametrize("command", SUBCOMMANDS, ids=" ".join)
def test_every_subcommand_help_teaches_with_examples(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out
    assert f"seglog {' '.join(command)}" in out


def test_top_level_help_lists_every_command_and_examples(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("serve", "topic", "produce", "consume", "offsets", "delete-records", "dump"):
        assert command in out
    assert "examples:" in out and "SEGLOG_SERVER" in out


def test_server_option_works_before_and_after_the_command():
    parser = build_parser()
    assert parser.parse_args(["--server", "h:1", "topic", "list"]).server == "h:1"
    assert parser.parse_args(["topic", "list", "--server", "h:2"]).server == "h:2"


def test_server_defaults_to_the_environment_then_the_builtin(monkeypatch):
    parser = build_parser()
    monkeypatch.delenv(_common.SERVER_ENV, raising=False)
    assert _common.server_of(parser.parse_args(["topic", "list"])) == "127.0.0.1:50551"
    monkeypatch.setenv(_common.SERVER_ENV, "10.0.0.5:7000")
    assert _common.server_of(parser.parse_args(["topic", "list"])) == "10.0.0.5:7000"
    assert _common.server_of(parser.parse_args(["topic", "list", "--server", "x:1"])) == "x:1"


def test_topic_create_collects_repeated_configs():
    args = build_parser().parse_args(
        ["topic", "create", "t", "--partitions", "3", "--config", "retention.ms=5", "--config", "a.b=x=y"]
    )
    assert args.partitions == 3 and args.config == [("retention.ms", "5"), ("a.b", "x=y")]


def test_bad_config_syntax_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["topic", "create", "t", "--config", "novalue"])
    assert exit_info.value.code == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_consume_start_options_are_mutually_exclusive(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["consume", "t", "--from-beginning", "--from-end"])
    assert exit_info.value.code == 2


def test_consume_from_timestamp_accepts_iso_and_relative_times():
    parser = build_parser()
    args = parser.parse_args(["consume", "t", "--from-timestamp", "2026-11-22T10:00:00Z"])
    assert args.from_timestamp == 1795341600000
    args = parser.parse_args(["consume", "t", "--from-timestamp=-1h"])
    assert isinstance(args.from_timestamp, int)


def test_unknown_arguments_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["topic", "list", "--bogus"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_offsets_default_to_the_log_end():
    args = build_parser().parse_args(["offsets", "t"])
    assert args.target == -1 and args.time is None


def test_a_service_that_cannot_be_reached_is_one_line_and_exit_1(capsys):
    assert main(["--server", "127.0.0.1:1", "topic", "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("seglog: error: cannot connect to 127.0.0.1:1") and "(--server)" in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1700000000000", 1700000000000),
        ("2026-11-22T10:00:00Z", 1795341600000),
        ("2026-11-22T10:00:00", 1795341600000),  # no offset: UTC
        ("2026-11-22T12:00:00+02:00", 1795341600000),
        ("2026-11-22T10:00:00.250Z", 1795341600250),
        ("now", 5_000_000),
        ("now-15m", 5_000_000 - 900_000),
        ("-2h", 5_000_000 - 7_200_000),
        ("now-30s", 5_000_000 - 30_000),
        ("now-500ms", 4_999_500),
        ("now-1d", 5_000_000 - 86_400_000),
    ],
)
def test_parse_time_ms_understands_epoch_ms_iso_and_relative_times(text, expected):
    assert _common.parse_time_ms(text, now_ms=5_000_000) == expected


@pytest.mark.parametrize("text", ["yesterday", "now+5m", "-5w", ""])
def test_parse_time_ms_refuses_other_text(text):
    with pytest.raises(argparse.ArgumentTypeError):
        _common.parse_time_ms(text, now_ms=0)


def test_record_json_round_trips_through_the_produce_input_format():
    record = ConsumerRecord("t", 1, 7, 99, b"k", b"\xff\x00binary", (("a", b"1"), ("b", None)))
    line = _common.record_to_json(record)
    obj = json.loads(line)
    assert obj["key"] == "k" and "value" not in obj and obj["headers"] == {"a": "1", "b": None}
    fields = _common.decode_record_json(json.dumps({k: obj[k] for k in ("key", "value_base64", "headers")}))
    assert fields["key"] == b"k" and fields["value"] == b"\xff\x00binary"
    assert fields["headers"] == [("a", b"1"), ("b", None)]


def test_record_json_lists_header_pairs_when_keys_repeat():
    record = ConsumerRecord("t", 0, 0, 0, None, None, (("h", b"1"), ("h", b"2")))
    obj = json.loads(_common.record_to_json(record))
    assert obj["headers"] == [["h", "1"], ["h", "2"]] and obj["key"] is None and obj["value"] is None
    assert _common.decode_record_json(json.dumps({"headers": obj["headers"]}))["headers"] == [("h", b"1"), ("h", b"2")]


def test_produce_json_sends_non_string_values_as_their_json_text():
    fields = _common.decode_record_json('{"value": {"n": 1}, "timestamp_ms": 5, "partition": 2}')
    assert fields["value"] == b'{"n":1}' and fields["timestamp_ms"] == 5 and fields["partition"] == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"valu": "x"}', "unknown fields"),
        ('{"timestamp_ms": "soon"}', "timestamp_ms must be an integer"),
        ('{"headers": 5}', "headers must be"),
    ],
)
def test_produce_json_reports_what_is_wrong_with_a_line(line, message):
    with pytest.raises(_common.CliError, match=message):
        _common.decode_record_json(line)


def test_text_of_escapes_bytes_that_are_not_utf8():
    assert _common.text_of(b"caf\xc3\xa9") == "café"
    assert _common.text_of(b"\xff") == "\\xff"
    assert _common.text_of(None) == "null"


class _Terminal:
    """A stream that says it is a terminal (what tqdm draws on)."""

    def __init__(self) -> None:
        self.text = ""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


class _Pipe(_Terminal):
    def isatty(self) -> bool:
        return False


def test_progress_draws_only_on_a_terminal():
    terminal, pipe = _Terminal(), _Pipe()
    bar = _common.progress(total=100, desc="verify", unit="B", stream=terminal)
    bar.update(50)
    bar.close()
    assert "verify" in terminal.text
    quiet = _common.progress(total=100, desc="verify", unit="B", stream=pipe)
    quiet.update(50)
    quiet.close()
    assert pipe.text == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["consume", "t", "--partition", "-1"],
        ["consume", "t", "--offset", "-5"],
        ["consume", "t", "--max-records", "-1"],
        ["produce", "t", "--partition", "-1"],
        ["produce", "t", "--batch-size", "0"],
        ["offsets", "t", "--partition", "-2"],
        ["topic", "create", "t", "--partitions", "0"],
        ["delete-records", "t", "--partition", "-1", "--before", "3"],
        ["delete-records", "t", "--before", "-3"],
        ["consume", "t", "--partition", "one"],
    ],
    ids=" ".join,
)
def test_negative_or_malformed_numbers_are_one_line_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("seglog ")
    assert "must be >= " in err or "expected an integer" in err


def test_delete_records_needs_before_or_all(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["delete-records", "t"])
    assert exit_info.value.code == 2
    assert "--before" in capsys.readouterr().err


def test_a_value_error_from_the_client_is_a_one_line_usage_error(monkeypatch, capsys):
    from seglog_cli import offsets

    def refuse(args):
        raise ValueError("partition must be >= 0, got -1")

    monkeypatch.setattr(offsets, "_run", refuse)
    assert main(["offsets", "t"]) == 2
    assert capsys.readouterr().err == "seglog: error: partition must be >= 0, got -1\n"


@pytest.mark.parametrize(
    ("error", "hint"),
    [
        (ServiceUnavailableError("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
                                 "Failed to connect to remote host: Connection refused",
                                 code=grpc.StatusCode.UNAVAILABLE),
         "cannot connect to 127.0.0.1:1 (Connection refused): is the service running at 127.0.0.1:1? (--server)"),
        # The service's own UNAVAILABLE (a log directory offline, a stop under way) says more itself.
        (ServiceUnavailableError("log directory /data is offline", code=grpc.StatusCode.UNAVAILABLE), None),
        (ServiceUnavailableError("the service is stopping", code=grpc.StatusCode.UNAVAILABLE), None),
        # Overload is not "not running", whatever its text.
        (ServiceOverloadedError("failed to connect to all addresses", code=grpc.StatusCode.RESOURCE_EXHAUSTED), None),
    ],
    ids=["refused", "log-dir-offline", "stopping", "overloaded"],
)
def test_only_a_channel_that_never_connected_gets_the_server_hint(error, hint):
    assert _unreachable(error, "127.0.0.1:1") == hint
