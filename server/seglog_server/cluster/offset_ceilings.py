"""Offset ceilings: an owner acknowledges offsets only below a ceiling etcd holds for its epoch, so
an unclean takeover can start the partition past every offset the old owner ever acknowledged.

An unclean takeover cannot ask the dead owner where its log ends. Without a bound, the new owner
would hand out again offsets the old one had acknowledged (and, paused rather than dead, might
still acknowledge). So the owner reserves offsets ahead in etcd, as InitProducerId reserves ids
in blocks (producer_id_blocks.py):

- ``<name>/offset_ceilings/<topic>/<partition>`` holds ``{"epoch": E, "ceiling": N}``: the owner
  at epoch E acknowledges no offset at or above N. With no record at the owner's epoch, the
  ceiling is the epoch's start offset (the owner record's ``start_offset``) + ``OFFSET_BLOCK``:
  a new topic or a moved partition needs no etcd write before its first produce;
- a thread at the owner raises the ceiling to ``log end + OFFSET_BLOCK`` whenever the log end
  comes within half a block of it, in a transaction compared on the owner record (still its own,
  at that epoch) and on the ceiling record as read: once a takeover changed the owner record, the
  old owner can raise its ceiling no more;
- the produce path refuses the OK (UNAVAILABLE, retriable) while the log end is past the ceiling
  this instance knows holds (``OffsetsNotReservedError`` in rpc/cluster_routing.py): only when
  produce outruns the thread, a block ahead;
- ``TakeOverPartition`` starts the partition at ``takeover_start``: the old epoch's ceiling, read
  in the same transaction's compare. Offsets in between are never used (a gap, as compaction
  leaves): none is ever acknowledged twice.

The price: one etcd write per half block of records per partition, and a takeover skips up to a
block and a half of offsets.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Callable

from .errors import ClusterError, MalformedRecordError
from .etcd_gateway import EtcdGateway, b64
from .keys import ClusterKeys
from .ownership import PartitionOwner
from .records import decode_ceiling, repair_advice

__all__ = ["OFFSET_BLOCK", "OffsetCeilings", "implicit_ceiling", "read_ceiling", "takeover_start"]

_log = logging.getLogger(__name__)

# Offsets reserved ahead per etcd write. 2^20: at a million records a second on one partition the
# thread writes twice a second, far from etcd's limits; a takeover's gap of at most 1.5 blocks is
# nothing beside int64 offsets.
OFFSET_BLOCK = 1 << 20
# How often the owner compares its logs' ends with their ceilings (a dict walk, no etcd call).
CHECK_INTERVAL_S = 0.2
# Partitions whose malformed ceiling record was logged, remembered so each is logged once.
_MALFORMED_REMEMBERED = 10_000


def implicit_ceiling(owner: PartitionOwner, block: int = OFFSET_BLOCK) -> int:
    """The ceiling of an epoch with no ceiling record: its start offset and one block."""
    return owner.start_offset + block


def read_ceiling(gateway: EtcdGateway, keys: ClusterKeys, topic: str, partition: int, owner: PartitionOwner,
                 block: int = OFFSET_BLOCK) -> tuple[int, int]:
    """(the ceiling of ``owner``'s epoch, the ceiling record's mod revision: 0 when absent)."""
    kv = gateway.get(keys.offset_ceiling(topic, partition))
    ceiling = implicit_ceiling(owner, block)
    if kv is None:
        return ceiling, 0
    record = decode_ceiling(kv.key, kv.value)
    if record.epoch == owner.epoch:
        ceiling = max(ceiling, record.ceiling)
    return ceiling, kv.mod_revision


def ceiling_compare(keys: ClusterKeys, topic: str, partition: int, mod_revision: int) -> dict:
    """The compare of a transaction that must see the ceiling record as read (absent when 0)."""
    key = b64(keys.offset_ceiling(topic, partition))
    if mod_revision == 0:
        return {"key": key, "result": "EQUAL", "target": "CREATE", "create_revision": 0}
    return {"key": key, "result": "EQUAL", "target": "MOD", "mod_revision": mod_revision}


def raise_ceiling(gateway: EtcdGateway, keys: ClusterKeys, topic: str, partition: int, owner: PartitionOwner,
                  ceiling: int, read_mod_revision: int) -> bool:
    """Writes ``ceiling`` for ``owner``'s epoch; False when the owner record or the ceiling record
    changed since read (a takeover won: the old ceiling stands for the old epoch)."""
    owner_compare = {"key": b64(keys.owner(topic, partition)), "result": "EQUAL", "target": "MOD",
                     "mod_revision": owner.mod_revision}
    value = json.dumps({"epoch": owner.epoch, "ceiling": ceiling}, sort_keys=True)
    succeeded, _ = gateway.txn(
        [owner_compare, ceiling_compare(keys, topic, partition, read_mod_revision)],
        [{"request_put": {"key": b64(keys.offset_ceiling(topic, partition)), "value": b64(value)}}])
    return succeeded


def takeover_start(gateway: EtcdGateway, keys: ClusterKeys, topic: str, partition: int,
                   owner: PartitionOwner, block: int = OFFSET_BLOCK) -> tuple[int, int]:
    """(the offset an unclean takeover of ``owner``'s epoch starts at: above every offset it may have
    acknowledged, the ceiling record's mod revision for the takeover's compare)."""
    return read_ceiling(gateway, keys, topic, partition, owner, block)


class OffsetCeilings:
    """This instance's ceilings: ``ceiling`` answers from memory on the produce path; a thread
    raises them ahead of the logs. ``gateway``: a callable giving this thread's EtcdGateway;
    ``cache``: the MetadataCache; ``log_end_offset(topic, partition)``: the local log's end, or
    None when not held here."""

    def __init__(self, gateway: Callable[[], EtcdGateway], keys: ClusterKeys, instance_id: str, cache: Any,
                 log_end_offset: Callable[[str, int], int | None], block: int = OFFSET_BLOCK,
                 interval_s: float = CHECK_INTERVAL_S) -> None:
        assert block >= 2, block
        self._gateway = gateway
        self._keys = keys
        self._instance_id = instance_id
        self._cache = cache
        self._log_end_offset = log_end_offset
        self.block = block
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._confirmed: dict[tuple[str, int], tuple[int, int]] = {}  # (epoch, ceiling) etcd holds
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.raise_count = 0
        self._malformed_logged: dict[tuple[str, int], str] = {}  # the step's thread only

    def ceiling(self, topic: str, partition: int, owner: PartitionOwner) -> int:
        """The highest offset + 1 this instance may acknowledge at ``owner``'s epoch."""
        with self._lock:
            confirmed = self._confirmed.get((topic, partition))
        ceiling = implicit_ceiling(owner, self.block)
        if confirmed is not None and confirmed[0] == owner.epoch:
            ceiling = max(ceiling, confirmed[1])
        return ceiling

    def beyond(self, topic: str, partition: int, owner: PartitionOwner) -> tuple[int, int] | None:
        """(log end, ceiling) when the local log ends past the ceiling (its last offsets may not be
        acknowledged yet), else None."""
        end = self._log_end_offset(topic, partition)
        ceiling = self.ceiling(topic, partition, owner)
        return None if end is None or end <= ceiling else (end, ceiling)

    def start(self) -> None:
        assert self._thread is None, "started twice"
        self._thread = threading.Thread(target=self._run, name="seglog-offset-ceilings", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        logged = ""
        while not self._stopping.wait(self._interval_s):
            try:
                self.step()
            except ClusterError as exc:  # etcd away: the ceilings stand, the next pass tries again
                if str(exc) != logged:
                    _log.warning("offset ceilings not raised: %s", exc)
                logged = str(exc)
            else:
                logged = ""

    def step(self) -> int:
        """Blocking. Raises the ceiling of every partition owned here whose log end is within half a
        block of it (every owner record naming this instance, whether or not its topic's record is
        readable); returns how many were raised. A malformed ceiling record stops its own
        partition only (logged once per record, raised again once the record is good): the
        others are raised in the same pass. etcd not answering ends the pass (ClusterError)."""
        raised = 0
        for (topic, partition), owner in self._cache.owners().items():
            if owner.owner != self._instance_id:
                continue  # another's, or an unreadable owner record (served by no one)
            end = self._log_end_offset(topic, partition)
            if end is not None and end + self.block // 2 > self.ceiling(topic, partition, owner):
                try:
                    raised += self._raise(topic, partition, owner, end)
                except MalformedRecordError as exc:
                    self._malformed(topic, partition, exc)
        return raised

    def _malformed(self, topic: str, partition: int, exc: MalformedRecordError) -> None:
        """A record etcd holds malformed fails every pass: logged once per record (and reason)."""
        if self._malformed_logged.get((topic, partition)) != str(exc):
            if len(self._malformed_logged) >= _MALFORMED_REMEMBERED:
                self._malformed_logged.clear()
            self._malformed_logged[(topic, partition)] = str(exc)
            _log.error("offset ceiling of %s-%d not raised (its produces stop a block past the ceiling it "
                       "has): %s; %s", topic, partition, exc, repair_advice(exc.key))

    def _raise(self, topic: str, partition: int, owner: PartitionOwner, end: int) -> int:
        gateway = self._gateway()
        ceiling, mod_revision = read_ceiling(gateway, self._keys, topic, partition, owner, self.block)
        wanted = max(ceiling, end + self.block)
        if not raise_ceiling(gateway, self._keys, topic, partition, owner, wanted, mod_revision):
            return 0  # the owner record moved on (a takeover, a move), or a racing raise: next pass
        with self._lock:
            self._confirmed[(topic, partition)] = (owner.epoch, wanted)
            self.raise_count += 1
        self._malformed_logged.pop((topic, partition), None)
        return 1
