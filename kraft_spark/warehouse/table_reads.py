"""What a restore reads from the warehouse's Delta tables (kraft_spark/warehouse/restore.py).

A warehouse on the driver's file system (a plain path: ``file:`` URIs are made plain paths by
``normalize_warehouse``) is read by delta-rs (the ``deltalake`` package) in this process, as the
materializer commits to it: no Spark job. After every host was lost (bench/multihost.py,
2026-11-28), building the restore snapshot through Spark took 13 s on the new executors, still
cold, to read a few commits and rows; with delta-rs, milliseconds. Any other URI (``s3a:``,
``hdfs:``, ``abfss:`` ...) is read through Spark, which holds the file systems and credentials
configured for it.

Both paths answer the same questions: whether a table exists, its materializer commits, the
``records`` rows of an offset range in offset order, and the newest leader epoch
``quorum_events`` saw below an offset. tests/spark/test_restore.py runs each restore on both.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kraft_spark.delta.tables import CommitMetadata, commits_in_history, materializer_commits
from kraft_spark.warehouse.location import is_uri


@dataclass(frozen=True, slots=True)
class RecordRow:
    """One row of ``records``, as a restore replays it."""

    offset: int
    epoch: int
    timestamp_ms: int
    key: str | None
    value: str | None
    headers: dict[str, str | None]


def is_table(spark: Any, path: str) -> bool:
    if is_uri(path):
        from delta.tables import DeltaTable as SparkDeltaTable

        return bool(SparkDeltaTable.isDeltaTable(spark, path))
    from deltalake import DeltaTable

    return bool(DeltaTable.is_deltatable(path))


def commits(spark: Any, path: str, app_id: str,
            others: set[str]) -> list[tuple[int, CommitMetadata]]:
    """(Delta version, metadata) of every materializer commit of ``app_id``, newest first; the
    app ids of other clusters' materializer commits go into ``others``."""
    if is_uri(path):
        return materializer_commits(spark, path, app_id, None, others)
    from deltalake import DeltaTable

    return commits_in_history(((int(c["version"]), c.get("userMetadata"))
                               for c in DeltaTable(path).history()), app_id, others)


def record_rows(spark: Any, path: str, start: int, end: int) -> Iterator[RecordRow]:
    """The rows of ``records`` at ``path`` with ``start <= offset < end``, in offset order.
    delta-rs reads them into memory at once: a restore replays the rows after the newest stored
    Raft snapshot only (one snapshot interval, 20 MiB of records by default)."""
    if is_uri(path):
        rows = (spark.read.format("delta").load(path)
                .where(f"offset >= {start} AND offset < {end}")
                .selectExpr("offset", "epoch", "unix_millis(timestamp) AS ts", "key", "value",
                            "headers")
                .orderBy("offset"))
        for row in rows.toLocalIterator():
            yield RecordRow(int(row["offset"]), int(row["epoch"]), int(row["ts"]), row["key"],
                            row["value"], dict(row["headers"] or {}))
        return
    import pyarrow as pa  # type: ignore[import-untyped]  # no stubs
    import pyarrow.compute as pc  # type: ignore[import-untyped]  # no stubs
    from deltalake import DeltaTable

    offset = pc.field("offset")
    table = (DeltaTable(path).to_pyarrow_dataset()
             .to_table(columns=["offset", "epoch", "timestamp", "key", "value", "headers"],
                       filter=(offset >= start) & (offset < end))
             .sort_by("offset"))
    # Milliseconds since the epoch, truncated as Spark's unix_millis truncates: the column's
    # unit is whatever the Parquet files hold (INT96 reads as nanoseconds).
    unit = table.schema.field("timestamp").type.unit
    per_ms = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}[unit]
    raw = table.column("timestamp").cast(pa.timestamp(unit)).cast(pa.int64()).to_pylist()
    stamps = [None if t is None else (t * 1000 if per_ms is None else t // per_ms) for t in raw]
    columns = {name: table.column(name).to_pylist()
               for name in ("offset", "epoch", "key", "value", "headers")}
    for i, ts in enumerate(stamps):
        yield RecordRow(columns["offset"][i], columns["epoch"][i], int(ts or 0),
                        columns["key"][i], columns["value"][i], dict(columns["headers"][i] or ()))


def newest_leader_epoch(spark: Any, path: str, end: int) -> int:
    """The newest epoch of a leader ``quorum_events`` at ``path`` recorded below ``end`` (0:
    none, or no table)."""
    if not is_table(spark, path):
        return 0
    if is_uri(path):
        row = (spark.read.format("delta").load(path).where(f"offset < {end} AND leader_id >= 0")
               .selectExpr("max(epoch) AS epoch").collect()[0])
        return int(row["epoch"] or 0)
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    epochs = (DeltaTable(path).to_pyarrow_dataset()
              .to_table(columns=["epoch"],
                        filter=(pc.field("offset") < end) & (pc.field("leader_id") >= 0))
              .column("epoch"))
    newest = pc.max(epochs).as_py()
    return int(newest or 0)
