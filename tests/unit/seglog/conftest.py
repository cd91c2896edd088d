"""The client's unit tests each see the process-wide loop thread as a fresh process would: none
running, no users, none stopping and no loop kept from an earlier thread. A sync client some
earlier test in the same pytest process left open (a pytest-xdist worker runs tests of many
modules one after another) would otherwise hold the shared loop thread, and tests that check a
refused construction starts no loop thread, or that the thread stops with its last user, would
judge that client instead of their own; and a loop an earlier client's thread left behind, still
holding that client's tasks, would be run again by the test's thread, whose stop then cancels
those tasks too. The earlier thread and loop are put back afterwards, untouched; the loop a test's
own last release kept is closed."""

from __future__ import annotations

import pytest

from seglog import _sync


@pytest.fixture(autouse=True)
def _a_fresh_loop_thread_registry(monkeypatch):
    with _sync._lock:
        monkeypatch.setattr(_sync, "_shared", None)
        monkeypatch.setattr(_sync, "_users", 0)
        monkeypatch.setattr(_sync, "_stopping", None)
        monkeypatch.setattr(_sync, "_stopped_loop", None)
    yield
    with _sync._lock:
        kept = _sync._stopped_loop
    if kept is not None and not kept.is_running() and not kept.is_closed():
        kept.close()
