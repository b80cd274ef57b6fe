"""Bootstrapping the Delta tables from a Raft snapshot (KIP-630) when the log no longer holds
the records they need next.

The driver's observer normally materializes every committed record. When retention deleted
records the tables have not materialized yet (a fresh warehouse for a compacted quorum, or a
materializer that fell behind the size limit), the observer starts from a snapshot instead.
Then, for each table still below the snapshot's end offset S:

* ``snapshot``: one MERGE makes the table equal to the snapshot's content (newer values
  updated, missing keys inserted, keys the snapshot does not hold deleted);
* ``records`` and ``quorum_events``: an empty commit that moves the table to S.

Every such commit carries, in its ``userMetadata``, the range it jumped over
(``first_offset``..``last_offset`` = S - 1) and ``bootstrap_snapshot`` = ``<S>-<epoch>``; the
driver also logs it. So the gap in ``records``' history is recorded, never silent, and time
travel before it still works for what was materialized.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from kraft_spark.delta.arrow_rows import MERGE_SOURCE_SCHEMA, arrow_frame
from kraft_spark.delta.materializer import DeltaMaterializer, TableCommit
from kraft_spark.delta.snapshot_rows import entry_row
from kraft_spark.delta.spark_merge import REVISION_COLUMNS, UPDATED_COLUMNS, set_commit_confs
from kraft_spark.delta.tables import SCHEMAS, SNAPSHOT, TABLES, CommitMetadata
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.state.machine import Entry

log = logging.getLogger(__name__)


def bootstrap_from_snapshot(
    materializer: DeltaMaterializer,
    snapshot_id: OffsetAndEpoch,
    entries: Iterable[tuple[bytes, Entry]],
    high_watermark: int,
) -> dict[str, int]:
    """Move every table below ``snapshot_id.offset`` to it (see the module doc); returns the
    first offset each table had to jump over (tables already there are left out)."""
    offsets = materializer.table_offsets()
    label = f"{snapshot_id.offset}-{snapshot_id.epoch}"
    # A snapshot's entries carry the revisions: its rows are exact (offset: the entry's).
    rows = [
        entry_row(key.decode("utf-8", errors="replace"),
                  entry.value.decode("utf-8", errors="replace"), entry.offset, entry)
        for key, entry in entries
    ]
    jumped: dict[str, int] = {}
    for table in TABLES:
        first = offsets[table]
        if first >= snapshot_id.offset:
            continue
        meta = CommitMetadata(materializer.app_id, first, snapshot_id.offset - 1,
                              high_watermark, bootstrap_snapshot=label)
        log.warning(
            "%s: offsets %d..%d are no longer in the quorum's log (retention): bootstrapping "
            "from snapshot %s; the gap is recorded in the commit's userMetadata",
            table, first, snapshot_id.offset - 1, label)
        started = time.monotonic()
        if table == SNAPSHOT:
            _replace_snapshot(materializer, rows, meta)
        else:
            _empty_commit(materializer, table, meta)
        materializer.forget_cached_offset(table)
        jumped[table] = first
        # Reported as every commit is (the driver's kraft_spark_delta_table_offset): left
        # unreported, the table's offset metric stayed at the gap's start while the table held
        # everything, and `make bench`'s wait for the materializer ran out (120 s a point).
        if materializer.on_commit is not None:
            materializer.on_commit(TableCommit(table, first, meta.last_offset,
                                               len(rows) if table == SNAPSHOT else 0,
                                               time.monotonic() - started))
    return jumped


def _empty_commit(materializer: DeltaMaterializer, table: str, meta: CommitMetadata) -> None:
    spark = materializer.spark
    frame = spark.createDataFrame(spark.sparkContext.emptyRDD(), SCHEMAS[table])
    (
        frame.write.format("delta")
        .mode("append")
        .option("txnAppId", meta.app_id)
        .option("txnVersion", str(meta.last_offset))
        .option("userMetadata", meta.to_json())
        .save(materializer.path(table))
    )


def _replace_snapshot(
    materializer: DeltaMaterializer, rows: list[tuple[Any, ...]], meta: CommitMetadata
) -> None:
    from delta.tables import DeltaTable

    materializer.ensure_tables()
    session = materializer.spark.newSession()
    session.conf.set("spark.databricks.delta.merge.materializeSource", "none")
    source = arrow_frame(session, MERGE_SOURCE_SCHEMA, rows).coalesce(1)
    target = DeltaTable.forPath(session, materializer.path(SNAPSHOT))
    set_commit_confs(session, meta)
    columns = SCHEMAS[SNAPSHOT].fieldNames()
    (
        target.alias("t")
        .merge(source.alias("s"), "t.key = s.key")
        .whenMatchedUpdate(
            # Changed since the table's offset: the snapshot's write is at or after it (a
            # revision; the log's batches, and so its groups, start there), the table's
            # before. Unchanged, the snapshot has its revision, at or below the row's
            # offset (a conditional group's first offset): the row keeps its record's.
            condition="t.offset < s.offset",
            set={c: f"s.`{c}`" for c in UPDATED_COLUMNS},
        )
        # A row unchanged since, written before the revision columns existed: it gets them
        # (back-filled) and keeps the rest.
        .whenMatchedUpdate(
            condition="t.version IS NULL",
            set={c: f"s.`{c}`" for c in REVISION_COLUMNS},
        )
        .whenNotMatchedInsert(values={c: f"s.`{c}`" for c in columns})
        .whenNotMatchedBySourceDelete()
        .execute()
    )
