"""The file-access seam.

Every system call the storage engine makes on files goes through a ``FileSystem`` so that fault
suites can substitute one that fails, tears or delays chosen operations (TigerBeetle's storage
interface with a fault-injecting test storage). Production uses ``REAL_FS``; nothing in storage
calls ``os.*`` on files directly.

Methods are thin and fd-based, mirroring the syscalls, so a fault injector can target exactly one
kind of operation (the Nth ``pwrite`` to a ``.log``, every ``fsync``, a ``replace`` of a ``.swap``).
"""

from __future__ import annotations

import mmap
import os
import stat
from collections.abc import Sequence

__all__ = ["REAL_FS", "FileSystem"]

_BufferLike = bytes | bytearray | memoryview


class FileSystem:
    """Real file access; subclass and override to inject faults."""

    # -- file descriptors -------------------------------------------------------------------
    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags | os.O_CLOEXEC, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pread(self, fd: int, size: int, position: int) -> bytes:
        return os.pread(fd, size, position)

    def preadinto(self, fd: int, buffer: bytearray | memoryview, position: int) -> int:
        """Fills ``buffer`` from ``position``; returns the byte count read (short at EOF)."""
        view = memoryview(buffer)
        filled = 0
        while filled < len(view):
            got = os.preadv(fd, [view[filled:]], position + filled)
            if got == 0:
                break
            filled += got
        return filled

    def pwrite(self, fd: int, data: _BufferLike, position: int) -> int:
        return os.pwrite(fd, data, position)

    def pwritev(self, fd: int, buffers: Sequence[_BufferLike], position: int) -> int:
        return os.pwritev(fd, buffers, position)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def fsize(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def mmap(self, fd: int, length: int, writable: bool) -> mmap.mmap:
        access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
        return mmap.mmap(fd, length, access=access)

    def data_end(self, fd: int, size: int) -> int:
        """Where the first hole in the file's first ``size`` bytes starts, or ``size`` when they
        have none (lseek SEEK_HOLE). A file system without hole support reports none."""
        try:
            return min(os.lseek(fd, 0, os.SEEK_HOLE), size)
        except OSError:  # ENXIO: an empty file; EINVAL: SEEK_HOLE not supported
            return size

    def fallocate(self, fd: int, position: int, size: int) -> None:
        """Backs ``size`` bytes from ``position`` with blocks (posix_fallocate): ENOSPC here,
        as an OSError, instead of SIGBUS when a mapping touches the range on a full disk."""
        os.posix_fallocate(fd, position, size)

    # -- names ------------------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def link(self, src: str, dst: str) -> None:
        """A hard link ``dst`` to ``src`` (same filesystem): snapshots and cleaned segments."""
        os.link(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def is_regular_file(self, path: str) -> bool:
        """Whether ``path`` names a regular file (a symbolic link is not followed); raises
        FileNotFoundError when nothing has that name."""
        return stat.S_ISREG(os.lstat(path).st_mode)

    def getmtime_ms(self, path: str) -> int:
        return os.stat(path).st_mtime_ns // 1_000_000

    def set_mtime_ms(self, path: str, mtime_ms: int) -> None:
        ns = mtime_ms * 1_000_000
        os.utime(path, ns=(ns, ns))

    def fsync_dir(self, path: str) -> None:
        """Makes renames and creations inside ``path`` durable."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- composite --------------------------------------------------------------------------
    def write_atomically(self, path: str, data: bytes) -> None:
        """tmp + fsync + rename + directory fsync: readers see the old file or the new one."""
        tmp = path + ".tmp"
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            try:
                view = memoryview(data)
                written = 0
                while written < len(view):
                    written += self.pwrite(fd, view[written:], written)
                self.fsync(fd)
            finally:
                self.close(fd)
        except BaseException:
            # On a full disk the half-written tmp file would hold blocks nobody frees.
            try:
                self.unlink(tmp)
            except OSError:
                pass
            raise
        self.replace(tmp, path)
        self.fsync_dir(os.path.dirname(os.path.abspath(path)))


REAL_FS = FileSystem()
