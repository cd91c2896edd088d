"""The service process: start-up settings, health, reflection, shutdown, restart, failures."""

import shutil
import signal
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from tests.support.integration_helpers import make_batch, records_of, service_environment

from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration
Code = grpc.StatusCode
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"


def _run_to_exit(args, env=None, timeout_s=30):
    return subprocess.run([sys.executable, "-m", "seglog_server", *args], capture_output=True,
                          text=True, env=service_environment(env), timeout=timeout_s)


def test_health_says_serving_and_reflection_lists_the_log_service(start_service):
    service = start_service()
    health = health_pb2_grpc.HealthStub(service.channel)
    for name in ("", "seglog.v1.LogService"):
        status = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    database = ProtoReflectionDescriptorDatabase(service.channel)
    services = database.get_services()
    assert "seglog.v1.LogService" in services
    assert "grpc.health.v1.Health" in services
    methods = database.FindFileContainingSymbol("seglog.v1.LogService").service[0].method
    assert {m.name for m in methods} >= {"Produce", "Fetch", "Consume", "OffsetsForTimes"}


def test_sigterm_finishes_in_flight_work_ends_streams_and_exits_zero(start_service):
    service = start_service(["--shutdown-grace-ms", "3000"])
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="events", partitions=1))
    stub.Produce(pb.ProduceRequest(topic="events", records=make_batch([b"before"])))
    health_watch = health_pb2_grpc.HealthStub(service.channel).Watch(
        health_pb2.HealthCheckRequest(service=""), timeout=60)
    assert next(health_watch).status == health_pb2.HealthCheckResponse.SERVING
    stream = stub.Consume(pb.ConsumeRequest(topic="events", position=pb.START_POSITION_LATEST),
                          timeout=60)
    assert dict(stream.initial_metadata())["seglog-start-offset"] == "1"
    long_poll = stub.Fetch.future(pb.FetchRequest(topic="events", offset=1, max_wait_ms=60_000))
    produces = [stub.Produce.future(pb.ProduceRequest(
        topic="events", records=make_batch([b"in-flight-%d" % i]), acks=pb.ACKS_FSYNCED))
        for i in range(20)]
    produces[0].result(timeout=30)  # the server is working through them (and has the long poll)

    service.signal(signal.SIGTERM)

    assert next(health_watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
    health_watch.cancel()  # a Watch never ends by itself; it would hold the whole grace period
    # The long poll answers (at once, with what there is) instead of being cut off.
    assert long_poll.result(timeout=30).next_offset >= 1
    # The stream ends cleanly, saying the service is stopping.
    with pytest.raises(grpc.RpcError) as info:
        for _ in stream:
            pass
    assert info.value.code() == Code.UNAVAILABLE
    acknowledged = []
    for future in produces:
        try:
            acknowledged.append(future.result(timeout=30).base_offset)
        except grpc.RpcError as error:
            # Calls arriving once the shutdown began are refused UNAVAILABLE (retriable), never
            # CANCELLED; none of them was appended (checked after the restart).
            assert error.code() == Code.UNAVAILABLE, error.details()
    assert service.wait() == 0, service.log()
    for data_dir in service.data_dirs:
        assert (data_dir / CLEAN_SHUTDOWN_MARKER).exists()
    assert not service.ready_file.exists()

    # Restart on the same directories: exactly the acknowledged records are there, in order.
    restarted = start_service(data_dirs=service.data_dirs, workdir=service.workdir)
    records = records_of(restarted.stub.Fetch(pb.FetchRequest(topic="events", offset=0)))
    assert [r.value for r in records[:1]] == [b"before"]
    assert [r.offset for r in records[1:]] == sorted(acknowledged)
    assert restarted.stop() == 0


def test_restart_keeps_topics_configs_and_data(start_service):
    service = start_service(data_dir_count=2)
    service.stub.CreateTopic(pb.CreateTopicRequest(
        topic="kept", partitions=2, configs={"retention.ms": "123456"}))
    for partition in (0, 1):
        service.stub.Produce(pb.ProduceRequest(
            topic="kept", partition=partition, records=make_batch([b"p%d" % partition] * 3)))
    assert service.stop() == 0
    restarted = start_service(data_dirs=service.data_dirs, workdir=service.workdir)
    described = restarted.stub.DescribeTopic(pb.DescribeTopicRequest(topic="kept"))
    assert described.configs["retention.ms"] == "123456"
    assert [p.log_end_offset for p in described.partitions] == [3, 3]
    for partition in (0, 1):
        fetched = restarted.stub.Fetch(pb.FetchRequest(topic="kept", partition=partition))
        assert [r.value for r in records_of(fetched)] == [b"p%d" % partition] * 3


def test_allocator_thresholds_are_in_the_process_environment(start_service):
    service = start_service()
    environ = (open(f"/proc/{service.process.pid}/environ", "rb").read().split(b"\0"))
    assert b"MALLOC_MMAP_THRESHOLD_=33554432" in environ
    assert b"MALLOC_TRIM_THRESHOLD_=536870912" in environ
    assert b"MALLOC_TOP_PAD_=67108864" in environ
    opted_out = start_service(["--no-malloc-tuning"])
    environ = open(f"/proc/{opted_out.process.pid}/environ", "rb").read()
    assert b"MALLOC_MMAP_THRESHOLD_" not in environ


def test_settings_from_a_toml_file(start_service, tmp_path):
    config = tmp_path / "seglog.toml"
    config.write_text('[topic_defaults]\n"retention.ms" = 5000\n[limits]\nfetch_bytes_max = 4096\n')
    service = start_service(["--config", str(config)])
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="from-file", partitions=1))
    described = service.stub.DescribeTopic(pb.DescribeTopicRequest(topic="from-file"))
    assert described.configs["retention.ms"] == "5000"
    for _ in range(4):
        service.stub.Produce(pb.ProduceRequest(topic="from-file", records=make_batch([b"x" * 2000])))
    fetched = service.stub.Fetch(pb.FetchRequest(topic="from-file", max_bytes=1_000_000))
    assert 1 <= len(records_of(fetched)) <= 2  # capped by fetch_bytes_max, not by max_bytes


@pytest.mark.parametrize(
    ("args", "env", "names"),
    [
        (["--fetch-bytes-max", "lots"], {}, "fetch_bytes_max"),
        ([], {"SEGLOG_STORAGE_THREADS": "0"}, "SEGLOG_STORAGE_THREADS"),
        (["--topic-default", "segment.bytes=-5"], {}, "segment.bytes"),
        (["--fetch-bytes-max", str(32 * 1024 * 1024)], {}, "response_bytes_max"),
        (["--bogus"], {}, "--bogus"),
    ],
    ids=["malformed-flag", "environment", "topic-default", "limits-disagree", "unknown-flag"],
)
def test_invalid_settings_exit_2_with_one_line_naming_the_setting(args, env, names):
    completed = _run_to_exit(args, env)
    assert completed.returncode == 2
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert names in lines[0]


def test_a_port_in_use_exits_1_with_one_line_naming_the_flag_that_moves_it(start_service, tmp_path):
    service = start_service()
    completed = _run_to_exit(["--listen", service.address, "--data-dir", str(tmp_path / "other")])
    assert completed.returncode == 1
    errors = [line for line in completed.stderr.splitlines() if " ERROR " in line or line.startswith("E")]
    assert len(errors) == 1, completed.stderr  # no gRPC core line beside it
    assert f"cannot listen on {service.address}: the port is in use" in errors[0]
    assert "choose another with --listen HOST:PORT" in errors[0]
    assert "Traceback" not in completed.stderr


def test_help_lists_the_settings():
    completed = _run_to_exit(["--help"])
    assert completed.returncode == 0
    for flag in ("--data-dir", "--listen", "--ready-file", "--topic-default", "--fetch-bytes-max",
                 "--no-malloc-tuning"):
        assert flag in completed.stdout


def test_a_removed_log_dir_makes_its_partitions_unavailable_and_the_rest_keeps_serving(
    start_service,
):
    service = start_service(data_dir_count=2)
    stub = service.stub
    # Small segments: the next roll has to create files in the partition's directory.
    stub.CreateTopic(pb.CreateTopicRequest(topic="jbod", partitions=2,
                                           configs={"segment.bytes": "1024"}))
    described = stub.DescribeTopic(pb.DescribeTopicRequest(topic="jbod"))
    lost = next(p for p in described.partitions if p.log_dir == "log dir #1 (data1)")
    kept = next(p for p in described.partitions if p.log_dir == "log dir #0 (data0)")
    shutil.rmtree(service.data_dirs[1])  # the disk is gone

    codes = set()
    for _ in range(10):
        try:
            stub.Produce(pb.ProduceRequest(topic="jbod", partition=lost.partition,
                                           records=make_batch([b"x" * 600])), timeout=10)
        except grpc.RpcError as error:
            codes.add(error.code())
            if error.code() == Code.UNAVAILABLE:
                break
    assert Code.UNAVAILABLE in codes
    with pytest.raises(grpc.RpcError) as info:
        stub.Fetch(pb.FetchRequest(topic="jbod", partition=lost.partition), timeout=10)
    assert info.value.code() == Code.UNAVAILABLE
    assert str(service.workdir) not in info.value.details()  # no server path in the message
    stub.Produce(pb.ProduceRequest(topic="jbod", partition=kept.partition,
                                   records=make_batch([b"fine"])), timeout=10)
    fetched = stub.Fetch(pb.FetchRequest(topic="jbod", partition=kept.partition))
    assert [r.value for r in records_of(fetched)] == [b"fine"]
    health = health_pb2_grpc.HealthStub(service.channel)
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == \
        health_pb2.HealthCheckResponse.SERVING
    assert service.stop() == 0
    assert (service.data_dirs[0] / CLEAN_SHUTDOWN_MARKER).exists()
