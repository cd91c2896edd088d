"""The storage engine: segments, indexes, logs, recovery, retention.

Imports only the standard library, small well-kept helpers and ``seglog.records``; never gRPC,
protobuf or Prometheus (checked by import-linter, see pyproject.toml).
"""
