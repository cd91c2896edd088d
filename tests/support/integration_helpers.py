"""Helpers for the integration tests: the service process and small record utilities."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import time

import grpc
import pytest

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

# How long a service may take to load and bind on a loaded 2-core machine; generous on purpose,
# a bound on a hang only (a service that exits is seen at once). 30 s was run out at a load of 12
# on 2 CPUs (engineers' runs and a C build beside two xdist workers): importing seglog_server alone
# took 8-9 s of wall time there, for 0.7 s of CPU.
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
# The interval at which we look for the ready file: starting a process is the one thing here we
# cannot be notified of (the service writes the file atomically, so a seen file is complete).
READY_POLL_S = 0.02
# The request limit of the client tests' ``limited_service``: below the 1 MiB a producer packs a
# ProduceStream message to, so a message of several batches packed to the client's limit is above
# the service's; a batch of 480,000 bytes alone is still within it (its topics' 800,000-byte batch
# limit, beside it, leaves room for the message's envelope).
LIMITED_REQUEST_BYTES_MAX = 900_000
LIMITED_BATCH_BYTES_MAX = 800_000
# Time retention off for the topics of the shared services (the integration `service`, the client
# tests' `seglog_service` and `limited_service`): their tests stamp records at fixed times long
# past (1_700_000_000_000 is 2023-11-14) so they can assert them, which is past the stock 7-day
# retention.ms, and a service's first retention pass runs 30 s after it starts
# (MaintenanceIntervals.initial_delay_ms). A module slow under load reached it and found its log
# start moved to the log end (commit 8f17137). retention.ms -1 keeps every record; a test about
# retention sets retention.ms on its topic (a topic's own config wins over this default).
KEEP_RECORDS_ARGS = ("--topic-default", "retention.ms=-1")


def keeping_records(args: list[str] | tuple[str, ...] = ()) -> list[str]:
    """``args`` after ``KEEP_RECORDS_ARGS``, unless they configure retention themselves: a
    ``retention.ms`` topic default or a ``--config`` file (whose [topic_defaults] a flag would
    override)."""
    if "--config" in args or any(arg.startswith("retention.ms=") for arg in args):
        return list(args)
    return [*KEEP_RECORDS_ARGS, *args]


CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]


def service_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test runner's environment without its SEGLOG_* settings (they would leak in)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
    environ.update(extra or {})
    return environ


class ServiceProcess:
    """One service process: start, talk, signal, wait."""

    def __init__(self, workdir: pathlib.Path, data_dirs: list[pathlib.Path], args: list[str],
                 env: dict[str, str] | None = None,
                 credentials: grpc.ChannelCredentials | None = None) -> None:
        self.credentials = credentials  # for a TLS service: the test channel's credentials
        self.workdir = workdir
        self.data_dirs = data_dirs
        self.ready_file = workdir / "ready"
        self.metrics_ready_file = workdir / "metrics-ready"
        self.metrics_address: str | None = None
        self.log_path = workdir / "service.log"
        self.args = args
        self.env = service_environment(env)
        self.process: subprocess.Popen | None = None
        self.address: str | None = None
        self.channel: grpc.Channel | None = None
        self.stub: pb_grpc.LogServiceStub | None = None

    def command(self) -> list[str]:
        dirs = ",".join(str(d) for d in self.data_dirs)
        # Metrics on a free port (services run side by side); a test's own --metrics-listen wins.
        return [sys.executable, "-m", "seglog_server", "--listen", "127.0.0.1:0",
                "--ready-file", str(self.ready_file), "--metrics-listen", "127.0.0.1:0",
                "--metrics-ready-file", str(self.metrics_ready_file), "--data-dir", dirs, *self.args]

    def start(self) -> ServiceProcess:
        for path in (self.ready_file, self.metrics_ready_file):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=log, env=self.env,
                                            cwd=self.workdir)
        try:
            self._wait_ready()
            self._connect()
        except BaseException:
            # Killed and reaped on any failure, Ctrl-C and a cancelled run too: the caller never
            # got the service to stop, and its temp dir goes, so the process would run on without it.
            self.process.kill()
            self.process.wait()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.ready_file.exists():
            if self.process.poll() is not None:
                raise AssertionError(f"service exited {self.process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"service not ready after {START_TIMEOUT_S} s:\n{self.log()}")
            time.sleep(READY_POLL_S)

    def _connect(self) -> None:
        self.address = self.ready_file.read_text().strip()
        # Written before the ready file, so it is there now (unless metrics are off).
        if self.metrics_ready_file.exists():
            self.metrics_address = self.metrics_ready_file.read_text().strip()
        if self.credentials is None:
            self.channel = grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        else:
            self.channel = grpc.secure_channel(self.address, self.credentials, options=CHANNEL_OPTIONS)
        self.stub = pb_grpc.LogServiceStub(self.channel)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, signum: int = signal.SIGTERM) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def wait(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"service did not stop in {timeout_s} s:\n{self.log()}")

    def stop(self) -> int:
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.signal(signal.SIGTERM)
        return self.wait()


def make_batch(values, *, keys=None, timestamps=None, headers=()) -> bytes:
    builder = codec.RecordBatchBuilder()
    for index, value in enumerate(values):
        builder.append(
            value,
            key=None if keys is None else keys[index],
            timestamp_ms=None if timestamps is None else timestamps[index],
            headers=headers,
        )
    return builder.build()


def records_of(response) -> list:
    """Every record of a FetchResponse's raw batches, CRC-checked."""
    out = []
    for batch in codec.iter_batches(response.records):
        batch.ensure_valid()
        out.extend(batch.records())
    return out


def assert_serving(stub) -> None:
    """The service still answers after whatever the test did to it."""
    stub.ListTopics(pb.ListTopicsRequest(), timeout=10)


def rpc_error(call, request, code: grpc.StatusCode, match: str = "") -> grpc.RpcError:
    """Calls ``call(request)``, expects status ``code`` with ``match`` in its message, and checks
    that the service still serves afterwards."""
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=10)
    error = info.value
    assert error.code() == code, f"{error.code()}: {error.details()}"
    assert match.lower() in (error.details() or "").lower(), error.details()
    return error


def error_class(error: grpc.RpcError) -> str | None:
    """The storage/codec/service error class named in the trailing metadata."""
    return dict(error.trailing_metadata() or ()).get("seglog-error")


def partition_values(address: str, topic: str, partition: int = 0) -> list[bytes]:
    """Every record value of ``topic``-``partition`` from the start to its end offset, in order,
    read back through the public client (a poll that returns nothing before the end fails)."""
    from seglog import Admin, Consumer

    with Admin(address) as admin:
        count = admin.latest_offsets(topic, [partition])[partition]
    seen: list[bytes] = []
    with Consumer(address, topic, partition, start="earliest") as consumer:
        while len(seen) < count:
            records = consumer.poll(timeout_ms=2000)
            assert records, f"only {len(seen)} of {count} records came back"
            seen += [record.value for record in records]
    return seen


def numbered_values(count: int) -> list[bytes]:
    """``count`` distinct 100-byte values, the index repeated: order and duplicates show on reading."""
    return [index.to_bytes(4, "big") * 25 for index in range(count)]


def values_to_end(address: str, topic: str, count: int, partition: int = 0) -> list[bytes | None]:
    """The partition's record values, every one up to its end: at least ``count`` waited for
    (a 2 s poll), then read on until a short poll returns nothing, so a record written twice shows."""
    from seglog import Consumer
    from seglog.records import RecordBatch

    read: list[bytes | None] = []
    with Consumer(address, topic, partition=partition, start="earliest") as consumer:
        while True:
            raws = consumer.poll_raw(timeout_ms=2000 if len(read) < count else 300)
            if not raws:
                break
            for raw in raws:
                read += [record.value for record in RecordBatch(raw.records)]
    return read


# How long a wait_until condition may take to hold (etcd watches on a loaded machine): bounds a hang.
WAIT_S = 15.0


def wait_until(condition, what: str, timeout_s: float = WAIT_S, poll_s: float = 0.02) -> None:
    """Returns once ``condition()`` holds (etcd watches, leases, a background pass: nothing that
    notifies the test); fails naming ``what`` after ``timeout_s``, which bounds a hang, not speed."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not reached in time"
        time.sleep(poll_s)


def count_size_refusals(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The reasons of the size refusals the producer's sender meets (``Sender._size_refusal``
    counted as it runs), in order."""
    from seglog._sender import Sender

    refusals: list[str] = []
    size_refusal = Sender._size_refusal

    def counted(self: Sender, tp: object, entry: object, outcome: object) -> object:
        refusal = size_refusal(self, tp, entry, outcome)
        if refusal is not None:
            refusals.append(str(refusal[0]))
        return refusal

    monkeypatch.setattr(Sender, "_size_refusal", counted)
    return refusals
