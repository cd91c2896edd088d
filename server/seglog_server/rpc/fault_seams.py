"""Test-only faults between a Produce's append and its acknowledgement.

The failures idempotent produce exists for happen exactly there: the batch is in the log, the
producer never hears so, and it sends the batch again. Tests reach that moment through one
environment variable, read once when the servicer is built (so a subprocess server gets it from
its environment and an in-process one from the test's)::

    SEGLOG_TEST_FAULT_AFTER_APPEND=kill:N       SIGKILL the process after the N-th appended batch
                                                (1-based), before its answer is sent
    SEGLOG_TEST_FAULT_AFTER_APPEND=delay_ms:M   hold every answer M ms after the append (a client
                                                deadline shorter than M then expires: the
                                                producer retries a batch that was written)
    SEGLOG_TEST_FAULT_AFTER_APPEND=delay_ms:M:K the same for the first K appended batches only

Unset (always, outside tests) it costs one attribute test per Produce.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

__all__ = ["FAULT_ENV", "AfterAppendFault"]

FAULT_ENV = "SEGLOG_TEST_FAULT_AFTER_APPEND"
_LOG = logging.getLogger(__name__)


class AfterAppendFault:
    """What to do after each appended batch (nothing unless the variable is set)."""

    def __init__(self, spec: str | None) -> None:
        self.active = bool(spec)
        self._kill_at = 0
        self._delay_s = 0.0
        self._delay_count = -1  # -1: every answer
        self._appended = 0
        if not spec:
            return
        kind, _, rest = spec.partition(":")
        parts = rest.split(":")
        if kind == "kill" and len(parts) == 1 and parts[0].isdigit():
            self._kill_at = int(parts[0])
        elif kind == "delay_ms" and 1 <= len(parts) <= 2 and all(part.isdigit() for part in parts):
            self._delay_s = int(parts[0]) / 1000
            self._delay_count = int(parts[1]) if len(parts) == 2 else -1
        else:
            raise ValueError(f"{FAULT_ENV}={spec!r}: expected kill:N, delay_ms:M or delay_ms:M:K")
        _LOG.warning("test fault seam active: %s=%s", FAULT_ENV, spec)

    @classmethod
    def from_environ(cls) -> AfterAppendFault:
        return cls(os.environ.get(FAULT_ENV))

    async def after_append(self) -> None:
        self._appended += 1
        if self._kill_at and self._appended >= self._kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if self._delay_s and (self._delay_count < 0 or self._appended <= self._delay_count):
            await asyncio.sleep(self._delay_s)
