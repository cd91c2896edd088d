"""The first-run scripts (scripts/): they say what they install before they install it, Debian
packages that ship a service are installed without starting it, and the linter runs before the
tests. Read from the scripts' text (running them would install packages on this machine) and
checked with ``bash -n``."""

from __future__ import annotations

import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = sorted(path for path in (ROOT / "scripts").iterdir() if path.is_file())
# Debian packages that need no guard: they ship no service.
NO_SERVICE = {"openjdk-17-jre-headless"}


# `apt-get install` run as a command (at a line's start or after && / ;), not quoted in a message.
APT_INSTALL = re.compile(r"^(?:[^\n\"#]*(?:&&|;)\s*)?\s*(?:\w+=\S+\s+)?apt-get install(?P<rest>[^\n>|]*)", re.M)


def installs(text: str) -> list[tuple[int, list[str]]]:
    """(position, packages) of each `apt-get install` command, options left out."""
    found = []
    for match in APT_INSTALL.finditer(text):
        words = [word for word in match["rest"].split() if not word.startswith("-")]
        found.append((match.start(), words))
    assert all(words for _, words in found)
    return found


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_every_script_parses(script):
    subprocess.run(["bash", "-n", str(script)], check=True)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_a_package_with_a_service_is_installed_under_a_policy_rc_d_guard(script):
    text = script.read_text()
    for position, packages in installs(text):
        if set(packages) <= NO_SERVICE:
            continue
        guard = text.rfind("exit 101", 0, position)
        assert guard != -1 and "policy-rc.d" in text[guard - 200:position], (script.name, packages)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_each_install_is_announced_on_stderr_before_it_runs(script):
    text = script.read_text()
    for position, packages in installs(text) + [(m.start(), ["pip"]) for m in re.finditer(r"pip install", text)]:
        before = text[:position]
        announced = [line for line in before.splitlines()[-12:] if "echo" in line and "installing" in line]
        assert announced and all(">&2" in line for line in announced), (script.name, packages)


def test_scripts_test_says_up_front_what_it_will_install():
    text = (ROOT / "scripts" / "test").read_text()
    assert text.index("will install") < text.index("scripts/bootstrap\n")


def test_scripts_test_runs_the_linter_before_the_tests_and_ruff_is_pinned():
    text = (ROOT / "scripts" / "test").read_text()
    lint = text.index(".venv/bin/ruff check --select F server client cli spark_jobs tests bench")
    assert lint < text.index(".venv/bin/lint-imports") < text.index(".venv/bin/python -m pytest")
    assert re.search(r"^ruff==\d+\.\d+\.\d+$", (ROOT / "requirements.txt").read_text(), re.M)
