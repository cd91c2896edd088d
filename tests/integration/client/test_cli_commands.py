"""The ``seglog`` command end to end: subprocesses against a real service."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from seglog import Admin, Producer

pytestmark = pytest.mark.integration


def test_topic_create_list_describe_delete(run_cli):
    created = run_cli("topic", "create", "cli-events", "--partitions", "3", "--config", "retention.ms=86400000")
    assert created.returncode == 0, created.stderr
    assert created.stdout == "created topic cli-events with 3 partitions\n"
    listed = run_cli("topic", "list")
    assert "cli-events\t3\n" in listed.stdout
    described = run_cli("topic", "describe", "cli-events")
    assert described.returncode == 0
    assert "retention.ms=86400000" in described.stdout and "PARTITION  LOG_START" in described.stdout
    as_json = json.loads(run_cli("topic", "describe", "cli-events", "--format", "json").stdout)
    assert [p["partition"] for p in as_json["partitions"]] == [0, 1, 2]
    assert as_json["configs"]["retention.ms"] == "86400000"
    assert json.loads(run_cli("topic", "list", "--format", "json").stdout).count({"topic": "cli-events", "partitions": 3}) == 1
    deleted = run_cli("topic", "delete", "cli-events")
    assert deleted.returncode == 0 and deleted.stdout == "deleted topic cli-events\n"
    assert "cli-events" not in run_cli("topic", "list").stdout


def test_topic_errors_are_one_line_and_exit_1(run_cli):
    assert run_cli("topic", "create", "cli-dup").returncode == 0
    again = run_cli("topic", "create", "cli-dup")
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.startswith("seglog: error:") and "ALREADY_EXISTS" in again.stderr
    assert again.stderr.count("\n") == 1 and "Traceback" not in again.stderr
    assert run_cli("topic", "create", "cli-dup", "--if-not-exists").returncode == 0
    missing = run_cli("topic", "delete", "cli-nope")
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr
    assert run_cli("topic", "delete", "cli-nope", "--if-exists").returncode == 0
    bad = run_cli("topic", "create", "cli-bad", "--config", "retention.ms=soon")
    assert bad.returncode == 1 and "INVALID_ARGUMENT" in bad.stderr


def test_produce_text_lines_then_consume_them_back(run_cli, make_topic):
    topic = make_topic(partitions=2)
    produced = run_cli("produce", topic, "--partition", "1", "--key", "greeting", "--header", "source=test",
                       input="hello\nworld\nbinary \u00e9\n")
    assert produced.returncode == 0, produced.stderr
    assert "produced 3 records" in produced.stderr
    consumed = run_cli("consume", topic, "--partition", "1", "--from-beginning")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == "hello\nworld\nbinary \u00e9\n"
    columns = run_cli("consume", topic, "--from-beginning", "--print-partition", "--print-offset", "--print-key",
                      "--print-headers", "--max-records", "1")
    assert columns.stdout == "1\t0\tgreeting\tsource=test\thello\n"


def test_produce_json_lines_then_consume_json(run_cli, make_topic):
    topic = make_topic(partitions=3)
    lines = [
        {"key": "user-1", "value": "clicked", "headers": {"trace": "abc"}, "timestamp_ms": 1_700_000_000_000},
        {"key": "user-1", "value": None, "partition": 2},
        {"value": {"nested": [1, 2]}, "partition": 0, "timestamp_ms": 1_700_000_000_500},
        {"key_base64": "gAE=", "value_base64": "/w==", "partition": 0},  # not UTF-8
    ]
    produced = run_cli("produce", topic, "--format", "json", "--print-metadata",
                       input="\n".join(json.dumps(line) for line in lines) + "\n")
    assert produced.returncode == 0, produced.stderr
    assert len(produced.stdout.splitlines()) == 4
    consumed = run_cli("consume", topic, "--from-beginning", "--format", "json")
    assert consumed.returncode == 0, consumed.stderr
    records = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert len(records) == 4
    by_value = {r.get("value", r.get("value_base64")): r for r in records}
    assert by_value["clicked"]["key"] == "user-1" and by_value["clicked"]["headers"] == {"trace": "abc"}
    assert by_value["clicked"]["timestamp_ms"] == 1_700_000_000_000
    assert by_value[None]["partition"] == 2 and by_value[None]["key"] == "user-1"
    assert by_value['{"nested":[1,2]}']["partition"] == 0
    assert by_value["/w=="]["key_base64"] == "gAE="


def test_produce_reports_a_bad_json_line_with_its_number(run_cli, make_topic):
    topic = make_topic()
    result = run_cli("produce", topic, "--format", "json", input='{"value": "ok", "partition": 0}\n{oops\n')
    assert result.returncode == 1
    assert "line 2: not valid JSON" in result.stderr and "the 1 records before it were produced" in result.stderr


def test_produce_with_key_separator_and_compression_and_fsync(run_cli, make_topic):
    topic = make_topic()
    result = run_cli("produce", topic, "--partition", "0", "--key-separator", ":", "--compression", "zstd",
                     "--acks", "fsynced", input="k1:v1\nk2:v:2\n")
    assert result.returncode == 0, result.stderr
    consumed = run_cli("consume", topic, "--from-beginning", "--print-key")
    assert consumed.stdout == "k1\tv1\nk2\tv:2\n"


# Records stamped in 1970 are decades past any time retention: these topics keep them forever, so
# the retention pass of the shared service cannot move their log start mid-test.
KEEP_FOREVER = {"retention.ms": "-1"}


def test_consume_from_an_offset_a_time_and_the_end(run_cli, seglog_service, make_topic):
    topic = make_topic(configs=KEEP_FOREVER)
    with Producer(seglog_service.address) as producer:
        for i, ts in enumerate([1_000, 2_000, 3_000, 4_000]):
            producer.send(topic, f"r{i}".encode(), partition=0, timestamp_ms=ts)
    assert run_cli("consume", topic, "--offset", "2").stdout == "r2\nr3\n"
    assert run_cli("consume", topic, "--from-timestamp", "2500").stdout == "r2\nr3\n"
    assert run_cli("consume", topic, "--from-timestamp", "1970-01-01T00:00:01.500Z").stdout == "r1\nr2\nr3\n"
    assert run_cli("consume", topic, "--from-end").stdout == ""
    assert run_cli("consume", topic, "--from-beginning", "--max-records", "2", "--mode", "stream").stdout == "r0\nr1\n"


def test_consume_follow_prints_records_appended_later(run_cli, seglog_service, make_topic):
    topic = make_topic()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
    follower = subprocess.Popen(
        [sys.executable, "-m", "seglog_cli", "--server", seglog_service.address, "consume", topic, "--from-end",
         "--follow", "--max-records", "2", "--mode", "stream"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        with Producer(seglog_service.address) as producer:
            # The follower starts at the end it finds; records sent before it looks would be missed,
            # so keep sending until it has printed two (it exits by itself after --max-records 2).
            sent = 0
            while follower.poll() is None and sent < 1000:
                producer.send_and_wait(topic, f"late-{sent}".encode(), partition=0)
                sent += 1
                try:
                    follower.wait(timeout=0.05)
                except subprocess.TimeoutExpired:
                    pass
        out, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err
    lines = out.splitlines()
    assert len(lines) == 2 and all(line.startswith("late-") for line in lines)
    assert int(lines[1][5:]) == int(lines[0][5:]) + 1
    assert "processed 2 records" in err


def test_offsets_earliest_latest_by_time_and_max_timestamp(run_cli, seglog_service, make_topic):
    topic = make_topic(partitions=2, configs=KEEP_FOREVER)
    with Producer(seglog_service.address) as producer:
        for ts in (1_000, 5_000, 3_000):
            producer.send(topic, b"x", partition=0, timestamp_ms=ts).result()
    assert run_cli("offsets", topic).stdout == f"{topic}:0 end offset 3\n{topic}:1 end offset 0\n"
    assert run_cli("offsets", topic, "--partition", "0", "--earliest").stdout == f"{topic}:0 start offset 0\n"
    assert run_cli("offsets", topic, "--time", "2000").stdout == (
        f"{topic}:0 offset 1 timestamp_ms 5000\n{topic}:1 offset none (no record at or after the time)\n")
    assert run_cli("offsets", topic, "--max-timestamp").stdout == (
        f"{topic}:0 offset 1 timestamp_ms 5000\n{topic}:1 offset none (the partition holds no records)\n")
    rows = [json.loads(line) for line in run_cli("offsets", topic, "--latest", "--format", "json").stdout.splitlines()]
    assert rows == [{"topic": topic, "partition": 0, "offset": 3}, {"topic": topic, "partition": 1, "offset": 0}]


def test_offsets_of_an_unknown_topic_exit_1(run_cli):
    result = run_cli("offsets", "cli-unknown")
    assert result.returncode == 1 and "NOT_FOUND" in result.stderr


def test_dump_verify_passes_on_the_services_own_files(run_cli, seglog_service, make_topic):
    topic = make_topic(configs={"index.interval.bytes": "100", "segment.bytes": "20000"})
    with Producer(seglog_service.address, linger_ms=0) as producer:
        for i in range(300):
            producer.send(topic, f"record-{i}".encode() * 3, key=str(i % 7).encode(), partition=0,
                          timestamp_ms=1_700_000_000_000 + i).result()
    partition_dir = seglog_service.data_dir / f"{topic}-0"
    logs = sorted(partition_dir.glob("*.log"))
    assert len(logs) > 1  # rolled: several segments, closed ones with trimmed indexes
    verified = run_cli("dump", str(partition_dir), "--verify", "--deep", server=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.strip().endswith("files OK")
    index_lines = [line for line in verified.stdout.splitlines() if ".index:" in line]
    assert any(" 0 entries" not in line for line in index_lines)  # real entries were checked
    printed = run_cli("dump", str(logs[0]), "--print-records", server=False)
    assert printed.returncode == 0 and "baseOffset: 0 lastOffset: 0" in printed.stdout
    assert "payload: record-0record-0record-0" in printed.stdout
    entries = run_cli("dump", str(logs[0].with_suffix(".index")), server=False)
    assert entries.returncode == 0 and "offset: " in entries.stdout and "position: " in entries.stdout


def test_dump_verify_fails_on_a_damaged_copy_of_the_services_files(run_cli, seglog_service, make_topic, tmp_path):
    topic = make_topic(configs={"index.interval.bytes": "50"})
    with Producer(seglog_service.address, linger_ms=0) as producer:
        for i in range(20):
            producer.send(topic, f"r{i}".encode() * 10, partition=0).result()
    log = seglog_service.data_dir / f"{topic}-0" / f"{0:020d}.log"
    copy = tmp_path / log.name
    data = bytearray(log.read_bytes())
    data[len(data) // 2] ^= 0x55
    copy.write_bytes(bytes(data))
    (tmp_path / f"{0:020d}.index").write_bytes(log.with_suffix(".index").read_bytes())
    result = run_cli("dump", str(copy), "--verify", server=False)
    assert result.returncode == 1
    assert "CRC mismatch" in result.stdout or "unreadable batch" in result.stdout
    assert result.stdout.splitlines()[-1].startswith("FAILED:")


def test_admin_view_matches_what_the_cli_created(run_cli, seglog_service):
    assert run_cli("topic", "create", "cli-seen", "--partitions", "2", "--config", "cleanup.policy=compact").returncode == 0
    with Admin(seglog_service.address) as admin:
        description = admin.describe_topic("cli-seen")
    assert len(description.partitions) == 2 and description.configs["cleanup.policy"] == "compact"


def test_serve_runs_the_service_with_its_own_flags(tmp_path):
    import signal
    import time

    ready = tmp_path / "ready"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
    service = subprocess.Popen(
        [sys.executable, "-m", "seglog_cli", "serve", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
         "--data-dir", str(tmp_path / "data")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and service.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # the ready file is the only signal a starting process gives
        assert ready.exists(), service.stdout.read() if service.poll() is not None else "not ready"
        address = ready.read_text().strip()
        with Admin(address) as admin:
            admin.create_topic("served")
            assert [t.topic for t in admin.list_topics()] == ["served"]
        assert (tmp_path / "data" / "served-0").is_dir()
    finally:
        service.send_signal(signal.SIGTERM)
        code = service.wait(timeout=30)
    assert code == 0


def test_serve_help_is_the_services_help(run_cli):
    result = run_cli("serve", "--help", server=False)
    assert result.returncode == 0 and "--data-dir" in result.stdout and "--listen" in result.stdout


def test_follow_stops_cleanly_on_ctrl_c(seglog_service, make_topic):
    import signal

    topic = make_topic()
    with Producer(seglog_service.address) as producer:
        producer.send_and_wait(topic, b"first", partition=0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
    # As a terminal's foreground job gets it: Ctrl-C live. A test run started in the background
    # of a non-interactive shell inherits SIGINT ignored, and so would the CLI (an ignored
    # signal stays ignored across exec): the interrupt below would be lost.
    follower = subprocess.Popen(
        [sys.executable, "-m", "seglog_cli", "--server", seglog_service.address, "consume", topic,
         "--from-beginning", "--follow"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert follower.stdout.readline() == "first\n"  # it is following now
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err
    assert "processed 1 record\n" in err and "Traceback" not in err


def test_consume_offset_past_the_end_says_so_and_exits_1(run_cli, make_topic):
    topic = make_topic()
    assert run_cli("produce", topic, "--partition", "0", input="a\nb\n").returncode == 0
    past = run_cli("consume", topic, "--partition", "0", "--offset", "5")
    assert past.returncode == 1 and past.stdout == ""
    assert past.stderr == (
        f"seglog: error: --offset 5 is past the log end of {topic} (partition 0 ends at 2): "
        "nothing to read; add --follow to wait for offset 5\n"
    )
    at_end = run_cli("consume", topic, "--partition", "0", "--offset", "2")
    assert at_end.returncode == 0 and at_end.stdout == ""


def test_consume_follow_waits_for_an_offset_past_the_end(seglog_service, make_topic):
    topic = make_topic()
    command = [sys.executable, "-m", "seglog_cli", "--server", seglog_service.address, "consume", topic,
               "--partition", "0", "--offset", "3", "--follow", "--print-offset", "--max-records", "2"]
    follower = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")})
    try:
        assert follower.stderr.readline() == f"waiting for {topic} to reach offset 3 (partition 0 ends at 0)\n"
        with Producer(seglog_service.address, linger_ms=0) as producer:
            for value in (b"r0", b"r1", b"r2", b"r3", b"r4"):
                producer.send(topic, value, partition=0).result()
        out, err = follower.communicate(timeout=30)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    assert out == "3\tr3\n4\tr4\n"


def test_delete_records_moves_the_log_start(run_cli, make_topic):
    topic = make_topic(partitions=2)
    for partition in ("0", "1"):
        assert run_cli("produce", topic, "--partition", partition, input="a\nb\nc\nd\n").returncode == 0
    deleted = run_cli("delete-records", topic, "--partition", "0", "--before", "3")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == f"{topic}:0 log start offset 3\n"
    assert run_cli("consume", topic, "--partition", "0", "--from-beginning").stdout == "d\n"
    everything = run_cli("delete-records", topic, "--all", "--format", "json")
    assert [json.loads(line) for line in everything.stdout.splitlines()] == [
        {"topic": topic, "partition": 0, "log_start_offset": 4},
        {"topic": topic, "partition": 1, "log_start_offset": 4},
    ]
    beyond = run_cli("delete-records", topic, "--partition", "1", "--before", "99")
    assert beyond.returncode == 1 and "OUT_OF_RANGE" in beyond.stderr and "Traceback" not in beyond.stderr


def test_create_topic_exist_ok_returns_the_existing_topic(seglog_service, make_topic):
    topic = make_topic(partitions=2, configs={"retention.ms": "60000"})
    with Admin(seglog_service.address) as admin:
        again = admin.create_topic(topic, 5, exist_ok=True)
        assert (again.topic, again.partitions, again.configs["retention.ms"]) == (topic, 2, "60000")
        with pytest.raises(Exception, match="ALREADY_EXISTS|exists"):
            admin.create_topic(topic, 2)


def test_a_service_that_is_not_running_is_named_with_the_flag_that_changes_it(run_cli):
    """Connection refused, for every command that talks to the service: one line, exit 1."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening: refused
        for command in (["topic", "list"], ["offsets", "events"], ["explain", "events", "--offset", "0"],
                        ["delete-records", "events", "--all"], ["consume", "events"]):
            result = run_cli("--server", address, *command, server=False)
            assert (result.returncode, result.stdout) == (1, ""), (command, result.stderr)
            assert result.stderr == (f"seglog: error: cannot connect to {address} (Connection refused): "
                                     f"is the service running at {address}? (--server)\n"), command


def test_explain_names_the_batch_holding_the_target_and_no_server_path(run_cli, seglog_service, make_topic):
    topic = make_topic(configs={"index.interval.bytes": "1"})
    assert run_cli("produce", topic, "--partition", "0", input="a\nb\nc\n").returncode == 0
    with Producer(seglog_service.address) as producer:
        producer.send_many(topic, [b"d", b"e", b"f"], partition=0).result()  # one batch: offsets 3-5
    text = run_cli("explain", topic, "--partition", "0", "--offset", "4")
    assert text.returncode == 0, text.stderr
    assert "-> batch at offset 3 holding the target" in text.stdout
    by_time = run_cli("explain", topic, "--partition", "0", "--time", "0")
    assert "-> record at offset 0, the first at or after the time" in by_time.stdout
    as_json = run_cli("explain", topic, "--partition", "0", "--offset", "4", "--format", "json")
    answer = json.loads(as_json.stdout)
    assert int(answer["found_offset"]) == 3 and all("path" not in search for search in answer["searches"])
    for output in (text.stdout, by_time.stdout, as_json.stdout):
        assert str(seglog_service.data_dir) not in output and ".index" not in output


@pytest.mark.parametrize("command", [["explain", "events", "--offset", "-1"], ["consume", "events", "--offset", "-1"],
                                     ["explain", "events", "--offset", "0", "--partition", "-1"]])
def test_a_negative_offset_or_partition_is_a_usage_error_before_any_call(run_cli, command):
    result = run_cli("--server", "127.0.0.1:1", *command, server=False)  # refused before connecting
    assert result.returncode == 2 and "must be >= 0, got -1" in result.stderr, result.stderr
