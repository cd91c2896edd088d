"""The remote tier's own thread (Kafka's RemoteLogManager copier threads, one here): calls
``LogManager.run_remote_pass`` at once, then every ``interval_ms`` until stopped.

Uploads are store calls of up to the store's deadline each; on a thread of their own, a silent
store delays only the next upload, never the maintenance pass (retention, flush, checkpoints)
nor a pool thread a request needs. The thread is a daemon: a process exiting while the store is
silent does not wait for the call (the interrupted copy is an orphan the next start cleans up).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["RemoteTierStatistics", "RemoteUploader"]

_log = logging.getLogger(__name__)


# ObjectStore's operations (object_store.STORE_OPERATIONS, not imported: it loads boto3), so a
# service without a store exports a zero series for each too.
STORE_OPERATIONS = ("PUT", "GET", "HEAD", "LIST", "DELETE", "CREATE-BUCKET")


@dataclass(frozen=True)
class RemoteTierStatistics:
    """The remote tier's figures for operators (metrics): zeros when tiering is off."""

    uploaded_segment_count: int = 0
    uploaded_bytes: int = 0
    # Closed segments below the high watermark not uploaded yet, over every tiered log, and the
    # age of the oldest one (now - its largest timestamp; 0 when none): local retention cannot
    # delete them, so a growing lag is a disk filling up.
    upload_lag_bytes: int = 0
    upload_lag_seconds: float = 0.0
    fetch_count: int = 0
    fetch_bytes: int = 0
    fetch_seconds: float = 0.0
    cache_hit_count: int = 0
    cache_miss_count: int = 0
    store_error_counts: Mapping[str, int] = None  # type: ignore[assignment]
    orphans_deleted: int = 0


class RemoteUploader:
    def __init__(self, run_pass: Callable[[], None], interval_ms: int) -> None:
        assert interval_ms > 0, interval_ms
        self._run_pass = run_pass
        self._interval_s = interval_ms / 1000
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="seglog-remote-uploader", daemon=True)
        self.pass_count = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float) -> bool:
        """Asks the thread to stop and waits up to ``timeout_s`` for its pass to end; False when
        a store call outlasted it (the thread ends by itself once the call's deadline passes)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        # The first pass at once: it lists the tiered logs' remote segments, which opening them
        # did not (the log start offsets below the local ones are known from then on).
        while not self._stopping.is_set():
            try:
                self._run_pass()
            except Exception:  # noqa: BLE001 - a bug in one pass must not end the uploads
                _log.exception("remote tier pass failed")
            self.pass_count += 1
            self._stopping.wait(self._interval_s)
