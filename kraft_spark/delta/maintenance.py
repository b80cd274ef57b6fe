"""Keeping the Delta tables fast to read: checkpoints of ``records`` and compaction (OPTIMIZE)
of the small files every materializer commit adds; and keeping older warehouses current (the
columns added since they were created). Uses Delta's JVM ``DeltaLog`` for the snapshot and its
checksum (not a public API; checked on delta-spark 4.4)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kraft_spark.delta.tables import ADDED_COLUMNS, delta_log_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def add_missing_columns(spark: SparkSession, path_of: Callable[[str], str]) -> list[str]:
    """Give tables an older version created the columns added since (``ADDED_COLUMNS``), with
    ``ALTER TABLE ... ADD COLUMNS`` (a metadata-only commit: older rows read as null). Returns
    ``table.column`` of each added."""
    added = []
    for table, column, sql_type in ADDED_COLUMNS:
        path = path_of(table)
        if column not in spark.read.format("delta").load(path).schema.fieldNames():
            spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({column} {sql_type})")
            added.append(f"{table}.{column}")
    return added


@dataclass(frozen=True, slots=True)
class Compaction:
    """What one ``compact`` call did (Delta OPTIMIZE's own metrics)."""

    table: str
    files_before: int  # data files in the table when it was found due
    files_removed: int
    files_added: int
    seconds: float


def checkpoint_table(spark: SparkSession, path: str, min_commits: int = 10) -> int | None:
    """Write a Delta checkpoint of the table at ``path`` if ``min_commits`` or more commits
    were made since its last one; return the version checkpointed (None if not due or no table).

    The driver calls it for ``records`` from the thread that commits the other tables, so
    the ``records`` thread never stalls on a checkpoint (see TABLE_EXTRA_PROPERTIES). Safe
    while another thread commits to the table: a checkpoint is a file per version. Uses
    Delta's JVM ``DeltaLog`` (not a public API; checked on delta-spark 4.4).
    """
    found = _latest_snapshot(spark, path)
    if found is None:
        return None
    delta_log, snapshot = found
    version = int(snapshot.version())
    last = int(snapshot.checkpointProvider().version())
    if version < 0 or version - last < min_commits:
        return None
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    delta_log.checkpoint(snapshot, jvm.scala.Option.empty())
    return version

def compact_table(
    spark: SparkSession, path: str, table: str, min_files: int, files: int | None = None
) -> Compaction | None:
    """Bin-pack ``table``'s small data files into large ones (Delta OPTIMIZE) once it holds
    ``min_files`` or more; None when not due, disabled (``min_files`` < 1) or no table.

    Every materializer commit adds one small Parquet file, so a long-running application
    makes thousands an hour, and every query of the table lists and opens them all.
    OPTIMIZE commits with ``dataChange = false``: the rows, the table's offsets (its
    commits carry no materializer metadata, which ``next_offset`` skips) and time travel to
    any earlier version are unchanged; the replaced files stay until a VACUUM. It does not
    conflict with the blind appends of ``records`` made meanwhile from another thread
    (they read no files); the driver runs it on the thread that commits ``quorum_events``
    and ``snapshot``, so it never races their commits. The file count comes from the
    snapshot's checksum (no Spark job; see ``_data_file_count``), or is the caller's
    (``files``: delta-rs's count of a local warehouse, which then meets no private Delta class
    here); OPTIMIZE itself is Delta's public Spark API, a Spark job (1-2 s on 2 busy cores).
    """
    if min_files < 1 or (files is not None and files < min_files):
        return None  # ``files``: the caller's count (delta-rs's), no JVM call when not due
    if files is None:  # counted from Delta's JVM snapshot (a warehouse URI)
        found = _latest_snapshot(spark, path)
        if found is None:
            return None
        files = _data_file_count(found[1])
        if files < min_files:
            return None
    from delta.tables import DeltaTable

    started = time.monotonic()
    optimize = DeltaTable.forPath(spark, path).optimize()
    result = optimize.executeCompaction().collect()
    metrics = result[0]["metrics"] if result else None
    return Compaction(
        table=table,
        files_before=files,
        files_removed=int(metrics["numFilesRemoved"]) if metrics is not None else 0,
        files_added=int(metrics["numFilesAdded"]) if metrics is not None else 0,
        seconds=time.monotonic() - started,
    )

def _latest_snapshot(spark: SparkSession, path: str) -> tuple[Any, Any] | None:
    """Delta's JVM ``DeltaLog`` of ``table`` and its latest snapshot; None before the table
    exists. Not a public API; checked on delta-spark 4.4."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        return None
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    delta_log = delta_log_for(spark, path)
    none = jvm.scala.Option.empty()
    return delta_log, delta_log.update(False, none, none)


def _data_file_count(snapshot: Any) -> int:
    """The number of data files of a Delta snapshot: from its checksum (``.crc``, which Delta
    writes with every commit), else Delta's own count, which reconstructs the table's state
    (3 Spark jobs, ~0.4 s on 2 busy cores, measured)."""
    checksum = snapshot.checksumOpt()
    if checksum.isDefined():
        return int(checksum.get().numFiles())
    return int(snapshot.numOfFiles())
