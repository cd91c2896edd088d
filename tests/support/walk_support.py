"""The compiled record walks (seglog.records._walk_c) tested in a fresh interpreter: a crash
there fails the test instead of ending pytest, and an install without the compiled module is
one whose import of it fails."""

from __future__ import annotations

import os
import subprocess
import sys

# The start of a program whose interpreter cannot import seglog.records._walk_c (an install
# without a C compiler): walk_compiled, imported after it, falls back to the Python walks.
WITHOUT_COMPILED_WALK = """
import sys
class NoCompiledWalk:
    def find_spec(self, name, path=None, target=None):
        if name == "seglog.records._walk_c":
            raise ImportError("not built")
sys.meta_path.insert(0, NoCompiledWalk())
"""

# Program lines that change a list ``targets`` (the program's own, defined after them) under a
# compiled call: change() empties it and refills it with non-ints, freeing its item array, while
# HOOKS["on"] (at most 200 times); a Changer target does it from its conversion and comparisons;
# arm() leaves a Bomb, garbage in a cycle whose finalizer does it when a collection runs inside
# the call (with gc thresholds of one) and arms the next.
CHANGING_TARGETS = """
HOOKS = {"on": True, "fired": 0}
def change():
    if HOOKS["on"] and HOOKS["fired"] < 200:
        HOOKS["fired"] += 1
        targets.clear()
        targets.extend(object() for _ in range(700))
class Changer(int):
    def __index__(self):
        change()
        return int(self)
    def __lt__(self, other):
        change()
        return int(self) < other
    def __gt__(self, other):
        change()
        return int(self) > other
class Bomb:
    def __del__(self):
        change()
        if HOOKS["on"]:
            arm()  # the next collection finds another
def arm():
    bomb = Bomb()
    bomb.cycle = bomb
"""


def run_alone(program: str, *, warnings_as_errors: bool = False, timeout_s: float | None = None
              ) -> tuple[int, str, str]:
    """``program`` in a fresh interpreter on this one's import path: its exit code, stdout and
    stderr (``warnings_as_errors``: run with -W error)."""
    flags = ["-W", "error"] if warnings_as_errors else []
    done = subprocess.run([sys.executable, *flags, "-c", program], capture_output=True, text=True,
                          timeout=timeout_s, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    return done.returncode, done.stdout, done.stderr
