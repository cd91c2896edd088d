"""The test tree's check that every sync client a test module creates is closed by the module's
end (tests/conftest.py), run on small test modules in a pytest of their own (a subprocess: the
check wraps the client's start once per process). No server: a client's channel connects lazily."""

from __future__ import annotations

import pathlib
import subprocess
import sys

CONFTEST = pathlib.Path(__file__).resolve().parents[1] / "conftest.py"

_LEAKY = '''
from seglog import Admin, Producer

def test_opens_and_forgets():
    admin = Admin("127.0.0.1:1")
    assert admin is not None

def test_closes_its_own():
    with Producer("127.0.0.1:1") as producer:
        assert producer is not None
'''

_TIDY = '''
import threading
from seglog import Admin

def test_with_block():
    with Admin("127.0.0.1:1") as admin:
        assert admin is not None

def test_closing_fixture(closing):
    admin = closing(Admin("127.0.0.1:1"))
    assert admin is not None

def test_made_and_closed_in_a_thread():
    made = []
    def make():
        made.append(Admin("127.0.0.1:1"))
        made[-1].close()
    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    assert made[0]._released
'''

_HELPER = '''
from seglog import Admin

def admin_of(address):
    return Admin(address)
'''

_USES_A_LEAKY_HELPER = '''
from leaky_helper import admin_of

def test_gets_its_admin_from_a_helper():
    admin = admin_of("127.0.0.1:1")
    assert admin is not None
'''

_SHARED_FIXTURE = '''
import pytest
from seglog import Admin

@pytest.fixture(scope="session")
def shared_admin():
    return Admin("127.0.0.1:1")  # the fixture's to close (here: never), not the module's
'''

_USES_SHARED = '''
def test_uses_the_shared_admin(shared_admin):
    assert shared_admin is not None
'''


def _run(tmp_path: pathlib.Path, modules: dict[str, str], extra_conftest: str = "") -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text() + extra_conftest)
    for name, text in modules.items():
        (tmp_path / name).write_text(text)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_a_module_leaving_a_client_open_errors_naming_the_module_and_the_creation_line(tmp_path):
    run = _run(tmp_path, {"test_leaky.py": _LEAKY})
    assert run.returncode == 1, run.stdout + run.stderr
    assert "2 passed, 1 error" in run.stdout, run.stdout
    assert "test_leaky.py: 1 sync client(s) left open at the module's end" in run.stdout, run.stdout
    assert "Admin created at line 5" in run.stdout and "Producer" not in run.stdout.split("left open")[1], run.stdout


def test_closed_clients_pass_and_only_the_leaking_module_errors(tmp_path):
    run = _run(tmp_path, {"test_tidy.py": _TIDY, "test_leaky.py": _LEAKY})
    assert "5 passed, 1 error" in run.stdout, run.stdout
    assert "test_tidy.py:" not in run.stdout.split("short test summary")[-1], run.stdout


def test_a_client_of_a_shared_fixture_is_not_judged_by_the_module_using_it(tmp_path):
    run = _run(tmp_path, {"test_uses_shared.py": _USES_SHARED}, _SHARED_FIXTURE)
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout + run.stderr


def test_a_client_a_helper_made_for_the_module_and_left_open_errors_naming_the_calling_line(tmp_path):
    run = _run(tmp_path, {"leaky_helper.py": _HELPER, "test_via_helper.py": _USES_A_LEAKY_HELPER})
    assert run.returncode == 1 and "1 passed, 1 error" in run.stdout, run.stdout + run.stderr
    assert "test_via_helper.py: 1 sync client(s) left open at the module's end" in run.stdout, run.stdout
    assert "Admin made by a helper called at line 5" in run.stdout, run.stdout
