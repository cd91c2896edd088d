"""The kill -9 loop: a real service process, concurrent producers acknowledged only after fsync
(ACKS_FSYNCED) and consumers tailing the log, killed with SIGKILL at a random moment, again and
again. After the last kill the service starts once more and every acknowledged record must be
there exactly once, at the offset it was acknowledged with, in order and CRC-valid; every record
a consumer saw must still be there; and ``seglog dump --verify`` must pass on every partition.

The default run does FAST_ITERATIONS kills; ``-m slow`` does SLOW_ITERATIONS. The figures of a
run are printed (``-s``) and reported in docs/reliability.md ("Crash loop").
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import grpc
import pytest
from tests.support.integration_helpers import ServiceProcess, make_batch, records_of, service_environment

from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration

FAST_ITERATIONS = 2
SLOW_ITERATIONS = 20
PARTITION_COUNT = 2
PRODUCERS_PER_PARTITION = 2
RECORDS_PER_BATCH = 5
# How long the load runs before the kill: long enough for segments to roll (segment.bytes is
# small), short and random so that kills land in appends, rolls, flushes and index writes.
RUN_S = (0.4, 1.5)
TOPIC_CONFIG = {"segment.bytes": "32768", "index.interval.bytes": "1024"}
RPC_TIMEOUT_S = 10


@dataclass
class Ledger:
    """What the clients were told: acknowledged records and records a consumer saw."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acknowledged: dict[int, dict[int, bytes]] = field(default_factory=dict)  # partition -> offset -> value
    consumed: dict[int, dict[int, bytes]] = field(default_factory=dict)
    produce_errors: int = 0


def _produce(stub, partition: int, producer: str, stop: threading.Event, ledger: Ledger) -> None:
    sequence = 0
    while not stop.is_set():
        values = [b"%s-%d" % (producer.encode(), sequence + i) for i in range(RECORDS_PER_BATCH)]
        sequence += RECORDS_PER_BATCH
        try:
            response = stub.Produce(
                pb.ProduceRequest(topic="crash", partition=partition, records=make_batch(values),
                                  acks=pb.ACKS_FSYNCED),
                timeout=RPC_TIMEOUT_S,
            )
        except grpc.RpcError:
            with ledger.lock:
                ledger.produce_errors += 1
            return  # the process is gone (or going): not acknowledged, never retried
        with ledger.lock:
            book = ledger.acknowledged.setdefault(partition, {})
            for index, record_value in enumerate(values):
                assert response.base_offset + index not in book, "an acknowledged offset handed out twice"
                book[response.base_offset + index] = record_value


def _consume(stub, partition: int, start: int, stop: threading.Event, ledger: Ledger) -> None:
    offset = start
    while not stop.is_set():
        try:
            response = stub.Fetch(
                pb.FetchRequest(topic="crash", partition=partition, offset=offset, max_wait_ms=100),
                timeout=RPC_TIMEOUT_S,
            )
        except grpc.RpcError:
            return
        records = records_of(response)  # CRC-checked
        with ledger.lock:
            seen = ledger.consumed.setdefault(partition, {})
            for record in records:
                if record.offset >= offset:
                    assert record.offset not in seen or seen[record.offset] == record.value
                    seen[record.offset] = record.value
        if records:
            assert [r.offset for r in records] == sorted(r.offset for r in records)
            offset = records[-1].offset + 1


def _one_life(service: ServiceProcess, life: int, rng: random.Random, ledger: Ledger) -> None:
    """Start, load for a random while, SIGKILL."""
    service.start()
    stub = service.stub
    stop = threading.Event()
    threads = []
    for partition in range(PARTITION_COUNT):
        start = service.stub.Fetch(pb.FetchRequest(topic="crash", partition=partition, offset=0, max_bytes=1),
                                   timeout=RPC_TIMEOUT_S).high_watermark
        threads.append(threading.Thread(target=_consume, args=(stub, partition, max(0, start - 50), stop, ledger)))
        for producer in range(PRODUCERS_PER_PARTITION):
            name = f"life{life}-p{partition}-w{producer}"
            threads.append(threading.Thread(target=_produce, args=(stub, partition, name, stop, ledger)))
    for thread in threads:
        thread.start()
    time.sleep(rng.uniform(*RUN_S))
    service.signal(signal.SIGKILL)
    service.wait()
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    service.channel.close()
    service.channel = None


def _read_partition(stub, partition: int) -> list:
    records, offset = [], 0
    while True:
        response = stub.Fetch(pb.FetchRequest(topic="crash", partition=partition, offset=offset,
                                              max_bytes=1 << 20), timeout=RPC_TIMEOUT_S)
        batch_records = [r for r in records_of(response) if r.offset >= offset]
        if not batch_records:
            assert offset == response.high_watermark, f"no records at {offset} below {response.high_watermark}"
            return records
        records.extend(batch_records)
        offset = batch_records[-1].offset + 1


def run_crash_loop(tmp_path, iterations: int, seed: int) -> dict:
    rng = random.Random(seed)
    workdir = tmp_path / "crash-loop"
    workdir.mkdir()
    service = ServiceProcess(workdir, [workdir / "data0"], ["--no-malloc-tuning"])
    service.start()
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="crash", partitions=PARTITION_COUNT, configs=TOPIC_CONFIG),
                             timeout=RPC_TIMEOUT_S)
    service.stop()
    ledger = Ledger()
    for life in range(iterations):
        _one_life(service, life, rng, ledger)

    service.start()
    try:
        for partition in range(PARTITION_COUNT):
            records = _read_partition(service.stub, partition)
            offsets = [r.offset for r in records]
            assert offsets == sorted(set(offsets)), "records out of order or twice"
            stored = {r.offset: r.value for r in records}
            values = [r.value for r in records]
            assert len(values) == len(set(values)), "a record stored twice"
            acknowledged = ledger.acknowledged.get(partition, {})
            missing = {o: v for o, v in acknowledged.items() if stored.get(o) != v}
            assert not missing, f"{len(missing)} acknowledged records lost or moved in partition {partition}"
            vanished = {o: v for o, v in ledger.consumed.get(partition, {}).items() if stored.get(o) != v}
            assert not vanished, f"{len(vanished)} consumed records vanished from partition {partition}"
    finally:
        assert service.stop() == 0, service.log()
    for partition in range(PARTITION_COUNT):
        verify = subprocess.run(
            [sys.executable, "-m", "seglog_cli", "dump", str(workdir / "data0" / f"crash-{partition}"), "--verify"],
            capture_output=True, text=True, env=service_environment(), timeout=120,
        )
        assert verify.returncode == 0, verify.stdout + verify.stderr
    figures = {
        "iterations": iterations,
        "acknowledged": sum(len(book) for book in ledger.acknowledged.values()),
        "consumed": sum(len(book) for book in ledger.consumed.values()),
        "lost": 0,
        "produce_calls_cut_by_kill": ledger.produce_errors,
        "recovery_log_lines": service.log().count("no clean-shutdown marker; recovering"),
    }
    print(f"crash loop figures: {figures}")
    return figures


def test_kill_nine_loses_no_acknowledged_record(tmp_path):
    figures = run_crash_loop(tmp_path, FAST_ITERATIONS, seed=11)
    assert figures["acknowledged"] > 0 and figures["recovery_log_lines"] == FAST_ITERATIONS


@pytest.mark.slow
@pytest.mark.timeout(1200)  # about 5 s per life on an idle 2-core machine; CI machines are busier
def test_kill_nine_loop_many_iterations(tmp_path):
    figures = run_crash_loop(tmp_path, SLOW_ITERATIONS, seed=29)
    assert figures["acknowledged"] > 0 and figures["recovery_log_lines"] == SLOW_ITERATIONS
