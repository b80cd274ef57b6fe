"""Reading the materialized tables: the snapshot as of a Raft offset, the history of a key."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from kraft_spark.delta.tables import (
    DEFAULT_APP_ID,
    RECORDS,
    SNAPSHOT,
    SNAPSHOT_SCHEMA,
    materializer_commits,
    next_offset,
    table_path,
)
from kraft_spark.store.leases import LEASE_DELETED_HEADER
from kraft_spark.store.txn import OUTCOME_HEADER

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def snapshot_version(
    spark: SparkSession,
    warehouse: str | os.PathLike[str],
    as_of_offset: int,
    *,
    app_id: str = DEFAULT_APP_ID,
) -> tuple[int, int] | None:
    """(Delta version, last offset) of the ``snapshot`` commit whose ``userMetadata``
    ``last_offset`` is the largest at or below ``as_of_offset``; None if there is none.
    """
    path = table_path(warehouse, SNAPSHOT)
    best: tuple[int, int] | None = None
    for version, meta in materializer_commits(spark, path, app_id, None):
        if meta.last_offset <= as_of_offset and (best is None or meta.last_offset > best[1]):
            best = (version, meta.last_offset)
    return best


def snapshot(
    spark: SparkSession,
    warehouse: str | os.PathLike[str],
    as_of_offset: int | None = None,
    *,
    app_id: str = DEFAULT_APP_ID,
) -> DataFrame:
    """The latest value per key (columns key, value, offset, epoch, timestamp).

    With ``as_of_offset`` X: the state after every record at offsets <= X, exactly. It is read
    by Delta time travel (``versionAsOf``) at the snapshot version whose ``last_offset`` L is the
    largest <= X; when L < X (X falls inside a materialized micro-batch) the changes of
    ``records`` in (L, X] are applied on top. Raises ValueError if X is not materialized yet
    (the ``records`` table does not reach X) or negative. Time travel needs the data files of
    the old version: a VACUUM with a short retention makes old offsets unreadable.
    """
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    snapshot_path = table_path(warehouse, SNAPSHOT)
    if not DeltaTable.isDeltaTable(spark, snapshot_path):
        raise ValueError(f"no snapshot table at {snapshot_path} (nothing materialized yet?)")
    if as_of_offset is None:
        return spark.read.format("delta").load(snapshot_path)
    if as_of_offset < 0:
        raise ValueError(f"as_of_offset {as_of_offset} is negative")
    records_path = table_path(warehouse, RECORDS)
    materialized = next_offset(spark, records_path, app_id)
    if as_of_offset >= materialized:
        raise ValueError(
            f"offset {as_of_offset} is not materialized yet (records reach {materialized - 1})"
        )
    found = snapshot_version(spark, warehouse, as_of_offset, app_id=app_id)
    if found is None:
        base, last = spark.createDataFrame([], SNAPSHOT_SCHEMA), -1
    else:
        version, last = found
        base = spark.read.format("delta").option("versionAsOf", version).load(snapshot_path)
    if last == as_of_offset:
        return base
    rows = (
        spark.read.format("delta").load(records_path)
        .where((F.col("offset") > last) & (F.col("offset") <= as_of_offset))
        # A failed conditional write changed nothing (kraft_spark.store.txn).
        .where(F.col("headers").getItem(OUTCOME_HEADER).isNull())
    )
    # A lease revocation or expiry deleted the keys its row lists (kraft.lease.deleted).
    lease_deletes = (
        rows.where(F.col("headers").getItem(LEASE_DELETED_HEADER).isNotNull())
        .select(F.explode(F.from_json(F.col("headers").getItem(LEASE_DELETED_HEADER),
                                      "array<string>")).alias("key"),
                F.lit(None).cast("string").alias("value"), "offset", "epoch", "timestamp")
    )
    changes = (
        rows.where(F.col("key").isNotNull())
        .select(*SNAPSHOT_SCHEMA.fieldNames())
        .unionByName(lease_deletes)
        .withColumn(
            "_rank", F.row_number().over(Window.partitionBy("key").orderBy(F.desc("offset")))
        )
        .where(F.col("_rank") == 1)
        .select(*SNAPSHOT_SCHEMA.fieldNames())
    )
    kept = base.join(changes.select("key"), on="key", how="left_anti")
    return kept.unionByName(changes.where(F.col("value").isNotNull()))



def history_of_key(spark: SparkSession, warehouse: str | os.PathLike[str], key: str) -> DataFrame:
    """Every committed record of ``key`` from ``records``, by offset (value null: deleted)."""
    from pyspark.sql import functions as F

    return (
        spark.read.format("delta")
        .load(table_path(warehouse, RECORDS))
        .where(F.col("key") == key)
        .orderBy("offset")
    )
