"""The start-up of a warehouse the materializer commits to in process (a path on the driver's
file system, or an object store delta-rs serves: ``table_store``; ``rs_append``), with delta-rs
(the ``deltalake`` package) in the driver process: creating the three tables, giving older ones
the columns added since, and reading where each table resumes.

Why not Spark: creating the tables through Delta's Spark API was most of the application's
start-up after the session itself ("Delta ready in 6.5-12.4 s" on 2 busy cores, nearly all of
it the JVM loading and compiling Delta's classes for three commits), and the in-process path
needs those classes for nothing (its commits, checkpoints and compactions are delta-rs's). With
delta-rs, tens of milliseconds.

The tables are the ones Spark's ``DeltaTable.createIfNotExists`` made: the schema of
``tables.SCHEMAS`` (translated through its JSON form, which both sides share), the table
properties of ``TABLE_PROPERTIES`` and ``TABLE_EXTRA_PROPERTIES``, reader 1 / writer 2
protocol. A table that exists is left alone (only the missing ones are created).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kraft_spark.delta.tables import (
    ADDED_COLUMNS,
    SCHEMAS,
    TABLE_EXTRA_PROPERTIES,
    TABLE_PROPERTIES,
    TABLES,
    commits_in_history,
    foreign_table,
)

if TYPE_CHECKING:
    from kraft_spark.delta.table_store import TableStore


def is_table(store: TableStore, table: str) -> bool:
    from deltalake import DeltaTable

    return bool(DeltaTable.is_deltatable(store.uri(table), store.storage_options()))


def create_tables(store: TableStore) -> list[str]:
    """Create each of the tables that does not exist in ``store``; return their names."""
    from deltalake import DeltaTable, Schema

    created = []
    for table in TABLES:
        if is_table(store, table):
            continue
        DeltaTable.create(
            store.uri(table),
            schema=Schema.from_json(SCHEMAS[table].json()),
            mode="ignore",
            configuration={**TABLE_PROPERTIES, **TABLE_EXTRA_PROPERTIES.get(table, {})},
            storage_options=store.storage_options(),
        )
        store.created_durable(table)  # delta-rs does not fsync
        created.append(table)
    return created


def add_missing_columns(store: TableStore) -> list[str]:
    """Give tables an older version created the columns added since (``ADDED_COLUMNS``): a
    metadata-only commit, older rows read as null. Returns ``table.column`` of each added."""
    from deltalake import DeltaTable, Field

    added: list[str] = []
    for table in dict.fromkeys(t for t, _column, _sql in ADDED_COLUMNS):
        delta = DeltaTable(store.uri(table), storage_options=store.storage_options())
        present = {f.name for f in delta.schema().fields}
        missing = [c for t, c, _sql in ADDED_COLUMNS if t == table and c not in present]
        if not missing:
            continue
        # One commit per table, the columns in their order.
        delta.alter.add_columns([Field.from_json(SCHEMAS[table][c].json()) for c in missing])
        delta.update_incremental()
        store.commit_durable(table, int(delta.version()))  # delta-rs does not fsync
        added.extend(f"{table}.{c}" for c in missing)
    return added


def next_offset(store: TableStore, table: str, app_id: str) -> int:
    """The Raft offset ``table`` of ``store`` holds everything below (0 if none or no table):
    ``txnVersion + 1`` of ``app_id`` in the table's state. Every materializer commit carries
    that transaction and its ``userMetadata`` in one atomic commit, so the two agree (the
    Spark path, ``tables.next_offset``, reads the history first, its public API). A table that
    records no transaction of ``app_id`` but materializer commits of other app ids is refused,
    as there."""
    from deltalake import DeltaTable

    if not is_table(store, table):
        return 0
    delta = DeltaTable(store.uri(table), storage_options=store.storage_options())
    version = delta.transaction_version(app_id)
    if version is not None:
        return int(version) + 1
    others: set[str] = set()
    commits_in_history(((int(c["version"]), c.get("userMetadata")) for c in delta.history()),
                       app_id, others)
    if others:
        raise foreign_table(store.uri(table), app_id, others)
    return 0
