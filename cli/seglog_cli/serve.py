"""``seglog serve``: run the service (the ``seglog_server`` entry point, imported only here)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from seglog_cli._common import epilog, server_missing

__all__ = ["add_parser", "run_server"]


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    commands.add_parser(
        "serve",
        add_help=False,  # --help and every other flag belong to the service
        help="run the seglog service (all arguments go to it; see `seglog serve --help`)",
        description="Run the seglog service in the foreground; every argument is the service's.",
        epilog=epilog(
            """
            examples:
              seglog serve                                   # gRPC on 127.0.0.1:50551, data in ./data
              seglog serve --listen 0.0.0.0:50551 --data-dir /var/lib/seglog
              seglog serve --help                            # the service's own settings
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def run_server(server_args: list[str]) -> int:
    """Hand the process to the service's entry point as if started as ``seglog-server ARGS``."""
    try:
        from seglog_server.__main__ import main as server_main
    except ImportError as error:
        raise server_missing("seglog serve", error) from None
    # A real process start: the service may re-execute itself once to apply its allocator
    # settings, which it only does when it reads its arguments from sys.argv.
    sys.argv = ["seglog-server", *server_args]
    return int(server_main() or 0)
