"""The ``snapshot`` table's MERGE with delta-rs (the ``deltalake`` package), without a Spark job.

A Spark MERGE of a handful of changed keys costs 1.5-3 s on 2 busy cores (6-7 s cold), most of
it job scheduling, and takes those cores from the voters; so the driver ran it at most every
5 s and, after a slow one, much less often (``full_cycle_wait``): the issue saw 100 appends
reach ``snapshot`` 15.4 s after they were acknowledged. delta-rs runs the same MERGE in the
driver process (Rust, no JVM), and the table stays a Delta table any reader opens: the same
protocol (reader 1 / writer 2; no deletion vectors, no column mapping), the same schema.

The exactly-once rules (docs/concepts/delta-tables.md) hold as for the Spark MERGE: the commit
carries the
transaction ``txnAppId = app_id`` / ``txnVersion = last offset`` (a ``txn`` action, which
``txn_version_from_log`` reads to resume) and the ``userMetadata`` JSON of ``CommitMetadata``
(in commitInfo, where ``materializer_commits`` and time travel by offset find it); and the
merge conditions make a replayed change a no-op (``t.offset < s.offset``).

Used for every warehouse delta-rs serves (a local path, S3, GCS, ADLS, HDFS); a URI only Spark
opens keeps the Spark MERGE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs

if TYPE_CHECKING:
    from kraft_spark.delta.table_store import TableStore
    from kraft_spark.delta.tables import CommitMetadata

# arrow_rows.MERGE_SOURCE_SCHEMA as Arrow (timestamps in microseconds, as Spark writes them).
_SOURCE_SCHEMA = pa.schema([
    pa.field("key", pa.string(), nullable=False),
    pa.field("value", pa.string(), nullable=True),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("epoch", pa.int32(), nullable=False),
    pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("create_revision", pa.int64(), nullable=True),
    pa.field("mod_revision", pa.int64(), nullable=True),
    pa.field("version", pa.int64(), nullable=True),
    pa.field("lease", pa.int64(), nullable=True),
])
_COLUMNS = tuple(_SOURCE_SCHEMA.names)


_OPEN: dict[str, Any] = {}  # table URI -> DeltaTable, brought up to date before each use


def open_table(store: TableStore, name: str) -> Any:
    """The table ``name`` of ``store``, kept open between commits and updated from the log's
    new commits (reading the whole log again each time would grow with every commit)."""
    from deltalake import DeltaTable

    uri = store.uri(name)
    table = _OPEN.get(uri)
    if table is None:
        table = _OPEN[uri] = DeltaTable(uri, storage_options=store.storage_options())
    else:
        try:
            table.update_incremental()
        except Exception:  # a vacuumed or rewritten log: read it from the start
            table = _OPEN[uri] = DeltaTable(uri, storage_options=store.storage_options())
    return table


def recorded_txn_version(table: Any, app_id: str) -> int:
    """The ``txnVersion`` the delta-rs table ``table`` (as ``open_table`` loaded it) records
    for ``app_id`` (-1 if none), from delta-rs's table state (no JVM: delta-rs writes no
    checksum for Delta's JVM to read it from, and without one Delta reconstructs the whole
    table state in a Spark job)."""
    version = table.transaction_version(app_id)
    return -1 if version is None else int(version)


def merge_snapshot(table: Any, data: list[tuple[Any, ...]], meta: CommitMetadata) -> dict[str, Any]:
    """MERGE ``data`` — ``MERGE_SOURCE_SCHEMA`` rows (timestamps in epoch milliseconds), one
    per key, a null value deleting the key — into the ``snapshot`` table, the delta-rs table
    ``table`` as ``open_table`` loaded it (committed at the version after that one, or
    CommitFailedError); returns delta-rs's metrics. Raises what delta-rs raises (the caller's
    retry re-reads the table's offset)."""
    from deltalake import CommitProperties, Transaction

    columns = list(zip(*data, strict=True)) if data else [() for _ in _COLUMNS]
    source = pa.table(
        [
            pa.array(columns[0], pa.string()),
            pa.array(columns[1], pa.string()),
            pa.array(columns[2], pa.int64()),
            pa.array(columns[3], pa.int32()),
            pa.array([ms * 1000 for ms in columns[4]], pa.int64()).cast(
                pa.timestamp("us", tz="UTC")),
            *(pa.array(values, pa.int64()) for values in columns[5:]),
        ],
        schema=_SOURCE_SCHEMA,
    )
    commit = CommitProperties(
        custom_metadata={"userMetadata": meta.to_json()},
        app_transactions=[Transaction(meta.app_id, meta.last_offset)],
        max_commit_retries=0,  # as rs_append: the version after the one checked, or fail
    )
    metrics: dict[str, Any] = (
        table.merge(source, "t.key = s.key", source_alias="s", target_alias="t",
                    commit_properties=commit)
        .when_matched_delete(predicate="s.value IS NULL AND t.offset < s.offset")
        .when_matched_update(
            updates={c: f"s.`{c}`" for c in _COLUMNS if c != "key"},
            predicate="s.value IS NOT NULL AND t.offset < s.offset",
        )
        .when_not_matched_insert(
            updates={c: f"s.`{c}`" for c in _COLUMNS},
            predicate="s.value IS NOT NULL",
        )
        .execute()
    )
    return metrics
