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
``parquet_file.write_parquet`` (fsync'd before the commit); the ``txn`` action
(``txnAppId = app_id``, ``txnVersion = last offset``) and the ``userMetadata`` JSON of
``CommitMetadata`` in its commitInfo; the caller checks the recorded transaction version first
(``materializer._continues``); the commit file and the log directory are fsync'd after the
commit. Tables stay readable by Spark and any Delta reader: reader 1 / writer 2 protocol, one
``add`` per commit.
Differences: delta-rs writes no ``.crc`` checksum (Spark readers then compute the table state
themselves), and the commit's ``operationMetrics`` are delta-rs's, not Spark's WRITE metrics.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kraft_spark.delta import parquet_file, rs_merge
from kraft_spark.delta.rs_merge import open_table
from kraft_spark.delta.tables import SCHEMAS, SNAPSHOT

if TYPE_CHECKING:
    from kraft_spark.delta.tables import CommitMetadata


# Commits of one call that may lose the race for their version to another commit before the
# call gives up (the driver's OPTIMIZE of records, every ~100 commits, is the usual one).
COMMIT_ATTEMPTS = 3


def commit_in_process(path: str, table: str, data: list[tuple[Any, ...]],
                      meta: CommitMetadata, continues: Callable[[int], bool]) -> None:
    """Commit ``data`` to ``table`` at ``path`` with delta-rs (``snapshot``: a MERGE; else an
    append; no rows: a commit of the offsets alone), at the version right after the one whose
    recorded txn version ``continues`` accepted (False: the commit landed before, skip it; it
    raises on a mismatch). Another commit in between (the driver's OPTIMIZE of ``records``,
    or another writer) fails ours (max_commit_retries=0), and the check is made again on the
    newer version: a commit of the same range by the same app id is then skipped, a
    different one raises, an unrelated one is retried."""
    from deltalake.exceptions import CommitFailedError

    path = os.path.abspath(path)
    for attempt in range(COMMIT_ATTEMPTS):
        delta = open_table(path)  # the newest version
        if not continues(rs_merge.recorded_txn_version(delta, meta.app_id)):
            return
        try:  # on top of that version, the one checked
            if table == SNAPSHOT and data:
                version = int(delta.version()) + 1
                rs_merge.merge_snapshot(delta, data, meta)  # no Spark job
                _make_commit_durable(path, version)
            else:
                append_rows(delta, path, table, data, meta)  # no JVM
            return
        except CommitFailedError:
            if attempt + 1 == COMMIT_ATTEMPTS:
                raise


def append_rows(delta: Any, path: str, table: str, data: list[tuple[Any, ...]],
                meta: CommitMetadata) -> int:
    """Append ``data`` (rows of ``table``'s schema; none: a commit of only the ``txn`` action
    and metadata, so the table's offset advances) to the Delta table at ``path``, ``delta`` as
    ``open_table`` loaded it, at the version after that one (raises delta-rs's
    CommitFailedError if another commit took it): the version whose recorded txn version the
    caller checked. Returns the committed version, already durable."""
    from deltalake import CommitProperties, Transaction
    from deltalake.exceptions import CommitFailedError

    path = os.path.abspath(path)
    actions = []
    if data:
        add = parquet_file.write_parquet(path, SCHEMAS[table], data)
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
            os.unlink(os.path.join(path, add["path"]))
        raise
    _make_commit_durable(path, version)
    return version


def append_untracked(path: str, table: str, data: list[tuple[Any, ...]],
                     user_metadata: str) -> int:
    """Append ``data`` to ``table`` at ``path`` in a commit of its own without a ``txn`` action:
    a record beside the materializer's commits (the restore's ``quorum_events`` row) that moves
    no table's resume offset. Durable when it returns; returns the version it committed."""
    from deltalake import CommitProperties, DeltaTable

    path = os.path.abspath(path)
    add = parquet_file.write_parquet(path, SCHEMAS[table], data)
    delta = DeltaTable(path)
    before = int(delta.version())
    delta.create_write_transaction(
        [_add_action(add)], mode="append", schema=delta.schema(),
        commit_properties=CommitProperties(custom_metadata={"userMetadata": user_metadata}))
    delta.update_incremental()
    version = int(delta.version())
    for committed in range(before + 1, version + 1):  # ours, and any that raced it
        _make_commit_durable(path, committed)
    return version


def _add_action(add: dict[str, Any]) -> Any:
    """delta-rs's ``add`` action for a file ``parquet_file.write_parquet`` wrote."""
    from deltalake.transaction import AddAction

    return AddAction(add["path"], int(add["size"]), {}, int(add["modificationTime"]), True,
                     add["stats"])


def _make_commit_durable(path: str, version: int) -> None:
    """fsync commit ``version`` of the table at ``path`` and the log directory (delta-rs's
    local store does not): a later commit must not survive a power loss without it."""
    log_dir = os.path.join(path, "_delta_log")
    parquet_file.make_durable(os.path.join(log_dir, f"{version:020d}.json"), log_dir)


def data_file_count(path: str) -> int:
    """The number of data files in the table at ``path`` (delta-rs's state, no Spark job)."""
    return len(open_table(os.path.abspath(path)).file_uris())


def checkpoint(path: str, min_commits: int) -> int | None:
    """Write a checkpoint of the table at ``path`` with delta-rs if ``min_commits`` or more
    commits were made since its last one; return the version checkpointed (None: not due, or
    no table). The JVM's checkpoint is a Spark job reconstructing the state (every ~10 s on the
    driver's upkeep thread, the largest JVM cost left once delta-rs commits); delta-rs writes
    the same classic Parquet checkpoint and ``_last_checkpoint`` that Spark reads."""
    from deltalake.exceptions import TableNotFoundError

    path = os.path.abspath(path)
    try:
        delta = open_table(path)
    except TableNotFoundError:
        return None
    version = int(delta.version())
    if version < 0 or version - _last_checkpoint_version(path) < min_commits:
        return None
    delta.create_checkpoint()
    return version


def _last_checkpoint_version(path: str) -> int:
    """The version of the table's last checkpoint (``_delta_log/_last_checkpoint``), -1: none."""
    try:
        with open(os.path.join(path, "_delta_log", "_last_checkpoint"), encoding="utf-8") as f:
            return int(json.load(f)["version"])
    except FileNotFoundError:
        return -1
