"""The ``seglog`` command line, built only on the public client (``seglog``) and codec.

Entry point ``seglog_cli:main`` (the ``seglog`` script); also ``python -m seglog_cli``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    from seglog_cli._app import main as app_main

    return app_main(argv)
