"""Exactly-once materialization of the committed Raft log into Delta tables
(docs/concepts/delta-tables.md).

``DeltaMaterializer.write(batches, high_watermark)`` turns committed batches into rows of the
three tables (see tables.py) and commits each table once per call, in the order
``records``, ``quorum_events``, ``snapshot``.

Exactly once, across crashes
----------------------------
Every commit is a Delta transaction with ``txnAppId = app_id`` and ``txnVersion = L``, the last
Raft offset of the call, and carries ``userMetadata`` ``{"last_offset": L, ...}`` in the same
atomic commit. So each table, on its own, knows the offset it holds everything below
(``L + 1`` of its newest materializer commit; 0 before the first), read back from the Delta
history (``userMetadata``; the log's ``txn`` state as a fallback), never from a side file.

- The three tables are committed one after another, so a crash can leave them at different
  offsets. ``resume_offset()`` is the minimum; on the next ``write`` each table receives only the
  rows at or above its *own* offset, and a table already past the call's end is not touched.
  So no table ever gets a row twice or misses one, whatever the order or the crash point.
- A table that has no rows in a call still gets a commit (a commit with the transaction and
  metadata and no data file), so every table's offset advances with every call and
  ``resume_offset()`` never lags behind what was written.
- Before every commit the table's recorded ``txnVersion`` for the ``txnAppId`` is read
  (``_continues``): the commit goes ahead only if it starts right after it, is skipped
  if it is its own (a retry of a commit that landed), and fails with ``ResumeMismatch``
  otherwise (stale cached offsets, or another writer grouping the log differently: Delta alone
  would skip only a commit whose version is not above the recorded one, and append an
  overlapping range twice). The Spark writes also carry the transaction (appends through the
  writer options, MERGE through the session confs ``spark.databricks.delta.write.txnAppId`` /
  ``txnVersion``, set on a private session and unset afterwards), and a commit racing another
  one of the same ``txnAppId`` fails with Delta's ConcurrentTransactionException.
- Tables holding commits of another ``txnAppId`` and none of ours are refused
  (``MaterializerError``) rather than resumed from offset 0 on top of another cluster's rows.
- In-process commits fsync their Parquet file before the commit and the commit file after it,
  so a power loss leaves no commit pointing at a torn file and no gap between commit files.

How the commits are made
------------------------
- A warehouse delta-rs serves (``in_process``): a local path (a shared mount counts) or an
  ``s3://``/``s3a://``, ``gs://``, ``abfss://``/``az://`` or ``hdfs://`` URI, whose storage options
  come from the Spark configuration's Hadoop keys and the driver's environment
  (``storage_options``). Every commit by delta-rs in the driver process, on public APIs only.
  ``records`` and ``quorum_events``: pyarrow writes the rows as one Parquet file and delta-rs
  commits it with the ``txn`` action and ``userMetadata`` (``rs_append``). ``snapshot``: delta-rs's
  MERGE (``rs_merge``: ~15 ms for 100 keys) of rows whose revision columns the state machine's own
  code gives (``snapshot_rows``: a replay seeded with the table's rows). Checkpoints and compaction
  are delta-rs's too (``rs_maintenance``), so every commit to the tables takes its version the same
  way (on S3, a conditional write). delta-rs reads the recorded transaction version from its own
  table state, kept up to date incrementally. No Spark job and no JVM call: the JVM's commit forked
  shells and ran hooks worth ~12 % of the voters' one-connection throughput.
- A URI only Spark opens (``wasbs://``, ``oss://``, a custom Hadoop file system): Delta's
  public Spark API, with the connectors and credentials of the Spark configuration. The
  recorded version is read from the table's history (the newest materializer commit's
  ``userMetadata``), then an append (``txnAppId`` / ``txnVersion`` writer options) of an
  Arrow-built local relation, or a MERGE on a private session with one shuffle partition:
  0.4-0.6 s on 2 idle cores, 1-3 s on busy ones. Compaction is Delta's OPTIMIZE, checkpoints
  Delta's automatic ones.
- ``prepare()`` creates the tables and reads their offsets: by delta-rs in tens of
  milliseconds (``rs_tables``), or through Spark, whose first commits pay class loading and
  code generation (3-7 s cold); ``warm_up()`` also rehearses the Spark appends (6-9 s cold) on
  scratch tables.
- ``checkpoint()`` writes Delta checkpoints on demand: ``records`` checkpoints automatically only
  every 100 commits (tables.py), the driver checkpoints it from its other thread.

Threads: one materializer per warehouse. ``write`` calls for *disjoint* sets of tables may run
concurrently from different threads (the driver commits ``records`` on its own thread, often,
and ``quorum_events`` + ``snapshot`` on another, less often): each table's cached offset is
only advanced by the call that committed it, and after a failed call only that call's tables
are re-read from Delta (a read that raced such a change is not cached). Two concurrent calls
for the same table are not allowed. ``app_id`` should identify the cluster (its cluster id).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kraft_spark.delta import rs_append, rs_maintenance, rs_tables
from kraft_spark.delta.arrow_rows import arrow_frame
from kraft_spark.delta.log_rows import Rows, rows_from
from kraft_spark.delta.maintenance import Compaction, add_missing_columns, compact_table
from kraft_spark.delta.rs_merge import open_table
from kraft_spark.delta.snapshot_rows import (
    Judgement,
    read_prior_rs,
    read_prior_spark,
    snapshot_rows,
)
from kraft_spark.delta.spark_merge import merge_session, merge_snapshot
from kraft_spark.delta.storage_options import DELTA_RS_SCHEMES
from kraft_spark.delta.table_store import (
    TableStore,
    named_store_errors,
    spark_conf_of,
    store_for,
)
from kraft_spark.delta.tables import (
    DEFAULT_APP_ID,
    QUORUM_EVENTS,
    RECORDS,
    SCHEMAS,
    SNAPSHOT,
    TABLE_EXTRA_PROPERTIES,
    TABLE_PROPERTIES,
    TABLES,
    CommitMetadata,
    MaterializerError,
    next_offset,
    table_path,
)
from kraft_spark.raft.records import (
    Batch,
    LeaderChange,
    Record,
    leader_change_batch,
)
from kraft_spark.state.machine import FailedTxn

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# OPTIMIZE's threshold (conf/spark-defaults.conf): files under it are compacted, by either path.
MIN_FILE_SIZE_CONF = "spark.databricks.delta.optimize.minFileSize"
# Scratch tables of warm_up() live under the warehouse in a directory Spark and Delta readers
# skip (a leading underscore); leftovers of a crashed warm-up are removed by the next one.
WARM_UP_PREFIX = "_warm_up-"


class ResumeMismatch(MaterializerError):
    """A commit does not start where the table's recorded transaction ends: the resume offset
    it was built from is stale (a race, or another writer of the same app id). Nothing was
    committed; ``write`` drops its cached offsets, so the next call re-reads them from Delta."""


@dataclass(frozen=True, slots=True)
class TableCommit:
    """One table's share of a ``write`` call."""

    table: str
    first_offset: int  # the table's resume offset before the commit
    last_offset: int  # txnVersion of the commit
    rows: int
    seconds: float


@dataclass(frozen=True, slots=True)
class CommitStats:
    """What the last ``write`` call did, for metrics (materialization lag and throughput)."""

    first_offset: int  # resume_offset(tables) before the call, over the call's tables
    end_offset: int  # resume_offset(tables) after the call
    high_watermark: int
    rows: dict[str, int] = field(default_factory=dict)  # rows committed per table
    seconds: dict[str, float] = field(default_factory=dict)  # seconds per table commit
    total_seconds: float = 0.0

    @property
    def lag_offsets(self) -> int:
        """Committed offsets not yet materialized when the call returned."""
        return max(0, self.high_watermark - self.end_offset)


class DeltaMaterializer:
    """Writes committed Raft batches into ``records``, ``snapshot`` and ``quorum_events``.

    ``on_commit(table_commit)`` is called after each table's Delta commit (progress and metrics
    hook; raising from it stops the call as a crash there would).
    """

    def __init__(
        self,
        spark: SparkSession | None,
        warehouse: str,
        *,
        app_id: str = DEFAULT_APP_ID,
        on_commit: Callable[[TableCommit], None] | None = None,
        in_process: bool | None = None,
    ) -> None:
        self.warehouse = warehouse
        self.app_id = app_id
        self.on_commit = on_commit
        # Every commit by delta-rs in this process (rs_append, rs_merge; no Spark job, no JVM):
        # a warehouse on the driver's file system or an object store delta-rs serves. Else
        # (in_process=False, or a URI only Spark opens) Spark's public Delta API commits.
        self.store: TableStore | None = (
            None if in_process is False
            else store_for(warehouse, {} if spark is None else spark_conf_of(spark)))
        if spark is None and self.store is None:
            raise MaterializerError(f"{warehouse}: only Spark opens it, and no session given")
        # None only with a store: the in-process path never starts a Spark job.
        self.spark: SparkSession = spark  # type: ignore[assignment]
        if in_process and self.store is None:
            raise MaterializerError(
                f"{warehouse}: delta-rs opens no such URI (it serves local paths and "
                f"{', '.join(sorted(DELTA_RS_SCHEMES))}); leave in_process unset to commit "
                "through Spark")
        self.in_process = self.store is not None
        self.last_commit_stats: CommitStats | None = None
        # Per-table resume offsets, cached; a missing table is read from Delta when needed.
        # Only the thread committing a table advances or drops its entry (_set_next/_drop_next),
        # and every such change bumps the table's generation: a read from Delta that started
        # before a change is stale and must not be cached (see table_offsets).
        self._next: dict[str, int] = {}
        self._generation: dict[str, int] = dict.fromkeys(TABLES, 0)
        self._lock = threading.Lock()
        # delta-rs operations on one table, one at a time: a commit (one thread) and the upkeep
        # of the same table (compaction, checkpoint: another thread) share the table's cached
        # DeltaTable (rs_merge.open_table), and a compaction's commit must be durable before a
        # commit lands on top of it.
        self._table_locks = {table: threading.Lock() for table in TABLES}
        self._created = False
        # MERGE takes its transaction from session confs: a private session (spark_merge),
        # made on the first Spark MERGE.
        self._merge_session: SparkSession | None = None
        # Per table, the data files its last compaction left (see compact).
        self._kept_by_compaction: dict[str, int] = {}

    # ------------------------------------------------------------------ progress

    def path(self, table: str) -> str:
        return table_path(self.warehouse, table)

    def table_offsets(self) -> dict[str, int]:
        """Each table's resume offset (everything below it is in the table)."""
        with self._lock:
            known = dict(self._next)
            generations = dict(self._generation)
        missing = {t: self._read_next_offset(t) for t in TABLES if t not in known}
        if missing:
            with self._lock:
                for table, offset in missing.items():
                    # Another thread may have committed (or dropped) this table while we read
                    # its history (seconds, in a Spark job): then our figure is stale. Caching
                    # it could send that thread back to offsets it already committed.
                    if self._generation[table] == generations[table]:
                        self._next.setdefault(table, offset)
                known = {**missing, **self._next}
        return known

    def resume_offset(self, tables: Collection[str] = TABLES) -> int:
        """The next Raft offset to materialize into ``tables`` (default all three): the minimum
        over them."""
        offsets = self.table_offsets()
        return min(offsets[t] for t in TABLES if t in tables)

    def _read_next_offset(self, table: str) -> int:
        if self.store is not None:
            with named_store_errors(self.store):
                return rs_tables.next_offset(self.store, table, self.app_id)
        return next_offset(self.spark, self.path(table), self.app_id)

    # ------------------------------------------------------------------ writing

    def write(
        self,
        batches: Sequence[Batch],
        high_watermark: int,
        tables: Collection[str] = TABLES,
        failed_txns: Mapping[int, FailedTxn] | None = None,
        lease_deleted: Mapping[int, Sequence[bytes]] | None = None,
    ) -> int:
        """Materialize committed ``batches`` (all below ``high_watermark``) into ``tables``
        (default all three); return the new resume offset of the three tables (the minimum).
        ``failed_txns``: the state machine's failed conditional writes among them, and
        ``lease_deleted`` the keys its lease revocations and expiries deleted
        (``log_rows.rows_from``).

        Writing ``records`` on its own, often, and the other tables less often (from another
        thread if wanted) keeps the log visible in Delta quickly: each table resumes from its own
        offset.

        The batches must be contiguous and reach back to ``resume_offset(tables)`` or before it
        (batches, or parts of them, that are already materialized are skipped, so re-sending
        the same batches after a crash is safe). Raises ValueError on a gap, on batches out of
        order, or on records at or above ``high_watermark``.
        """
        started = time.monotonic()
        batches = list(batches)
        _check_batches(batches, high_watermark)
        targets = [t for t in TABLES if t in tables]
        if not targets:
            return self.resume_offset()
        offsets = self.table_offsets()
        resume = min(offsets[t] for t in targets)
        if not batches:
            return min(offsets.values())
        if batches[0].base_offset > resume:
            raise ValueError(
                f"gap: the first batch starts at offset {batches[0].base_offset} but "
                f"materialization resumes at {resume}"
            )
        end = batches[-1].next_offset
        if end <= resume:
            return min(offsets.values())  # everything already materialized
        rows = rows_from(batches, resume, failed_txns, lease_deleted)
        judgement = Judgement(failed_txns or {}, lease_deleted or {})
        counts: dict[str, int] = {}
        seconds: dict[str, float] = {}
        try:
            for table in targets:
                first = offsets[table]
                if first >= end:
                    continue  # this table was committed before a crash
                meta = CommitMetadata(self.app_id, first, end - 1, high_watermark)
                t0 = time.monotonic()
                count = self._commit(table, rows, first, meta, batches=batches,
                                     judgement=judgement)
                commit = TableCommit(table, first, end - 1, count, time.monotonic() - t0)
                counts[table] = count
                seconds[table] = commit.seconds
                offsets[table] = end
                self._set_next(table, end)
                if self.on_commit is not None:
                    self.on_commit(commit)
        except BaseException:
            # Re-read this call's tables from Delta: a failed commit may have landed.
            for table in targets:
                self._drop_next(table)
            raise
        self.last_commit_stats = CommitStats(
            first_offset=resume,
            end_offset=min(offsets[t] for t in targets),
            high_watermark=high_watermark,
            rows=counts,
            seconds=seconds,
            total_seconds=time.monotonic() - started,
        )
        with self._lock:
            return min(self._next.get(t, offsets[t]) for t in TABLES)

    def _set_next(self, table: str, offset: int) -> None:
        with self._lock:
            self._next[table] = offset
            self._generation[table] += 1

    def forget_cached_offset(self, table: str) -> None:
        """Another writer (``bootstrap``) committed to ``table``: read its offset again."""
        self._drop_next(table)

    def ensure_tables(self) -> None:
        self._create_tables()

    def _drop_next(self, table: str) -> None:
        with self._lock:
            self._next.pop(table, None)
            self._generation[table] += 1

    def checkpoint(self, table: str, min_commits: int = 10) -> int | None:
        """Write a checkpoint of ``table`` if ``min_commits`` or more commits were made since
        its last one; return the version checkpointed (None: not due, no table, or a warehouse
        only Spark opens, whose checkpoints are Delta's automatic ones). The driver calls it
        for ``records`` from the thread that commits the other tables, so the ``records``
        thread never stalls on one (see TABLE_EXTRA_PROPERTIES). Safe while another thread
        commits to the table: a checkpoint is a file per version."""
        if self.store is None:
            return None
        with self._table_locks[table]:
            return rs_maintenance.checkpoint(self.store, table, min_commits)  # no Spark job

    def compact(self, table: str, min_files: int) -> Compaction | None:
        """Compact ``table``'s small data files (``rs_maintenance.compact``; Delta OPTIMIZE,
        ``maintenance.compact_table``, for a warehouse only Spark opens) once ``min_files``
        data files were added since the last compaction; None when not due or disabled
        (``min_files`` < 1). The files a compaction left (the large ones it wrote, and those
        it leaves alone) do not count again, or a table of compacted files would be compacted
        for nothing at every cycle."""
        if min_files < 1:
            return None
        kept = self._kept_by_compaction.get(table, 0)
        if self.store is None:
            done = compact_table(self.spark, self.path(table), table, min_files + kept)
        elif not rs_tables.is_table(self.store, table):
            return None
        else:
            target = _min_file_size(self.spark)
            with self._table_locks[table]:
                files = rs_maintenance.data_file_count(self.store, table)
                done = (rs_maintenance.compact(self.store, table, files, target)
                        if files >= min_files + kept else None)
        if done is not None:
            self._kept_by_compaction[table] = (done.files_before - done.files_removed
                                               + done.files_added)
        return done

    # ------------------------------------------------------------------ start-up

    def prepare(self) -> dict[str, int]:
        """Create the tables if missing and read their offsets (start-up, before serving)."""
        if self.store is not None:
            with named_store_errors(self.store):
                new = [t for t in TABLES if not rs_tables.is_table(self.store, t)]
        else:
            from delta.tables import DeltaTable

            new = [t for t in TABLES if not DeltaTable.isDeltaTable(self.spark, self.path(t))]
        self._create_tables()
        with self._lock:
            for table in new:
                # Just created by us: nothing in it (no need to read its history).
                self._next.setdefault(table, 0)
        return self.table_offsets()

    def warm_up(self, tables: Collection[str] = (RECORDS, QUORUM_EVENTS)) -> float:
        """Pay the JVM's first-commit costs (class loading, code generation, Delta's log and
        checksum paths) for commits to ``tables`` on scratch tables under the warehouse, then
        delete them; the real tables are not touched. Returns the seconds spent.

        Call it once per JVM before serving. Cold, on 2 busy cores: creating the three tables
        2-3 s; a Spark append 6-9 s; a MERGE 2-7 s. By default the
        appends are rehearsed (what the latency of ``records`` depends on), not the MERGE of
        ``snapshot``, which pays its own first time on the thread that commits it. The scratch
        tables are removed through the local file system: under a warehouse that is a URI they
        stay (in ``_warm_up-*`` directories, which Spark and Delta readers skip).
        """
        started = time.monotonic()
        for stale in _stale_warm_ups(self.warehouse):
            shutil.rmtree(stale, ignore_errors=True)
        scratch = os.path.join(self.warehouse, f"{WARM_UP_PREFIX}{uuid.uuid4().hex[:12]}")
        try:
            rehearsal = DeltaMaterializer(
                self.spark,
                scratch,
                app_id=f"{self.app_id}-warm-up",
                in_process=self.in_process,
            )
            log = _warm_up_log()
            # Two calls: the first creates the tables and commits to a new table, the second
            # commits on top of a checksum (the steady state).
            rehearsal.write(log[:2], log[1].next_offset, tables)
            rehearsal.write(log[2:], log[-1].next_offset, tables)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return time.monotonic() - started

    def _commit(self, table: str, rows: Rows, first: int, meta: CommitMetadata, *,
                batches: Sequence[Batch], judgement: Judgement) -> int:
        self._create_tables()
        if table == RECORDS:
            data = [r for r in rows.records if r[0] >= first]
        elif table == QUORUM_EVENTS:
            data = [r for r in rows.events if r[0] >= first]
        else:
            # Each changed key's Entry, by the state machine's code replaying [first, end) on
            # the table's rows as of `first` (snapshot_rows).
            latest = {k: r for k, r in rows.latest.items() if r[2] >= first}
            if self.store is not None:
                with self._table_locks[table], named_store_errors(self.store):
                    prior = read_prior_rs(open_table(self.store, SNAPSHOT), list(latest))
            else:
                prior = read_prior_spark(self.spark, self.path(SNAPSHOT), list(latest))
            data = snapshot_rows(batches, first, latest, prior, judgement)
        if self.store is not None:
            # delta-rs reads the recorded version from its own table state (kept up to date
            # incrementally) and commits at exactly the version it checked. The driver is the
            # tables' only writer; the check is the one that matters (Delta's own would let an
            # overlapping range through).
            with self._table_locks[table], named_store_errors(self.store):
                rs_append.commit_in_process(
                    self.store, table, data, meta,
                    lambda recorded: _continues(table, recorded, meta))
            return len(data)
        # Through Spark (a URI only Spark opens): the recorded version from the table's history (the
        # newest materializer commit's userMetadata), then an append or MERGE carrying
        # txnAppId/txnVersion, which Delta itself skips when that version is already recorded.
        recorded = next_offset(self.spark, self.path(table), meta.app_id) - 1
        if not _continues(table, recorded, meta):
            return len(data)  # this very commit landed before (a retry after a failure)
        if table == SNAPSHOT and data:
            if self._merge_session is None:
                self._merge_session = merge_session(self.spark)
            merge_snapshot(self._merge_session, self.path(SNAPSHOT), data, meta)
        else:
            frames = {RECORDS: self._records_frame, QUORUM_EVENTS: self._events_frame}
            self._append(table, frames[table](data) if table in frames else None, meta)
        return len(data)

    def _create_tables(self) -> None:
        with self._lock:
            if self._created:
                return
            self._create_tables_locked()
            self._created = True

    def _create_tables_locked(self) -> None:
        if self.store is not None:
            with named_store_errors(self.store):
                rs_tables.create_tables(self.store)
                rs_tables.add_missing_columns(self.store)
            return
        from delta.tables import DeltaTable

        for table in TABLES:
            builder = (
                DeltaTable.createIfNotExists(self.spark)
                .location(self.path(table))
                .addColumns(SCHEMAS[table])
            )
            for key, value in {**TABLE_PROPERTIES, **TABLE_EXTRA_PROPERTIES.get(table, {})}.items():
                builder = builder.property(key, value)
            builder.execute()
        add_missing_columns(self.spark, self.path)

    def _append(self, table: str, frame: DataFrame | None, meta: CommitMetadata) -> None:
        if frame is None:
            # Zero partitions: Delta commits the transaction and metadata without a data file.
            frame = self.spark.createDataFrame(self.spark.sparkContext.emptyRDD(), SCHEMAS[table])
        (
            frame.write.format("delta")
            .mode("append")
            .option("txnAppId", meta.app_id)
            .option("txnVersion", str(meta.last_offset))
            .option("userMetadata", meta.to_json())
            .save(self.path(table))
        )

    def _records_frame(self, data: list[tuple[Any, ...]]) -> DataFrame | None:
        if not data:
            return None
        # Rows are (offset, epoch, timestamp_ms, key, value, headers, revision): its columns.
        return arrow_frame(self.spark, SCHEMAS[RECORDS], data).coalesce(1)

    def _events_frame(self, data: list[tuple[Any, ...]]) -> DataFrame | None:
        if not data:
            return None
        # (offset, epoch, leader_id, voters, granting_voters, timestamp_ms, voter_directories,
        # restored_from)
        return arrow_frame(self.spark, SCHEMAS[QUORUM_EVENTS], data).coalesce(1)


def _check_batches(batches: Sequence[Batch], high_watermark: int) -> None:
    if high_watermark < 0:
        raise ValueError(f"high watermark {high_watermark} is negative")
    previous: Batch | None = None
    for batch in batches:
        if not batch.records:
            raise ValueError(f"empty batch at offset {batch.base_offset}")
        if previous is not None and batch.base_offset != previous.next_offset:
            raise ValueError(
                f"batches are not contiguous: offset {previous.next_offset} expected, "
                f"batch at {batch.base_offset}"
            )
        previous = batch
    if previous is not None and previous.last_offset >= high_watermark:
        raise ValueError(
            f"batch up to offset {previous.last_offset} is not below the high watermark "
            f"{high_watermark}: only committed records may be materialized"
        )




def _min_file_size(spark: SparkSession | None) -> int:
    """OPTIMIZE's threshold from the session (64 MiB without one)."""
    default = 64 << 20
    if spark is None:
        return default
    return int(spark.conf.get(MIN_FILE_SIZE_CONF, str(default)) or default)


def _continues(table: str, recorded: int, meta: CommitMetadata) -> bool:
    """Whether the commit ``meta`` is due on a table whose recorded transaction version for
    the app id is ``recorded`` (-1: none): True when it starts right after it (the only commit
    that neither repeats nor skips a row), False when that version is already its own (it
    landed before: a retry).

    Raises ResumeMismatch otherwise. Delta's own check only skips a commit whose version is not
    above the recorded one, so a writer working from a stale offset with a different grouping
    (recorded inside the commit's range) would append the overlap a second time.
    """
    if recorded == meta.last_offset:
        return False
    if recorded != meta.first_offset - 1:
        raise ResumeMismatch(
            f"{table}: the table holds offsets below {recorded + 1} (txnAppId {meta.app_id!r}) "
            f"but this commit starts at {meta.first_offset} (offsets {meta.first_offset}-"
            f"{meta.last_offset}): a stale resume offset or another writer of this app id; "
            "nothing was committed, the offsets are read again from Delta"
        )
    return True


def _warm_up_log() -> list[Batch]:
    """A small log for warm_up(): leader changes, inserts, updates, deletes, headers, a null
    key."""
    now = int(time.time() * 1000)

    def data(base: int, epoch: int, *changes: tuple[str | None, str | None]) -> Batch:
        records = tuple(
            Record(
                key=None if key is None else key.encode(),
                value=None if value is None else value.encode(),
                timestamp_ms=now,
                headers=(("warm-up", b"1"), ("none", None)),
            )
            for key, value in changes
        )
        return Batch(base_offset=base, epoch=epoch, records=records)

    def leader(base: int, epoch: int) -> Batch:
        change = LeaderChange(leader_id=0, voters=(0,), granting_voters=(0,))
        return leader_change_batch(base, epoch, change, now)

    return [
        leader(0, 1),
        data(1, 1, ("a", "1"), ("b", "1"), (None, "x")),
        data(4, 1, ("a", "2"), ("b", None), ("c", "1")),
        leader(7, 2),
        data(8, 2, ("c", None), ("d", "1")),
    ]


def _stale_warm_ups(warehouse: str) -> list[str]:
    try:
        names = os.listdir(warehouse)
    except OSError:
        return []
    return [os.path.join(warehouse, n) for n in names if n.startswith(WARM_UP_PREFIX)]
