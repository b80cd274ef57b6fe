"""Reading the materialized tables: the snapshot as of a Raft offset, the history of a key."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from kraft_spark.delta.arrow_rows import arrow_frame
from kraft_spark.delta.log_rows import rows_from
from kraft_spark.delta.snapshot_rows import (
    SEED_COLUMNS,
    log_from_records,
    prior_from_rows,
    snapshot_rows,
)
from kraft_spark.delta.tables import (
    DEFAULT_APP_ID,
    RECORDS,
    SNAPSHOT,
    SNAPSHOT_SCHEMA,
    materializer_commits,
    next_offset,
    table_path,
)

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
    """The latest value per key (the ``snapshot`` table's columns: key, value, offset, epoch,
    timestamp, create_revision, mod_revision, version, lease).

    With ``as_of_offset`` X: the state after every record at offsets <= X, exactly. It is read
    by Delta time travel (``versionAsOf``) at the snapshot version whose ``last_offset`` L is the
    largest <= X; when L < X (X falls inside a materialized micro-batch) the changes of
    ``records`` in (L, X] are applied on top. Raises ValueError if X is not materialized yet
    (the ``records`` table does not reach X) or negative. Time travel needs the data files of
    the old version: a VACUUM with a short retention makes old offsets unreadable.
    """
    from delta.tables import DeltaTable

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
    return _apply_records(spark, base, records_path, last, as_of_offset)


def _apply_records(spark: SparkSession, base: DataFrame, records_path: str, last: int,
                   as_of: int) -> DataFrame:
    """``base`` (the snapshot after offset ``last``) with the changes of ``records`` in
    ``(last, as_of]``: the state machine's replay of those rows (``snapshot_rows``) on the
    base rows of the keys they write, so the revision columns are what the API answered."""
    from pyspark.sql import functions as F

    collected = (
        spark.read.format("delta").load(records_path)
        .where((F.col("offset") > last) & (F.col("offset") <= as_of))
        .select("offset", "epoch", F.unix_millis("timestamp").alias("ts"), "key", "value",
                "headers")
        .orderBy("offset").collect()
    )
    batches, judgement = log_from_records(
        (r.offset, r.epoch, r.ts, r.key, r.value, dict(r.headers)) for r in collected)
    latest = rows_from(batches, last + 1, judgement.failed, judgement.deleted).latest
    if not latest:
        return base
    keys = list(latest)
    columns = [c for c in SEED_COLUMNS if c in base.columns]
    prior = prior_from_rows(r.asDict() for r in
                            base.where(F.col("key").isin(keys)).select(*columns).collect())
    changes = snapshot_rows(batches, last + 1, latest, prior, judgement)
    live = arrow_frame(spark, SNAPSHOT_SCHEMA, [r for r in changes if r[1] is not None])
    changed = spark.createDataFrame([(k,) for k in keys], "key string")
    kept = base.join(changed, on="key", how="left_anti")
    return kept.unionByName(live, allowMissingColumns=True)


def history_of_key(spark: SparkSession, warehouse: str | os.PathLike[str], key: str) -> DataFrame:
    """Every committed record of ``key`` from ``records``, by offset (value null: deleted)."""
    from pyspark.sql import functions as F

    return (
        spark.read.format("delta")
        .load(table_path(warehouse, RECORDS))
        .where(F.col("key") == key)
        .orderBy("offset")
    )
