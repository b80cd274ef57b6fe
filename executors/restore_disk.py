"""A fresh voter's side of a restore from the warehouse: the driver decides, for a generation
whose voters all have fresh disks, whether they start empty or from a snapshot it built from
the warehouse (``kraft_spark.warehouse.restore``), and tells each over the control channel.

The line protocol after the voter's hello (fresh voters only)::

    start\\n                       start as formatted (keep disk_lost: others hold the log)
    start-fresh\\n                 no voter holds a log and the warehouse holds nothing: start
                                  empty, allowed to vote at once
    restore <offset> <epoch> <n>\\n, then n bytes: install that snapshot file, then start
                                  allowed to vote (the quorum is rebuilt from it)
    stop\\n                        the driver stops (or refused to restore): do not start
"""

from __future__ import annotations

import asyncio
import logging

from kraft_spark.log.checkpoints import partition_dir
from kraft_spark.log.fs import RealFileSystem
from kraft_spark.secret_files import private_dir
from kraft_spark.state.snapshot_file import SnapshotId, label
from kraft_spark.state.snapshot_store import FileSnapshotStore

log = logging.getLogger("kraft_spark.executor")

# The biggest restore snapshot a voter accepts over the control channel.
MAX_RESTORE_BYTES = 1 << 31


def install_restore(log_dir: str, snapshot_id: SnapshotId, data: bytes) -> None:
    """Write the snapshot into the (fresh) log directory, checked and durable; the node then
    starts its log at its end offset (``state_keeper.open_storage``)."""
    fs = RealFileSystem()
    private_dir(partition_dir(log_dir))
    download = FileSnapshotStore(fs, partition_dir(log_dir)).begin_download(snapshot_id)
    download.write(0, data)
    download.complete()  # InvalidSnapshotError if the bytes are not a valid snapshot
    log.warning("restored snapshot %s (%d bytes) from the warehouse into %s",
                label(snapshot_id), len(data), log_dir)


async def await_start(reader: asyncio.StreamReader, log_dir: str) -> str:
    """Read the driver's decision and act on it; returns ``start``, ``start-fresh``,
    ``restore`` or ``stop``. Raises ValueError for a line it does not understand."""
    line = (await reader.readline()).decode("utf-8", "replace").strip()
    if line in ("start", "start-fresh"):
        return line
    if not line or line == "stop":
        return "stop"
    word, *args = line.split()
    if word != "restore" or len(args) != 3:
        raise ValueError(f"unexpected word from the driver: {line[:100]!r}")
    offset, epoch, size = (int(a) for a in args)
    if not 0 <= size <= MAX_RESTORE_BYTES:
        raise ValueError(f"restore snapshot of {size} bytes refused")
    data = await reader.readexactly(size)
    install_restore(log_dir, SnapshotId(offset, epoch), data)
    return "restore"
