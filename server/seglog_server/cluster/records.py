"""The one checked decoding of every etcd record the service reads: keys and values.

etcd is outside the process: anyone with access to it (an operator's etcdctl, a buggy tool, a
restore of an old backup) may write any bytes under the cluster's prefix. Every reader goes through
here, and a decode raises nothing but ``MalformedRecordError`` (a ``ClusterError`` naming the key):

- a value is at most ``RECORD_BYTES_MAX`` bytes and at most ``DEPTH_MAX`` levels of arrays and
  objects (counted before ``json`` recurses), UTF-8 JSON whose integers have at most
  ``INT_DIGITS_MAX`` digits and with no NaN or Infinity;
- each field is type-checked (an int is an int, not a float or a bool; a string a string) and
  range-checked: epochs in [0, 2^31) (the writers refuse to write one past it), offsets in
  [0, 2^63), a partition count in [1, PARTITION_COUNT_MAX] (the storage's cap, which CreateTopic
  applies too), instance ids as ``--instance-id`` accepts. No field is capped below what its writer
  (or a seglog before this one) writes: free text (an address, a data dir, a config value) is
  bounded by the record's size alone; tests/unit/seglog_server/cluster/test_cluster_records.py
  decodes what every writer writes over the range of its valid inputs;
- a key's numeric part is ASCII digits only (``"²".isdigit()`` is True), below the partition cap;
  a topic name is one the storage accepts.

The readers decide what a malformed record means for them: the watched cache (metadata_cache.py)
skips it and counts it, an RPC answers a specific status naming the key (cluster_node.py,
rpc/move_rpcs.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from seglog_server.storage.base.topic_partition import PARTITION_COUNT_MAX, TOPIC_NAME_LENGTH_MAX

from .errors import MalformedRecordError

__all__ = ["DEPTH_MAX", "INT_DIGITS_MAX", "RECORD_BYTES_MAX", "CeilingRecord", "InstanceRecord",
           "MoveFields", "OwnerFields", "TopicRecord", "check_instance_id", "check_partition_text",
           "check_topic_name", "decode_ceiling", "decode_instance", "decode_json", "decode_move",
           "decode_owner", "decode_topic", "key_text", "repair_advice"]

# Far above any record seglog writes now (an instance record with a few data dirs, a topic record
# with its canonical configs: a few KiB) and above any an earlier seglog could write: a topic record
# held its configs as the client sent them, bounded only by the CreateTopic request (8 MiB by
# default, request_bytes_max) and etcd's request limit (1.5 MiB by default).
RECORD_BYTES_MAX = 16 << 20
# seglog's records nest two levels ({"capacity": {...}}); json recurses per level.
DEPTH_MAX = 8
# int64 has 19 digits; json.loads turns a longer run of digits into a (slow, unbounded) int.
INT_DIGITS_MAX = 20
INT64_MAX = (1 << 63) - 1
INSTANCE_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,%d}" % TOPIC_NAME_LENGTH_MAX)
_DIGITS = re.compile(r"[0-9]{1,%d}" % len(str(PARTITION_COUNT_MAX)))
MOVE_STATES = ("copying", "final")


def key_text(raw: bytes) -> str:
    """A key as etcd gave it, as text: invalid UTF-8 escaped (``\\xff``), so it is never confused
    with a key seglog writes (whose parts are ASCII) and prints as it is."""
    return raw.decode("utf-8", errors="backslashreplace")


# -- what an operator does about a malformed record ---------------------------------------------
_LAST_GOOD = "its last good value (etcdctl get <key> --rev=<a revision before the bad write> shows it)"
_ADVICE = {
    "topics": f'write it again with {_LAST_GOOD}, as seglog writes it: {{"partitions": <its partition count>, '
              '"configs": {"<name>": "<value>"}, "topic_id": "<its 32 hex digits>"}; never delete it: that '
              "deletes the topic, and every instance drops its copy",
    "owners": f'write it again with {_LAST_GOOD}: {{"owner": "<instance id>", "epoch": <E>, "start_offset": <S>}}; '
              "never delete it: a partition with no owner record is served by every instance holding a copy",
    "offset_ceilings": f'write it again with {_LAST_GOOD}, or a higher ceiling: {{"epoch": <E>, "ceiling": <N>}}; '
                       "never delete it: a takeover would then start the partition below offsets already "
                       "acknowledged",
    "producer_id_block": f"write it again as decimal digits, at or above {_LAST_GOOD}; never lower it or "
                         "delete it: ids already handed out could be handed out again",
    "moves": "delete it (what AbortMove does: the move is abandoned, its target's copy dropped, and it may be "
             "asked again), or write it again with " + _LAST_GOOD,
    "instances": "the instance writes its record again itself at its next lease renewal (restart it if the "
                 "record stays malformed); never delete it: the instance would be seen gone while it still "
                 "serves, and its partitions could be taken over under it",
}


def repair_advice(key: str, key_malformed: bool = False) -> str:
    """What an operator does about the malformed record at ``key``: safe per kind. Deleting is safe
    only for a move record and a key seglog never writes (``key_malformed``): a deleted topic
    record deletes the topic, a deleted owner record lets every instance serve the partition, a
    deleted ceiling lets a takeover reuse acknowledged offsets."""
    if key_malformed:
        return "seglog never writes such a key and applies nothing from it: delete it (etcdctl del <key>)"
    parts = key.split("/", 2)
    kind = parts[1] if len(parts) > 1 else ""
    return _ADVICE.get(kind, "write it again with " + _LAST_GOOD)


# -- keys -------------------------------------------------------------------------------------
def check_partition_text(key: str, text: str) -> int:
    """The partition number of a key's last part: ASCII digits, below the partition cap."""
    if not _DIGITS.fullmatch(text) or (len(text) > 1 and text[0] == "0"):
        raise MalformedRecordError(key, f"partition {text[:40]!r} is not a number in [0, {PARTITION_COUNT_MAX})")
    partition = int(text)
    if partition >= PARTITION_COUNT_MAX:
        raise MalformedRecordError(key, f"partition {partition} is not below {PARTITION_COUNT_MAX}")
    return partition


def check_topic_name(key: str, name: str) -> str:
    if not _LEGAL_TOPIC.fullmatch(name) or name in (".", ".."):
        raise MalformedRecordError(key, f"topic name {name[:80]!r} is not one of 1-{TOPIC_NAME_LENGTH_MAX} of "
                                        "[a-zA-Z0-9._-]")
    return name


def check_instance_id(key: str, name: str, what: str = "instance id") -> str:
    if not INSTANCE_ID.fullmatch(name):
        raise MalformedRecordError(key, f"{what} {name[:80]!r} is not 1-64 of [A-Za-z0-9._-]")
    return name


# -- values -----------------------------------------------------------------------------------
def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > INT_DIGITS_MAX:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def _depth_within(value: bytes, limit: int) -> bool:
    """Whether no array or object nests deeper than ``limit`` (brackets inside strings skipped)."""
    if value.count(b"[") + value.count(b"{") <= limit:
        return True  # the usual record: too few brackets to nest that deep
    depth, in_string, escaped = 0, False, False
    for byte in value:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return False
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return True


def decode_json(key: str, value: bytes) -> dict[str, Any]:
    """The value as a JSON object, bounded in size, depth and integer length."""
    if not isinstance(value, (bytes, bytearray)):
        raise MalformedRecordError(key, f"value is {type(value).__name__}, not bytes")
    if len(value) > RECORD_BYTES_MAX:
        raise MalformedRecordError(key, f"value of {len(value)} bytes, above {RECORD_BYTES_MAX}")
    if not _depth_within(bytes(value), DEPTH_MAX):
        raise MalformedRecordError(key, f"value nests deeper than {DEPTH_MAX} levels")
    try:
        record = json.loads(bytes(value).decode("utf-8"), parse_int=_bounded_int, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise MalformedRecordError(key, f"not JSON seglog writes: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(record, dict):
        raise MalformedRecordError(key, f"value is a JSON {type(record).__name__}, not an object")
    return record


def _int(key: str, record: Mapping[str, Any], name: str, default: int | None = None, low: int = 0,
         high: int = INT64_MAX) -> int:
    if name not in record:
        if default is None:
            raise MalformedRecordError(key, f"field {name!r} is missing")
        return default
    found = record[name]
    if isinstance(found, bool) or not isinstance(found, int):
        raise MalformedRecordError(key, f"field {name!r} is {type(found).__name__}, not an integer")
    if not low <= found <= high:
        raise MalformedRecordError(key, f"field {name!r} is {found}, not in [{low}, {high}]")
    return found


def _str(key: str, record: Mapping[str, Any], name: str, default: str | None = None,
         limit: int | None = None) -> str:
    if name not in record:
        if default is None:
            raise MalformedRecordError(key, f"field {name!r} is missing")
        return default
    found = record[name]
    if not isinstance(found, str):
        raise MalformedRecordError(key, f"field {name!r} is {type(found).__name__}, not a string")
    if limit is not None and len(found) > limit:
        raise MalformedRecordError(key, f"field {name!r} has {len(found)} characters, above {limit}")
    return found


def _object(key: str, record: Mapping[str, Any], name: str) -> dict[str, Any]:
    found = record.get(name, {})
    if not isinstance(found, dict):
        raise MalformedRecordError(key, f"field {name!r} is {type(found).__name__}, not an object")
    return found


@dataclass(frozen=True)
class InstanceRecord:
    address: str
    data_dirs: tuple[str, ...]
    partition_count: int
    bytes: int
    acl_digest: str


def decode_instance(key: str, value: bytes) -> InstanceRecord:
    record = decode_json(key, value)
    capacity = _object(key, record, "capacity")
    dirs = record.get("data_dirs", [])
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        raise MalformedRecordError(key, "field 'data_dirs' is not a list of strings")
    return InstanceRecord(_str(key, record, "address"), tuple(dirs), _int(key, capacity, "partition_count", 0),
                          _int(key, capacity, "bytes", 0), _str(key, record, "acl_digest", ""))


@dataclass(frozen=True)
class TopicRecord:
    partitions: int
    configs: dict[str, str]
    topic_id: str | None  # as written (ownership.topic_id_of checks its form)
    record: dict[str, Any]  # the whole decoded record: a rewrite keeps the fields it does not know


def decode_topic(key: str, value: bytes) -> TopicRecord:
    record = decode_json(key, value)
    partitions = _int(key, record, "partitions", low=1, high=PARTITION_COUNT_MAX)
    configs = _object(key, record, "configs")
    for name, config in configs.items():
        if not isinstance(config, str):
            raise MalformedRecordError(key, f"config {name[:80]!r} is {type(config).__name__}, not a string")
    topic_id = record.get("topic_id")
    return TopicRecord(partitions, dict(configs), topic_id if isinstance(topic_id, str) else None, record)


@dataclass(frozen=True)
class OwnerFields:
    owner: str
    epoch: int
    start_offset: int


# Kafka's leader epoch is an int32; the log stamps it into each batch.
EPOCH_MAX = (1 << 31) - 1


def decode_owner(key: str, value: bytes) -> OwnerFields:
    record = decode_json(key, value)
    return OwnerFields(check_instance_id(key, _str(key, record, "owner", limit=64), "owner"),
                       _int(key, record, "epoch", high=EPOCH_MAX), _int(key, record, "start_offset", 0))


@dataclass(frozen=True)
class MoveFields:
    source: str
    target: str
    epoch: int
    state: str
    started_ms: int

    def as_dict(self, mod_revision: int) -> dict[str, Any]:
        """The form the watched cache hands out (``move_of``)."""
        return {"source": self.source, "target": self.target, "epoch": self.epoch, "state": self.state,
                "started_ms": self.started_ms, "mod_revision": mod_revision}


def decode_move(key: str, value: bytes) -> MoveFields:
    record = decode_json(key, value)
    state = _str(key, record, "state", limit=16)
    if state not in MOVE_STATES:
        raise MalformedRecordError(key, f"state {state!r} is not one of {', '.join(MOVE_STATES)}")
    return MoveFields(check_instance_id(key, _str(key, record, "source", limit=64), "source"),
                      check_instance_id(key, _str(key, record, "target", limit=64), "target"),
                      _int(key, record, "epoch", high=EPOCH_MAX), state, _int(key, record, "started_ms", 0))


@dataclass(frozen=True)
class CeilingRecord:
    epoch: int
    ceiling: int


def decode_ceiling(key: str, value: bytes) -> CeilingRecord:
    record = decode_json(key, value)
    return CeilingRecord(_int(key, record, "epoch", high=EPOCH_MAX), _int(key, record, "ceiling"))
