"""A client-only install: the ``seglog`` command with the service (``seglog_server``), the cleaning
job (``seglog_spark``) and the ``spark`` extra (pyspark, numpy) made unimportable by a
sitecustomize shim. Every command's help runs; a command that needs what is missing says in one
line which extra to install, and no command fails with a traceback.

Each case is a real ``python -m seglog_cli`` process; the commands are read from the parser, so a
new command is covered without editing this file."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap

import pytest

from seglog_cli._app import build_parser
from seglog_cli._common import SERVER_EXTRA
from seglog_cli.cleaner import SPARK_EXTRA

# What a client-only install lacks. Installed as sitecustomize.py, ahead of every other finder.
MISSING = ("seglog_server", "seglog_spark", "pyspark", "numpy")
CLIENT_ONLY = textwrap.dedent(f"""
    import sys

    class ClientOnly:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in {set(MISSING)!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, ClientOnly())
""")
# Nothing listens on port 1: a command that gets as far as connecting reports it in one line.
NOWHERE = "127.0.0.1:1"


def _subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found.append((*prefix, name))
                found += _subcommands(child, (*prefix, name))
    return found


COMMANDS = _subcommands(build_parser())
# The commands whose own help belongs to a missing package (`serve` hands every argument, --help
# too, to the service).
NEEDS_SERVER_FOR_HELP = {("serve",)}


@pytest.fixture(scope="module")
def client_only(tmp_path_factory):
    shim_dir = tmp_path_factory.mktemp("client-only")
    (shim_dir / "sitecustomize.py").write_text(CLIENT_ONLY)
    env = {key: value for key, value in os.environ.items() if not key.startswith("SEGLOG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(shim_dir), *filter(None, [env.get("PYTHONPATH")])])
    for name in MISSING:  # the shim is in force
        shim = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, env=env)
        assert f"No module named '{name}'" in shim.stderr, shim.stderr
    return env


def seglog(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seglog_cli", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def assert_one_line(finished: subprocess.CompletedProcess, extra: str) -> None:
    assert finished.returncode == 1, finished.stderr
    assert finished.stdout == ""
    lines = finished.stderr.splitlines()
    assert len(lines) == 1, finished.stderr
    assert lines[0].startswith("seglog: error: ")
    assert lines[0].endswith(extra)


def test_the_parser_knows_the_commands_this_file_relies_on():
    assert {("serve",), ("token", "create"), ("cleaner", "run"), ("cleaner", "list"), ("produce",)} <= set(COMMANDS)


def test_top_level_help_lists_every_command(client_only):
    finished = seglog(client_only, "--help")
    assert finished.returncode == 0, finished.stderr
    for command in {command[0] for command in COMMANDS}:
        assert command in finished.stdout


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - NEEDS_SERVER_FOR_HELP), ids=" ".join)
def test_every_command_help_runs_without_the_service_or_the_cleaner(client_only, command):
    finished = seglog(client_only, *command, "--help")
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.startswith("usage: seglog ")
    assert finished.stderr == ""


def test_serve_names_the_server_extra_in_one_line(client_only):
    assert_one_line(seglog(client_only, "serve", "--help"), SERVER_EXTRA)
    assert_one_line(seglog(client_only, "serve", "--data-dir", "unused"), SERVER_EXTRA)


def test_token_create_names_the_server_extra_in_one_line_and_writes_nothing(client_only, tmp_path):
    tokens = tmp_path / "tokens"
    assert_one_line(seglog(client_only, "token", "create", "alice", "--file", str(tokens)), SERVER_EXTRA)
    assert not tokens.exists()


@pytest.mark.parametrize("engine", ["spark", "python"])
def test_cleaner_run_names_the_spark_extra_and_the_job_package(client_only, engine):
    finished = seglog(client_only, "cleaner", "run", "--once", "--engine", engine, "--server", NOWHERE)
    assert_one_line(finished, SPARK_EXTRA)
    assert "seglog_spark" in finished.stderr and "numpy" in finished.stderr


@pytest.mark.parametrize("command", [("cleaner", "list"), ("topic", "list"), ("offsets", "t")], ids=" ".join)
def test_client_commands_run_and_report_the_unreachable_service_in_one_line(client_only, command):
    finished = seglog(client_only, "--server", NOWHERE, *command)
    assert finished.returncode == 1, finished.stderr
    assert finished.stderr.splitlines() == [
        f"seglog: error: cannot connect to {NOWHERE} (Connection refused): is the service running at {NOWHERE}? "
        f"(--server)"]


def test_dump_runs_on_the_codec_alone(client_only, tmp_path):
    finished = seglog(client_only, "dump", str(tmp_path))  # an empty directory: nothing to print
    assert (finished.returncode, finished.stdout, finished.stderr) == (0, "", "")
