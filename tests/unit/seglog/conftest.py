"""The client's unit tests each see the process-wide loop thread as a fresh process would: none
running and no users. A sync client some earlier test in the same pytest process left open (the
whole suite runs in one process) would otherwise hold the shared loop thread, and tests that check
a refused construction starts no loop thread, or that the thread stops with its last user, would
judge that client instead of their own. The earlier thread is put back afterwards, untouched."""

from __future__ import annotations

import pytest

from seglog import _sync


@pytest.fixture(autouse=True)
def _a_fresh_loop_thread_registry(monkeypatch):
    with _sync._lock:
        monkeypatch.setattr(_sync, "_shared", None)
        monkeypatch.setattr(_sync, "_users", 0)
    yield
