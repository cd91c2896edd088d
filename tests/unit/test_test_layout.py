"""The test tree's own rule: pytest imports test modules by their basename (rootdir-relative
"prepend" mode, no __init__.py in the test folders), so two test files with one name in two
folders stop the whole run at collection ("import file mismatch"). This keeps names unique."""

from __future__ import annotations

import collections
import pathlib

TESTS = pathlib.Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename() -> None:
    by_name = collections.defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        by_name[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
