"""Whether the running storage call runs inline on the service's event loop, and the refusal of
a step too long for it.

The service runs calls that move a few KiB inline (rpc/storage_calls.py) with
``INLINE_CALL.running`` set. A step whose cost is not bounded by the call's bytes (rebuilding a segment's
offset index from its log: a walk of every batch header, 0.37 s for a warm 277 MiB segment)
asks ``refuse_if_inline`` first: InlineRefused there, before anything changed, and the service
runs the whole call again on its storage pool. One event-loop thread, so a thread-local flag.
"""

from __future__ import annotations

import threading

__all__ = ["INLINE_CALL", "InlineRefused", "refuse_if_inline"]


class InlineRefused(Exception):
    """A step an inline call may not take; the same call on the storage pool takes it."""


# ``INLINE_CALL.running = True`` around an inline call, False after it: two stores into a
# C-level thread-local (a context manager's Python-level __enter__/__exit__ cost ~300 ns a call).
INLINE_CALL = threading.local()


def refuse_if_inline(what: str) -> None:
    """InlineRefused naming ``what`` when the calling thread runs an inline call."""
    if getattr(INLINE_CALL, "running", False):
        raise InlineRefused(f"{what} is not taken inline")
