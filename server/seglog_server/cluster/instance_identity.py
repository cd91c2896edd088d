"""The instance id a data directory carries, so a restart with the same data is the same instance.

Kafka keeps ``node.id`` in each log directory's ``meta.properties``; seglog keeps its instance id in
``<data dir>/instance.id`` (one line), written once, atomically, the first time cluster mode starts
on that directory. The id is random rather than a hash of the path: three instances on three
machines may all use ``/var/lib/seglog``.
"""

from __future__ import annotations

import os
import re
import secrets

from .errors import ClusterConfigError

INSTANCE_ID_FILE_NAME = "instance.id"
_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def instance_id_for(data_dir: str) -> str:
    """The id recorded in ``data_dir``, recording a new one (``seglog-`` + 12 hex) if there is none."""
    path = os.path.join(data_dir, INSTANCE_ID_FILE_NAME)
    try:
        with open(path, encoding="ascii") as handle:
            recorded = handle.read().strip()
    except FileNotFoundError:
        return _record(path, "seglog-" + secrets.token_hex(6))
    except (OSError, UnicodeDecodeError) as exc:
        raise ClusterConfigError(f"instance-id: cannot read {path}: {exc}") from exc
    if not _ID.match(recorded):
        raise ClusterConfigError(f"instance-id: {path} holds {recorded[:80]!r}, not 1-64 of [A-Za-z0-9._-]")
    return recorded


def _record(path: str, instance_id: str) -> str:
    temporary = path + ".tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temporary, "w", encoding="ascii") as handle:
            handle.write(instance_id + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        directory = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError as exc:
        raise ClusterConfigError(f"instance-id: cannot record it in {path}: {exc}") from exc
    return instance_id
