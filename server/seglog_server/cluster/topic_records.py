"""Deleting a topic cluster-wide, and which generation of each topic this instance holds.

A topic etcd knows is one **generation**: the etcd create revision of its ``<name>/topics/<topic>``
key. Deleting it removes the topic key and every record of its partitions (owners, moves, offset
ceilings) in ONE transaction compared on the key existing, so no instance ever sees a topic without
owners or owners without a topic; a create of the same name afterwards is a new generation.

Each instance deletes its local copy when its watched cache shows the generation it holds gone (or
replaced), and only after confirming it with etcd. For that it records, in
``<first data dir>/cluster-topics.json``, the generation of every topic it holds because etcd has
it (written before the local copy is created, so a crash between the two leaves a record and no
copy, never a copy without a record). An instance down at the deletion finds at its next start a
local copy whose generation etcd no longer has and deletes it; a local topic with no record (one
created before cluster mode, served here alone) is never deleted for etcd's sake.
"""

from __future__ import annotations

import json
import logging
import os
import threading

from seglog_server.storage.base.json_document import INT64_MAX, Fields, read_json_document
from seglog_server.storage.base.topic_partition import TOPIC_NAME_LENGTH_MAX

from .errors import ClusterError
from .etcd_gateway import EtcdGateway, b64, prefix_end
from .keys import MOVES, ClusterKeys

__all__ = ["HELD_TOPICS_BYTES_MAX", "HELD_TOPICS_FILE_NAME", "HeldTopics", "HeldTopicsFileError", "delete_topic_records"]

_log = logging.getLogger(__name__)
HELD_TOPICS_FILE_NAME = "cluster-topics.json"
# The offset ceilings' records (offset_ceilings.py) live under this part of the prefix too.
_OFFSET_CEILINGS = "offset_ceilings/"
# One entry is a topic name (at most 249 characters, each up to 4 UTF-8 bytes when escaped as
# JSON: 6) and a revision: 16 MiB holds over 10,000 of the longest names, far more topics than
# one instance holds; a larger file is not ours.
HELD_TOPICS_BYTES_MAX = 16 * 1024 * 1024


class HeldTopicsFileError(ClusterError):
    """The held-topics file is not the document this module writes (read as empty: see HeldTopics)."""


def _parse_held_topics(data: bytes, path: str) -> dict[str, int]:
    """topic -> generation from the file's bytes; HeldTopicsFileError naming ``path`` otherwise."""
    doc = Fields(read_json_document(data, path, HeldTopicsFileError, bytes_max=HELD_TOPICS_BYTES_MAX),
                 path, HeldTopicsFileError)
    version = doc.get("version", int)
    if version != 1:
        doc.fail("version", f"expected 1, found {version}")
    topics = doc.object("topics")
    for topic in topics.data:
        if not 0 < len(topic) <= TOPIC_NAME_LENGTH_MAX:
            doc.fail("topics", f"a topic name of {len(topic)} characters (1 to {TOPIC_NAME_LENGTH_MAX})")
    return {topic: topics.int(topic, 0, INT64_MAX) for topic in topics.data}


def _delete_prefix(prefix: str) -> dict:
    return {"request_delete_range": {"key": b64(prefix), "range_end": b64(prefix_end(prefix))}}


def delete_topic_records(gateway: EtcdGateway, keys: ClusterKeys, topic: str) -> bool:
    """Deletes the topic and every record of its partitions in one transaction; False (nothing
    deleted) when etcd has no such topic. Raises EtcdUnavailableError."""
    key = keys.topic(topic)
    exists = {"key": b64(key), "result": "GREATER", "target": "CREATE", "create_revision": 0}
    deletes = [{"request_delete_range": {"key": b64(key)}}, _delete_prefix(keys.owners_of(topic)),
               _delete_prefix(f"{keys.prefix}{MOVES}{topic}/"),
               _delete_prefix(f"{keys.prefix}{_OFFSET_CEILINGS}{topic}/")]
    succeeded, _ = gateway.txn([exists], deletes)
    return succeeded


class HeldTopics:
    """topic -> the generation (etcd create revision) of the local copy, kept in a JSON file
    written atomically. An unreadable file (an I/O error, or bytes the bounded JSON reader or the
    field checks refuse: a huge number, 1e400, deep nesting, a wrong type) is logged and read as
    empty: the instance then deletes nothing for etcd's sake until it records the generations
    again (the safe side)."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, HELD_TOPICS_FILE_NAME)
        self._lock = threading.Lock()
        self._generations: dict[str, int] = self._read()

    def _read(self) -> dict[str, int]:
        try:
            with open(self.path, "rb") as handle:
                data = handle.read(HELD_TOPICS_BYTES_MAX + 1)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            return self._unreadable(exc)
        try:
            return _parse_held_topics(data, self.path)
        except HeldTopicsFileError as exc:
            return self._unreadable(exc)

    def _unreadable(self, exc: Exception) -> dict[str, int]:
        _log.error("%s unreadable (%s): no local topic is deleted for etcd's sake until each is "
                   "recorded again", self.path, exc)
        return {}

    def get(self, topic: str) -> int | None:
        with self._lock:
            return self._generations.get(topic)

    def record(self, topic: str, generation: int) -> None:
        with self._lock:
            if self._generations.get(topic) == generation:
                return
            self._generations[topic] = generation
            self._write()

    def forget(self, topic: str) -> None:
        with self._lock:
            if self._generations.pop(topic, None) is not None:
                self._write()

    def _write(self) -> None:
        temporary = self.path + ".tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump({"version": 1, "topics": self._generations}, handle, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)
        directory = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
