"""Appending rows to a Delta table without a Spark job: the rows are written as one Parquet
file by pyarrow and committed through Delta's own ``OptimisticTransaction`` in the driver's JVM
(``DeltaMaterializer`` uses it for ``records`` and ``quorum_events`` on a local warehouse).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs; used for a few arrays
from pyspark.sql import types as T

from kraft_spark.delta.arrow_rows import arrow_type
from kraft_spark.delta.tables import SCHEMAS, CommitMetadata
from kraft_spark.log.fs import RealFileSystem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def append_direct(
    spark: SparkSession, path: str, table: str, txn: Any, *, data: list[tuple[Any, ...]],
    meta: CommitMetadata,
) -> None:
    """An append of ``DeltaMaterializer`` without a Spark job: the rows are written as one Parquet
    file by pyarrow, and the commit (that file's ``add``, the ``txn`` action, ``userMetadata``)
    goes through Delta's own ``OptimisticTransaction`` in the driver's JVM, so conflict
    detection, the checksum and the other post-commit hooks are Delta's.

    Why: a Spark append with ``txnAppId``/``txnVersion`` reconstructs the table's whole state
    to read the transaction version (Delta 4.4 does not read it from the checksum), then runs
    a write job: 0.4-0.6 s on 2 idle cores, 1-3 s on busy ones, and 10-15 s cold. Here the
    transaction version comes from the read snapshot's checksum (``.crc``, which Delta keeps
    with the transactions of every commit); only when that is missing does Delta's own
    ``txnVersion`` run (the state reconstruction). The appId is registered as read by the
    transaction (``txn``, started and checked by the materializer before it calls this),
    so a concurrent commit of the same appId makes ours fail with Delta's
    ConcurrentTransactionException instead of duplicating rows.

    Uses Delta's JVM classes (``DeltaLog``, ``OptimisticTransaction``, ``Action.fromJson``,
    ``DeltaOperations.Write``): not a public API; checked on delta-spark 4.4.
    """
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    delta = jvm.org.apache.spark.sql.delta
    now_ms = int(time.time() * 1000)
    actions = jvm.java.util.ArrayList()
    add: dict[str, Any] | None = None
    if data:
        add = write_parquet(path, SCHEMAS[table], data)
        actions.add(delta.actions.Action.fromJson(json.dumps({"add": add})))
    _register_write_metrics(jvm, spark, txn, len(data), add)
    txn_action = {"appId": meta.app_id, "version": meta.last_offset, "lastUpdated": now_ms}
    actions.add(delta.actions.Action.fromJson(json.dumps({"txn": txn_action})))
    none = jvm.scala.Option.empty()
    operation = getattr(delta, "DeltaOperations$Write")(
        jvm.org.apache.spark.sql.SaveMode.Append,
        none,
        none,
        jvm.scala.Some(meta.to_json()),
        none,
        none,
        none,
        none,
        none,
    )
    version = txn.commit(jvm.org.apache.spark.api.python.PythonUtils.toSeq(actions), operation)
    # Delta's local log store writes the commit file without an fsync: after a power loss a
    # later commit could survive without this one (a gap no reader accepts). This one is
    # made durable before the next is started.
    log_dir = os.path.join(path, "_delta_log")
    make_durable(os.path.join(log_dir, f"{int(version):020d}.json"), log_dir)


def _register_write_metrics(
    jvm: Any, spark: SparkSession, txn: Any, rows: int, add: dict[str, Any] | None
) -> None:
    """Give the transaction the metrics a Spark write job would have collected, so the commit's
    ``operationMetrics`` (``DESCRIBE HISTORY``) show ``numFiles``, ``numOutputRows`` and
    ``numOutputBytes`` like any other WRITE. Delta keeps only the names its WRITE operation
    declares, and only while ``spark.databricks.delta.history.metricsEnabled`` is on (default)."""
    figures = {
        "numFiles": 0 if add is None else 1,
        "numOutputRows": rows,
        "numOutputBytes": 0 if add is None else int(add["size"]),
    }
    metrics = jvm.java.util.HashMap()
    for name, value in figures.items():
        metric = jvm.org.apache.spark.sql.execution.metric.SQLMetric("sum", 0)
        metric.add(value)
        metrics.put(name, metric)
    scala_map = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(metrics)
    txn.registerSQLMetrics(spark._jsparkSession, scala_map)


def write_parquet(
    table_dir: str, schema: T.StructType, rows: list[tuple[Any, ...]]
) -> dict[str, Any]:
    """Write ``rows`` as one Parquet file in the table's directory; return its ``add`` action
    (path, size, stats of the scalar columns)."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    columns = list(zip(*rows, strict=True))
    arrays = []
    fields = []
    nulls: dict[str, int] = {}
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    for field_, values in zip(schema.fields, columns, strict=True):
        kind = field_.dataType
        if isinstance(kind, T.MapType):
            pairs = [None if v is None else list(v.items()) for v in values]
            arrays.append(pa.array(pairs, type=arrow_type(kind)))
        elif isinstance(kind, T.TimestampType):
            arrays.append(pa.array(values, type=pa.int64()).cast(pa.timestamp("ms", tz="UTC")))
        else:
            arrays.append(pa.array(values, type=arrow_type(kind)))
        if isinstance(kind, T.ArrayType):
            item = pa.field("element", arrow_type(kind.elementType), kind.containsNull)
            arrays[-1] = arrays[-1].cast(pa.list_(item))
        fields.append(pa.field(field_.name, arrays[-1].type, field_.nullable))
        if isinstance(kind, (T.LongType, T.IntegerType, T.TimestampType, T.StringType)):
            present = [v for v in values if v is not None]
            nulls[field_.name] = len(values) - len(present)
            if present and not isinstance(kind, T.StringType):
                # Strings have no min/max here (Delta truncates them; absent is "unknown").
                low[field_.name], high[field_.name] = min(present), max(present)
                if isinstance(kind, T.TimestampType):
                    low[field_.name] = _stats_timestamp(low[field_.name])
                    high[field_.name] = _stats_timestamp(high[field_.name])
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    # Spark's own timestamps in Parquet: INT64 microseconds, UTC-adjusted.
    table = table.cast(
        pa.schema(
            [
                pa.field(f.name, pa.timestamp("us", tz="UTC"), f.nullable)
                if pa.types.is_timestamp(f.type)
                else f
                for f in table.schema
            ]
        )
    )
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    target = os.path.join(table_dir, name)
    pq.write_table(table, target, compression="snappy")
    # Durable before the commit that references it: a commit surviving a power loss must not
    # point at a missing or torn file.
    make_durable(target, table_dir)
    info = os.stat(target)
    stats = {"numRecords": len(rows), "minValues": low, "maxValues": high, "nullCount": nulls}
    return {
        "path": name,
        "partitionValues": {},
        "size": info.st_size,
        "modificationTime": int(info.st_mtime * 1000),
        "dataChange": True,
        "stats": json.dumps(stats, separators=(",", ":")),
    }


def make_durable(file: str, directory: str) -> None:
    """fsync ``file``, then its entry in ``directory`` (the log's own file system calls)."""
    fs = RealFileSystem()
    fs.fsync(file)
    fs.fsync_dir(directory)


def _stats_timestamp(ms: int) -> str:
    """A timestamp as Delta writes it in file statistics (UTC, milliseconds)."""
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
