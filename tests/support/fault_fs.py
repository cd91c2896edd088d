"""One fault-injecting file system for every test that fails the storage's ``fs`` seam.

``FaultFs`` is the real ``FileSystem`` (the files are real) that raises ``OSError(errno)`` from
any seam call a rule matches, before the call reaches the kernel, so nothing of the failed call
happened. A rule names the operation (the seam method's name: ``open``, ``fdatasync``,
``replace``, ``link``, ``fsync_dir`` ...), optionally a path test (a string: the path's suffix,
part of its file name or one of its directories; or a predicate) matched against the path (for
fd-based calls the path the descriptor was opened with; a ``replace`` or ``link`` matches on
its source), how many matching calls to let through first and how many to fail (``None``:
every one until healed)::

    fs = FaultFs()
    rule = fs.fail("fdatasync", errno.ENOSPC, path=".log")
    ... the next fdatasync of a .log raises ENOSPC ...
    assert rule.hits == 1
    fs.heal()                                       # every rule gone: the disk is back

``calls`` counts every seam call by operation (faulted or not), so a test can aim a rule at the
n-th step of a protocol it has first run cleanly (``steps_of``).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from seglog_server.storage.base.fs import FileSystem

__all__ = ["FaultFs", "FaultRule", "NoSyncFs"]

PathTest = str | Callable[[str], bool] | None


@dataclass
class FaultRule:
    operation: str
    error: int
    path: PathTest = None
    skip: int = 0  # matching calls let through before the first failure
    times: int | None = 1  # failures before the rule retires itself; None: until healed
    hits: int = 0  # failures raised so far
    seen: int = 0  # matching calls so far
    paths: list[str] = field(default_factory=list)  # the paths of the failed calls
    # Raised instead of OSError(error): a failure that is no I/O error (a BufferError from an
    # mmap close, a ValueError, a bug), for the paths that must survive anything.
    raises: BaseException | None = None

    def matches(self, operation: str, paths: tuple[str, ...]) -> bool:
        if operation != self.operation:
            return False
        if self.path is None:
            return True
        path = paths[0] if paths else ""
        if callable(self.path):
            return self.path(path)
        part = self.path
        return path.endswith(part) or part in os.path.basename(path) or f"{os.sep}{part}{os.sep}" in path

    @property
    def spent(self) -> bool:
        return self.times is not None and self.hits >= self.times


class FaultFs(FileSystem):
    """The real file system, failing the calls its rules match (see the module docstring)."""

    def __init__(self) -> None:
        self.rules: list[FaultRule] = []
        self.calls: Counter[str] = Counter()
        self.trace: list[tuple[str, tuple[str, ...]]] = []  # every call with its paths
        self.tracing = False
        self._fd_paths: dict[int, str] = {}
        self._lock = threading.Lock()

    # -- rules --------------------------------------------------------------------------------
    def fail(
        self, operation: str, error: int, *, path: PathTest = None, skip: int = 0, times: int | None = 1,
        raises: BaseException | None = None,
    ) -> FaultRule:
        if not hasattr(FileSystem, operation):
            raise AssertionError(f"the fs seam has no operation {operation!r}")
        rule = FaultRule(operation, error, path, skip, times, raises=raises)
        with self._lock:
            self.rules.append(rule)
        return rule

    def heal(self) -> None:
        with self._lock:
            self.rules.clear()

    def steps_of(self, operation: str, path: PathTest = None) -> list[tuple[str, ...]]:
        """The traced calls of ``operation`` (matching ``path``), in order (needs ``tracing``)."""
        probe = FaultRule(operation, 0, path)
        return [paths for op, paths in self.trace if probe.matches(op, paths)]

    def _check(self, operation: str, *paths: str) -> None:
        with self._lock:
            self.calls[operation] += 1
            if self.tracing:
                self.trace.append((operation, paths))
            for rule in self.rules:
                if rule.spent or not rule.matches(operation, paths):
                    continue
                rule.seen += 1
                if rule.seen <= rule.skip:
                    continue
                rule.hits += 1
                rule.paths.append(paths[0] if paths else "")
                if rule.raises is not None:
                    raise rule.raises
                raise OSError(rule.error, f"injected {operation}: {os.strerror(rule.error)}", *paths[:1])

    def _path_of(self, fd: int) -> str:
        return self._fd_paths.get(fd, f"<fd {fd}>")

    # -- descriptors --------------------------------------------------------------------------
    def open(self, path, flags, mode=0o644):
        self._check("open", path)
        fd = super().open(path, flags, mode)
        self._fd_paths[fd] = path
        return fd

    def close(self, fd):
        self._check("close", self._path_of(fd))
        self._fd_paths.pop(fd, None)
        super().close(fd)

    def pread(self, fd, size, position):
        self._check("pread", self._path_of(fd))
        return super().pread(fd, size, position)

    def preadinto(self, fd, buffer, position):
        self._check("preadinto", self._path_of(fd))
        return super().preadinto(fd, buffer, position)

    def pwrite(self, fd, data, position):
        self._check("pwrite", self._path_of(fd))
        return super().pwrite(fd, data, position)

    def pwritev(self, fd, buffers, position):
        self._check("pwritev", self._path_of(fd))
        return super().pwritev(fd, buffers, position)

    def fsync(self, fd):
        self._check("fsync", self._path_of(fd))
        super().fsync(fd)

    def fdatasync(self, fd):
        self._check("fdatasync", self._path_of(fd))
        super().fdatasync(fd)

    def ftruncate(self, fd, size):
        self._check("ftruncate", self._path_of(fd))
        super().ftruncate(fd, size)

    def fsize(self, fd):
        self._check("fsize", self._path_of(fd))
        return super().fsize(fd)

    def mmap(self, fd, length, writable):
        self._check("mmap", self._path_of(fd))
        return super().mmap(fd, length, writable)

    # -- names --------------------------------------------------------------------------------
    def exists(self, path):
        self._check("exists", path)
        return super().exists(path)

    def listdir(self, path):
        self._check("listdir", path)
        return super().listdir(path)

    def makedirs(self, path):
        self._check("makedirs", path)
        super().makedirs(path)

    def replace(self, src, dst):
        self._check("replace", src, dst)
        super().replace(src, dst)

    def link(self, src, dst):
        self._check("link", src, dst)
        super().link(src, dst)

    def unlink(self, path):
        self._check("unlink", path)
        super().unlink(path)

    def rmdir(self, path):
        self._check("rmdir", path)
        super().rmdir(path)

    def is_regular_file(self, path):
        self._check("is_regular_file", path)
        return super().is_regular_file(path)

    def getmtime_ms(self, path):
        self._check("getmtime_ms", path)
        return super().getmtime_ms(path)

    def set_mtime_ms(self, path, mtime_ms):
        self._check("set_mtime_ms", path)
        super().set_mtime_ms(path, mtime_ms)

    def fsync_dir(self, path):
        self._check("fsync_dir", path)
        super().fsync_dir(path)


class NoSyncFs(FileSystem):
    """The real file system without its syncs (fsync, fdatasync, fsync of a directory: each a
    no-op): for set-ups that lay out many logs whose durability no test looks at, where the syncs
    were most of the time (an fsync per partition created, one per log flushed and shut down)."""

    def fsync(self, fd: int) -> None:
        pass

    def fdatasync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass
