"""Keeping the Delta tables of a warehouse only Spark opens fast to read and current, on Delta's
public Spark API: compaction (OPTIMIZE) of the small files every materializer commit adds, and
the columns added since older warehouses were created. Their checkpoints are Delta's automatic
ones. (A warehouse delta-rs serves has its upkeep in ``rs_maintenance`` and ``rs_tables``.)"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kraft_spark.delta.tables import ADDED_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def add_missing_columns(spark: SparkSession, path_of: Callable[[str], str]) -> list[str]:
    """Give tables an older version created the columns added since (``ADDED_COLUMNS``), with
    ``ALTER TABLE ... ADD COLUMNS`` (a metadata-only commit: older rows read as null). Returns
    ``table.column`` of each added."""
    added: list[str] = []
    for table in dict.fromkeys(t for t, _column, _sql in ADDED_COLUMNS):
        path = path_of(table)
        present = set(spark.read.format("delta").load(path).schema.fieldNames())
        missing = [(c, sql) for t, c, sql in ADDED_COLUMNS if t == table and c not in present]
        if missing:  # one commit per table, the columns in their order
            columns = ", ".join(f"{c} {sql}" for c, sql in missing)
            spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({columns})")
            added.extend(f"{table}.{c}" for c, _sql in missing)
    return added


@dataclass(frozen=True, slots=True)
class Compaction:
    """What one ``compact`` call did (Delta OPTIMIZE's own metrics)."""

    table: str
    files_before: int  # data files in the table when it was found due
    files_removed: int
    files_added: int
    seconds: float


def compact_table(spark: SparkSession, path: str, table: str, min_files: int) -> Compaction | None:
    """Bin-pack ``table``'s small data files into large ones (Delta OPTIMIZE) once it holds
    ``min_files`` or more; None when not due, disabled (``min_files`` < 1) or no table. For a
    warehouse only Spark opens (delta-rs's own compaction serves the others:
    ``rs_maintenance``).

    Every materializer commit adds one small Parquet file, so a long-running application
    makes thousands an hour, and every query of the table lists and opens them all.
    OPTIMIZE commits with ``dataChange = false``: the rows, the table's offsets (its
    commits carry no materializer metadata, which ``next_offset`` skips) and time travel to
    any earlier version are unchanged; the replaced files stay until a VACUUM. The file count
    is ``DESCRIBE DETAIL``'s (public SQL); OPTIMIZE is Delta's public Spark API, a Spark job
    (1-2 s on 2 busy cores).
    """
    from delta.tables import DeltaTable

    if min_files < 1 or not DeltaTable.isDeltaTable(spark, path):
        return None
    files = int(DeltaTable.forPath(spark, path).detail().select("numFiles").collect()[0][0])
    if files < min_files:
        return None
    started = time.monotonic()
    result = DeltaTable.forPath(spark, path).optimize().executeCompaction().collect()
    metrics = result[0]["metrics"] if result else None
    return Compaction(
        table=table,
        files_before=files,
        files_removed=int(metrics["numFilesRemoved"]) if metrics is not None else 0,
        files_added=int(metrics["numFilesAdded"]) if metrics is not None else 0,
        seconds=time.monotonic() - started,
    )
