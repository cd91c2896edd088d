"""seglog_server: the seglog storage service (storage engine, gRPC adapter, metrics)."""
