"""The storage's structure, measured from its imports (grimp, the graph import-linter builds):
no import cycle between its modules, type-checking imports included (a circle drawn only for the
type checker still ties two modules into one), and every module in a folder by concern. The
layers between the folders are import-linter's contract in pyproject.toml."""

from __future__ import annotations

import grimp

STORAGE = "seglog_server.storage"
FOLDERS = {"base", "format", "segment", "producers", "remote", "log", "dirs", "cleaning", "manager"}


def _storage_graph() -> dict[str, set[str]]:
    graph = grimp.build_graph("seglog_server", cache_dir=None)
    modules = {m for m in graph.modules if m.startswith(STORAGE + ".")}
    return {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, or of one importing itself
    (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges[node]:
                    found.append(sorted(component))
    return found


def test_cycles_finds_a_circle_and_a_self_import_and_passes_a_tree():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"a"}}) == [["a"]]
    assert _cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_no_import_cycle_between_storage_modules():
    assert _cycles(_storage_graph()) == []


def test_every_storage_module_sits_in_a_folder_by_concern():
    loose = {m for m in _storage_graph() if m.count(".") == 2 and m.split(".")[2] not in FOLDERS}
    assert loose == set()
    assert {m.split(".")[2] for m in _storage_graph()} == FOLDERS
