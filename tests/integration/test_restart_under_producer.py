"""A single service process stopped (SIGTERM) and started again, three times, under idempotent
Producers sending without pause: not one send fails, and every acknowledged record is there once.

Before, a send in flight when the process stopped could fail CANCELLED (10-20 of ~2,400 sends
over three restarts here), which the producer did not retry: a stream opened after the service's
drain went quiet is cancelled by gRPC's own server stop, without a status of the service's.
CANCELLED as a status now reads as the service's side going away (ServiceUnavailableError,
retriable).
"""

from __future__ import annotations

import collections
import threading

import pytest

from seglog import Admin, Producer
from tests.support.integration_helpers import records_of, wait_until

from seglog.v1 import log_service_pb2 as pb
from tests.support.ports import free_port as _free_port

PARTITIONS = 3
RESTARTS = 3


class _Load:
    """One Producer per partition, sending batches of ten numbered values back to back."""

    def __init__(self, bootstrap: str) -> None:
        self.acknowledged: dict[int, list] = collections.defaultdict(list)
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(bootstrap, p)) for p in range(PARTITIONS)]
        for thread in self._threads:
            thread.start()

    def _run(self, bootstrap: str, partition: int) -> None:
        with Producer(bootstrap, linger_ms=1, retries=1000, retry_backoff_ms=100, request_timeout_ms=5000) as producer:
            n = 0
            while not self._stop.is_set():
                futures = [producer.send("restarts", b"%d-%d" % (partition, n + i), partition=partition)
                           for i in range(10)]
                n += 10
                for future in futures:
                    try:
                        self.acknowledged[partition].append(future.result(timeout=120))
                    except Exception as exc:  # noqa: BLE001 - asserted on below
                        self.failures.append(exc)

    def count(self) -> int:
        return sum(len(acknowledged) for acknowledged in self.acknowledged.values())

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


@pytest.mark.slow  # three restarts of one process under load: ~15 s
def test_restarts_under_idempotent_producers_fail_no_send(start_service):
    service = start_service(["--listen", f"127.0.0.1:{_free_port()}"])
    with Admin(service.address) as admin:
        admin.create_topic("restarts", partitions=PARTITIONS)
    load = _Load(service.address)
    try:
        for _ in range(RESTARTS):
            before = load.count()
            wait_until(lambda: load.count() >= before + 500, what="produced before the restart", timeout_s=60.0)
            assert service.stop() == 0
            service.start()
        before = load.count()
        wait_until(lambda: load.count() >= before + 500, what="produced after the last restart", timeout_s=60.0)
    finally:
        load.stop()
    assert not load.failures, (len(load.failures), load.failures[:3])
    for partition, acknowledged in load.acknowledged.items():
        stored = {}
        offset = 0
        while True:
            response = service.stub.Fetch(pb.FetchRequest(topic="restarts", partition=partition, offset=offset),
                                          timeout=10)
            records = list(records_of(response))
            if not records:
                break
            stored.update((record.offset, record.value) for record in records)
            offset = records[-1].offset + 1
        offsets = [metadata.offset for metadata in acknowledged]
        assert len(set(offsets)) == len(offsets), f"partition {partition}: an offset acknowledged twice"
        assert set(offsets) <= set(stored), f"partition {partition}: an acknowledged record missing"
        values = list(stored.values())
        assert len(set(values)) == len(values), f"partition {partition}: a record stored twice"
