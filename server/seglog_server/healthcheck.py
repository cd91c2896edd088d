"""``python -m seglog_server.healthcheck``: ask a running service whether it serves.

The container health check (deploy/seglog.Dockerfile) and the compose file's start order use it:
it calls the standard ``grpc.health.v1.Health/Check`` for the log service and exits 0 only when
the answer is SERVING. Exit 1 for NOT_SERVING, no answer in time, or any gRPC error; the one line
it prints says which. TLS is used when ``SEGLOG_TLS_CA`` names a CA bundle (then the server's
certificate is verified against it, and ``SEGLOG_TLS_CERT``/``SEGLOG_TLS_KEY`` are presented when
the service asks for client certificates).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from seglog.v1 import log_service_pb2

__all__ = ["main"]

# The name the composition root registers in the health servicer (app.LOG_SERVICE_NAME, read
# from the same descriptor; app itself is not imported: it brings the whole storage engine).
LOG_SERVICE_NAME = log_service_pb2.DESCRIPTOR.services_by_name["LogService"].full_name
# A health check that takes longer than this is as bad as a failed one; Docker's own timeout
# (deploy/seglog.Dockerfile) is longer so that this message is what the operator sees.
CHECK_TIMEOUT_S = 3.0


def _read(path: str | None) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as file:
        return file.read()


def _channel(target: str) -> grpc.Channel:
    ca_path = os.environ.get("SEGLOG_TLS_CA")
    if not ca_path:
        return grpc.insecure_channel(target)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read(ca_path),
        private_key=_read(os.environ.get("SEGLOG_TLS_KEY")),
        certificate_chain=_read(os.environ.get("SEGLOG_TLS_CERT")),
    )
    return grpc.secure_channel(target, credentials)


def check(target: str, service: str = LOG_SERVICE_NAME, timeout_s: float = CHECK_TIMEOUT_S) -> str:
    """The serving status name the service reports for ``service`` (raises grpc.RpcError)."""
    with _channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m seglog_server.healthcheck",
        description="Exit 0 when the seglog service at --server answers SERVING.",
    )
    parser.add_argument(
        "--server",
        default=os.environ.get("SEGLOG_SERVER", "127.0.0.1:50551"),
        help="HOST:PORT of the service (default: $SEGLOG_SERVER, else 127.0.0.1:50551)",
    )
    parser.add_argument("--service", default=LOG_SERVICE_NAME, help="health service name to ask for")
    args = parser.parse_args(argv)
    try:
        status = check(args.server, args.service)
    except grpc.RpcError as error:
        print(f"seglog at {args.server}: {error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"seglog health check: cannot read a TLS file: {error}", file=sys.stderr)
        return 1
    print(f"seglog at {args.server}: {status}")
    return 0 if status == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main())
