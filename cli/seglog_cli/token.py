"""``seglog token create NAME --file FILE``: a new bearer token for the service's token file.

The token is printed once, on stdout; the file receives only its salted slow hash (format in
``seglog_server.security.token_file``). The file is created with mode 0600 if missing, and checked
before anything is appended, so a malformed file is reported instead of being extended.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from seglog_cli._common import CliError, epilog, server_missing

__all__ = ["add_parser"]


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "token",
        help="manage the service's bearer tokens (create)",
        description="Manage the bearer tokens of a seglog token file (--auth-tokens FILE).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser(
        "create",
        help="create a token for a principal; print it once, append its hash to the file",
        description="Create a token for principal NAME: print it once on stdout and append its "
        "salted hash to FILE. Send SIGHUP to a running service to load it.",
        epilog=epilog(
            """
            examples:
              seglog token create alice --file /etc/seglog/tokens
              export SEGLOG_TOKEN=$(seglog token create ci --file tokens)
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    create.add_argument("name", metavar="NAME", help="the principal the token authenticates as")
    create.add_argument("--file", required=True, metavar="FILE", help="the token file to append to")
    create.set_defaults(run=_create)


def _create(args: argparse.Namespace) -> int:
    try:
        from seglog_server.security import SecurityFileError
        from seglog_server.security.token_file import create_token, format_entry, parse_token_file
    except ImportError as error:
        raise server_missing("seglog token", error) from None
    try:
        token, entry = create_token(args.name)
    except ValueError as error:
        raise CliError(str(error)) from None
    existing = _read(args.file)
    try:
        parse_token_file(existing)
    except SecurityFileError as error:
        raise CliError(f"{args.file}: {error}; nothing appended") from None
    line = format_entry(entry)
    if existing and not existing.endswith("\n"):
        line = "\n" + line
    fd = os.open(args.file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    print(token)
    print(f"token for {args.name} (key id {entry.key_id}) appended to {args.file}; it is shown only "
          "once. Send SIGHUP to a running service to load it.", file=sys.stderr)
    return 0


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(f"cannot read {path}: {error}") from None
