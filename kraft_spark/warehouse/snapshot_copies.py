"""The Raft snapshots kept beside the Delta tables: ``<warehouse>/_raft_snapshots/``.

The driver copies each new snapshot of its observer there (the same Kafka-format file,
``<end offset>-<epoch>.checkpoint``), so a quorum whose disks are all gone can be rebuilt from
the warehouse: that snapshot, then the ``records`` rows after it (``kraft_spark.warehouse.
restore``). The newest ``KEEP`` copies are kept; older ones are deleted after a newer one is
in place (a restore needs only the newest one the tables have gone past).
"""

from __future__ import annotations

import logging
import os

from kraft_spark.state.snapshot_file import (
    SnapshotContent,
    SnapshotId,
    decode_snapshot,
    file_name,
    label,
    parse_name,
)
from kraft_spark.state.snapshot_store import FileSnapshotStore
from kraft_spark.warehouse.location import WarehouseFiles

log = logging.getLogger(__name__)

SNAPSHOT_DIR = "_raft_snapshots"
KEEP = 2


def stored_ids(files: WarehouseFiles) -> list[SnapshotId]:
    """The snapshots in the warehouse, oldest first."""
    ids = [sid for sid in map(parse_name, files.list(SNAPSHOT_DIR)) if sid is not None]
    return sorted(ids, key=lambda s: (s.offset, s.epoch))


def load(files: WarehouseFiles, snapshot_id: SnapshotId) -> SnapshotContent:
    """Read and check one stored snapshot (InvalidSnapshotError names the file)."""
    name = file_name(snapshot_id)
    where = os.path.join(files.warehouse, SNAPSHOT_DIR, name)
    return decode_snapshot(files.read(SNAPSHOT_DIR, name), snapshot_id, where)


class SnapshotCopier:
    """Copies the observer's new snapshots into the warehouse; call ``copy_new`` now and
    then (the driver does after each quorum_events/snapshot cycle)."""

    def __init__(self, files: WarehouseFiles) -> None:
        self.files = files
        self._copied: SnapshotId | None = None
        self.copies = 0

    def copy_new(self, store: FileSnapshotStore) -> SnapshotId | None:
        """Copy the store's newest snapshot if the warehouse lacks it; returns what it copied.
        The bootstrap checkpoint 0-0 (a voter set, no data) is not worth a copy."""
        latest = store.latest_id()
        if latest is None or latest.offset == 0 or latest == self._copied:
            return None
        present = stored_ids(self.files)
        if latest not in present:
            with open(store.path_of(latest), "rb") as fh:
                data = fh.read()
            self.files.write(data, SNAPSHOT_DIR, file_name(latest))
            self.copies += 1
            log.info("copied Raft snapshot %s (%d bytes) to %s", label(latest), len(data),
                     os.path.join(self.files.warehouse, SNAPSHOT_DIR))
            present.append(latest)
        self._copied = latest
        present.sort(key=lambda s: (s.offset, s.epoch))
        for old in present[:-KEEP]:
            self.files.delete(SNAPSHOT_DIR, file_name(old))
        return latest
