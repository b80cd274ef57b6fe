"""The materializer's commits by delta-rs (the ``deltalake`` package), in the driver process:
appends to ``records`` and ``quorum_events`` here, the ``snapshot`` MERGE in ``rs_merge``,
each at exactly the version whose recorded txn version was checked (``commit_in_process``).
No JVM call on the materializer's steady path.

Why in process: a commit through Delta's JVM (``OptimisticTransaction``, which is not Delta's
public API) forked a shell several times per commit (Hadoop's local file system without its
native library), ran post-commit hooks and kept the JIT busy; measured on the application at
one connection, materialization took the voters' throughput from 1,043 to 913 appends/s
(median of 4 windows each, 2026-11-26). delta-rs commits the same actions from Python, and is
the only commit path of a local warehouse.

What every commit holds (docs/concepts/delta-tables.md): one Parquet file written by
``parquet_file.write_parquet`` (durable before the commit: ``TableStore.put``); the ``txn``
action (``txnAppId = app_id``, ``txnVersion = last offset``) and the ``userMetadata`` JSON of
``CommitMetadata`` in its commitInfo; the caller checks the recorded transaction version first
(``materializer._continues``); on a local directory the commit file and the log directory are
fsync'd after the commit (``TableStore.commit_durable``). The same code commits to a local
warehouse and to an object store delta-rs serves (``table_store``). Tables stay readable by
Spark and any Delta reader: reader 1 / writer 2 protocol, one ``add`` per commit. Differences:
delta-rs writes no ``.crc`` checksum (Spark readers then compute the table state themselves),
and the commit's ``operationMetrics`` are delta-rs's, not Spark's WRITE metrics. """

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kraft_spark.delta import parquet_file, rs_merge
from kraft_spark.delta.rs_merge import open_table
from kraft_spark.delta.tables import SCHEMAS, SNAPSHOT

if TYPE_CHECKING:
    from kraft_spark.delta.table_store import TableStore
    from kraft_spark.delta.tables import CommitMetadata


# Commits of one call that may lose the race for their version to another commit before the
# call gives up (the driver's OPTIMIZE of records, every ~100 commits, is the usual one).
COMMIT_ATTEMPTS = 3


def commit_in_process(store: TableStore, table: str, data: list[tuple[Any, ...]],
                      meta: CommitMetadata, continues: Callable[[int], bool]) -> None:
    """Commit ``data`` to ``table`` of ``store`` with delta-rs (``snapshot``: a MERGE; else an
    append; no rows: a commit of the offsets alone), at the version right after the one whose
    recorded txn version ``continues`` accepted (False: the commit landed before, skip it; it
    raises on a mismatch). Another commit in between (the driver's compaction of ``records``,
    or another writer) fails ours (max_commit_retries=0), and the check is made again on the
    newer version: a commit of the same range by the same app id is then skipped, a
    different one raises, an unrelated one is retried."""
    from deltalake.exceptions import CommitFailedError

    for attempt in range(COMMIT_ATTEMPTS):
        delta = open_table(store, table)  # the newest version
        if not continues(rs_merge.recorded_txn_version(delta, meta.app_id)):
            return
        try:  # on top of that version, the one checked
            if table == SNAPSHOT and data:
                version = int(delta.version()) + 1
                rs_merge.merge_snapshot(delta, data, meta)  # no Spark job
                store.written_commits_durable(table, version, version)
            else:
                append_rows(delta, store, table, data, meta)  # no JVM
            return
        except CommitFailedError:
            if attempt + 1 == COMMIT_ATTEMPTS:
                raise


def append_rows(delta: Any, store: TableStore, table: str, data: list[tuple[Any, ...]],
                meta: CommitMetadata) -> int:
    """Append ``data`` (rows of ``table``'s schema; none: a commit of only the ``txn`` action
    and metadata, so the table's offset advances) to ``table`` of ``store``, ``delta`` as
    ``open_table`` loaded it, at the version after that one (raises delta-rs's
    CommitFailedError if another commit took it): the version whose recorded txn version the
    caller checked. Returns the committed version, already durable."""
    from deltalake import CommitProperties, Transaction
    from deltalake.exceptions import CommitFailedError

    actions = []
    if data:
        add = parquet_file.write_parquet(store, table, SCHEMAS[table], data)
        actions.append(_add_action(add))
    version = int(delta.version()) + 1
    try:
        delta.create_write_transaction(
            actions,
            mode="append",
            schema=delta.schema(),
            commit_properties=CommitProperties(
                custom_metadata={"userMetadata": meta.to_json()},
                app_transactions=[Transaction(meta.app_id, meta.last_offset)],
                # Exactly the version after the one the caller's txn check read, or fail
                # (CommitFailedError): delta-rs would otherwise put a blind append on top of
                # a concurrent commit, even one of the same app id (two drivers, one warehouse).
                max_commit_retries=0,
            ),
        )
    except CommitFailedError:
        # The version was taken: no commit references our file (other errors leave it: the
        # commit may have landed).
        if data:
            store.delete(table, add["path"])
        raise
    store.commit_durable(table, version)
    return version


def append_untracked(store: TableStore, table: str, data: list[tuple[Any, ...]],
                     user_metadata: str) -> int:
    """Append ``data`` to ``table`` of ``store`` in a commit of its own without a ``txn``
    action: a record beside the materializer's commits (the restore's ``quorum_events`` row)
    that moves no table's resume offset. Durable when it returns; returns the version it
    committed."""
    from deltalake import CommitProperties

    add = parquet_file.write_parquet(store, table, SCHEMAS[table], data)
    delta = open_table(store, table)
    before = int(delta.version())
    delta.create_write_transaction(
        [_add_action(add)], mode="append", schema=delta.schema(),
        commit_properties=CommitProperties(custom_metadata={"userMetadata": user_metadata}))
    delta.update_incremental()
    version = int(delta.version())
    for committed in range(before + 1, version + 1):  # ours, and any that raced it
        store.commit_durable(table, committed)
    return version


def _add_action(add: dict[str, Any]) -> Any:
    """delta-rs's ``add`` action for a file ``parquet_file.write_parquet`` wrote."""
    from deltalake.transaction import AddAction

    return AddAction(add["path"], int(add["size"]), {}, int(add["modificationTime"]), True,
                     add["stats"])
