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
        ("move", topic, partition) or None."""
        if not key.startswith(self.prefix):
            return None
        rest = key[len(self.prefix):]
        if rest.startswith(INSTANCES):
            return ("instance", rest[len(INSTANCES):], None)
        if rest.startswith(TOPICS):
            return ("topic", rest[len(TOPICS):], None)
        if rest.startswith(OWNERS):
            topic, _, partition = rest[len(OWNERS):].rpartition("/")
            if topic and partition.isdigit():
                return ("owner", topic, int(partition))
        if rest.startswith(MOVES):
            topic, _, partition = rest[len(MOVES):].rpartition("/")
            if topic and partition.isdigit():
                return ("move", topic, int(partition))
        return None
