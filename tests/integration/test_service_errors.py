"""Clear errors users meet first: reflection under v1 and v1alpha, plain-record timestamps, per
partition OffsetsForTimes answers, no server paths in messages, scripts/serve's paths."""

from __future__ import annotations

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2
from tests.support.integration_helpers import rpc_error

from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration
Code = grpc.StatusCode


@pytest.mark.parametrize("package", ["grpc.reflection.v1", "grpc.reflection.v1alpha"])
def test_reflection_is_served_under_v1_and_v1alpha(service, package):
    # v1 and v1alpha are the same messages in two packages: the v1alpha classes speak both.
    call = service.channel.stream_stream(
        f"/{package}.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(
            file_containing_symbol=f"{package}.ServerReflection"),
    ]
    listed, described = list(call(iter(requests), timeout=10))
    names = {s.name for s in listed.list_services_response.service}
    assert {"seglog.v1.LogService", "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"} <= names
    assert described.file_descriptor_response.file_descriptor_proto  # it can describe itself


@pytest.mark.parametrize("timestamp_ms", [-5, -2, -(2**63)])
def test_a_plain_record_with_a_negative_timestamp_is_invalid_argument(stub, topic, timestamp_ms):
    request = pb.ProduceRequest(topic=topic, plain_records=[
        pb.PlainRecord(value=b"v", timestamp_ms=timestamp_ms)])
    error = rpc_error(stub.Produce, request, Code.INVALID_ARGUMENT, "plain_records[0]: timestamp_ms")
    assert str(timestamp_ms) in error.details()


def test_offsets_for_times_answers_each_partition_when_one_topic_is_unknown(stub, topic):
    stub.Produce(pb.ProduceRequest(topic=topic, plain_records=[
        pb.PlainRecord(value=b"v", timestamp_ms=1000)]))
    response = stub.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic=topic, timestamp_ms=500),
        pb.PartitionTimestamp(topic="no-such-topic", timestamp_ms=500),
        pb.PartitionTimestamp(topic=topic, partition=7, timestamp_ms=500),
        pb.PartitionTimestamp(topic="../x", timestamp_ms=500),
        pb.PartitionTimestamp(topic=topic, timestamp_ms=-2),
    ]))
    found, unknown, no_partition, bad_name, earliest = response.results
    assert (found.offset, found.timestamp_ms, found.HasField("error")) == (0, 1000, False)
    assert unknown.error.code == Code.NOT_FOUND.value[0]
    assert unknown.error.error_class == "UnknownTopicOrPartitionError"
    assert "no-such-topic" in unknown.error.message
    assert (unknown.topic, unknown.offset, unknown.timestamp_ms) == ("no-such-topic", -1, -1)
    assert no_partition.error.code == Code.NOT_FOUND.value[0]
    assert bad_name.error.code == Code.NOT_FOUND.value[0]  # a name no topic can have
    assert (earliest.offset, earliest.HasField("error")) == (0, False)


def test_the_client_raises_the_failed_partitions_error_naming_it(service, topic):
    from seglog import Admin, TopicPartition
    from seglog.errors import TopicNotFoundError

    with Admin(service.address) as admin, pytest.raises(TopicNotFoundError) as caught:
        admin.offsets_for_times({TopicPartition(topic, 0): -2, TopicPartition("missing", 0): -2})
    assert "missing-0" in str(caught.value)


def test_describe_topic_names_the_log_dir_by_index_and_name_not_path(service, stub, topic):
    [partition] = stub.DescribeTopic(pb.DescribeTopicRequest(topic=topic)).partitions
    assert partition.log_dir in ("log dir #0 (data0)", "log dir #1 (data1)")
    assert str(service.workdir) not in partition.log_dir


def test_scripts_serve_resolves_relative_paths_against_the_callers_directory(tmp_path):
    import os
    import pathlib
    import signal
    import subprocess
    import time

    from tests.support.integration_helpers import READY_POLL_S, START_TIMEOUT_S, service_environment

    serve = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "serve"
    (tmp_path / "seglog.toml").write_text('[limits]\nshutdown_grace_ms = 100\n')
    process = subprocess.Popen(
        [str(serve), "--config", "seglog.toml", "--data-dir", "mydata", "--listen", "127.0.0.1:0",
         "--ready-file", "ready", "--no-malloc-tuning"],
        cwd=tmp_path, env=service_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (tmp_path / "ready").exists():
            assert process.poll() is None, process.stdout.read().decode()
            assert time.monotonic() < deadline
            time.sleep(READY_POLL_S)
        assert (tmp_path / "mydata").is_dir()  # the caller's ./mydata, not the repository's
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=30)[0].decode()
    assert process.returncode == 0, output
    assert not os.path.exists(serve.parents[1] / "mydata")
