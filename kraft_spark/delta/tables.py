"""The three Delta tables of the materialized log: names, schemas, properties, commit metadata.

Layout under the warehouse directory (path-based Delta tables, readable by any Delta reader)::

    <warehouse>/records        one row per committed data record
    <warehouse>/snapshot       the latest value per key
    <warehouse>/quorum_events  one row per LeaderChange control record, and per voter-set
                               change (KIP-853 VotersRecord: leader_id -1, the new voters
                               and their directory ids), and per restore from the warehouse
                               (``restored_from`` set)
    <warehouse>/_raft_snapshots  copies of the observer's Raft snapshots (not a table)

Timestamps are Spark ``TIMESTAMP`` (UTC instants, millisecond precision from the record's
``timestamp_ms``); the application's session time zone is UTC (conf/spark-defaults.conf).
``key`` and ``value`` are the UTF-8 text of the record's bytes (undecodable bytes become U+FFFD,
so a foreign record can never wedge materialization); the HTTP layer stores JSON text. Header
values likewise; of repeated header names the last one wins (a MAP has unique keys). Records
with a null key are in ``records`` but not in ``snapshot``.

Every commit the materializer makes carries ``userMetadata`` JSON
``{"app_id": ..., "first_offset": F, "last_offset": L, "high_watermark": H}`` and the Delta
transaction ``txnAppId = app_id`` / ``txnVersion = L``: the commit holds exactly the table's rows
for Raft offsets ``[F, L]``, and the table then holds everything below ``L + 1``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RECORDS = "records"
SNAPSHOT = "snapshot"
QUORUM_EVENTS = "quorum_events"
# Commit order within one write: see materializer.py for why any order is safe.
TABLES = (RECORDS, QUORUM_EVENTS, SNAPSHOT)

DEFAULT_APP_ID = "kraft-spark-materializer"

# Explicit, so the tables stay at reader version 1 / writer version 2 whatever the session's
# defaults: deletion vectors and column mapping would need newer readers.
TABLE_PROPERTIES = {
    "delta.enableDeletionVectors": "false",
    "delta.columnMapping.mode": "none",
}

# Per-table additions. ``records`` is committed every second or so on the latency-critical
# thread: Delta's automatic checkpoint (every 10 commits by default) would stall that thread for
# a second each time, so the driver checkpoints it from its other materializer thread
# (DeltaMaterializer.checkpoint) and the automatic one only remains as a backstop.
TABLE_EXTRA_PROPERTIES: dict[str, dict[str, str]] = {
    RECORDS: {"delta.checkpointInterval": "100"},
}

RECORDS_SCHEMA = T.StructType(
    [
        T.StructField("offset", T.LongType(), nullable=False),
        T.StructField("epoch", T.IntegerType(), nullable=False),
        T.StructField("timestamp", T.TimestampType(), nullable=False),
        T.StructField("key", T.StringType(), nullable=True),
        T.StructField("value", T.StringType(), nullable=True),
        T.StructField(
            "headers",
            T.MapType(T.StringType(), T.StringType(), valueContainsNull=True),
            nullable=False,
        ),
        # etcd's mod_revision of the key this record wrote (a value or a deletion), as the
        # state machine gives it (kraft_spark.state.judged_replay.write_revisions); null for a
        # record that wrote no key (keyless, a lease operation, control) or failed. Added
        # after the first release (``ADDED_COLUMNS``): older rows read null.
        T.StructField("revision", T.LongType(), nullable=True),
    ]
)

SNAPSHOT_SCHEMA = T.StructType(
    [
        T.StructField("key", T.StringType(), nullable=False),
        T.StructField("value", T.StringType(), nullable=False),
        T.StructField("offset", T.LongType(), nullable=False),
        T.StructField("epoch", T.IntegerType(), nullable=False),
        T.StructField("timestamp", T.TimestampType(), nullable=False),
        # etcd's view of the key, the state machine's ``Entry`` (create_offset, offset,
        # version, lease: kraft_spark.delta.snapshot_rows). Added after the first release
        # (``ADDED_COLUMNS``): rows written before read null; see docs/concepts/delta-tables.md.
        T.StructField("create_revision", T.LongType(), nullable=True),
        T.StructField("mod_revision", T.LongType(), nullable=True),
        T.StructField("version", T.LongType(), nullable=True),
        T.StructField("lease", T.LongType(), nullable=True),
    ]
)

QUORUM_EVENTS_SCHEMA = T.StructType(
    [
        T.StructField("offset", T.LongType(), nullable=False),
        T.StructField("epoch", T.IntegerType(), nullable=False),
        T.StructField("leader_id", T.IntegerType(), nullable=False),
        T.StructField("voters", T.ArrayType(T.IntegerType(), containsNull=False), nullable=False),
        T.StructField(
            "granting_voters", T.ArrayType(T.IntegerType(), containsNull=False), nullable=False
        ),
        T.StructField("timestamp", T.TimestampType(), nullable=False),
        # KIP-853: for a voter-set change, each voter's directory id (Kafka's base64 text) in
        # the order of ``voters``; null for a LeaderChange. Added after the first release:
        # older tables get it on start-up (``ADDED_COLUMNS``).
        T.StructField("voter_directories", T.ArrayType(T.StringType(), containsNull=False),
                      nullable=True),
        # A row the driver wrote when it rebuilt the quorum from the warehouse (its voters are
        # the new ones, leader_id -1): what it was rebuilt from; null for every other row.
        T.StructField("restored_from", T.StringType(), nullable=True),
    ]
)

# Columns added to a table after it was first created, as (table, column name, SQL type): a
# warehouse written by an older version gets them with ALTER TABLE ... ADD COLUMNS at start-up.
ADDED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    (QUORUM_EVENTS, "voter_directories", "ARRAY<STRING>"),
    (QUORUM_EVENTS, "restored_from", "STRING"),
    (RECORDS, "revision", "BIGINT"),
    (SNAPSHOT, "create_revision", "BIGINT"),
    (SNAPSHOT, "mod_revision", "BIGINT"),
    (SNAPSHOT, "version", "BIGINT"),
    (SNAPSHOT, "lease", "BIGINT"),
)

SCHEMAS = {RECORDS: RECORDS_SCHEMA, SNAPSHOT: SNAPSHOT_SCHEMA, QUORUM_EVENTS: QUORUM_EVENTS_SCHEMA}

# How many recent commits to scan for the last materializer commit before reading all history.
HISTORY_PAGE = 32


def table_path(warehouse: str | os.PathLike[str], table: str) -> str:
    return os.path.join(os.fspath(warehouse), table)


@dataclass(frozen=True, slots=True)
class CommitMetadata:
    """The ``userMetadata`` of one materializer commit."""

    app_id: str
    first_offset: int
    last_offset: int
    high_watermark: int
    # KIP-630: set on the commit that jumped over [first_offset, last_offset] because those
    # records were gone from the quorum's logs: ``<end offset>-<epoch>`` of the snapshot the
    # tables were bootstrapped from (``records`` has no rows for that range).
    bootstrap_snapshot: str | None = None

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "app_id": self.app_id,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "high_watermark": self.high_watermark,
        }
        if self.bootstrap_snapshot is not None:
            data["bootstrap_snapshot"] = self.bootstrap_snapshot
        return json.dumps(data, sort_keys=True)

    @staticmethod
    def parse(text: str | None) -> CommitMetadata | None:
        """The metadata of a materializer commit, or None for any other commit."""
        if not text:
            return None
        try:
            data: Any = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        try:
            return CommitMetadata(
                app_id=str(data.get("app_id", DEFAULT_APP_ID)),
                first_offset=int(data.get("first_offset", -1)),
                last_offset=int(data["last_offset"]),
                high_watermark=int(data.get("high_watermark", -1)),
                bootstrap_snapshot=(
                    str(data["bootstrap_snapshot"]) if "bootstrap_snapshot" in data else None
                ),
            )
        except (KeyError, TypeError, ValueError):
            return None


def materializer_commits(
    spark: SparkSession,
    path: str,
    app_id: str,
    limit: int | None = None,
    others: set[str] | None = None,
) -> list[tuple[int, CommitMetadata]]:
    """(Delta version, metadata) of the materializer's commits among the table's last ``limit``
    commits (all when None), newest first. Other commits (creation, OPTIMIZE, ...) are skipped;
    the app ids of materializer commits for another app id go into ``others`` if given.
    """
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, path).history(limit).select("version", "userMetadata")
    return commits_in_history(((int(r["version"]), r["userMetadata"]) for r in history.collect()),
                              app_id, others)


def commits_in_history(
    history: Iterable[tuple[int, str | None]], app_id: str, others: set[str] | None = None,
) -> list[tuple[int, CommitMetadata]]:
    """``materializer_commits`` of a table history read elsewhere (delta-rs's): the
    ``(version, userMetadata)`` pairs of its commits."""
    found: list[tuple[int, CommitMetadata]] = []
    for version, user_metadata in history:
        meta = CommitMetadata.parse(user_metadata)
        if meta is not None and meta.app_id == app_id:
            found.append((version, meta))
        elif meta is not None and others is not None:
            others.add(meta.app_id)
    found.sort(key=lambda item: item[0], reverse=True)
    return found


class MaterializerError(RuntimeError):
    """The Delta tables are in a state the materializer cannot resume from."""


def foreign_table(path: str, app_id: str, others: set[str]) -> MaterializerError:
    """The error for a table holding other clusters' materializer commits and none of
    ``app_id``'s: resuming at 0 would append this cluster's log on top of their rows."""
    return MaterializerError(
        f"{path} holds rows materialized for txnAppId {', '.join(sorted(others))}, never "
        f"for {app_id!r}: it belongs to another cluster, or this cluster's id changed. "
        "Use an empty warehouse for this cluster, or the cluster id that wrote it"
    )


def next_offset(spark: SparkSession, path: str, app_id: str) -> int:
    """The Raft offset the table at ``path`` holds everything below (0 if none or no table).

    ``last_offset + 1`` of the newest materializer commit in the Delta history; the log's
    transaction state (``txnVersion + 1``) when that commit is no longer in the history.
    """
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        return 0
    commits = materializer_commits(spark, path, app_id, HISTORY_PAGE)
    others: set[str] = set()
    if not commits:
        commits = materializer_commits(spark, path, app_id, None, others)
    if commits:
        return commits[0][1].last_offset + 1
    if others:
        # Resuming at 0 would append this cluster's log on top of another's rows.
        raise foreign_table(path, app_id, others)
    if latest_version(spark, path) <= 0:
        return 0  # created, never written
    # Written to, but the materializer's commits are gone from the readable history (log
    # cleanup after other commits such as OPTIMIZE): the log's transaction state still knows.
    try:
        version = txn_version_from_log(spark, path, app_id)
    except Exception as exc:
        raise MaterializerError(
            f"{path}: no materializer commit (txnAppId {app_id!r}) in the Delta history and "
            "the log's transaction state could not be read"
        ) from exc
    return 0 if version is None else version + 1


def latest_version(spark: SparkSession, path: str) -> int:
    from delta.tables import DeltaTable

    rows = DeltaTable.forPath(spark, path).history(1).select("version").collect()
    return int(rows[0]["version"]) if rows else -1


def txn_version_from_log(spark: SparkSession, path: str, app_id: str) -> int | None:
    """The table's current ``txnVersion`` for ``app_id``, from the Delta log's files.

    Only a fallback for tables whose last materializer commit is no longer in the readable
    history (log cleanup after foreign commits such as OPTIMIZE); the transaction itself
    survives checkpoints. Read with Spark's public JSON and Parquet readers from the log's
    documented format (the Delta protocol: ``txn`` actions in commit files and checkpoints): a
    writer's ``txnVersion`` only grows, so the largest one in the checkpoints and the commit
    files left is the current one.
    """
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    log = f"{path.rstrip('/')}/_delta_log"
    found: list[int] = []
    for reader, pattern in ((spark.read.json, "*.json"), (spark.read.parquet,
                                                            "*.checkpoint*.parquet")):
        try:
            actions = reader(f"{log}/{pattern}")
        except AnalysisException:  # no such files (no checkpoint yet)
            continue
        if "txn" not in actions.columns:
            continue
        row = (actions.where(F.col("txn.appId") == app_id)
               .agg(F.max("txn.version").alias("v")).collect()[0])
        if row["v"] is not None:
            found.append(int(row["v"]))
    return max(found) if found else None
