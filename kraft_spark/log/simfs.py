"""A deterministic in-memory disk that remembers what was fsync'd, for the simulator and tests.

The crash model (the weakest POSIX promises, so code that survives it survives a real disk):

* A file (an *inode*) has a current content and a durable content. ``write_at``,
  ``write_file``, ``truncate`` and ``preallocate`` change the current content; ``fsync(path)``
  makes the current content durable. A preallocated range reads as zeros, here as on a real
  disk, and a crash keeps it only if it was fsync'd.
* Names are kept the same way per directory: creating, renaming and removing a file change the
  current namespace at once; ``fsync_dir(d)`` makes the current entries of ``d`` durable.
  Directories themselves are durable as soon as they are made (a simplification: the log fsyncs
  every parent it creates anyway).
* ``crash(rng, torn=False)`` is a power cut: the namespace reverts to its durable entries (an
  un-fsync'd create vanishes, an un-fsync'd remove or rename is undone) and every surviving file
  reverts to its durable content. Locks are released (the process died).
* ``crash(rng, torn=True)`` also keeps part of the most recent un-fsync'd data write (``write_at``
  or whole-file write) if its file survives: the writes to that file before it survive whole and
  the last one keeps a random prefix of ``rng.randrange(len)`` bytes, i.e. a torn write at the
  tail, exactly what recovery must cut off.
* ``wipe()`` loses the disk: every file and directory is gone.

Nothing here reads a clock or a global RNG; the only randomness is the ``rng`` passed to
``crash``, so a simulation seed reproduces the same disk state.
"""

from __future__ import annotations

import os
import posixpath
import random
from dataclasses import dataclass, field

from kraft_spark.log.errors import LogDirLockedError

_WRITE = "write"
_PREALLOCATE = "preallocate"
_TRUNCATE = "truncate"
_REPLACE = "replace"


@dataclass
class _Op:
    seq: int
    kind: str
    data: bytes = b""
    size: int = 0
    """The new size (truncate, preallocate) or where the bytes go (write)."""


@dataclass(eq=False)
class _Inode:
    data: bytearray = field(default_factory=bytearray)
    durable: bytearray = field(default_factory=bytearray)
    pending: list[_Op] = field(default_factory=list)

    def apply(self, target: bytearray, op: _Op, keep: int | None = None) -> bytearray:
        """``target`` with ``op`` applied (``keep``: only that prefix of the op's bytes)."""
        data = op.data if keep is None else op.data[:keep]
        if op.kind == _WRITE:
            if op.size > len(target):
                target += bytes(op.size - len(target))
            target[op.size : op.size + len(data)] = data
        elif op.kind == _PREALLOCATE:
            if op.size > len(target):
                target += bytes(op.size - len(target))
        elif op.kind == _TRUNCATE:
            if op.size < len(target):
                del target[op.size :]
            else:
                target += bytes(op.size - len(target))
        else:
            target = bytearray(data)
        return target


class _SimLock:
    def __init__(self, fs: SimulatedFileSystem, path: str, token: object) -> None:
        self._fs = fs
        self._path = path
        self._token = token

    def held(self) -> bool:
        return self._fs._locks.get(self._path) is self._token

    def release(self) -> None:
        if self._fs._locks.get(self._path) is self._token:
            del self._fs._locks[self._path]


class SimulatedFileSystem:
    """One simulated disk (give each simulated node its own)."""

    def __init__(self) -> None:
        self._names: dict[str, _Inode] = {}
        self._durable_names: dict[str, _Inode] = {}
        self._dirs: set[str] = {"/", "."}
        self._locks: dict[str, object] = {}
        self._seq = 0
        self.fsync_count = 0
        """Number of fsync and fsync_dir calls (the simulator may charge time for them)."""
        self.fail_with: int | None = None
        """An errno (ENOSPC, EIO): while set, every write, fsync and rename fails with it."""

    # -- helpers ----------------------------------------------------------------------------

    @staticmethod
    def _norm(path: str) -> str:
        return posixpath.normpath(path)

    def _inode(self, path: str) -> _Inode:
        inode = self._names.get(self._norm(path))
        if inode is None:
            raise FileNotFoundError(f"[simulated] no such file: {path}")
        return inode

    def _record(self, inode: _Inode, op: _Op) -> None:
        self._seq += 1
        op.seq = self._seq
        inode.pending.append(op)
        inode.data = inode.apply(inode.data, op)

    def _create(self, path: str) -> _Inode:
        path = self._norm(path)
        inode = self._names.get(path)
        if inode is None:
            parent = posixpath.dirname(path) or "."
            if parent not in self._dirs:
                raise FileNotFoundError(f"[simulated] no such directory: {parent}")
            if path in self._dirs:
                raise IsADirectoryError(f"[simulated] is a directory: {path}")
            inode = _Inode()
            self._names[path] = inode
        return inode

    # -- queries ----------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        path = self._norm(path)
        return path in self._names or path in self._dirs

    def listdir(self, path: str) -> list[str]:
        path = self._norm(path)
        if path not in self._dirs:
            raise FileNotFoundError(f"[simulated] no such directory: {path}")
        names = {p for p in self._names if (posixpath.dirname(p) or ".") == path}
        names |= {d for d in self._dirs if d != path and (posixpath.dirname(d) or ".") == path}
        return sorted(posixpath.basename(n) for n in names)

    def makedirs(self, path: str) -> None:
        path = self._norm(path)
        while path not in self._dirs:
            if path in self._names:
                raise FileExistsError(f"[simulated] a file is in the way: {path}")
            self._dirs.add(path)
            path = posixpath.dirname(path) or "."

    def size(self, path: str) -> int:
        return len(self._inode(path).data)

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        data = self._inode(path).data
        end = len(data) if length < 0 else offset + length
        return bytes(data[offset:end])

    # -- writes -----------------------------------------------------------------------------

    def _check_fault(self, path: str) -> None:
        if self.fail_with is not None:
            raise OSError(self.fail_with, f"[simulated] {os.strerror(self.fail_with)}", path)

    def write_at(self, path: str, position: int, data: bytes | bytearray | memoryview) -> None:
        self._check_fault(path)
        self._record(self._create(path), _Op(0, _WRITE, bytes(data), size=position))

    def preallocate(self, path: str, size: int) -> None:
        self._check_fault(path)
        self._record(self._inode(path), _Op(0, _PREALLOCATE, size=size))

    def write_file(self, path: str, data: bytes | bytearray) -> None:
        self._check_fault(path)
        self._record(self._create(path), _Op(0, _REPLACE, bytes(data)))

    def truncate(self, path: str, size: int) -> None:
        self._record(self._inode(path), _Op(0, _TRUNCATE, size=size))

    def fsync(self, path: str) -> None:
        self._check_fault(path)
        inode = self._inode(path)
        for op in inode.pending:
            inode.durable = inode.apply(inode.durable, op)
        inode.pending.clear()
        self.fsync_count += 1

    def fsync_dir(self, path: str) -> None:
        path = self._norm(path)
        if path not in self._dirs:
            raise FileNotFoundError(f"[simulated] no such directory: {path}")
        for name in [p for p in self._durable_names if (posixpath.dirname(p) or ".") == path]:
            if self._names.get(name) is not self._durable_names[name]:
                del self._durable_names[name]
        for name, inode in self._names.items():
            if (posixpath.dirname(name) or ".") == path:
                self._durable_names[name] = inode
        self.fsync_count += 1

    def rename(self, src: str, dst: str) -> None:
        self._check_fault(dst)
        src, dst = self._norm(src), self._norm(dst)
        inode = self._inode(src)
        if (posixpath.dirname(dst) or ".") not in self._dirs:
            raise FileNotFoundError(f"[simulated] no such directory for {dst}")
        del self._names[src]
        self._names[dst] = inode

    def remove(self, path: str) -> None:
        path = self._norm(path)
        self._inode(path)
        del self._names[path]

    def close(self, path: str) -> None:
        """No handles to drop in memory."""

    def lock(self, path: str, timeout_s: float = 0.0) -> _SimLock:
        """Exclusive lock; never waits (simulated time does not pass inside a call)."""
        path = self._norm(path)
        if path in self._locks:
            raise LogDirLockedError(
                f"{posixpath.dirname(path)} is locked by another process (lock file {path})"
            )
        token = object()
        self._locks[path] = token
        self._create(path)
        return _SimLock(self, path, token)

    # -- faults -----------------------------------------------------------------------------

    def crash(self, rng: random.Random, torn: bool = False) -> None:
        """Lose everything not fsync'd, as described in the module docstring."""
        survivors = dict(self._durable_names)
        torn_inode: _Inode | None = None
        torn_seq = 0
        if torn:
            for inode in survivors.values():
                for op in inode.pending:
                    if op.kind != _TRUNCATE and op.data and op.seq > torn_seq:
                        torn_inode, torn_seq = inode, op.seq
        for inode in {id(i): i for i in [*survivors.values(), *self._names.values()]}.values():
            content = bytearray(inode.durable)
            if inode is torn_inode:
                for op in inode.pending:
                    if op.seq == torn_seq:
                        content = inode.apply(content, op, keep=rng.randrange(len(op.data)))
                        break
                    content = inode.apply(content, op)
            inode.data = content
            inode.durable = bytearray(content)
            inode.pending.clear()
        self._names = survivors
        self._durable_names = dict(survivors)
        self._locks.clear()

    def wipe(self) -> None:
        """Disk loss: every file and directory disappears."""
        self._names.clear()
        self._durable_names.clear()
        self._dirs = {"/", "."}
        self._locks.clear()

    def flip_bit(self, path: str, bit: int) -> None:
        """Flip one bit of the current and durable content (bit rot, for tests)."""
        inode = self._inode(path)
        for buf in (inode.data, inode.durable):
            if bit // 8 < len(buf):
                buf[bit // 8] ^= 1 << (bit % 8)

    def unsynced_paths(self) -> list[str]:
        """Paths whose content has writes not yet fsync'd (for tests and simulator checks)."""
        return sorted(p for p, inode in self._names.items() if inode.pending)
