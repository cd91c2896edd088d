"""Every import in bench/ resolves: a module moved or a name renamed breaks the benchmark that
imports it here, not weeks later when someone runs it.

The benchmarks are scripts (some run their work at module level, as callgrind_append.py does), so
they are not executed: each file is parsed, and every ``import X`` and ``from X import Y`` in it
(at any depth, as function-level imports are common in workers) is checked against the tree — the
module must be importable and each imported name an attribute or submodule of it. Imports
guarded by ``try``/``except ImportError`` (a fallback for an older tree) are checked only in
their first form that resolves.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
BENCH_FILES = sorted(p for p in BENCH.rglob("*.py") if "results" not in p.parts)


def _module_name(path: pathlib.Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _resolve_relative(path: pathlib.Path, node: ast.ImportFrom) -> str:
    package = _module_name(path).split(".")[:-1]
    if node.level > 1:
        package = package[: -(node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _problems(path: pathlib.Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [f"line {node.lineno}: no module {alias.name}" for alias in node.names if not _importable(alias.name)]
    module = _resolve_relative(path, node) if node.level else node.module
    assert module is not None
    if not _importable(module):
        return [f"line {node.lineno}: no module {module}"]
    imported = importlib.import_module(module)
    missing = []
    for alias in node.names:
        if alias.name == "*" or hasattr(imported, alias.name) or _importable(f"{module}.{alias.name}"):
            continue
        missing.append(f"line {node.lineno}: {module} has no {alias.name}")
    return missing


def _import_guards(tree: ast.AST) -> list[ast.Try]:
    """The ``try`` blocks whose handlers catch ImportError: the fallback pattern (a new module
    path first, an older tree's in the handler), judged as a whole below."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Try)
        and any(isinstance(h.type, ast.Name) and h.type.id in {"ImportError", "ModuleNotFoundError"} for h in node.handlers)
    ]


def _guarded_imports(tree: ast.AST) -> set[int]:
    return {
        inner.lineno
        for node in _import_guards(tree)
        for inner in ast.walk(node)
        if isinstance(inner, (ast.Import, ast.ImportFrom))
    }


@pytest.fixture(autouse=True)
def _bench_on_path(monkeypatch):
    # The benchmarks run as scripts from bench/ (their siblings importable) or as `python -m bench.peers`.
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.syspath_prepend(str(ROOT))
    yield
    sys.modules.pop("bench", None)


@pytest.mark.parametrize("path", BENCH_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_import_of_a_benchmark_resolves(path: pathlib.Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    guarded = _guarded_imports(tree)
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno not in guarded:
            problems.extend(_problems(path, node))
    for node in _import_guards(tree):
        forms = [n for n in node.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        fallbacks = [n for h in node.handlers for n in h.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        if any(_problems(path, n) for n in forms) and (not fallbacks or any(_problems(path, n) for n in fallbacks)):
            problems.append(f"line {node.lineno}: neither the import nor its fallback resolves")
    assert not problems, f"{path.relative_to(ROOT)}: " + "; ".join(problems)


def test_the_check_finds_a_broken_import(tmp_path, monkeypatch) -> None:
    broken = BENCH / "_broken_for_test.py"
    # Written beside the benchmarks only for this test's duration, so the relative module name is real.
    broken.write_text("from seglog_server.storage import NoSuchThing\nimport no_such_module_anywhere\n")
    try:
        tree = ast.parse(broken.read_text())
        problems = [p for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for p in _problems(broken, n)]
    finally:
        broken.unlink()
    assert problems == [
        "line 1: seglog_server.storage has no NoSuchThing",
        "line 2: no module no_such_module_anywhere",
    ]
