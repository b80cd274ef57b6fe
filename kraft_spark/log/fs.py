"""The file-system seam: every byte the log reads or writes goes through a ``FileSystem``.

Two implementations: ``RealFileSystem`` (os-level calls, real fsync, flock) for nodes and tools,
and ``SimulatedFileSystem`` (``kraft_spark.log.simfs``) for the simulator, which keeps what was
fsync'd apart from what was merely written and can crash, tear the last write, or lose the disk.

Durability contract, the same for both (POSIX semantics, taken at their weakest):

* ``write_at``/``write_file``/``truncate``/``preallocate`` change a file's contents at once for
  every reader, but only ``fsync(path)`` makes them durable.
* Creating, renaming or removing a name changes the directory at once, but only
  ``fsync_dir(parent)`` makes the change durable.
* ``rename`` atomically replaces the destination.

Paths are plain strings; the seam has no notion of a current directory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from typing import Protocol

from kraft_spark.secret_files import private_dir


class FileLock(Protocol):
    """An acquired exclusive lock; ``release`` is idempotent."""

    def release(self) -> None: ...

    def held(self) -> bool:
        """Still ours: not released, and (on a simulated disk) not lost in a crash."""
        ...


class FileSystem(Protocol):
    """The operations the log needs, and nothing else."""

    def exists(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]:
        """Names (not paths) in directory ``path``, sorted."""
        ...

    def makedirs(self, path: str) -> None:
        """Create ``path`` and missing parents; no error if it exists."""
        ...

    def size(self, path: str) -> int: ...

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        """Up to ``length`` bytes from ``offset`` (``-1``: to the end); short at end of file."""
        ...

    def write_at(self, path: str, position: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``position`` (over or past the end), creating the file if needed."""
        ...

    def preallocate(self, path: str, size: int) -> None:
        """Make the file at least ``size`` bytes long, the new bytes reading as zeros, with the
        space reserved: later writes inside it then change no metadata, so their ``fsync`` skips
        the file system's journal. Never shortens the file."""
        ...

    def write_file(self, path: str, data: bytes | bytearray) -> None:
        """Create or replace the whole content of ``path`` (not durable until fsync)."""
        ...

    def truncate(self, path: str, size: int) -> None: ...

    def fsync(self, path: str) -> None:
        """Make the file's data durable with what reading it back needs (its size), like
        ``fdatasync``; timestamps may be lost."""
        ...

    def fsync_dir(self, path: str) -> None: ...

    def rename(self, src: str, dst: str) -> None: ...

    def remove(self, path: str) -> None: ...

    def close(self, path: str) -> None:
        """Drop any handle cached for ``path`` (a hint; no effect on contents)."""
        ...

    def lock(self, path: str, timeout_s: float = 0.0) -> FileLock:
        """Take the exclusive lock of lock file ``path``, waiting up to ``timeout_s``.

        Raises ``LogDirLockedError`` (from ``kraft_spark.log.errors``) if it stays taken.
        """
        ...


class _FlockLock:
    def __init__(self, fd: int, path: str) -> None:
        self._fd: int | None = fd
        self.path = path

    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class RealFileSystem:
    """The operating system's files, with real ``fsync`` and ``flock``.

    Keeps one open descriptor per file it writes at positions, preallocates or truncates
    (segments: written and read many times); ``close(path)``, ``remove`` and ``rename`` drop it.
    Other files are opened per call. Not thread-safe: the node drives its log from one thread
    (its flush worker only fsyncs, under the log's I/O lock).
    """

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    # -- descriptors ------------------------------------------------------------------------

    def _fd(self, path: str) -> int:
        """The cached read-write descriptor of a file that is written to (segments)."""
        fd = self._fds.get(path)
        if fd is None:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self._fds[path] = fd
        return fd

    def close(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def close_all(self) -> None:
        for path in list(self._fds):
            self.close(path)

    # -- queries ----------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def makedirs(self, path: str) -> None:
        private_dir(path)  # a log is its owner's alone, its parents too

    def size(self, path: str) -> int:
        fd = self._fds.get(path)
        return os.fstat(fd).st_size if fd is not None else os.stat(path).st_size

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        """Uses the cached descriptor of a file being written; other files are opened for the
        call only, so reading small state files leaves nothing open."""
        cached = self._fds.get(path)
        if cached is not None:
            return self._pread(cached, offset, length)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return self._pread(fd, offset, length)
        finally:
            os.close(fd)

    @staticmethod
    def _pread(fd: int, offset: int, length: int) -> bytes:
        if length < 0:
            length = max(0, os.fstat(fd).st_size - offset)
        chunks: list[bytes] = []
        while length > 0:
            chunk = os.pread(fd, length, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
            length -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    # -- writes -----------------------------------------------------------------------------

    def write_at(self, path: str, position: int, data: bytes | bytearray | memoryview) -> None:
        fd = self._fd(path)
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, position)
            view = view[written:]
            position += written

    def preallocate(self, path: str, size: int) -> None:
        """``posix_fallocate``: the blocks are allocated (as unwritten extents on ext4 and XFS,
        read as zeros) and the size set now, in one metadata change."""
        fd = self._fd(path)
        current = os.fstat(fd).st_size
        if size > current:
            os.posix_fallocate(fd, current, size - current)

    def write_file(self, path: str, data: bytes | bytearray) -> None:
        self.close(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def truncate(self, path: str, size: int) -> None:
        os.ftruncate(self._fd(path), size)

    def fsync(self, path: str) -> None:
        cached = self._fds.get(path)
        if cached is not None:
            # Segments: fdatasync flushes the data and the size (which reading it back needs),
            # not the timestamps; inside preallocated space that leaves the journal out of it.
            os.fdatasync(cached)
            return
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        self.close(src)
        self.close(dst)
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        self.close(path)
        os.remove(path)

    # -- locking ----------------------------------------------------------------------------

    def lock(self, path: str, timeout_s: float = 0.0) -> FileLock:
        """flock(LOCK_EX) on ``path``; the holder writes its pid there for the error message.

        flock is per open file description, so a second ``lock`` of the same path fails even
        inside one process, and the kernel drops it when the holder dies (even by SIGKILL).
        """
        from kraft_spark.log.errors import LogDirLockedError

        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
                    os.close(fd)
                    waited = f" after waiting {timeout_s:g} s" if timeout_s > 0 else ""
                    raise LogDirLockedError(
                        f"{os.path.dirname(path) or '.'} is locked by another process "
                        f"(pid {holder}, lock file {path}){waited}; stop that process or use "
                        "another log directory"
                    ) from None
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        return _FlockLock(fd, path)
