"""Producer-id blocks for the whole cluster, from one counter in etcd.

Kafka's controller hands every broker blocks of 1000 producer ids from one counter in its metadata
log, so no two brokers ever hand out one id. seglog's counterpart is one key,
``<cluster>/producer_id_block``, holding the first id not yet reserved (decimal text). An instance
reserves a block by advancing it by ``BLOCK_SIZE`` in one etcd transaction compared on the key's
mod revision; a lost race (another instance advanced it first) reads again and retries. The first
block of a cluster creates the key (compared absent) at the wall clock in milliseconds times
``BLOCK_SIZE``, the floor the single-process allocator takes on a first start
(storage/producers/producer_ids.py): an id an instance handed out from its local files before it
joined a cluster, at fewer than ``BLOCK_SIZE`` ids per millisecond since its first run, is below
it, and so is every id of a former cluster whose key was lost with its etcd.

An id reserved is never handed out again even if the instance that reserved it dies before using
it: a gap, as in Kafka. Failing to reach etcd raises ``EtcdUnavailableError``; nothing is reserved.
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import EtcdUnavailableError, MalformedRecordError
from .etcd_gateway import EtcdGateway, b64
from .keys import ClusterKeys

__all__ = ["ProducerIdBlockContentionError", "reserve_producer_id_block"]

# Lost races in a row before giving up (each one means another instance reserved a block).
_ATTEMPTS_MAX = 64
_ID_MAX = 2**63 - 1


class ProducerIdBlockContentionError(EtcdUnavailableError):
    """Every attempt lost its race to another reservation: retriable, like etcd not answering."""


def reserve_producer_id_block(gateway: EtcdGateway, keys: ClusterKeys, block_size: int,
                              now_ms: Callable[[], int]) -> int:
    """Blocking. The first id of a block of ``block_size`` ids no other reservation in the cluster
    got; raises EtcdUnavailableError (etcd not reached, or ``_ATTEMPTS_MAX`` races lost),
    MalformedRecordError (the counter etcd holds is not a number an instance wrote)."""
    assert block_size > 0
    key = keys.producer_id_block()
    for _ in range(_ATTEMPTS_MAX):
        kv = gateway.get(key)
        if kv is None:
            start = now_ms() * block_size
            compare = {"key": b64(key), "result": "EQUAL", "target": "CREATE", "create_revision": 0}
        else:
            start = _parse(kv.value, key)
            compare = {"key": b64(key), "result": "EQUAL", "target": "MOD", "mod_revision": kv.mod_revision}
        end = start + block_size
        if end > _ID_MAX:
            raise OverflowError("producer ids are exhausted")
        put = {"request_put": {"key": b64(key), "value": b64(str(end))}}
        succeeded, _ = gateway.txn([compare], [put])
        if succeeded:
            return start
    raise ProducerIdBlockContentionError(
        f"no producer-id block reserved: {_ATTEMPTS_MAX} reservations in a row lost to other instances")


def _parse(value: bytes, key: str) -> int:
    text = value.decode("ascii", errors="replace")
    if not text.isascii() or not text.isdigit() or len(text) > 19 or int(text) > _ID_MAX:
        # Not something an instance wrote: refusing is safer than guessing a counter.
        raise MalformedRecordError(key, f"holds {text[:40]!r}, not a producer-id counter")
    return int(text)
