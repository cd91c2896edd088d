"""The ``seglog`` command: the parser, dispatch, and the one place errors become exit codes.

Exit codes: 0 success; 1 an error the command reports in one line (a service error, bad input, a
file that cannot be read, problems found by ``dump --verify``); 2 invalid arguments; 130
interrupted. Expected errors never print a traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from importlib import metadata

from seglog import SeglogError, ServiceUnavailableError
from seglog_cli import (
    cleaner,
    cluster,
    consume,
    delete_records,
    dump,
    explain,
    groups,
    offsets,
    partition,
    produce,
    serve,
    token,
    topic,
)
from seglog_cli._common import CliError, add_server_option, epilog, server_of

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell convention


def _version() -> str:
    try:
        return metadata.version("seglog")
    except metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="seglog",
        description="Work with a seglog service: topics, producing, consuming, offsets; dump segment files.",
        epilog=epilog(
            """
            examples:
              seglog serve --data-dir ./data                      # run the service
              seglog topic create events --partitions 3
              printf 'hello\\nworld\\n' | seglog produce events --partition 0
              seglog consume events --partition 0 --from-beginning
              seglog offsets events --time now-1h
              seglog groups describe billing                      # members, offsets, lag
              seglog delete-records events --partition 0 --before 1200
              seglog dump data/events-0 --verify
              seglog cleaner run --once                           # clean compacted topics
              seglog cluster status                               # instances, offline partitions
              seglog partition move events 3 --to b               # to another instance

            Every command that talks to the service takes --server HOST:PORT (default:
            $SEGLOG_SERVER, else 127.0.0.1:50551). `seglog COMMAND --help` shows more examples.
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_server_option(parser)
    parser.add_argument("--version", action="version", version=f"seglog {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    with_server = argparse.ArgumentParser(add_help=False)
    add_server_option(with_server)
    serve.add_parser(commands, [])
    topic.add_parser(commands, [with_server])
    produce.add_parser(commands, [with_server])
    consume.add_parser(commands, [with_server])
    offsets.add_parser(commands, [with_server])
    groups.add_parser(commands, [with_server])
    explain.add_parser(commands, [with_server])
    delete_records.add_parser(commands, [with_server])
    dump.add_parser(commands, [])
    cleaner.add_parser(commands, [with_server])
    token.add_parser(commands, [])
    partition.add_parser(commands, [with_server])
    cluster.add_parser(commands, [with_server])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    try:
        if args.command == "serve":
            return serve.run_server(extra)
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        return int(args.run(args))
    except ServiceUnavailableError as error:
        _print_error(_unreachable(error, server_of(args)) or str(error))
        return EXIT_ERROR
    except (SeglogError, CliError) as error:
        _print_error(str(error))
        return EXIT_ERROR
    except ValueError as error:
        # The public client checks its arguments (a negative partition, an offset below 0, ...)
        # with ValueError; from the command line that is a usage error, said in one line.
        _print_error(str(error))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`seglog consume ... | head`): stop quietly, like other Unix tools.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the final flush at exit does not fail again
        return EXIT_OK


def _unreachable(error: ServiceUnavailableError, server: str) -> str | None:
    """For a service that cannot be reached at all (nothing listens, the host does not resolve),
    the one thing to check and the flag that changes it; None for an UNAVAILABLE the service
    itself answered (stopping, a log directory offline), whose own message says more."""
    message = str(error)
    if type(error) is not ServiceUnavailableError or not _TRANSPORT_FAILURE.search(message):
        return None
    reason = _TRANSPORT_REASON.search(message)
    why = f" ({reason.group(0).rstrip('. ')})" if reason else ""
    return f"cannot connect to {server}{why}: is the service running at {server}? (--server)"


# gRPC's words for a channel that never connected, and for why.
_TRANSPORT_FAILURE = re.compile(r"failed to connect to all addresses|errors resolving|DNS resolution failed")
_TRANSPORT_REASON = re.compile(
    r"Connection refused|Connection timed out|No route to host|Network is unreachable|Domain name not found"
)


def _print_error(message: str) -> None:
    print(f"seglog: error: {message}", file=sys.stderr)
