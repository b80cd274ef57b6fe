"""``FileSnapshotStore``: the snapshots in a partition directory, over a ``FileSystem``.

Files are written as ``<name>.checkpoint.part``, fsync'd, renamed to ``<name>.checkpoint`` and
the directory fsync'd, so a ``.checkpoint`` file is always whole; a crash leaves at most a
``.part``, removed when the store opens. A snapshot found damaged (``load`` or a download that
fails its checks) is renamed to ``.checkpoint.corrupt``, kept for inspection but never used
again, and the error names the file. The same code runs on the simulator's disk.

Threads: ``write`` may run on a worker thread (it touches only its own ``.part`` file); every
other method, and ``add`` of what a worker wrote, runs on the owner's thread.
"""

from __future__ import annotations

import logging
import posixpath
from bisect import insort
from collections.abc import Callable, Iterable
from typing import Any

from kraft_spark.log.fs import FileSystem
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.snapshot_api import InvalidSnapshotError
from kraft_spark.state.machine import Entry, FailedTxn
from kraft_spark.state.snapshot_file import (
    CORRUPT_SUFFIX,
    PART_SUFFIX,
    SUFFIX,
    SnapshotContent,
    SnapshotId,
    decode_snapshot,
    encode_snapshot,
    file_name,
    label,
    parse_name,
)

log = logging.getLogger(__name__)

def _key(sid: OffsetAndEpoch) -> tuple[int, int]:
    """Snapshot ids sort by end offset, then epoch."""
    return (sid.offset, sid.epoch)


class FileDownload:
    """A snapshot being received from the leader into a ``.part`` file."""

    def __init__(self, store: FileSnapshotStore, snapshot_id: SnapshotId) -> None:
        self.snapshot_id = snapshot_id
        self._store = store
        self._path = store.path_of(snapshot_id) + ".part"
        self._size = 0
        store.fs.write_file(self._path, b"")

    def position(self) -> int:
        return self._size

    def write(self, position: int, data: bytes) -> None:
        if position != self._size:
            raise InvalidSnapshotError(
                f"{self._path}: chunk at position {position}, expected {self._size}"
            )
        self._store.fs.write_at(self._path, position, data)
        self._size += len(data)

    def complete(self) -> None:
        fs = self._store.fs
        try:
            decode_snapshot(fs.read(self._path), self.snapshot_id, self._path)
        except InvalidSnapshotError:
            self.abort()
            raise
        fs.fsync(self._path)
        fs.close(self._path)
        final = self._store.path_of(self.snapshot_id)
        fs.rename(self._path, final)
        fs.fsync_dir(self._store.pdir)
        self._store.add(self.snapshot_id)

    def abort(self) -> None:
        fs = self._store.fs
        if fs.exists(self._path):
            fs.close(self._path)
            fs.remove(self._path)


class FileSnapshotStore:
    def __init__(self, fs: FileSystem, pdir: str) -> None:
        self.fs = fs
        self.pdir = pdir
        self._ids: list[SnapshotId] = []
        # The producer table and VotersRecord of the snapshot read last (the newest, usually).
        self._meta: tuple[SnapshotId, bytes, bytes | None] | None = None
        for name in sorted(fs.listdir(pdir)):
            path = posixpath.join(pdir, name)
            if name.endswith(PART_SUFFIX):
                log.info("%s: removing an unfinished snapshot", path)
                fs.remove(path)
                continue
            sid = parse_name(name)
            if sid is not None:
                insort(self._ids, sid, key=_key)

    # -- queries ----------------------------------------------------------------------------

    def ids(self) -> list[SnapshotId]:
        return list(self._ids)

    def latest_id(self) -> SnapshotId | None:
        return self._ids[-1] if self._ids else None

    def earliest_id(self) -> SnapshotId | None:
        return self._ids[0] if self._ids else None

    def path_of(self, snapshot_id: SnapshotId) -> str:
        return posixpath.join(self.pdir, file_name(snapshot_id))

    def size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        if snapshot_id not in self._ids:
            return None
        return self.fs.size(self.path_of(snapshot_id))

    def total_bytes(self) -> int:
        return sum(self.fs.size(self.path_of(s)) for s in self._ids)

    def read_chunk(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        return self.fs.read(self.path_of(snapshot_id), position, max_bytes)

    def producer_state(self) -> bytes:
        meta = self._latest_meta()
        return meta[1] if meta is not None else b""

    def voters_state(self) -> bytes | None:
        """The VotersRecord stored with the newest snapshot (None: none, or static voters)."""
        meta = self._latest_meta()
        return meta[2] if meta is not None else None

    def _latest_meta(self) -> tuple[SnapshotId, bytes, bytes | None] | None:
        latest = self.latest_id()
        if latest is None:
            return None
        if self._meta is None or self._meta[0] != latest:
            try:
                self.load(latest)
            except InvalidSnapshotError:
                return None
        return self._meta

    def load(self, snapshot_id: SnapshotId) -> SnapshotContent:
        """Read and check a whole snapshot. A damaged one is set aside (``.corrupt``) and
        ``InvalidSnapshotError`` names its file."""
        path = self.path_of(snapshot_id)
        try:
            content = decode_snapshot(self.fs.read(path), snapshot_id, path)
        except InvalidSnapshotError as exc:
            self.set_aside(snapshot_id, str(exc))
            raise
        self._meta = (snapshot_id, content.producers, content.voters)
        return content

    # -- writes -----------------------------------------------------------------------------

    def write(
        self,
        snapshot_id: SnapshotId,
        entries: Iterable[tuple[bytes, Entry]],
        producers: bytes,
        last_timestamp_ms: int,
        *,
        voters: bytes | None = None,
        failed_txns: dict[int, FailedTxn] | None = None,
        leases: dict[str, Any] | None = None,
        outcomes_from: int | None = None,
        fs: FileSystem | None = None,
        between_batches: Callable[[], None] | None = None,
    ) -> int:
        """Write a snapshot durably (``.part``, fsync, rename, fsync dir); returns its size.
        Safe on a worker thread given its own ``fs`` (file handles are per FileSystem); call
        ``add`` on the owner's thread afterwards. ``between_batches`` runs after each batch
        is written (a worker passes ``time.sleep(0)``: it hands the GIL to the event loop)."""
        fs = fs or self.fs
        final = self.path_of(snapshot_id)
        part = final + ".part"
        fs.write_file(part, b"")
        size = 0
        for chunk in encode_snapshot(snapshot_id, entries, producers, last_timestamp_ms,
                                     voters, failed_txns=failed_txns, leases=leases,
                                     outcomes_from=outcomes_from):
            fs.write_at(part, size, chunk)
            size += len(chunk)
            if between_batches is not None:
                between_batches()
        fs.fsync(part)
        fs.close(part)
        fs.rename(part, final)
        fs.fsync_dir(self.pdir)
        return size

    def add(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._ids:
            insort(self._ids, snapshot_id, key=_key)

    def begin_download(self, snapshot_id: OffsetAndEpoch) -> FileDownload:
        return FileDownload(self, snapshot_id)

    def delete(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id in self._ids:
            self._ids.remove(snapshot_id)
            self.fs.remove(self.path_of(snapshot_id))
            self.fs.fsync_dir(self.pdir)

    def delete_before(self, snapshot_id: SnapshotId) -> list[SnapshotId]:
        """Delete every snapshot older than ``snapshot_id`` (which is kept)."""
        old = [s for s in self._ids if _key(s) < _key(snapshot_id)]
        for sid in old:
            self._ids.remove(sid)
            self.fs.remove(self.path_of(sid))
        if old:
            self.fs.fsync_dir(self.pdir)
        return old

    def set_aside(self, snapshot_id: SnapshotId, reason: str) -> None:
        path = self.path_of(snapshot_id)
        log.error("snapshot %s is damaged and will not be used: %s (kept as %s)",
                  label(snapshot_id), reason, path[: -len(SUFFIX)] + CORRUPT_SUFFIX)
        if snapshot_id in self._ids:
            self._ids.remove(snapshot_id)
        if self.fs.exists(path):
            self.fs.rename(path, path[: -len(SUFFIX)] + CORRUPT_SUFFIX)
            self.fs.fsync_dir(self.pdir)
