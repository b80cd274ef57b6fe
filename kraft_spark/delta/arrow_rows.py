"""Rows as Arrow: the Arrow types of the tables' columns and DataFrames built from Arrow
tables (a local relation in the JVM: no Python worker, no pickling)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs; used for a few arrays
from pyspark.sql import types as T

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# The MERGE source of the snapshot table: its columns, in its order (tables.SNAPSHOT_SCHEMA),
# with a nullable value (null: delete the key).
MERGE_SOURCE_SCHEMA = T.StructType(
    [
        T.StructField("key", T.StringType(), False),
        T.StructField("value", T.StringType(), True),  # null: delete the key
        T.StructField("offset", T.LongType(), False),
        T.StructField("epoch", T.IntegerType(), False),
        T.StructField("timestamp", T.TimestampType(), False),
        T.StructField("create_revision", T.LongType(), True),
        T.StructField("mod_revision", T.LongType(), True),
        T.StructField("version", T.LongType(), True),
        T.StructField("lease", T.LongType(), True),
    ]
)


def arrow_type(spark_type: T.DataType) -> pa.DataType:
    """The Arrow type our rows carry for a column of the tables' schemas (timestamps as epoch
    milliseconds, maps as (key, value) pairs)."""
    if isinstance(spark_type, T.LongType):
        return pa.int64()
    if isinstance(spark_type, T.IntegerType):
        return pa.int32()
    if isinstance(spark_type, T.StringType):
        return pa.string()
    if isinstance(spark_type, T.TimestampType):
        return pa.timestamp("ms", tz="UTC")
    if isinstance(spark_type, T.ArrayType):
        return pa.list_(arrow_type(spark_type.elementType))
    if isinstance(spark_type, T.MapType):
        return pa.map_(arrow_type(spark_type.keyType), arrow_type(spark_type.valueType))
    raise TypeError(f"no Arrow type for {spark_type}")


def arrow_frame(
    spark: SparkSession, schema: T.StructType, rows: list[tuple[Any, ...]]
) -> DataFrame:
    """A DataFrame of ``rows`` (tuples in the order of ``schema``) built from an Arrow table:
    Spark makes a local relation of it in the JVM, no Python worker and no pickling."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema.fields]
    arrays = []
    for field_, values in zip(schema.fields, columns, strict=True):
        if isinstance(field_.dataType, T.MapType):
            pairs = [None if v is None else list(v.items()) for v in values]
            arrays.append(pa.array(pairs, type=arrow_type(field_.dataType)))
        else:
            arrays.append(pa.array(values, type=arrow_type(field_.dataType)))
    table = pa.Table.from_arrays(arrays, names=schema.fieldNames())
    return spark.createDataFrame(table, schema)
