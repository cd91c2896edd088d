"""A topic's configs changed cluster-wide: the ``configs`` of its record in etcd, compared and set.

The topic record (``<name>/topics/<topic>``, JSON ``{"partitions", "configs", "topic_id"}``) holds
the topic's overrides, as every copy's ``topic.properties`` does. A change reads the record, computes
the new overrides from the ones etcd holds (never from a local copy that may lag), and writes the
record back in a transaction compared on its modification revision: a change made meanwhile by
another instance makes the transaction fail, and the change is computed again from the record that
won. The other fields (partition count, topic id) are written back as read; the key's create
revision, the topic's generation, is untouched. Each instance applies the record's configs to its
copy from its watched cache (cluster_node.py); one down at the time applies them at its next start.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from .errors import ConfigsConflictError, UnknownTopicError
from .etcd_gateway import EtcdGateway, b64
from .keys import ClusterKeys
from .records import decode_topic

__all__ = ["write_topic_configs"]

# Changes of one topic's configs racing each other are rare (an operator's command); past this many
# lost races in a row the caller is told to retry rather than spin.
WRITE_ATTEMPTS_MAX = 5

Change = Callable[[dict[str, str]], dict[str, str]]


def write_topic_configs(gateway: EtcdGateway, keys: ClusterKeys, topic: str, change: Change) -> tuple[dict[str, str], int]:
    """Sets the record's configs to ``change(configs read)``, compared on the record's revision;
    returns (the configs written, the revision written at). ``change`` may raise to refuse (nothing
    is written). Raises UnknownTopicError, ConfigsConflictError, EtcdUnavailableError,
    MalformedRecordError (the record etcd holds is not one seglog writes: nothing is written)."""
    key = keys.topic(topic)
    for _ in range(WRITE_ATTEMPTS_MAX):
        kv = gateway.get(key)
        if kv is None:
            raise UnknownTopicError(f"topic {topic!r} does not exist in the cluster")
        record = decode_topic(kv.key, kv.value).record  # checked; the fields it does not know kept
        configs = change(dict(record.get("configs", {})))
        record["configs"] = configs
        unchanged = {"key": b64(key), "result": "EQUAL", "target": "MOD", "mod_revision": kv.mod_revision}
        put = {"request_put": {"key": b64(key), "value": b64(json.dumps(record, sort_keys=True).encode())}}
        succeeded, revision = gateway.txn([unchanged], [put])
        if succeeded:
            return configs, revision
    raise ConfigsConflictError(
        f"topic {topic!r}: its configs changed {WRITE_ATTEMPTS_MAX} times while this change was written; retry")
