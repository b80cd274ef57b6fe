"""Rebuilding a quorum's log from the warehouse (issue: disposable executors).

When no voter has a usable log, the driver reads the warehouse (``warehouse_plan``), and
``build_restore`` makes one Raft snapshot (KIP-630's format) of the state at the plan's end:
the stored snapshot's entries, then every ``records`` row after it applied in offset order (a
null value deletes its key; keyless rows change nothing), each key keeping the offset, epoch and
timestamp of its last write. Each fresh voter installs that file (``install_restore``) and
starts with an empty log beginning at its end offset, the cluster id unchanged; offsets and
epochs go on from there, so the Delta tables continue where they stopped.

Deliberate limits, stated where users read them (README):

* the rows of ``records`` hold UTF-8 text (undecodable bytes became U+FFFD): keys and values
  written as other bytes come back as that text; the stored Raft snapshot is byte-exact;
* the idempotent-producer table is not in the tables: retries of batches written before the
  restore are not recognised as retries;
* history before the end offset stays in the Delta tables (time travel), not in the new log;
* the snapshot's epoch is one past the newest known (see ``build_restore``), not the epoch of
  the record before its end offset: it starts a new history.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from kraft_spark.delta import rs_tables
from kraft_spark.delta.rs_append import append_untracked
from kraft_spark.delta.table_store import spark_conf_of, store_for
from kraft_spark.delta.tables import QUORUM_EVENTS, RECORDS, TABLES, CommitMetadata, table_path
from kraft_spark.raft.records import Record
from kraft_spark.state.machine import Entry, FailedTxn, KeyValueState
from kraft_spark.state.snapshot_file import SnapshotId, encode_snapshot, label
from kraft_spark.store.txn import OUTCOME_HEADER
from kraft_spark.warehouse import table_reads
from kraft_spark.warehouse.location import WarehouseError, WarehouseFiles
from kraft_spark.warehouse.restore_plan import RestorePlan, plan_restore
from kraft_spark.warehouse.snapshot_copies import SNAPSHOT_DIR, load, stored_ids

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RestoredLog:
    """The snapshot a fresh voter starts from: its id and the file's bytes."""

    snapshot_id: SnapshotId
    data: bytes
    keys: int
    replayed_rows: int
    plan: RestorePlan
    text_replacements: int  # rows whose key or value held U+FFFD (not byte-exact)


def warehouse_plan(spark: Any, warehouse: str, app_id: str) -> RestorePlan | None:
    """The restore this warehouse supports for cluster ``app_id`` (None: it holds nothing).
    Raises RestoreRefused, or WarehouseError for tables another cluster wrote."""
    commits: dict[str, list[CommitMetadata]] = {}
    for table in TABLES:
        path = table_path(warehouse, table)
        if not table_reads.is_table(spark, path):
            commits[table] = []
            continue
        others: set[str] = set()
        found = table_reads.commits(spark, path, app_id, others)
        if not found and others:
            raise WarehouseError(
                f"{path} was written by cluster {', '.join(sorted(others))}, not {app_id}: "
                "this warehouse belongs to another cluster. Point kraft.warehouse.uri at this "
                "cluster's warehouse, or start with an empty one")
        commits[table] = [meta for _, meta in found]
    recorded = max((m.high_watermark for ms in commits.values() for m in ms), default=0)
    files = WarehouseFiles(warehouse, spark)
    return plan_restore(commits[RECORDS], recorded, stored_ids(files),
                        os.path.join(warehouse, SNAPSHOT_DIR))


def build_restore(spark: Any, warehouse: str, plan: RestorePlan,
                  epoch_seen: int = 0) -> RestoredLog:
    """The restore snapshot for ``plan`` (reads the stored snapshot and the records rows).

    Its epoch is one more than any the warehouse holds and ``epoch_seen`` (the newest the
    driver saw): the rebuilt quorum elects its first leader in a newer epoch than any leader
    of the old one, so no client, cache or node that remembers an old leader can take a new
    leader of the same epoch for it (an epoch names one leader)."""
    entries: dict[bytes, Entry] = {}
    stored_failures: dict[int, FailedTxn] = {}
    stored_leases: dict[str, Any] = {}
    stored_from: int | None = None
    epoch, last_ts = 0, 0
    if plan.snapshot is not None:
        content = load(WarehouseFiles(warehouse, spark), plan.snapshot)
        entries = dict(content.entries)
        stored_failures = content.failed_txns
        stored_leases = content.leases
        stored_from = content.outcomes_from
        epoch, last_ts = plan.snapshot.epoch, content.last_timestamp_ms
    replayed = replaced = 0
    # Replayed through the state machine, so conditional writes are judged as the quorum
    # judged them (their kraft.txn header is in the rows' headers); a run of consecutive
    # offsets of one epoch holds every group whole (a group never spans batches).
    state = KeyValueState()
    state.load(entries.items(), plan.replay_from, epoch, b"", failed_txns=stored_failures,
               leases=stored_leases, outcomes_from=stored_from)
    run: list[Record] = []
    run_start = run_epoch = -1

    def flush_run() -> None:
        if run:
            state.apply_data(run_start, run_epoch, run)
            run.clear()

    if plan.replay_from < plan.end:
        rows = table_reads.record_rows(spark, table_path(warehouse, RECORDS), plan.replay_from,
                                       plan.end)
        for row in rows:
            replayed += 1
            offset, row_epoch = row.offset, row.epoch
            epoch, last_ts = max(epoch, row_epoch), max(last_ts, row.timestamp_ms)
            key, value = row.key, row.value
            replaced += "\ufffd" in (key or "") or "\ufffd" in (value or "")
            if offset != run_start + len(run) or row_epoch != run_epoch:
                flush_run()
                run_start, run_epoch = offset, row_epoch
            headers = tuple((k, None if v is None else v.encode())
                            for k, v in sorted(row.headers.items()) if k != OUTCOME_HEADER)
            run.append(Record(None if key is None else key.encode(),
                              None if value is None else value.encode(), row.timestamp_ms,
                              headers))
        flush_run()
    entries = dict(state.items())
    # The state is at the plan's end now (apply_data leaves applied_offset alone): the snapshot
    # stores the outcome window before its end, complete from the stored snapshot's on.
    state.applied_offset = plan.end
    outcomes_from, failed_txns, leases = state.outcomes_to_store()
    # The newest epoch quorum_events saw below the end (a LeaderChange may be the log's last
    # record): the restored log must not name an epoch older than one the quorum reached.
    last_event_epoch = table_reads.newest_leader_epoch(
        spark, table_path(warehouse, QUORUM_EVENTS), plan.end)
    epoch = max(epoch, last_event_epoch, epoch_seen) + 1
    snapshot_id = SnapshotId(plan.end, epoch)
    data = b"".join(encode_snapshot(snapshot_id, entries.items(), b"", last_ts,
                                    failed_txns=failed_txns, leases=leases,
                                    outcomes_from=outcomes_from))
    if replaced:
        log.warning("restore: %d records rows held U+FFFD (bytes that were not UTF-8): they "
                    "are restored as that text", replaced)
    log.info("restore: snapshot %s from %s: %d keys, %d bytes", label(snapshot_id),
             plan.describe(), len(entries), len(data))
    return RestoredLog(snapshot_id, data, len(entries), replayed, plan, replaced)


def record_restore(spark: Any, warehouse: str, app_id: str, restored: RestoredLog,
                   voters: dict[int, str]) -> None:
    """One ``quorum_events`` row for the restore: at the restored log's start offset and
    epoch, leader_id -1, the new voters and their directory ids, ``restored_from`` saying
    what it was built from. A commit of its own without a transaction id (the materializer's
    resume offset, which counts its own commits only, is unchanged)."""
    import datetime
    import json

    from kraft_spark.delta.tables import SCHEMAS

    ids = sorted(voters)
    now = datetime.datetime.now(datetime.UTC)
    meta = json.dumps({"app_id": app_id, "restore": restored.plan.describe(),
                       "restore_snapshot": label(restored.snapshot_id)}, sort_keys=True)

    def row(at: Any) -> tuple[Any, ...]:
        return (restored.snapshot_id.offset, restored.snapshot_id.epoch, -1, ids, [], at,
                [voters[i] for i in ids], f"warehouse: {restored.plan.describe()}")

    path = table_path(warehouse, QUORUM_EVENTS)
    store = store_for(warehouse, spark_conf_of(spark))
    if store is not None and rs_tables.is_table(store, QUORUM_EVENTS):
        # In this process, as the materializer commits: a Spark job on the new, cold
        # executors took 18 s here (bench/multihost.py, 2026-11-28).
        append_untracked(store, QUORUM_EVENTS, [row(int(now.timestamp() * 1000))], meta)
        return
    (spark.createDataFrame([row(now)], SCHEMAS[QUORUM_EVENTS]).coalesce(1).write.format("delta")
     .mode("append").option("userMetadata", meta).save(path))
