"""The ``snapshot`` table's MERGE through Delta's public Spark API, for a warehouse only Spark
opens (a local path or a URI delta-rs serves merges with ``rs_merge``, the same conditions).

The transaction (``txnAppId`` / ``txnVersion``) and ``userMetadata`` of a MERGE come from
session confs: they are set on a private session (``merge_session``) and unset afterwards, so
they never reach another writer of the application.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kraft_spark.delta.arrow_rows import MERGE_SOURCE_SCHEMA, arrow_frame

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kraft_spark.delta.tables import CommitMetadata

TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"

# What a later change of a key sets (every column but the key).
UPDATED_COLUMNS = tuple(f.name for f in MERGE_SOURCE_SCHEMA.fields if f.name != "key")
# etcd's view of the key (tables.SNAPSHOT_SCHEMA: added after the first release).
REVISION_COLUMNS = ("create_revision", "mod_revision", "version", "lease")


def merge_session(spark: SparkSession) -> SparkSession:
    """A private session for MERGEs (see the module doc)."""
    session = spark.newSession()
    # The merge source is a local relation (deterministic): no need to materialize it.
    session.conf.set("spark.databricks.delta.merge.materializeSource", "none")
    # A few hundred keys at most per call: one task per stage is plenty (4 shuffle partitions
    # and a local relation of defaultParallelism slices made 5 tasks of every stage).
    session.conf.set("spark.sql.shuffle.partitions", "1")
    return session


def merge_snapshot(session: SparkSession, path: str, data: list[tuple[Any, ...]],
                   meta: CommitMetadata) -> None:
    """MERGE ``data`` (``MERGE_SOURCE_SCHEMA`` rows, one per key; a null value deletes the key)
    into the ``snapshot`` table at ``path`` as the commit ``meta``."""
    from delta.tables import DeltaTable

    source = arrow_frame(session, MERGE_SOURCE_SCHEMA, data).coalesce(1)
    target = DeltaTable.forPath(session, path)
    set_commit_confs(session, meta)
    try:
        (
            target.alias("t")
            .merge(source.alias("s"), "t.key = s.key")
            # `t.offset < s.offset` makes a replayed change a no-op even without the txn.
            .whenMatchedDelete(condition="s.value IS NULL AND t.offset < s.offset")
            .whenMatchedUpdate(
                condition="s.value IS NOT NULL AND t.offset < s.offset",
                set={c: f"s.`{c}`" for c in UPDATED_COLUMNS},
            )
            .whenNotMatchedInsert(
                condition="s.value IS NOT NULL",
                values={c: f"s.`{c}`" for c in MERGE_SOURCE_SCHEMA.fieldNames()},
            )
            .execute()
        )
    finally:
        unset_commit_confs(session)


def set_commit_confs(session: SparkSession, meta: CommitMetadata) -> None:
    session.conf.set(TXN_APP_ID_CONF, meta.app_id)
    session.conf.set(TXN_VERSION_CONF, str(meta.last_offset))
    session.conf.set(USER_METADATA_CONF, meta.to_json())


def unset_commit_confs(session: SparkSession) -> None:
    for key in (TXN_APP_ID_CONF, TXN_VERSION_CONF, USER_METADATA_CONF):
        session.conf.unset(key)
