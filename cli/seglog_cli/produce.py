"""``seglog produce``: records from stdin (or a file), one per line, plain text or JSON."""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

from seglog import Producer, RecordMetadata, SeglogError
from seglog_cli._common import (
    CliError, decode_record_json, epilog, non_negative_int, parse_key_value, positive_int, progress, security_of,
    server_of,
)

__all__ = ["add_parser"]


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "produce",
        parents=parents,
        help="append records read from stdin, one per line",
        description=(
            "Append records read from stdin (or --file), one per line. With --format json each line "
            'is an object {"key": .., "value": .., "headers": {..}, "timestamp_ms": .., "partition": ..} '
            "(every field optional; strings are sent as UTF-8, other JSON values as their JSON text, "
            "key_base64 / value_base64 carry binary data, null is a null key or a tombstone value)."
        ),
        epilog=epilog(
            """
            Records without --partition (or a "partition" field) go where Kafka's default
            partitioner would put them: by murmur2 of the key, or to a sticky partition.

            examples:
              printf 'hello\\nworld\\n' | seglog produce events --partition 0
              printf 'hello\\n' | seglog produce events --key greeting --header source=shell
              printf 'user-1:clicked\\n' | seglog produce events --key-separator :
              seglog produce events --format json <<'EOF'
              {"key": "user-1", "value": "clicked", "headers": {"trace": "abc"}}
              {"key": "user-1", "value": null}
              EOF
              seglog produce events --file events.txt --compression zstd --acks fsynced
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("topic", help="topic to append to")
    parser.add_argument("--partition", type=non_negative_int, metavar="N", help="partition for every record (default: partitioner)")
    parser.add_argument("--key", help="key for every record (text lines)")
    parser.add_argument(
        "--key-separator", metavar="SEP", help="split each text line at the first SEP into key and value"
    )
    parser.add_argument(
        "--header", type=parse_key_value, action="append", default=[], metavar="KEY=VALUE",
        help="a header on every record (repeatable)",
    )
    parser.add_argument("--format", choices=["text", "json"], default="text", help="input format (default: text)")
    parser.add_argument("--file", metavar="PATH", help="read records from PATH instead of stdin")
    parser.add_argument(
        "--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], default="none",
        help="batch compression (default: none)",
    )
    parser.add_argument(
        "--acks", choices=["written", "fsynced"], default="written",
        help="acknowledge after the write (default) or after fsync",
    )
    parser.add_argument("--linger-ms", type=float, default=5, metavar="MS", help="batching delay (default: 5)")
    parser.add_argument("--batch-size", type=positive_int, default=16384, metavar="BYTES", help="batch size (default: 16384)")
    parser.add_argument("--print-metadata", action="store_true", help="print 'partition offset' for each record")
    parser.set_defaults(run=_run)


class _Tally:
    """Counts completions from the producer's thread; remembers the first failure."""

    def __init__(self, print_metadata: bool) -> None:
        self.sent = 0
        self.failed = 0
        self.first_error: BaseException | None = None
        self._print_metadata = print_metadata

    def watch(self, future: concurrent.futures.Future[RecordMetadata]) -> None:
        future.add_done_callback(self._done)

    def _done(self, future: concurrent.futures.Future[RecordMetadata]) -> None:
        error = future.exception()
        if error is None:
            self.sent += 1
            if self._print_metadata:
                metadata = future.result()
                print(f"{metadata.partition}\t{metadata.offset}", flush=False)
        else:
            self.failed += 1
            if self.first_error is None:
                self.first_error = error


def _records(args: argparse.Namespace, lines: BinaryIO) -> Iterator[dict[str, Any]]:
    headers = [(k, v.encode()) for k, v in args.header]
    separator = args.key_separator.encode() if args.key_separator else None
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip(b"\n").rstrip(b"\r")
        if args.format == "json":
            if line.strip():
                yield _json_record(args, number, line, headers)
            continue
        key = args.key.encode() if args.key is not None else None
        value = line
        if separator:
            key, sep, value = line.partition(separator)
            if not sep:
                raise CliError(f"line {number}: no key separator {args.key_separator!r}")
        yield {"key": key, "value": value, "headers": headers, "timestamp_ms": None, "partition": args.partition}


def _json_record(args: argparse.Namespace, number: int, line: bytes, headers: list[tuple[str, bytes]]) -> dict[str, Any]:
    try:
        fields = decode_record_json(line.decode("utf-8"))
    except UnicodeDecodeError:
        raise CliError(f"line {number}: not UTF-8") from None
    except CliError as error:
        raise CliError(f"line {number}: {error}") from None
    fields["headers"] = headers + fields["headers"]
    if fields["partition"] is None:
        fields["partition"] = args.partition
    return fields


def _open_input(args: argparse.Namespace) -> BinaryIO:
    if args.file is None:
        return sys.stdin.buffer
    try:
        return open(args.file, "rb")
    except OSError as error:
        raise CliError(f"cannot read {args.file}: {error.strerror}") from None


def _run(args: argparse.Namespace) -> int:
    lines = _open_input(args)
    tally = _Tally(args.print_metadata)
    show_progress = not lines.isatty()
    bar = progress(total=None, desc=f"produce {args.topic}", unit="rec") if show_progress else None
    try:
        with Producer(
            server_of(args),
            **security_of(args),
            acks=args.acks,
            compression=args.compression,
            linger_ms=args.linger_ms,
            batch_size=args.batch_size,
        ) as producer:
            try:
                for fields in _records(args, lines):
                    tally.watch(producer.send(args.topic, **fields))
                    if bar is not None:
                        bar.update()
            except CliError as error:
                producer.flush()
                raise CliError(f"{error} (the {tally.sent} records before it were produced)") from None
            producer.flush()
    finally:
        if bar is not None:
            bar.close()
        if lines is not sys.stdin.buffer:
            lines.close()
    if tally.first_error is not None:
        first = tally.first_error
        message = str(first) if isinstance(first, SeglogError) else f"{type(first).__name__}: {first}"
        raise CliError(f"{tally.failed} of {tally.sent + tally.failed} records failed; first error: {message}")
    print(f"produced {tally.sent} record{'s' * (tally.sent != 1)} to {args.topic}", file=sys.stderr)
    return 0
