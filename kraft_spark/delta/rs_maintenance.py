"""Upkeep of the tables the materializer commits with delta-rs (``rs_append``): checkpoints, the
data-file count and compaction, in the driver process, no Spark job.

Why compaction here too, and not Spark's OPTIMIZE: on an object store every commit to a table
must come from writers that agree on how a version is taken. delta-rs takes it with a
put-if-absent (S3's conditional write); Delta's Spark writer on S3 checks for the version in
its own JVM and then overwrites blindly, so a Spark OPTIMIZE racing a delta-rs append could
silently replace the append's commit. With delta-rs making every commit of the materializer's
tables, a race only fails one commit, which ``rs_append`` retries. On a local directory the
same code runs (one path to test), and costs no Spark job: the JVM's OPTIMIZE took 1-2 s of the
driver's 2 cores per compaction.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from kraft_spark.delta.maintenance import Compaction
from kraft_spark.delta.rs_merge import open_table

if TYPE_CHECKING:
    from kraft_spark.delta.table_store import TableStore


def data_file_count(store: TableStore, table: str) -> int:
    """The number of data files in ``table`` (delta-rs's state, no Spark job)."""
    return len(open_table(store, table).file_uris())


def checkpoint(store: TableStore, table: str, min_commits: int) -> int | None:
    """Write a checkpoint of ``table`` with delta-rs if ``min_commits`` or more commits were
    made since its last one; return the version checkpointed (None: not due, or no table).
    delta-rs writes the classic Parquet checkpoint and ``_last_checkpoint`` that Spark reads
    (the JVM's checkpoint was a Spark job reconstructing the state, every ~10 s)."""
    from deltalake.exceptions import TableNotFoundError

    try:
        delta = open_table(store, table)
    except TableNotFoundError:
        return None
    version = int(delta.version())
    if version < 0 or version - _last_checkpoint_version(store, table) < min_commits:
        return None
    delta.create_checkpoint()
    store.checkpoint_durable(table, version)  # delta-rs does not fsync
    return version


def compact(store: TableStore, table: str, files: int, target_bytes: int) -> Compaction:
    """Bin-pack ``table``'s data files under ``target_bytes`` (``files`` data files in all
    now) into files of up to that size with delta-rs's compaction; larger files, such as an
    earlier compaction's once they reach it, are left alone, so a compaction does not
    rewrite the whole table every time (the materializer passes OPTIMIZE's own
    ``spark.databricks.delta.optimize.minFileSize``). A commit with ``dataChange = false``,
    so the rows, the table's offsets (it carries no ``txn`` action or materializer metadata,
    which ``next_offset`` skips) and time travel to any earlier version are unchanged; the
    replaced files stay until a VACUUM. A materializer append that loses its version to it
    fails and is retried (``rs_append.COMMIT_ATTEMPTS``); the compaction itself retries past
    appends, which it does not conflict with."""
    started = time.monotonic()
    delta = open_table(store, table)
    before = int(delta.version())
    metrics = delta.optimize.compact(target_size=target_bytes)
    if store.local:
        # As for the materializer's own commits: the new files, then the commit, durable
        # before anything else is committed on top (a gap in the log is unreadable).
        delta.update_incremental()
        store.written_commits_durable(table, before + 1, int(delta.version()))
    return Compaction(
        table=table,
        files_before=files,
        files_removed=int(metrics.get("numFilesRemoved", 0)),
        files_added=int(metrics.get("numFilesAdded", 0)),
        seconds=time.monotonic() - started,
    )


def _last_checkpoint_version(store: TableStore, table: str) -> int:
    """The version of the table's last checkpoint (``_delta_log/_last_checkpoint``), -1: none."""
    raw = store.read(table, "_delta_log/_last_checkpoint")
    return -1 if raw is None else int(json.loads(raw)["version"])
