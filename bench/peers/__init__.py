"""seglog side by side with Redis Streams and NATS JetStream, on one machine, in one run.

    .venv/bin/python -m bench.peers [--records 1000000] [--repeats 3] [--systems seglog,redis,nats]
                                    [--out bench/results/peers.json]
    .venv/bin/python -m bench.peers.report bench/results/peers.json > docs/performance.md

Each system runs as its own server process on loopback, started by the benchmark with durable
settings as close to one another as the servers allow, and is driven by the Python client its
users reach for:

| system | server | durability | client |
|---|---|---|---|
| seglog | ``python -m seglog_server`` | ``flush.ms=1000`` (fdatasync at most 1 s after a write) | ``seglog`` (Producer.send_many, Consumer, Admin) |
| Redis Streams | Debian ``redis-server`` | AOF, ``appendfsync everysec`` | ``redis`` with ``hiredis``, pipelined |
| NATS JetStream | Debian ``nats-server -js`` | file storage (fsync every 2 min by default; 2.9 cannot shorten it) | ``nats-py``, ``publish_async`` |

A system whose server binary is missing is skipped with a message (``scripts/peers-setup``
installs both Debian packages as root). Within each repeat the systems take turns (the order
rotates from one repeat to the next), the machine's limits are measured at the start of each
repeat, and every figure is the median over the repeats. Modules:

- ``systems`` lists the systems; ``seglog_system``, ``redis_system``, ``nats_system`` drive them;
- ``workloads`` runs the workloads against one system; ``limits`` measures the machine; ``floor``
  the round trip of an empty message on an open grpc.aio bidi stream, which the single lookup's
  and the produce -> consume latencies are read against (ratios per repeat);
- ``proc`` reads CPU and memory from /proc and samples the load average;
- ``figures`` names every figure, its unit and which way is better (shared by the report);
- ``plot`` draws the PNGs (the figures; the latency CDFs beside the floor), ``report`` turns the
  JSON into docs/performance.md.
"""
