"""Ownership with epochs: per partition ``{owner, epoch}`` in etcd, changed only by transaction.

- Creating a topic writes the topic key and every partition's ``{owner, epoch: 0}`` in one
  transaction that compares the topic key absent: two creates of one name, one wins, the other gets
  TopicExistsError, and no half-created topic is ever visible.
- Changing an owner writes ``{new owner, epoch + 1}`` in one transaction compared on the record's
  mod revision as read: a concurrent change (another mover, an unclean takeover) makes it fail
  cleanly with OwnershipConflictError, and epochs only ever increase. The new owner must be
  registered (its instance key exists) in the same transaction.

The epoch is Kafka's leader epoch: the owner stamps it into each batch it appends and refuses to
append once the cluster's epoch moved past its own (the wiring, not this module, does that).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Mapping, Sequence

from seglog_server.storage import LogConfig

from .errors import OwnershipConflictError, TopicExistsError, UnknownPartitionError
from .etcd_gateway import EtcdGateway, b64
from .keys import ClusterKeys
from .records import EPOCH_MAX, decode_owner

INITIAL_EPOCH = 0
_TOPIC_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class PartitionOwner:
    owner: str
    epoch: int
    mod_revision: int  # etcd's revision of the record; what a change compares on
    # The offset the epoch started at, as a move's commit or a takeover recorded it (0: never
    # recorded, a topic's first epoch): where offset_ceilings.py counts the epoch's first block from.
    start_offset: int = 0

    @property
    def readable(self) -> bool:
        """False for the stand-in of a record etcd holds malformed (``UNREADABLE_OWNER``)."""
        return self.owner != UNREADABLE_OWNER


# The owner the watched cache shows for a partition whose owner record in etcd is malformed
# (metadata_cache.py): never an instance id (not of [A-Za-z0-9._-]), so no instance serves the
# partition, every one refuses it as owned by an instance not registered (UNAVAILABLE), and
# nothing that acts on "owned elsewhere" (a stale copy's drop) acts on it.
UNREADABLE_OWNER = "(unreadable owner record)"


def owner_value(owner: str, epoch: int) -> bytes:
    return json.dumps({"owner": owner, "epoch": checked_epoch(epoch)}, sort_keys=True).encode()


def checked_epoch(epoch: int) -> int:
    """``epoch`` if an owner record may carry it: Kafka's leader epoch is an int32, and the readers
    (records.py) refuse one past it. Raises OwnershipConflictError (nothing written) past it."""
    if not 0 <= epoch <= EPOCH_MAX:
        raise OwnershipConflictError(f"epoch {epoch} is not in [0, {EPOCH_MAX}] (a leader epoch is an int32): "
                                     "the owner record is not changed")
    return epoch


def parse_owner(value: bytes, mod_revision: int, key: str = "owner record") -> PartitionOwner:
    """The owner record, checked (records.py): raises MalformedRecordError naming ``key``."""
    fields = decode_owner(key, value)
    return PartitionOwner(owner=fields.owner, epoch=fields.epoch, mod_revision=mod_revision,
                          start_offset=fields.start_offset)


def _put(key: str, value: bytes) -> dict:
    return {"request_put": {"key": b64(key), "value": b64(value)}}


def _absent(key: str) -> dict:
    return {"key": b64(key), "result": "EQUAL", "target": "CREATE", "create_revision": 0}


def create_topic(gateway: EtcdGateway, keys: ClusterKeys, topic: str, owners: Sequence[str],
                 configs: Mapping[str, str] | None = None, topic_id: str | None = None,
                 defaults: LogConfig | None = None) -> int:
    """Writes the topic (with its topic id: every instance's copy takes this one, the object
    store keys the topic's remote segments by it) and its partitions' owners at epoch 0; the
    revision written at. ``configs`` were validated over ``defaults`` (the instance's topic
    defaults; Kafka's without): they are written in their canonical form (``canonical_overrides``),
    as AlterTopicConfigs writes them."""
    assert owners, "a topic has at least one partition"
    record = {"partitions": len(owners), "configs": canonical_overrides(configs or {}, defaults),
              "topic_id": topic_id or new_topic_id()}
    topic_value = json.dumps(record, sort_keys=True).encode()
    puts = [_put(keys.topic(topic), topic_value)]
    puts += [_put(keys.owner(topic, partition), owner_value(owner, INITIAL_EPOCH))
             for partition, owner in enumerate(owners)]
    succeeded, revision = gateway.txn([_absent(keys.topic(topic))], puts)
    if not succeeded:
        raise TopicExistsError(f"topic {topic!r} already exists in the cluster")
    return revision


def canonical_overrides(configs: Mapping[str, str], defaults: LogConfig | None = None) -> dict[str, str]:
    """Each override as LogConfig writes it back (``" 604800000"`` -> ``"604800000"``, ``"TRUE"`` ->
    ``"true"``): what a topic record holds, so its size is the configs' count, never the length of
    the text a client sent. Parsed over ``defaults``, the ones the caller validated them against
    (the instance's ``--topic-default`` values): the cross-field checks (local.retention.ms within
    retention.ms, ...) weigh the overrides against them, and Kafka's own defaults would refuse
    what the instance accepts. Raises InvalidConfigError for configs LogConfig refuses (the callers
    validated them first)."""
    canonical = LogConfig.from_properties(configs, defaults).to_properties()
    return {name: canonical[name] for name in configs}


def new_topic_id() -> str:
    """A topic's id: 32 random lowercase hex digits (the storage's topic.id form)."""
    return uuid.uuid4().hex


def topic_id_of(cluster_name: str, topic: str, record: Mapping, create_revision: int) -> str:
    """The topic id of etcd's topic record: the one it carries; for a record written before
    topic ids were carried, one derived from the cluster, the name and the generation (the create
    revision), so every instance derives the same and a new generation gets another."""
    topic_id = record.get("topic_id")
    if isinstance(topic_id, str) and _TOPIC_ID.fullmatch(topic_id):
        return topic_id
    return uuid.uuid5(uuid.NAMESPACE_URL, f"seglog:{cluster_name}/{topic}/{create_revision}").hex


def read_owner(gateway: EtcdGateway, keys: ClusterKeys, topic: str, partition: int) -> PartitionOwner:
    kv = gateway.get(keys.owner(topic, partition))
    if kv is None:
        raise UnknownPartitionError(f"no owner recorded for {topic}-{partition}")
    return parse_owner(kv.value, kv.mod_revision, kv.key)


def change_owner(gateway: EtcdGateway, keys: ClusterKeys, topic: str, partition: int, new_owner: str,
                 expected: PartitionOwner) -> PartitionOwner:
    """``{new_owner, expected.epoch + 1}`` if the record is still ``expected`` and new_owner is registered."""
    key = keys.owner(topic, partition)
    epoch = expected.epoch + 1
    unchanged = {"key": b64(key), "result": "EQUAL", "target": "MOD", "mod_revision": expected.mod_revision}
    registered = {"key": b64(keys.instance(new_owner)), "result": "GREATER", "target": "CREATE",
                  "create_revision": 0}
    succeeded, revision = gateway.txn([unchanged, registered], [_put(key, owner_value(new_owner, epoch))])
    if not succeeded:
        raise OwnershipConflictError(
            f"{topic}-{partition}: owner not changed to {new_owner!r}: the record changed since epoch "
            f"{expected.epoch} (revision {expected.mod_revision}) or {new_owner!r} is not registered")
    return PartitionOwner(owner=new_owner, epoch=epoch, mod_revision=revision)
