"""seglog.v1.ClusterService: Metadata, which every instance answers (cluster.proto).

In cluster mode (``core.cluster`` set) the answer comes from the watched cache of etcd, never
from a call to etcd: the instances (alive or since when gone) and each partition's owner, its
address and epoch; a topic this instance holds with no owner record in etcd (created before
cluster mode) is answered as this instance's, at epoch 0, as the produce path serves it. In a
single process the answer is this instance owning every local partition at epoch 0, so a client
can always ask. Internal topics are left out (__consumer_offsets: a group's client finds its
coordinator from a refusal's hint, rpc/group_routing.py); the caller sees only the topics it may
describe.
"""

from __future__ import annotations

from typing import Any

import grpc

from seglog.v1 import cluster_pb2 as cpb
from seglog.v1 import cluster_pb2_grpc as cpb_grpc
from seglog_server.security import Operation

from .boundary import unary_rpc
from .call_gate import current_call
from .service_core import ServiceCore

__all__ = ["CLUSTER_SERVICE_NAME", "LOCAL_INSTANCE_ID", "ClusterRpcs", "add_cluster_service"]

CLUSTER_SERVICE_NAME = cpb.DESCRIPTOR.services_by_name["ClusterService"].full_name
# The instance id a single process answers with (it has no etcd registration).
LOCAL_INSTANCE_ID = "local"


class ClusterRpcs(cpb_grpc.ClusterServiceServicer):
    def __init__(self, core: ServiceCore) -> None:
        self.core = core
        self.address = ""  # the bound address, set by app.py once bound

    @unary_rpc
    async def Metadata(self, request: cpb.MetadataRequest, context: Any) -> Any:
        cluster = self.core.cluster
        wanted = set(request.topics)
        local = [(topic, count) for topic, count in self.core.storage.list_topics()
                 if topic not in self.core.internal_topics]
        if cluster is None:
            response = cpb.MetadataResponse(cluster_mode=False, instance_id=LOCAL_INSTANCE_ID, current=True)
            response.instances.add(instance_id=LOCAL_INSTANCE_ID, address=self.address, alive=True)
            self._add_local(response, local, LOCAL_INSTANCE_ID, self.address, wanted)
            return response
        return self._cluster_answer(cluster, local, wanted)

    def _cluster_answer(self, cluster: Any, local: list[tuple[str, int]], wanted: set[str]) -> Any:
        cache = cluster.cache
        instances = cache.instances()
        response = cpb.MetadataResponse(cluster_mode=True, cluster_name=cluster.cluster_name,
                                        instance_id=cluster.instance_id, current=cache.statistics().connected)
        for info in sorted(instances.values(), key=lambda info: info.instance_id):
            response.instances.add(instance_id=info.instance_id, address=info.address, alive=info.alive,
                                   gone_since_ms=info.gone_since_ms or 0)
        topics = cache.topics()
        for topic in sorted(topics):
            if (wanted and topic not in wanted) or not self._may_describe(topic):
                continue
            for partition in range(topics[topic]):
                owner = cache.owner_of(topic, partition)
                if owner is None:
                    continue
                info = instances.get(owner.owner)
                response.partitions.add(
                    topic=topic, partition=partition, owner_id=owner.owner,
                    owner_address=info.address if info is not None else "", epoch=owner.epoch,
                    owner_alive=info is not None and info.alive)
        self._add_local(response, [(t, n) for t, n in local if t not in topics], cluster.instance_id,
                        cluster.address, wanted)
        return response

    def _add_local(self, response: Any, topics: list[tuple[str, int]], instance_id: str, address: str,
                   wanted: set[str]) -> None:
        for topic, count in sorted(topics):
            if (wanted and topic not in wanted) or not self._may_describe(topic):
                continue
            for partition in range(count):
                response.partitions.add(topic=topic, partition=partition, owner_id=instance_id,
                                        owner_address=address, epoch=0, owner_alive=True)

    @staticmethod
    def _may_describe(topic: str) -> bool:
        call = current_call()
        return call is None or call.may(Operation.DESCRIBE, topic)


def add_cluster_service(servicer: ClusterRpcs, server: grpc.aio.Server) -> None:
    cpb_grpc.add_ClusterServiceServicer_to_server(servicer, server)
