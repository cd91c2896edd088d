"""What building a ProduceStream message costs the client, by the way it is built.

    .venv/bin/python bench/bench_stream_messages.py [--repeats 7]

A ProduceStream request wraps a ProduceRequest, which holds the record batch. Two ways to build it
with protobuf's Python API (upb):

- nested: ``ProduceStreamRequest(correlation_id=n, produce=ProduceRequest(..., records=batch))``,
  what the client did until 2026-11-26: the constructor copies the finished ProduceRequest in;
- in place: ``message = ProduceStreamRequest(); message.produce.records = batch; ...``, what
  ``Sender.produce_once`` (seglog._sender) does now: the batch is copied once, into the message.

And the same for a LookupStream request of 1,000 targets against ``CopyFrom`` (what
``Transport.offsets_for_times`` does with the request it is given). No network, no service: the
client process's own time (perf_counter), medians of ``--repeats`` timings, each the mean of a
loop long enough to take about 0.2 s. Ratio = nested / in place.
"""

from __future__ import annotations

import argparse
import statistics
import time

from seglog.v1 import log_service_pb2 as pb

_BATCH_SIZES = (1_024, 64 * 1_024, 512 * 1_024, 1_024 * 1_024)


def _nested(batch: bytes) -> pb.ProduceStreamRequest:
    request = pb.ProduceRequest(topic="bench", partition=0, records=batch, acks=pb.ACKS_WRITTEN)
    return pb.ProduceStreamRequest(correlation_id=7, produce=request)


def _in_place(batch: bytes) -> pb.ProduceStreamRequest:
    message = pb.ProduceStreamRequest(correlation_id=7)
    request = message.produce
    request.topic = "bench"
    request.partition = 0
    request.records = batch
    request.acks = pb.ACKS_WRITTEN
    return message


def _per_call_us(build, argument, repeats: int) -> float:
    loops = 1
    while True:  # size the loop to about 0.2 s
        started = time.perf_counter()
        for _ in range(loops):
            build(argument)
        if time.perf_counter() - started > 0.2:
            break
        loops *= 2
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(loops):
            build(argument)
        timings.append((time.perf_counter() - started) / loops * 1e6)
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    assert _nested(b"x" * 100) == _in_place(b"x" * 100)
    print(f"{'ProduceStream message':<34} {'nested us':>10} {'in place us':>12} {'ratio':>7}")
    for size in _BATCH_SIZES:
        batch = b"r" * size
        nested = _per_call_us(_nested, batch, args.repeats)
        in_place = _per_call_us(_in_place, batch, args.repeats)
        print(f"{f'batch of {size // 1024:,} KiB':<34} {nested:>10.1f} {in_place:>12.1f} {nested / in_place:>6.1f}x")
    lookups = pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic="bench", partition=i % 4, timestamp_ms=1_700_000_000_000 + i) for i in range(1_000)
    ])

    def lookup_nested(request: pb.OffsetsForTimesRequest) -> pb.LookupStreamRequest:
        return pb.LookupStreamRequest(correlation_id=7, offsets_for_times=request)

    def lookup_copy(request: pb.OffsetsForTimesRequest) -> pb.LookupStreamRequest:
        message = pb.LookupStreamRequest(correlation_id=7)
        message.offsets_for_times.CopyFrom(request)
        return message

    assert lookup_nested(lookups) == lookup_copy(lookups)
    nested = _per_call_us(lookup_nested, lookups, args.repeats)
    copied = _per_call_us(lookup_copy, lookups, args.repeats)
    print(f"{'LookupStream, 1,000 targets':<34} {nested:>10.1f} {copied:>12.1f} {nested / copied:>6.1f}x  (CopyFrom)")


if __name__ == "__main__":
    main()
