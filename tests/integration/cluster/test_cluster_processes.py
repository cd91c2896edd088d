"""Three seglog processes and a three-member etcd on loopback: the cluster as an operator runs it.

- placement spreads a topic over the three instances, and a Producer and a Consumer bootstrapped
  with one address reach every partition at its owner;
- an owner killed with SIGKILL under produce load: its partitions answer UNAVAILABLE from every
  instance, naming it and since when; the other partitions keep being acknowledged meanwhile;
  every acknowledged record is there once it is back with its data dir;
- etcd loses its quorum (two of three members stopped): reads go on, produce is refused
  UNAVAILABLE once the lease deadline passes, saying why, and resumes without a restart when the
  quorum returns, no acknowledged record lost;
- a rolling restart of all three instances under an idempotent producer and a consumer: no
  record lost, none duplicated.

Each test is bounded by the waits of ``_until`` (no timing is asserted) and marked slow.
"""

from __future__ import annotations

import collections
import itertools
import threading

import grpc
import pytest

from seglog import Admin, Consumer, Producer
from seglog.v1 import log_service_pb2 as pb
from tests.integration.cluster.test_cluster_client_routing import _holds
from tests.integration.cluster.test_service_cluster import _until
from tests.support.etcd_server import EtcdCluster, free_port
from tests.support.integration_helpers import ServiceProcess, records_of

pytestmark = pytest.mark.integration
# Fenced after 4 - 2 x 0.8 - 0.4 = 2 s without renewal; a killed owner's lease is gone within 4 s.
LEASE_TTL_MS = 4000
INSTANCES = ("a", "b", "c")
_clusters = itertools.count()


@pytest.fixture(scope="module")
def etcd3(tmp_path_factory):
    cluster = EtcdCluster.start(str(tmp_path_factory.mktemp("etcd3")), size=3)
    yield cluster
    cluster.stop()


@pytest.fixture
def instances(tmp_path, etcd3):
    """Starts one seglog process per id, all in a cluster of their own on the three-member etcd."""
    started: list[ServiceProcess] = []
    name = f"procs{next(_clusters)}"

    def start(*ids: str, lease_ttl_ms: int = LEASE_TTL_MS) -> list[ServiceProcess]:
        for instance_id in ids:
            data = tmp_path / instance_id / "data"
            data.mkdir(parents=True)
            # A fixed port: a restarted instance is where the clients' bootstrap lists say.
            service = ServiceProcess(tmp_path / instance_id, [data], [
                "--listen", f"127.0.0.1:{free_port()}", "--etcd", ",".join(etcd3.endpoints), "--cluster-name", name, "--instance-id", instance_id,
                "--lease-ttl-ms", str(lease_ttl_ms)])
            started.append(service.start())
        return started

    yield start
    for service in started:  # all at once: each revokes its lease and drains in parallel
        if service.process is not None and service.process.poll() is None:
            service.signal()
    for service in started:
        service.stop()


def _alive(admin: Admin) -> set[str]:
    return {instance.instance_id for instance in admin.metadata().instances if instance.alive}


def _owners(admin: Admin, topic: str, partitions: int) -> dict[int, str]:
    metadata = admin.metadata([topic])
    return {p: metadata.owner_of(topic, p).owner_id for p in range(partitions)}


def _create_spread(admin: Admin, services, topic: str, partitions: int) -> dict[int, str]:
    _until(lambda: _alive(admin) == set(INSTANCES), what="three instances alive")
    admin.create_topic(topic, partitions=partitions)
    for service in services:
        _until(lambda: _holds(service, topic), what="every instance holding the topic")
    return _owners(admin, topic, partitions)


def _stored(service: ServiceProcess, topic: str, partition: int) -> dict[int, bytes]:
    """offset -> value of every record of the partition at ``service`` (its owner)."""
    stored, offset = {}, 0
    while True:
        page = records_of(service.stub.Fetch(pb.FetchRequest(topic=topic, partition=partition, offset=offset),
                                             timeout=30))
        if not page:
            return stored
        stored.update((record.offset, record.value) for record in page)
        offset = page[-1].offset + 1


def _refusal(service: ServiceProcess, topic: str, partition: int) -> grpc.RpcError | None:
    try:
        service.stub.Produce(pb.ProduceRequest(topic=topic, partition=partition,
                                               plain_records=[pb.PlainRecord(value=b"probe")]), timeout=30)
    except grpc.RpcError as exc:
        return exc
    return None


class Load:
    """One producer thread per partition (its own Producer, bootstrapped with one address),
    sending numbered values; what each acknowledged and each failure, by partition."""

    def __init__(self, bootstrap: str, topic: str, partitions, **producer_options) -> None:
        self.acknowledged: dict[int, list] = collections.defaultdict(list)
        self.failures: dict[int, list] = collections.defaultdict(list)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(bootstrap, topic, p, producer_options))
                         for p in partitions]
        for thread in self._threads:
            thread.start()

    def _run(self, bootstrap: str, topic: str, partition: int, options: dict) -> None:
        with Producer(bootstrap, linger_ms=1, **options) as producer:
            for n in itertools.count():
                if self._stop.is_set():
                    return
                futures = [producer.send(topic, b"p%d-%d-%d" % (partition, n, i), partition=partition)
                           for i in range(10)]
                for future in futures:
                    try:
                        self.acknowledged[partition].append(future.result(timeout=120))
                    except Exception as exc:  # noqa: BLE001 - kept per partition, asserted on
                        self.failures[partition].append(exc)
                        self._stop.wait(0.2)

    def count(self, partition: int) -> int:
        return len(self.acknowledged[partition])

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


def _assert_every_acknowledged_record_there(load: Load, by_id, owners, topic: str) -> None:
    for partition, acknowledged in load.acknowledged.items():
        stored = _stored(by_id[owners[partition]], topic, partition)
        missing = [m.offset for m in acknowledged if m.offset not in stored]
        assert not missing, f"{topic}-{partition}: acknowledged offsets missing: {missing[:5]}"
        offsets = [m.offset for m in acknowledged]
        assert len(set(offsets)) == len(offsets), f"{topic}-{partition}: an offset acknowledged twice"


@pytest.mark.slow  # three service processes: ~10 s
def test_placement_spreads_over_three_and_one_bootstrap_address_reaches_every_owner(instances, closing):
    a, b, c = instances(*INSTANCES)
    by_id = dict(zip(INSTANCES, (a, b, c)))
    admin = closing(Admin(a.address))
    owners = _create_spread(admin, (a, b, c), "spread", 6)
    assert collections.Counter(owners.values()) == {"a": 2, "b": 2, "c": 2}
    with Producer(a.address) as producer:  # one address: it learns the owners from refusals
        sent = {p: producer.send("spread", b"v%d" % p, partition=p).result(timeout=60) for p in range(6)}
    for p, metadata in sent.items():
        assert _stored(by_id[owners[p]], "spread", p) == {metadata.offset: b"v%d" % p}
    with Consumer(a.address, "spread", partition=list(range(6)), start="earliest") as consumer:
        read: dict[int, bytes] = {}
        _until(lambda: read.update((r.partition, r.value) for r in consumer.poll(timeout_ms=500)) or len(read) == 6,
               what="every partition read through a")
    assert read == {p: b"v%d" % p for p in range(6)}


@pytest.mark.slow  # three service processes, one killed and restarted under load: ~30 s
def test_an_owner_killed_under_load_is_offline_alone_and_keeps_every_acknowledged_record(instances, closing):
    a, b, c = instances(*INSTANCES)
    by_id = dict(zip(INSTANCES, (a, b, c)))
    admin = closing(Admin(a.address))
    owners = _create_spread(admin, (a, b, c), "killed", 6)
    on_c = [p for p, owner in owners.items() if owner == "c"]
    others = [p for p in owners if p not in on_c]
    load = Load(a.address, "killed", range(6), retries=2, retry_backoff_ms=100, request_timeout_ms=5000)
    try:
        _until(lambda: all(load.count(p) >= 100 for p in range(6)), what="every partition produced to")
        c.signal(9)
        c.wait()
        # From every live instance, c's partitions answer UNAVAILABLE naming c and since when.
        for service in (a, b):
            for p in on_c:
                refused = _until(lambda: (e := _refusal(service, "killed", p)) is not None
                                 and e.code() == grpc.StatusCode.UNAVAILABLE and e, what="UNAVAILABLE, c gone")
                assert "owned by instance 'c'" in refused.details() and " since " in refused.details()
                assert dict(refused.trailing_metadata())["seglog-owner-id"] == "c"
        # The other partitions keep being acknowledged while c is gone.
        during = {p: load.count(p) for p in others}
        _until(lambda: all(load.count(p) >= during[p] + 100 for p in others), what="the others acknowledged")
        assert _refusal(a, "killed", on_c[0]).code() == grpc.StatusCode.UNAVAILABLE  # still gone meanwhile
        c.start()  # with its data dir and its id
        back = {p: load.count(p) for p in on_c}
        _until(lambda: all(load.count(p) > back[p] for p in on_c), what="c's partitions acknowledged again")
    finally:
        load.stop()
    assert not any(load.failures[p] for p in others), {p: load.failures[p][:2] for p in others}
    _assert_every_acknowledged_record_there(load, by_id, owners, "killed")
    admin.close()


@pytest.mark.slow  # a three-member etcd losing its quorum and getting it back: ~25 s
def test_etcd_quorum_lost_and_back_reads_go_on_produce_fenced_then_resumes_without_restart(instances, etcd3, closing):
    # A 6 s lease: fenced after 3 s without renewal, so a produce right after the quorum goes is
    # still acknowledged (the local deadline, not etcd, decides).
    a, b, c = instances(*INSTANCES, lease_ttl_ms=6000)
    by_id = dict(zip(INSTANCES, (a, b, c)))
    admin = closing(Admin(a.address))
    owners = _create_spread(admin, (a, b, c), "quorum", 3)
    load = Load(a.address, "quorum", range(3), retries=1000, retry_backoff_ms=200, request_timeout_ms=5000)
    owner_of_0 = by_id[owners[0]]
    try:
        _until(lambda: all(load.count(p) >= 50 for p in range(3)), what="produced before")
        at_quorum_loss = sum(load.count(p) for p in range(3))
        etcd3.stop_member(1)
        etcd3.stop_member(2)
        # Produce is refused once the lease deadline passes, UNAVAILABLE, saying why.
        refused = _until(lambda: (e := _refusal(owner_of_0, "quorum", 0)) is not None and e, what="fenced")
        assert refused.code() == grpc.StatusCode.UNAVAILABLE
        assert "instance fenced: lease not renewed since" in refused.details()
        # Reads go on meanwhile, at every owner.
        fenced_counts = {p: load.count(p) for p in range(3)}
        assert sum(fenced_counts.values()) > at_quorum_loss  # acknowledged until the deadline
        for p in range(3):
            assert len(_stored(by_id[owners[p]], "quorum", p)) >= fenced_counts[p]
        etcd3.start_member(1)
        etcd3.start_member(2)
        etcd3.wait_healthy()
        # Everything resumes with the same processes: the producers' retries are acknowledged.
        _until(lambda: _refusal(owner_of_0, "quorum", 0) is None, timeout_s=60, what="produce accepted again")
        _until(lambda: all(load.count(p) >= fenced_counts[p] + 50 for p in range(3)), timeout_s=60,
               what="produced after")
    finally:
        load.stop()
    assert all(service.process.poll() is None for service in (a, b, c))  # no restart
    assert not any(load.failures.values()), {p: f[:2] for p, f in load.failures.items()}
    _assert_every_acknowledged_record_there(load, by_id, owners, "quorum")
    admin.close()


@pytest.mark.slow  # three service processes restarted one by one under a producer and a consumer: ~40 s
def test_a_rolling_restart_under_an_idempotent_producer_and_a_consumer_loses_and_duplicates_nothing(instances, closing):
    a, b, c = instances(*INSTANCES)
    services = (a, b, c)
    by_id = dict(zip(INSTANCES, services))
    bootstrap = ",".join(service.address for service in services)
    admin = closing(Admin(bootstrap))
    owners = _create_spread(admin, services, "rolling", 3)
    load = Load(bootstrap, "rolling", range(3), retries=1000, retry_backoff_ms=200, request_timeout_ms=5000)
    consumed: list = []
    stop_reading = threading.Event()

    def read() -> None:
        with Consumer(bootstrap, "rolling", partition=[0, 1, 2], start="earliest") as consumer:
            while not stop_reading.is_set():
                try:
                    consumed.extend(consumer.poll(timeout_ms=200))
                except Exception:  # noqa: BLE001 - an owner restarting; the position is kept
                    stop_reading.wait(0.2)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        _until(lambda: all(load.count(p) >= 50 for p in range(3)), what="produced before the restarts")
        for service in services:
            before = {p: load.count(p) for p in range(3)}
            service.stop()
            service.start()
            _until(lambda: all(load.count(p) >= before[p] + 30 for p in range(3)), timeout_s=60,
                   what="every partition acknowledged after the restart")
    finally:
        load.stop()
    acknowledged = {(m.partition, m.offset) for ms in load.acknowledged.values() for m in ms}
    try:
        _until(lambda: acknowledged <= {(r.partition, r.offset) for r in consumed}, timeout_s=60,
               what="the consumer reaching every acknowledged record")
    finally:
        stop_reading.set()
        reader.join()
    # Not one send fails (a call gRPC cancelled as an instance stopped is retried as UNAVAILABLE).
    assert not any(load.failures.values()), {p: f[:2] for p, f in load.failures.items()}
    _assert_every_acknowledged_record_there(load, by_id, owners, "rolling")
    for p in range(3):
        values = list(_stored(by_id[owners[p]], "rolling", p).values())
        assert len(set(values)) == len(values), f"rolling-{p}: a record stored twice"
    read_values = [(r.partition, r.value) for r in consumed]
    assert len(set(read_values)) == len(read_values), "a record delivered twice"
    admin.close()
