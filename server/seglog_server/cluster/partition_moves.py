"""Partition moves and unclean takeovers in etcd: the move record and the transactions around it.

A move of ``<topic>/<partition>`` from its owner (the source) to another live instance (the
target) is recorded under ``<name>/moves/<topic>/<partition>`` as JSON ``{source, target, epoch,
state, started_ms}``:

- ``begin_move`` creates it in state ``copying``, compared on the owner record's mod revision
  (still the source's, at the epoch read), the move key absent and both instances registered;
- ``finalize_move`` puts state ``final``, compared on the record's mod revision. From the moment an
  instance's watched cache holds a ``final`` record naming it as the source, it refuses produce
  for the partition (rpc/cluster_routing.py): this is the owner's fence for the final catch-up, and
  since it lives in etcd, a source restarted mid-move is still fenced;
- ``commit_move`` writes the owner ``{target, epoch + 1, start_offset}`` and deletes the record in
  ONE transaction compared on both mod revisions (the record as finalised, the owner as read);
- ``abort_move`` deletes the record compared on its mod revision, so an abort and a commit never
  both succeed: the source owns the partition until a commit does.

``take_over`` is the unclean takeover of a partition whose owner's lease is gone: the owner record
becomes ``{new owner, epoch + 1, start_offset}`` compared on its mod revision, on the old owner's
instance key being absent (no live lease) and on the offset ceiling record as read, and any move
record goes. ``start_offset`` is the old epoch's offset ceiling (offset_ceilings.py): above every
offset the old owner may have acknowledged, so none is handed out twice; the records the dead
owner held are lost to readers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .errors import ClusterError, OwnershipConflictError, UnknownPartitionError
from .etcd_gateway import EtcdGateway, b64
from .keys import ClusterKeys
from .offset_ceilings import ceiling_compare, takeover_start
from .ownership import PartitionOwner, checked_epoch, parse_owner
from .records import decode_move

COPYING = "copying"
FINAL = "final"


class MoveConflictError(ClusterError):
    """The move record is not what the caller read (another move, an abort, a commit won)."""


class OwnerStillAliveError(ClusterError):
    """An unclean takeover was asked while the owner still holds its lease."""


@dataclass(frozen=True)
class MoveRecord:
    topic: str
    partition: int
    source: str
    target: str
    epoch: int  # the owner record's epoch when the move began
    state: str
    started_ms: int
    mod_revision: int


def _value(source: str, target: str, epoch: int, state: str, started_ms: int) -> bytes:
    return json.dumps({"source": source, "target": target, "epoch": epoch, "state": state,
                       "started_ms": started_ms}, sort_keys=True).encode()


def parse_move(topic: str, partition: int, value: bytes, mod_revision: int, key: str = "move record") -> MoveRecord:
    """The move record, checked (records.py): raises MalformedRecordError naming ``key``."""
    fields = decode_move(key, value)
    return MoveRecord(topic, partition, fields.source, fields.target, fields.epoch, fields.state, fields.started_ms,
                      mod_revision)


def owner_record_value(owner: str, epoch: int, start_offset: int) -> bytes:
    """The owner record with the offset the new epoch starts at (ownership.py's two fields and one
    more, which its parser ignores)."""
    return json.dumps({"owner": owner, "epoch": checked_epoch(epoch), "start_offset": start_offset},
                      sort_keys=True).encode()


def _put(key: str, value: bytes) -> dict:
    return {"request_put": {"key": b64(key), "value": b64(value)}}


def _delete(key: str) -> dict:
    return {"request_delete_range": {"key": b64(key)}}


def _mod(key: str, revision: int) -> dict:
    return {"key": b64(key), "result": "EQUAL", "target": "MOD", "mod_revision": revision}


def _absent(key: str) -> dict:
    return {"key": b64(key), "result": "EQUAL", "target": "CREATE", "create_revision": 0}


def _present(key: str) -> dict:
    return {"key": b64(key), "result": "GREATER", "target": "CREATE", "create_revision": 0}


def read_owner_record(gateway: EtcdGateway, keys: ClusterKeys, topic: str, partition: int) -> tuple[PartitionOwner, int]:
    """(the owner, the offset its epoch started at: 0 when not recorded)."""
    kv = gateway.get(keys.owner(topic, partition))
    if kv is None:
        raise UnknownPartitionError(f"no owner recorded for {topic}-{partition}")
    owner = parse_owner(kv.value, kv.mod_revision, kv.key)
    return owner, owner.start_offset


def read_move(gateway: EtcdGateway, keys: ClusterKeys, topic: str, partition: int) -> MoveRecord | None:
    kv = gateway.get(keys.move(topic, partition))
    return None if kv is None else parse_move(topic, partition, kv.value, kv.mod_revision, kv.key)


def begin_move(gateway: EtcdGateway, keys: ClusterKeys, topic: str, partition: int, owner: PartitionOwner,
               target: str, now_ms: int) -> MoveRecord:
    key = keys.move(topic, partition)
    value = _value(owner.owner, target, owner.epoch, COPYING, now_ms)
    succeeded, revision = gateway.txn(
        [_mod(keys.owner(topic, partition), owner.mod_revision), _absent(key), _present(keys.instance(target)),
         _present(keys.instance(owner.owner))],
        [_put(key, value)])
    if not succeeded:
        raise OwnershipConflictError(
            f"{topic}-{partition}: move to {target!r} not begun: the owner changed since epoch {owner.epoch}, "
            f"another move began, or {owner.owner!r} or {target!r} is no longer registered")
    return MoveRecord(topic, partition, owner.owner, target, owner.epoch, COPYING, now_ms, revision)


def finalize_move(gateway: EtcdGateway, keys: ClusterKeys, move: MoveRecord) -> MoveRecord:
    key = keys.move(move.topic, move.partition)
    succeeded, revision = gateway.txn(
        [_mod(key, move.mod_revision)],
        [_put(key, _value(move.source, move.target, move.epoch, FINAL, move.started_ms))])
    if not succeeded:
        raise MoveConflictError(f"{move.topic}-{move.partition}: the move record changed (aborted?)")
    return MoveRecord(move.topic, move.partition, move.source, move.target, move.epoch, FINAL, move.started_ms,
                      revision)


def commit_move(gateway: EtcdGateway, keys: ClusterKeys, move: MoveRecord, owner: PartitionOwner,
                start_offset: int) -> PartitionOwner:
    owner_key = keys.owner(move.topic, move.partition)
    epoch = owner.epoch + 1
    succeeded, revision = gateway.txn(
        [_mod(keys.move(move.topic, move.partition), move.mod_revision), _mod(owner_key, owner.mod_revision)],
        [_put(owner_key, owner_record_value(move.target, epoch, start_offset)),
         _delete(keys.move(move.topic, move.partition))])
    if not succeeded:
        raise MoveConflictError(f"{move.topic}-{move.partition}: move not committed: the move record or the "
                                f"owner changed since epoch {owner.epoch} (aborted, or another change won)")
    return PartitionOwner(move.target, epoch, revision)


def abort_move(gateway: EtcdGateway, keys: ClusterKeys, move: MoveRecord) -> bool:
    """True when this deleted the record; False when it had changed (committed or aborted)."""
    key = keys.move(move.topic, move.partition)
    succeeded, _ = gateway.txn([_mod(key, move.mod_revision)], [_delete(key)])
    return succeeded


def take_over(gateway: EtcdGateway, keys: ClusterKeys, topic: str, partition: int, new_owner: str,
              owner: PartitionOwner, start_offset: int, ceiling_mod_revision: int) -> PartitionOwner:
    """``start_offset`` and ``ceiling_mod_revision`` as ``takeover_start`` read them: a ceiling the
    old owner raised since fails the transaction (OwnershipConflictError; read again)."""
    owner_key = keys.owner(topic, partition)
    epoch = owner.epoch + 1
    succeeded, revision = gateway.txn(
        [_mod(owner_key, owner.mod_revision), _absent(keys.instance(owner.owner)),
         _present(keys.instance(new_owner)), ceiling_compare(keys, topic, partition, ceiling_mod_revision)],
        [_put(owner_key, owner_record_value(new_owner, epoch, start_offset)),
         _delete(keys.move(topic, partition))])
    if not succeeded:
        if gateway.get(keys.instance(owner.owner)) is not None:
            raise OwnerStillAliveError(
                f"{topic}-{partition}: owner {owner.owner!r} holds its lease: an unclean takeover is only for "
                "an owner whose lease is gone (move the partition instead)")
        raise OwnershipConflictError(f"{topic}-{partition}: not taken over: the owner record or its offset "
                                     f"ceiling changed since epoch {owner.epoch}")
    return PartitionOwner(new_owner, epoch, revision, start_offset)


class MoveStore:
    """The move transactions bound to this instance (blocking: run on a thread). ``gateway`` is a
    callable giving this thread's EtcdGateway."""

    def __init__(self, gateway, keys: ClusterKeys, instance_id: str) -> None:  # noqa: ANN001
        self._gateway = gateway
        self.keys = keys
        self.instance_id = instance_id

    def read_owner(self, topic: str, partition: int) -> tuple[PartitionOwner, int]:
        return read_owner_record(self._gateway(), self.keys, topic, partition)

    def read_move(self, topic: str, partition: int) -> MoveRecord | None:
        return read_move(self._gateway(), self.keys, topic, partition)

    def begin(self, topic: str, partition: int, owner: PartitionOwner, now_ms: int) -> MoveRecord:
        return begin_move(self._gateway(), self.keys, topic, partition, owner, self.instance_id, now_ms)

    def finalize(self, move: MoveRecord) -> MoveRecord:
        return finalize_move(self._gateway(), self.keys, move)

    def commit(self, move: MoveRecord, owner: PartitionOwner, start_offset: int) -> PartitionOwner:
        return commit_move(self._gateway(), self.keys, move, owner, start_offset)

    def abort(self, move: MoveRecord) -> bool:
        return abort_move(self._gateway(), self.keys, move)

    def takeover_start(self, topic: str, partition: int, owner: PartitionOwner) -> tuple[int, int]:
        return takeover_start(self._gateway(), self.keys, topic, partition, owner)

    def take_over(self, topic: str, partition: int, owner: PartitionOwner, start_offset: int,
                  ceiling_mod_revision: int) -> PartitionOwner:
        return take_over(self._gateway(), self.keys, topic, partition, self.instance_id, owner, start_offset,
                         ceiling_mod_revision)
