# The seglog service image: gRPC on 50551, Prometheus metrics on 9551, data in /var/lib/seglog.
#   docker build -f deploy/seglog.Dockerfile -t seglog .
# Build context: the repository root (see .dockerignore).
FROM python:3.11.13-slim-bookworm

# Dependencies first, from the same pins CI tests, so code changes reuse this layer.
WORKDIR /opt/seglog
COPY requirements.txt pyproject.toml deploy/print_requirements.py ./
RUN python print_requirements.py requirements.txt pyproject.toml remote > /tmp/pins.txt \
 && pip install --no-cache-dir --disable-pip-version-check -r /tmp/pins.txt \
 && rm /tmp/pins.txt

# Then the code (README.md is the package's readme in pyproject.toml).
COPY README.md ./
COPY client ./client
COPY server ./server
COPY cli ./cli
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps .

# A user of its own, owning only the data directory.
RUN groupadd --system --gid 10001 seglog \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/seglog --shell /usr/sbin/nologin seglog \
 && mkdir -p /var/lib/seglog \
 && chown seglog:seglog /var/lib/seglog
VOLUME ["/var/lib/seglog"]

# Both ports bind 0.0.0.0: inside a container that is the container's own network (compose
# publishes them on the host's 127.0.0.1 only, and Prometheus scrapes seglog:9551 over the compose
# network). Without TLS, tokens or --metrics-require-token the service says so at start, one
# warning per open port: give it credentials before publishing either port beyond the host.
# glibc allocator thresholds for large gRPC messages (about 3x for 1 MiB messages on the
# measured machine; see seglog_server.__main__): set here so the service does not re-execute.
ENV MALLOC_MMAP_THRESHOLD_=33554432 \
    MALLOC_TRIM_THRESHOLD_=536870912 \
    MALLOC_TOP_PAD_=67108864 \
    PYTHONUNBUFFERED=1 \
    SEGLOG_DATA_DIRS=/var/lib/seglog \
    SEGLOG_LISTEN=0.0.0.0:50551 \
    SEGLOG_METRICS_LISTEN=0.0.0.0:9551 \
    SEGLOG_SERVER=127.0.0.1:50551

USER 10001:10001
EXPOSE 50551 9551
# Through the standard grpc.health.v1 service: healthy only while the log service is SERVING.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-m", "seglog_server.healthcheck"]
# SIGTERM is a clean shutdown (in-flight calls get --shutdown-grace-ms, then the clean-shutdown
# marker); give it longer than that grace in `docker stop -t` / compose's stop_grace_period.
STOPSIGNAL SIGTERM
ENTRYPOINT ["python", "-m", "seglog_server"]
