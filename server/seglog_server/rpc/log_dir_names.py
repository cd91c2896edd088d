"""Names for log directories in what the service sends: never a server path.

Error messages from the storage name the files they are about (useful in the service's own log),
and a partition's description says where it lives. Sent to a client, an absolute path tells a
stranger the server's layout. So every message and description leaves through ``LogDirNames``:
each configured data directory becomes ``log dir #<index> (<its last path component>)``, the
index being its position in ``data_dirs``, and a path inside it keeps only what follows
(partition directory and file name), which is what a user needs to report a problem.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["LogDirNames"]


class LogDirNames:
    def __init__(self, data_dirs: Sequence[str]) -> None:
        labels = {}
        for index, configured in enumerate(data_dirs):
            absolute = os.path.abspath(configured)
            name = os.path.basename(absolute.rstrip(os.sep)) or absolute
            labels[absolute] = f"log dir #{index} ({name})"
            real = os.path.realpath(configured)
            labels.setdefault(real, labels[absolute])
        # Longest first, so a directory nested in another is replaced as itself.
        self._labels = sorted(labels.items(), key=lambda item: len(item[0]), reverse=True)

    def label(self, path: str) -> str:
        """The directory's label (``log dir #1 (data1)``), or just the last component of a path
        outside every data directory."""
        absolute = os.path.abspath(str(path))
        for prefix, label in self._labels:
            if absolute == prefix:
                return label
            if absolute.startswith(prefix + os.sep):
                return label + absolute[len(prefix):]
        return os.path.basename(absolute)

    def redact(self, text: str) -> str:
        """``text`` with every data directory's path replaced by its label."""
        for prefix, label in self._labels:
            if prefix in text:
                text = text.replace(prefix, label)
        return text
