"""One Parquet data file of a Delta table, written as Spark writes it (INT64 UTC microsecond
timestamps, required columns, file statistics data skipping may trust) and made durable before
the commit that adds it (``TableStore.put``): ``write_parquet`` returns that commit's ``add``
action (``rs_append`` commits it with delta-rs).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs; used for a few arrays
from pyspark.sql import types as T

from kraft_spark.delta.arrow_rows import arrow_type

if TYPE_CHECKING:
    from kraft_spark.delta.table_store import TableStore


def write_parquet(
    store: TableStore, table_name: str, schema: T.StructType, rows: list[tuple[Any, ...]]
) -> dict[str, Any]:
    """Write ``rows`` as one Parquet file of the table ``table_name`` of ``store``, durable when
    this returns; return its ``add`` action (path, size, stats of the scalar columns)."""
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
    # Durable before the commit that references it: a commit surviving a power loss must not
    # point at a missing or torn file.
    size, modified_ms = store.put_parquet(table_name, name, table)
    stats = {"numRecords": len(rows), "minValues": low, "maxValues": high, "nullCount": nulls}
    return {
        "path": name,
        "partitionValues": {},
        "size": size,
        "modificationTime": modified_ms,
        "dataChange": True,
        "stats": json.dumps(stats, separators=(",", ":")),
    }


def _stats_timestamp(ms: int) -> str:
    """A timestamp as Delta writes it in file statistics (UTC, milliseconds)."""
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
