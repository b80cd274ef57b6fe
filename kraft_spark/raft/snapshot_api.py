"""Snapshots as the consensus core sees them (KIP-630): an injected store, never opened by it.

A snapshot is named by an ``OffsetAndEpoch``: its end offset (every record below it is in the
snapshot) and the epoch of the record just below that offset. The core uses the store to:

* answer Fetch below the log start with the newest snapshot's id (``latest_id``);
* serve FetchSnapshot chunks (``size``, ``read_chunk``), only of snapshots it holds;
* download a snapshot from the leader (``begin_download``), whose ``complete`` checks the whole
  file and installs it atomically, or raises ``InvalidSnapshotError``;
* seed the idempotent-producer table from the newest snapshot (``producer_state``).

The shell writes snapshots of its state machine and deletes old ones; the core never does.
Implementations: ``kraft_spark.state.snapshot_store.FileSnapshotStore`` (real node and
simulator, over a ``FileSystem``).
"""

from __future__ import annotations

from typing import Protocol

from kraft_spark.raft.log_api import OffsetAndEpoch


class InvalidSnapshotError(ValueError):
    """A snapshot that must not be trusted: damaged, truncated, or not what was asked for."""


class SnapshotDownload(Protocol):
    snapshot_id: OffsetAndEpoch

    def position(self) -> int:
        """Bytes received so far (the next FetchSnapshot position)."""
        ...

    def write(self, position: int, data: bytes) -> None:
        """Append ``data`` received at ``position`` (== ``position()``)."""
        ...

    def complete(self) -> None:
        """Check the whole file; make it a durable snapshot of the store, or raise
        ``InvalidSnapshotError`` (the partial file is then discarded)."""
        ...

    def abort(self) -> None:
        """Discard the partial file."""
        ...


class SnapshotStore(Protocol):
    def latest_id(self) -> OffsetAndEpoch | None: ...

    def earliest_id(self) -> OffsetAndEpoch | None: ...

    def ids(self) -> list[OffsetAndEpoch]:
        """Every snapshot held, oldest first."""
        ...

    def size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        """Bytes of the snapshot, None if the store does not hold it."""
        ...

    def read_chunk(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes: ...

    def begin_download(self, snapshot_id: OffsetAndEpoch) -> SnapshotDownload: ...

    def producer_state(self) -> bytes:
        """The producer table stored with the newest snapshot (b"" if none)."""
        ...

    def voters_state(self) -> bytes | None:
        """The VotersRecord value stored with the newest snapshot (None if none: static
        voters, or no snapshot)."""
        ...


class NoSnapshots:
    """The store of a node that never snapshots (tests of the core without snapshots)."""

    def latest_id(self) -> OffsetAndEpoch | None:
        return None

    def earliest_id(self) -> OffsetAndEpoch | None:
        return None

    def ids(self) -> list[OffsetAndEpoch]:
        return []

    def size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        return None

    def read_chunk(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        raise KeyError(snapshot_id)

    def begin_download(self, snapshot_id: OffsetAndEpoch) -> SnapshotDownload:
        raise InvalidSnapshotError("this node keeps no snapshots")

    def producer_state(self) -> bytes:
        return b""

    def voters_state(self) -> bytes | None:
        return None
