"""The key layout in etcd, in one place.

Everything of one cluster lives under ``<cluster name>/`` (``--cluster-name``), so several clusters
may share one etcd:

    <name>/instances/<instance id>          JSON InstanceRecord, attached to the instance's lease
    <name>/topics/<topic>                   JSON {"partitions": N, "configs": {...}}
    <name>/owners/<topic>/<partition>       JSON {"owner": <instance id>, "epoch": E}
    <name>/producer_id_block                the first producer id not yet reserved (decimal)
    <name>/moves/<topic>/<partition>        JSON move record of a partition move in progress
    <name>/offset_ceilings/<topic>/<partition>  JSON {"epoch": E, "ceiling": N}: the owner at epoch E
                                            acknowledges no offset at or above N (offset_ceilings.py)

Topic names never contain ``/`` (Kafka's legal characters are ``[a-zA-Z0-9._-]``), so the last
``/`` of an owners key separates the topic from the partition number.
"""

from __future__ import annotations

from dataclasses import dataclass

from .records import check_instance_id, check_partition_text, check_topic_name

INSTANCES = "instances/"
TOPICS = "topics/"
OWNERS = "owners/"
PRODUCER_ID_BLOCK = "producer_id_block"
MOVES = "moves/"
OFFSET_CEILINGS = "offset_ceilings/"


@dataclass(frozen=True)
class ClusterKeys:
    cluster_name: str

    @property
    def prefix(self) -> str:
        return self.cluster_name + "/"

    def instance(self, instance_id: str) -> str:
        return self.prefix + INSTANCES + instance_id

    def topic(self, topic: str) -> str:
        return self.prefix + TOPICS + topic

    def owner(self, topic: str, partition: int) -> str:
        assert partition >= 0, partition
        return f"{self.prefix}{OWNERS}{topic}/{partition}"

    def owners_of(self, topic: str) -> str:
        return f"{self.prefix}{OWNERS}{topic}/"

    def producer_id_block(self) -> str:
        return self.prefix + PRODUCER_ID_BLOCK

    def move(self, topic: str, partition: int) -> str:
        assert partition >= 0, partition
        return f"{self.prefix}{MOVES}{topic}/{partition}"

    def offset_ceiling(self, topic: str, partition: int) -> str:
        assert partition >= 0, partition
        return f"{self.prefix}{OFFSET_CEILINGS}{topic}/{partition}"

    def parse(self, key: str) -> tuple[str, str, int | None] | None:
        """("instance", id, None), ("topic", name, None), ("owner", topic, partition),
        ("move", topic, partition), or None for a key of no such kind (another cluster's, the
        producer-id counter, an offset ceiling). A key of one of these kinds whose parts are not
        what seglog writes (an instance id or topic name it refuses, a partition that is not
        ASCII digits below the cap) raises MalformedRecordError (records.py)."""
        if not key.startswith(self.prefix):
            return None
        rest = key[len(self.prefix):]
        if rest.startswith(INSTANCES):
            return ("instance", check_instance_id(key, rest[len(INSTANCES):]), None)
        if rest.startswith(TOPICS):
            return ("topic", check_topic_name(key, rest[len(TOPICS):]), None)
        for kind, prefix in (("owner", OWNERS), ("move", MOVES)):
            if rest.startswith(prefix):
                topic, _, partition = rest[len(prefix):].rpartition("/")
                return (kind, check_topic_name(key, topic), check_partition_text(key, partition))
        return None
