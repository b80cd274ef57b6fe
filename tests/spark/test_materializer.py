"""The Delta materializer against a real Spark + Delta (docs/concepts/delta-tables.md).

The tables must equal the input log and its replay; every commit is idempotent; a crash between
the three tables' commits neither duplicates nor skips a row on restart; time travel by Raft
offset equals replaying the log up to that offset.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from kraft_spark.delta import (
    QUORUM_EVENTS,
    RECORDS,
    SNAPSHOT,
    TABLES,
    CommitMetadata,
    DeltaMaterializer,
    MaterializerError,
    TableCommit,
    history_of_key,
    rs_merge,
    snapshot,
    snapshot_version,
)
from kraft_spark.delta import materializer as materializer_module
from kraft_spark.delta import table_store as table_store_module
from kraft_spark.delta.materializer import WARM_UP_PREFIX, ResumeMismatch
from kraft_spark.delta.tables import (
    DEFAULT_APP_ID,
    latest_version,
    table_path,
    txn_version_from_log,
)
from kraft_spark.raft.records import Batch, Record
from tests.spark import logdata

pytestmark = pytest.mark.spark

# The fixture log materialized in three calls: (batches slice, high watermark).
CALLS = ((slice(0, 2), 5), (slice(2, 4), 12), (slice(4, None), 16))


class SimulatedCrash(Exception):
    pass


# ---------------------------------------------------------------------------- reading helpers


def read_records(spark: Any, warehouse: Path) -> list[tuple[Any, ...]]:
    from pyspark.sql import functions as F

    df = spark.read.format("delta").load(table_path(warehouse, RECORDS))
    rows = df.select(
        "offset", "epoch", F.unix_millis("timestamp").alias("ts"), "key", "value", "headers"
    ).collect()
    out = [(r.offset, r.epoch, r.ts, r.key, r.value, dict(r.headers)) for r in rows]
    return sorted(out, key=lambda row: row[0])


def read_events(spark: Any, warehouse: Path) -> list[tuple[Any, ...]]:
    from pyspark.sql import functions as F

    df = spark.read.format("delta").load(table_path(warehouse, QUORUM_EVENTS))
    rows = df.select(
        "offset",
        "epoch",
        "leader_id",
        "voters",
        "granting_voters",
        F.unix_millis("timestamp").alias("ts"),
    ).collect()
    return sorted(
        ((r.offset, r.epoch, r.leader_id, list(r.voters), list(r.granting_voters), r.ts))
        for r in rows
    )


def as_state(df: Any) -> dict[str, tuple[Any, ...]]:
    from pyspark.sql import functions as F

    rows = df.select(
        "key", "value", "offset", "epoch", F.unix_millis("timestamp").alias("ts")
    ).collect()
    state = {r.key: (r.value, r.offset, r.epoch, r.ts) for r in rows}
    assert len(state) == len(rows), "duplicate keys in the snapshot"
    return state


def read_snapshot(spark: Any, warehouse: Path) -> dict[str, tuple[Any, ...]]:
    return as_state(spark.read.format("delta").load(table_path(warehouse, SNAPSHOT)))


def commits_of(spark: Any, warehouse: Path, table: str) -> list[CommitMetadata]:
    """The materializer's commits of a table, oldest first."""
    from kraft_spark.delta.tables import DEFAULT_APP_ID, materializer_commits

    found = materializer_commits(spark, table_path(warehouse, table), DEFAULT_APP_ID)
    return [meta for _version, meta in reversed(found)]


def versions(spark: Any, warehouse: Path) -> dict[str, int]:
    return {t: latest_version(spark, table_path(warehouse, t)) for t in TABLES}


def assert_tables_equal_log(spark: Any, warehouse: Path, batches: list[Batch]) -> None:
    assert read_records(spark, warehouse) == logdata.record_rows(batches)
    assert read_events(spark, warehouse) == logdata.event_rows(batches)
    assert read_snapshot(spark, warehouse) == logdata.replay(batches)


# ---------------------------------------------------------------------------- the fixture log


@pytest.fixture(scope="module")
def materialized(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The fixture log written in three calls; returns what the calls returned and did."""
    warehouse = tmp_path_factory.mktemp("materialized")
    batches = logdata.log()
    commits: list[TableCommit] = []
    materializer = DeltaMaterializer(spark, str(warehouse), on_commit=commits.append)
    assert materializer.resume_offset() == 0
    results = []
    stats = []
    for part, hw in CALLS:
        results.append(materializer.write(batches[part], hw))
        stats.append(materializer.last_commit_stats)
    return {
        "warehouse": warehouse,
        "batches": batches,
        "results": results,
        "stats": stats,
        "commits": commits,
        "materializer": materializer,
    }


def test_tables_equal_the_log_and_its_replay(spark: Any, materialized: dict[str, Any]) -> None:
    warehouse, batches = materialized["warehouse"], materialized["batches"]
    assert materialized["results"] == [5, 9, 16]
    assert_tables_equal_log(spark, warehouse, batches)
    # Spot checks of the replay itself: deletes, re-insert after delete, null key, unicode.
    state = read_snapshot(spark, warehouse)
    assert sorted(state) == ["b", "c", "e"]
    assert state["b"][:3] == ('{"v":3}', 10, 2)
    assert state["e"][0] == "[3]"
    rows = read_records(spark, warehouse)
    assert [r[4] for r in rows if r[3] is None] == ['"no key"']
    assert [r[4] for r in rows if r[3] == "d"] == ['{"name":"日本"}', None]
    assert rows[0][5] == {"source": "test", "n": "1", "none": None}
    events = read_events(spark, warehouse)
    assert [(e[0], e[1], e[2], e[4]) for e in events] == [(0, 1, 0, [0, 1]), (8, 2, 1, [1, 2])]


def test_commit_metadata_and_stats(spark: Any, materialized: dict[str, Any]) -> None:
    warehouse = materialized["warehouse"]
    for table in TABLES:
        metas = commits_of(spark, warehouse, table)
        assert [(m.first_offset, m.last_offset, m.high_watermark) for m in metas] == [
            (0, 4, 5),
            (5, 8, 12),
            (9, 15, 16),
        ], table
        assert txn_version_from_log(spark, table_path(warehouse, table), metas[-1].app_id) == 15
    stats = materialized["stats"]
    assert [(s.first_offset, s.end_offset, s.lag_offsets) for s in stats] == [
        (0, 5, 0),
        (5, 9, 3),
        (9, 16, 0),
    ]
    assert stats[0].rows == {RECORDS: 4, QUORUM_EVENTS: 1, SNAPSHOT: 3}
    assert stats[1].rows == {RECORDS: 3, QUORUM_EVENTS: 1, SNAPSHOT: 2}
    # "z", deleted and never written, has no snapshot row: it changes nothing.
    assert stats[2].rows == {RECORDS: 7, QUORUM_EVENTS: 0, SNAPSHOT: 5}
    assert all(s.total_seconds >= sum(s.seconds.values()) for s in stats)
    assert [c.table for c in materialized["commits"]] == list(TABLES) * 3


def test_history_of_key(spark: Any, materialized: dict[str, Any]) -> None:
    rows = history_of_key(spark, materialized["warehouse"], "b").collect()
    assert [(r.offset, r.value) for r in rows] == [(2, '{"v":1}'), (5, None), (10, '{"v":3}')]


@pytest.mark.parametrize("as_of", [0, 3, 4, 10, 15])
def test_time_travel_equals_replay(spark: Any, materialized: dict[str, Any], as_of: int) -> None:
    warehouse, batches = materialized["warehouse"], materialized["batches"]
    assert as_state(snapshot(spark, warehouse, as_of_offset=as_of)) == logdata.replay(
        batches, upto=as_of
    )


def test_time_travel_maps_offsets_to_versions(spark: Any, materialized: dict[str, Any]) -> None:
    warehouse = materialized["warehouse"]
    # Version 0 creates the table; then one version per call, last offsets 4, 8, 15.
    assert snapshot_version(spark, warehouse, 3) is None
    assert snapshot_version(spark, warehouse, 4) == (1, 4)
    assert snapshot_version(spark, warehouse, 14) == (2, 8)
    assert snapshot_version(spark, warehouse, 99) == (3, 15)
    with pytest.raises(ValueError, match="not materialized"):
        snapshot(spark, warehouse, as_of_offset=16)
    with pytest.raises(ValueError, match="negative"):
        snapshot(spark, warehouse, as_of_offset=-1)


def test_writing_the_same_batches_twice_is_a_noop(
    spark: Any, materialized: dict[str, Any]
) -> None:
    warehouse, batches = materialized["warehouse"], materialized["batches"]
    before = versions(spark, warehouse)
    # The same materializer, and a restarted one that reads its offsets back from Delta.
    assert materialized["materializer"].write(batches, 16) == 16
    restarted = DeltaMaterializer(spark, str(warehouse))
    assert restarted.table_offsets() == dict.fromkeys(TABLES, 16)
    assert restarted.write(batches, 16) == 16
    assert restarted.write(batches[4:], 20) == 16
    assert versions(spark, warehouse) == before
    assert_tables_equal_log(spark, warehouse, batches)


def test_gap_and_high_watermark_checks(spark: Any, materialized: dict[str, Any]) -> None:
    batches = materialized["batches"]
    restarted = DeltaMaterializer(spark, str(materialized["warehouse"]))
    later = [logdata.data(17, 2, ("x", "1"))]
    with pytest.raises(ValueError, match="gap"):
        restarted.write(later, 100)
    with pytest.raises(ValueError, match="high watermark"):
        restarted.write([logdata.data(16, 2, ("x", "1"))], 16)
    with pytest.raises(ValueError, match="contiguous"):
        restarted.write([batches[0], batches[2]], 100)
    with pytest.raises(ValueError, match="high watermark"):
        restarted.write(batches, 15)
    assert restarted.resume_offset() == 16


def test_gap_on_a_fresh_warehouse(spark: Any, tmp_path: Path) -> None:
    materializer = DeltaMaterializer(spark, str(tmp_path))
    assert materializer.resume_offset() == 0
    assert materializer.write([], 0) == 0
    with pytest.raises(ValueError, match="gap: the first batch starts at offset 1"):
        materializer.write(logdata.log()[1:2], 10)
    assert not any(tmp_path.iterdir()), "a rejected write must not create tables"


def test_tables_stay_readable_by_other_delta_readers(
    spark: Any, materialized: dict[str, Any]
) -> None:
    warehouse = materialized["warehouse"]
    for table in TABLES:
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{table_path(warehouse, table)}`").first()
        assert detail.minReaderVersion == 1, table
        assert detail.minWriterVersion <= 2, table
        features = set(detail.tableFeatures or [])
        assert not features & {"deletionVectors", "columnMapping", "v2Checkpoint"}, features
        assert detail.properties["delta.enableDeletionVectors"] == "false"
        if table == QUORUM_EVENTS:
            # Calls without events commit no data file (zero-partition append): one file per
            # call that had events.
            assert detail.numFiles == 2


# ---------------------------------------------------------------------------- crashes, races


def crash_after(table: str) -> Any:
    def hook(commit: TableCommit) -> None:
        if commit.table == table:
            raise SimulatedCrash(table)

    return hook


def test_crash_after_records_then_restart_with_more_batches(spark: Any, tmp_path: Path) -> None:
    batches = logdata.log()
    first = batches[:3]  # offsets 0..7
    crashing = DeltaMaterializer(spark, str(tmp_path), on_commit=crash_after(RECORDS))
    with pytest.raises(SimulatedCrash):
        crashing.write(first, 8)
    # Really committed: records only.
    assert read_records(spark, tmp_path) == logdata.record_rows(first)
    restarted = DeltaMaterializer(spark, str(tmp_path))
    assert restarted.table_offsets() == {RECORDS: 8, QUORUM_EVENTS: 0, SNAPSHOT: 0}
    assert restarted.resume_offset() == 0
    # The observer re-sends from the resume offset, now with more of the log (other grouping).
    assert restarted.write(batches, 16) == 16
    assert_tables_equal_log(spark, tmp_path, batches)
    assert [(m.first_offset, m.last_offset) for m in commits_of(spark, tmp_path, RECORDS)] == [
        (0, 7),
        (8, 15),
    ]
    for table in (QUORUM_EVENTS, SNAPSHOT):
        metas = commits_of(spark, tmp_path, table)
        assert [(m.first_offset, m.last_offset) for m in metas] == [(0, 15)]


def test_crash_after_quorum_events_then_same_batches(spark: Any, tmp_path: Path) -> None:
    batches = logdata.log()
    first = batches[:4]  # offsets 0..8, ends with a leader change
    crashing = DeltaMaterializer(spark, str(tmp_path), on_commit=crash_after(QUORUM_EVENTS))
    with pytest.raises(SimulatedCrash):
        crashing.write(first, 9)
    restarted = DeltaMaterializer(spark, str(tmp_path))
    assert restarted.table_offsets() == {RECORDS: 9, QUORUM_EVENTS: 9, SNAPSHOT: 0}
    assert restarted.write(first, 9) == 9
    assert_tables_equal_log(spark, tmp_path, first)
    assert restarted.last_commit_stats is not None
    # Only the missing table; "b", written and deleted within the range, has no row.
    assert restarted.last_commit_stats.rows == {SNAPSHOT: 3}
    # And the log goes on from there.
    assert restarted.write(batches[4:], 16) == 16
    assert_tables_equal_log(spark, tmp_path, batches)


def test_a_stale_writer_is_skipped_by_the_delta_transaction(spark: Any, tmp_path: Path) -> None:
    """Two materializers on one warehouse, the second with offsets read before the first wrote:
    our own bookkeeping lets the second commit again, and Delta's txnAppId/txnVersion check
    (appends and MERGE alike) turns those commits into no-ops."""
    batches = logdata.log()[:2]
    stale = DeltaMaterializer(spark, str(tmp_path))
    assert stale.resume_offset() == 0
    assert DeltaMaterializer(spark, str(tmp_path)).write(batches, 5) == 5
    before = versions(spark, tmp_path)
    assert stale.write(batches, 5) == 5
    assert stale.last_commit_stats is not None
    assert stale.last_commit_stats.rows == {RECORDS: 4, QUORUM_EVENTS: 1, SNAPSHOT: 3}
    assert versions(spark, tmp_path) == before
    assert_tables_equal_log(spark, tmp_path, batches)


# ------------------------------------------------------------- in-process and Spark commits


def test_appends_through_spark_equal_in_process_appends(spark: Any, tmp_path: Path) -> None:
    """The Spark path (a warehouse that is not local) writes the same tables, and a warehouse
    can switch between the two paths across restarts."""
    batches = logdata.log()
    via_spark = DeltaMaterializer(spark, str(tmp_path), in_process=False)
    assert not via_spark.in_process
    assert via_spark.write(batches[:2], 5) == 5
    direct = DeltaMaterializer(spark, str(tmp_path))
    assert direct.in_process
    assert DeltaMaterializer(spark, tmp_path.as_uri()).in_process  # file: is delta-rs's too
    # A URI delta-rs does not open (Hadoop's legacy Azure driver) stays on Spark.
    assert not DeltaMaterializer(spark, "wasbs://c@a.blob.core.windows.net/w").in_process
    with pytest.raises(MaterializerError, match="delta-rs opens no such URI"):
        DeltaMaterializer(spark, "wasbs://c@a.blob.core.windows.net/w", in_process=True)
    assert direct.write(batches[:4], 12) == 9
    assert DeltaMaterializer(spark, str(tmp_path), in_process=False).write(batches, 16) == 16
    assert_tables_equal_log(spark, tmp_path, batches)
    for table in TABLES:
        metas = commits_of(spark, tmp_path, table)
        assert [(m.first_offset, m.last_offset) for m in metas] == [(0, 4), (5, 8), (9, 15)]
    # The commit in the middle is delta-rs's (rs_append): a WRITE without Spark's metrics.
    assert _write_metrics(spark, tmp_path) == [("1", "4"), None, ("1", "7")]


def _write_metrics(spark: Any, tmp_path: Path) -> list[tuple[str, str] | None]:
    """(numFiles, numOutputRows) of each WRITE commit of ``records``; None: no metrics."""
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table_path(tmp_path, RECORDS)}`")
    return [
        None if r.operationMetrics is None
        else (r.operationMetrics["numFiles"], r.operationMetrics["numOutputRows"])
        for r in history.orderBy("version").collect()
        if r.operation == "WRITE"
    ]


def test_in_process_append_files_and_statistics(spark: Any, tmp_path: Path) -> None:
    """Parquet as Spark writes it (INT64 UTC microseconds, required columns), file statistics
    that data skipping may trust, WRITE commits with the transaction and userMetadata."""
    import pyarrow.parquet as pq

    batches = logdata.log()
    materializer = DeltaMaterializer(spark, str(tmp_path))
    materializer.write(batches[:4], 12)
    materializer.write(batches[4:], 16)
    files = sorted((tmp_path / RECORDS).glob("*.parquet"))
    assert len(files) == 2
    schema = pq.read_schema(files[0])
    assert str(schema.field("timestamp").type) == "timestamp[us, tz=UTC]"
    assert not schema.field("offset").nullable and schema.field("key").nullable
    log_dir = tmp_path / RECORDS / "_delta_log"
    actions = [json.loads(line) for line in (log_dir / f"{2:020d}.json").read_text().splitlines()]
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "WRITE"
    assert CommitMetadata.parse(info["userMetadata"]) == CommitMetadata(DEFAULT_APP_ID, 9, 15, 16)
    assert next(a["txn"] for a in actions if "txn" in a)["version"] == 15
    add = next(a["add"] for a in actions if "add" in a)
    stats = json.loads(add["stats"])
    assert stats["numRecords"] == 7
    assert (stats["minValues"]["offset"], stats["maxValues"]["offset"]) == (9, 15)
    assert stats["minValues"]["timestamp"] == "2023-11-14T22:13:20.090Z"
    assert stats["nullCount"]["value"] == 3
    # Filters that data skipping answers from those statistics.
    records = spark.read.format("delta").load(table_path(tmp_path, RECORDS))
    assert records.where("offset >= 12").count() == 4
    assert records.where("offset < 9").count() == 7
    assert records.where("timestamp > timestamp_millis(1700000000100)").count() == 5
    assert records.where("value IS NULL").count() == 4


def _clear_delta_log_cache(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


def test_a_racing_writer_makes_a_delta_rs_append_check_again_not_duplicate(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer commits the same appId between our read of the transaction version and
    our delta-rs commit: ours fails for its version (max_commit_retries=0) and the check made
    again finds the range committed (same app id, same range): skipped, not appended twice;
    a different range would raise ResumeMismatch."""
    batches = logdata.log()
    ours = DeltaMaterializer(spark, str(tmp_path))
    other = DeltaMaterializer(spark, str(tmp_path))
    assert ours.in_process
    assert ours.write(batches[:2], 5) == 5
    other.table_offsets()
    read_version = rs_merge.recorded_txn_version
    raced: list[int] = []

    def racing(table: Any, app_id: str) -> int:
        version = read_version(table, app_id)
        if not raced:
            raced.append(version)
            other.write(batches[:4], 9, (RECORDS,))  # commits offsets 5..8 first
        return version

    monkeypatch.setattr(rs_merge, "recorded_txn_version", racing)
    assert ours.write(batches[:4], 9, (RECORDS,)) == 5  # records at 9; the others at 5
    monkeypatch.undo()
    assert raced == [4]
    assert read_records(spark, tmp_path) == logdata.record_rows(batches[:4])
    assert len(commits_of(spark, tmp_path, RECORDS)) == 2
    assert len(list((tmp_path / RECORDS).glob("*.parquet"))) == 2  # ours, refused: removed
    assert ours.write(batches, 16) == 16
    assert_tables_equal_log(spark, tmp_path, batches)


@pytest.mark.parametrize("in_process", [True, False], ids=["delta-rs", "spark"])
def test_a_stale_writer_grouping_differently_fails_not_duplicates(
    spark: Any, tmp_path: Path, in_process: bool
) -> None:
    """A writer whose cached offsets are stale commits a range that overlaps what the table
    holds: Delta's own check (skip only if txnVersion <= recorded) would let it through and
    duplicate the overlap, so the commit must start right after the recorded version (read by
    delta-rs in process, from the table's history through Spark)."""
    batches = logdata.log()
    current = DeltaMaterializer(spark, str(tmp_path))
    assert current.write(batches[:2], 5) == 5
    stale = DeltaMaterializer(spark, str(tmp_path), in_process=in_process)
    stale._next = dict.fromkeys(TABLES, 0)  # as if read before the first commit
    before = versions(spark, tmp_path)
    with pytest.raises(ResumeMismatch, match=r"records: the table holds offsets below 5 .* 0-8"):
        stale.write(batches[:4], 9)
    assert versions(spark, tmp_path) == before
    # The failed call dropped its cached offsets: the next one re-reads them and goes on.
    assert stale.write(batches, 16) == 16
    assert_tables_equal_log(spark, tmp_path, batches)


def test_snapshot_merges_in_delta_rs_keep_the_checks(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local warehouse's ``snapshot`` MERGE runs in delta-rs, never as a Spark job, with the
    Spark path's checks: a retry is skipped, a stale writer grouping differently fails and
    commits nothing."""
    batches = logdata.log()
    current = DeltaMaterializer(spark, str(tmp_path))
    assert current.in_process
    assert current.write(batches[:2], 5) == 5

    def no_spark_merge(*args: Any) -> None:
        raise AssertionError("a Spark MERGE ran on a local warehouse")

    monkeypatch.setattr(materializer_module, "merge_snapshot", no_spark_merge)
    stale = DeltaMaterializer(spark, str(tmp_path))
    stale._next = dict.fromkeys(TABLES, 0)  # as if read before the first commit
    before = versions(spark, tmp_path)
    with pytest.raises(ResumeMismatch, match=r"snapshot: the table holds offsets below 5 .* 0-8"):
        stale.write(batches[:4], 9, tables=[SNAPSHOT])
    assert versions(spark, tmp_path) == before
    current.write(batches[2:4], 9, tables=[SNAPSHOT])
    assert current.table_offsets()[SNAPSHOT] == 9
    again = DeltaMaterializer(spark, str(tmp_path))
    again._next = {**dict.fromkeys(TABLES, 5), SNAPSHOT: 5}  # the same commit once more
    again.write(batches[2:4], 9, tables=[SNAPSHOT])  # landed before: skipped
    assert versions(spark, tmp_path)[SNAPSHOT] == before[SNAPSHOT] + 1
    monkeypatch.undo()
    assert current.write(batches, 16) == 16
    assert_tables_equal_log(spark, tmp_path, batches)


def test_a_history_read_racing_a_commit_is_not_cached(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One thread reads a table's offset from Delta (seconds) while the table's own thread
    commits it and fails: the slow read's figure is stale and must not be cached, or the
    owning thread would start again from offsets it already committed."""
    batches = logdata.log()
    materializer = DeltaMaterializer(spark, str(tmp_path))
    assert materializer.write(batches[:2], 5) == 5
    materializer._drop_next(RECORDS)  # as after a failed records commit
    read = materializer._read_next_offset
    raced: list[str] = []

    def slow_read(table: str) -> int:
        offset = read(table)
        if table == RECORDS and not raced:
            raced.append(table)
            # Meanwhile the records thread commits up to 9, then its next call fails.
            assert materializer.write(batches[:4], 9, (RECORDS,)) == 5
            materializer._drop_next(RECORDS)
        return offset

    monkeypatch.setattr(materializer, "_read_next_offset", slow_read)
    assert materializer.table_offsets()[RECORDS] == 5  # the stale figure, returned not cached
    monkeypatch.undo()
    assert materializer.table_offsets()[RECORDS] == 9
    assert materializer.write(batches, 16) == 16
    assert_tables_equal_log(spark, tmp_path, batches)


def test_in_process_appends_are_durable_before_and_after_their_commit(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each table's creation is durable (its first commit, _delta_log, the table's own entry
    in the warehouse: delta-rs fsyncs none of them). The Parquet file (and its directory
    entry) is fsync'd before the commit that adds it, and the commit file (and _delta_log)
    before the next commit starts."""
    make_durable = table_store_module.make_durable
    records = tmp_path / RECORDS
    seen: list[tuple[str, list[str]]] = []  # (path, the records commits at that moment)

    def recording(file: str, directory: str) -> None:
        commits = sorted(p.name for p in (records / "_delta_log").glob("*.json"))
        seen.extend((path, commits) for path in (file, directory))
        make_durable(file, directory)

    materializer = DeltaMaterializer(spark, str(tmp_path))
    monkeypatch.setattr(table_store_module, "make_durable", recording)
    materializer.prepare()
    created, commit = (f"{v:020d}.json" for v in (0, 1))
    paths = [path for path, _ in seen]
    for table in TABLES:
        log_dir = tmp_path / table / "_delta_log"
        made = [str(log_dir / created), str(log_dir), str(log_dir), str(tmp_path / table),
                str(tmp_path / table), str(tmp_path)]
        first = paths.index(made[0])
        assert paths[first:first + len(made)] == made, table
    seen.clear()
    materializer.write(logdata.log()[:2], 5, (RECORDS,))
    data_file = next(records.glob("*.parquet"))
    assert seen == [
        (str(data_file), [created]),  # before the commit
        (str(records), [created]),
        (str(records / "_delta_log" / commit), [created, commit]),  # before any other
        (str(records / "_delta_log"), [created, commit]),
    ]


@pytest.mark.parametrize("in_process", [True, False], ids=["delta-rs", "spark"])
def test_a_warehouse_of_another_cluster_is_refused(
    spark: Any, tmp_path: Path, in_process: bool
) -> None:
    """Resuming at offset 0 on tables another cluster (app id) wrote would append this log on
    top of its rows: refused, naming both ids, whichever side reads the offsets."""
    batches = logdata.log()
    DeltaMaterializer(spark, str(tmp_path), app_id="cluster-a").write(batches[:2], 5)
    other = DeltaMaterializer(spark, str(tmp_path), app_id="cluster-b", in_process=in_process)
    with pytest.raises(MaterializerError, match=r"cluster-a, never for 'cluster-b'"):
        other.resume_offset()
    with pytest.raises(MaterializerError, match="another cluster"):
        other.write(batches, 16)
    assert read_records(spark, tmp_path) == logdata.record_rows(batches[:2])


# ---------------------------------------------------------------------------- threads, start-up


def test_disjoint_tables_from_two_threads(spark: Any, tmp_path: Path) -> None:
    """records committed call by call on one thread while quorum_events and snapshot follow
    on another (the driver's layout), on one materializer."""
    batches = logdata.log()
    materializer = DeltaMaterializer(spark, str(tmp_path))
    materializer.prepare()
    errors: list[BaseException] = []

    def run(tables: tuple[str, ...], step: int) -> None:
        try:
            done = 0
            while done < len(batches):
                done = min(len(batches), done + step)
                part = batches[:done]
                start = materializer.resume_offset(tables)
                sent = [b for b in part if b.next_offset > start]
                materializer.write(sent, part[-1].next_offset, tables)
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=((RECORDS,), 1)),
        threading.Thread(target=run, args=((QUORUM_EVENTS, SNAPSHOT), 3)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not errors, errors
    assert materializer.table_offsets() == dict.fromkeys(TABLES, 16)
    assert_tables_equal_log(spark, tmp_path, batches)
    assert len(commits_of(spark, tmp_path, RECORDS)) == len(batches)
    assert DeltaMaterializer(spark, str(tmp_path)).table_offsets() == dict.fromkeys(TABLES, 16)


def test_prepare_and_warm_up(spark: Any, tmp_path: Path) -> None:
    """warm_up() works on scratch tables and leaves nothing behind (a crashed one's leftovers
    included); prepare() creates the tables, then reads the offsets back. (Through Spark,
    prepare() is checked by the next test: a rehearsal of Spark's appends costs ~20 s.)"""
    leftover = tmp_path / f"{WARM_UP_PREFIX}crashed"
    (leftover / "records").mkdir(parents=True)
    materializer = DeltaMaterializer(spark, str(tmp_path))
    assert materializer.warm_up() > 0
    assert list(tmp_path.iterdir()) == []
    assert materializer.prepare() == dict.fromkeys(TABLES, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(TABLES)
    assert versions(spark, tmp_path) == dict.fromkeys(TABLES, 0)
    batches = logdata.log()
    assert materializer.write(batches[:2], 5) == 5
    assert DeltaMaterializer(spark, str(tmp_path)).prepare() == dict.fromkeys(TABLES, 5)


def test_tables_created_by_delta_rs_equal_those_spark_creates(
    spark: Any, tmp_path: Path
) -> None:
    """A local warehouse's tables are created by delta-rs (no Delta class loading in the
    driver's JVM at start-up): same schema, nullability, properties and protocol as Delta's
    Spark API makes them for a warehouse URI."""
    made = {}
    for in_process in (True, False):
        warehouse = tmp_path / ("rs" if in_process else "spark")
        assert DeltaMaterializer(spark, str(warehouse), in_process=in_process).prepare() == \
            dict.fromkeys(TABLES, 0)
        made[in_process] = {
            table: (
                spark.read.format("delta").load(table_path(warehouse, table)).schema,
                spark.sql(f"DESCRIBE DETAIL delta.`{table_path(warehouse, table)}`")
                .select("properties", "minReaderVersion", "minWriterVersion").first(),
            )
            for table in TABLES
        }
    assert made[True] == made[False]
    assert made[True][RECORDS][1]["properties"]["delta.checkpointInterval"] == "100"


def test_checkpoint_when_due(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """delta-rs writes the checkpoint on demand, made durable here (delta-rs fsyncs nothing):
    the checkpoint, then ``_last_checkpoint`` that names it. Spark reads the table from it and
    the offsets resume. Through Spark (a URI delta-rs does not open) the checkpoints are
    Delta's automatic ones: ``checkpoint`` does nothing."""
    batches = logdata.log()
    assert DeltaMaterializer(spark, str(tmp_path / "spark"), in_process=False).checkpoint(
        RECORDS, min_commits=0) is None
    materializer = DeltaMaterializer(spark, str(tmp_path))
    assert materializer.checkpoint(RECORDS) is None  # no table yet
    for i in range(1, len(batches) + 1):
        materializer.write(batches[:i], batches[i - 1].next_offset, (RECORDS,))
    # Versions 0 (creation) .. 7; no checkpoint yet (the automatic one is every 100 commits).
    log_dir = tmp_path / RECORDS / "_delta_log"
    assert not list(log_dir.glob("*.checkpoint.parquet"))
    assert materializer.checkpoint(RECORDS, min_commits=10) is None
    synced: list[str] = []
    real_fsync = table_store_module.RealFileSystem.fsync

    def recording_fsync(fs: Any, path: str) -> None:
        synced.append(path)
        real_fsync(fs, path)

    monkeypatch.setattr(table_store_module.RealFileSystem, "fsync", recording_fsync)
    assert materializer.checkpoint(RECORDS, min_commits=5) == 7
    monkeypatch.undo()
    assert (log_dir / f"{7:020d}.checkpoint.parquet").is_file()
    assert synced == [str(log_dir / f"{7:020d}.checkpoint.parquet"),
                      str(log_dir / "_last_checkpoint")]
    assert materializer.checkpoint(RECORDS, min_commits=1) is None  # nothing since
    _clear_delta_log_cache(spark)
    assert read_records(spark, tmp_path) == logdata.record_rows(batches)
    assert DeltaMaterializer(spark, str(tmp_path)).table_offsets()[RECORDS] == 16


def _data_files(spark: Any, warehouse: Path, table: str, version: int | None = None) -> int:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return len(reader.load(table_path(warehouse, table)).inputFiles())


def test_compaction_keeps_rows_offsets_and_time_travel(spark: Any, tmp_path: Path) -> None:
    # A path with a space: delta-rs lists local files percent-encoded, and the compaction's
    # new files must still be found and fsync'd (it raised FileNotFoundError after committing).
    warehouse = tmp_path / "my warehouse"
    batches = logdata.log()
    materializer = DeltaMaterializer(spark, str(warehouse))
    assert materializer.compact(RECORDS, min_files=1) is None  # no table yet
    for i in range(1, len(batches) + 1):
        materializer.write(batches[:i], batches[i - 1].next_offset, (RECORDS,))
    path = table_path(warehouse, RECORDS)
    before = latest_version(spark, path)
    files = _data_files(spark, warehouse, RECORDS)
    assert files >= 3  # one small file per commit that had records
    # Counted and compacted by delta-rs in this process: no Spark job, due or not.
    group = f"compact-probe-{id(materializer)}"
    spark.sparkContext.setJobGroup(group, "compact")
    try:
        assert materializer.compact(RECORDS, min_files=1000) is None
        assert materializer.compact(RECORDS, min_files=files + 1) is None  # not due
        assert materializer.compact(RECORDS, min_files=0) is None  # disabled
        done = materializer.compact(RECORDS, min_files=files)
    finally:
        spark.sparkContext.setJobGroup(None, None)  # type: ignore[arg-type]
    assert list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []
    assert done is not None
    assert (done.table, done.files_before, done.files_removed, done.files_added) == (
        RECORDS, files, files, 1)
    assert latest_version(spark, path) == before + 1
    assert _data_files(spark, warehouse, RECORDS) == 1
    _clear_delta_log_cache(spark)
    assert read_records(spark, warehouse) == logdata.record_rows(batches)
    # The OPTIMIZE commit carries no offset: the table still resumes where it did.
    assert DeltaMaterializer(spark, str(warehouse)).table_offsets()[RECORDS] == 16
    # Time travel before the compaction reads the old files, which are still there.
    assert _data_files(spark, warehouse, RECORDS, version=before) == files
    old = spark.read.format("delta").option("versionAsOf", before).load(path)
    assert old.count() == len(logdata.record_rows(batches))
    # Once compacted, one file is not due again.
    assert materializer.compact(RECORDS, min_files=2) is None


def test_a_compactions_own_files_are_not_rewritten_or_counted_again(
        spark: Any, tmp_path: Path) -> None:
    """A compaction rewrites the files under ``spark.databricks.delta.optimize.minFileSize``
    (conf/spark-defaults.conf: 64 MiB; Delta's default, 1 GiB, made every compaction rewrite
    the files the earlier ones wrote, hence the whole table). Here the threshold is scaled to
    the first compaction's file (made large by one large value): the second leaves that file
    alone, and it does not count towards the second's ``min_files`` either."""
    import random

    from deltalake import DeltaTable

    def files() -> dict[str, int]:
        actions = DeltaTable(table_path(tmp_path, RECORDS)).get_add_actions(flatten=True)
        return dict(zip(actions.column("path").to_pylist(),
                        actions.column("size_bytes").to_pylist(), strict=True))

    large = random.Random(7).randbytes(16_000).hex()  # hardly compressible
    batches = [logdata.data(0, 1, ("big", large)),
               *(logdata.data(i, 1, (f"k{i}", str(i))) for i in range(1, 7))]
    materializer = DeltaMaterializer(spark, str(tmp_path))
    for i in range(1, 4):
        materializer.write(batches[:i], batches[i - 1].next_offset, (RECORDS,))
    first = materializer.compact(RECORDS, min_files=2)
    assert first is not None and (first.files_removed, first.files_added) == (3, 1)
    [(compacted, size)] = files().items()
    spark.conf.set("spark.databricks.delta.optimize.minFileSize", str(size))
    try:
        for i in range(4, len(batches) + 1):
            materializer.write(batches[:i], batches[i - 1].next_offset, (RECORDS,))
        new = {p: n for p, n in files().items() if p != compacted}
        assert len(new) == 4 and sum(new.values()) < size  # what the second may rewrite
        assert materializer.compact(RECORDS, min_files=len(new) + 1) is None  # kept: not due
        second = materializer.compact(RECORDS, min_files=len(new))
        assert second is not None
        assert (second.files_before, second.files_removed, second.files_added) == (
            len(new) + 1, len(new), 1)
        assert compacted in files() and len(files()) == 2
    finally:
        spark.conf.unset("spark.databricks.delta.optimize.minFileSize")
    _clear_delta_log_cache(spark)
    assert read_records(spark, tmp_path) == logdata.record_rows(batches)


def test_compaction_while_records_are_appended(spark: Any, tmp_path: Path) -> None:
    """Compaction on one thread while the other commits records call by call (blind appends):
    neither fails, no row is lost or doubled."""
    batches = logdata.log()
    materializer = DeltaMaterializer(spark, str(tmp_path))
    materializer.prepare()
    errors: list[BaseException] = []
    appended = threading.Event()
    compactions: list[Any] = []

    def append() -> None:
        try:
            for i in range(1, len(batches) + 1):
                materializer.write(batches[:i], batches[i - 1].next_offset, (RECORDS,))
        except BaseException as exc:
            errors.append(exc)
        finally:
            appended.set()

    def compact() -> None:
        try:
            while not appended.is_set():
                done = materializer.compact(RECORDS, min_files=2)
                if done is not None:
                    compactions.append(done)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=append), threading.Thread(target=compact)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not errors, errors
    assert compactions, "no compaction ran while the records were appended"
    _clear_delta_log_cache(spark)
    assert read_records(spark, tmp_path) == logdata.record_rows(batches)
    assert len(commits_of(spark, tmp_path, RECORDS)) == len(batches)
    assert DeltaMaterializer(spark, str(tmp_path)).table_offsets()[RECORDS] == 16


# ---------------------------------------------------------------------------- KIP-630 bootstrap


def test_bootstrap_from_a_snapshot_records_the_gap_and_continues(
    spark: Any, tmp_path: Path
) -> None:
    """The log lost offsets 8..11 to retention before they were materialized: the tables jump
    to the snapshot ending at 12, ``snapshot`` equals its content (with the revision columns:
    the snapshot's own entries, back-filled into a row of the older schema that is unchanged
    since), the gap is in the commits' userMetadata, and materialization continues after it."""
    from kraft_spark.delta.bootstrap import bootstrap_from_snapshot
    from kraft_spark.raft.log_api import OffsetAndEpoch
    from kraft_spark.state.machine import KeyValueState

    batches = logdata.log()
    warehouse = tmp_path / "wh"
    reported: list[Any] = []
    mat = DeltaMaterializer(spark, str(warehouse), on_commit=reported.append)
    mat.write(batches[:3], 8)
    # As an older version left them ("d", written at 6, is unchanged up to the snapshot).
    spark.sql(f"UPDATE delta.`{table_path(warehouse, SNAPSHOT)}` SET create_revision = NULL, "
              "mod_revision = NULL, version = NULL, lease = NULL")
    state = KeyValueState()
    state.apply_all(batches[:5])
    sid = OffsetAndEpoch(state.applied_offset, state.applied_epoch)
    assert sid == OffsetAndEpoch(12, 2)
    reported.clear()
    jumped = bootstrap_from_snapshot(mat, sid, state.items(), 12)
    assert jumped == dict.fromkeys(TABLES, 8)
    # Each jump reported as any commit is (the driver's table-offset metric follows it).
    assert sorted((c.table, c.first_offset, c.last_offset) for c in reported) == sorted(
        (t, 8, 11) for t in TABLES)
    assert mat.table_offsets() == dict.fromkeys(TABLES, 12)
    assert read_snapshot(spark, warehouse) == logdata.replay(batches[:5])
    assert _revisions(spark, warehouse) == _entries(state)  # the snapshot's own entries
    gap = commits_of(spark, warehouse, RECORDS)[-1]
    assert (gap.first_offset, gap.last_offset, gap.bootstrap_snapshot) == (8, 11, "12-2")
    mat.write(batches[5:], 16)
    assert read_snapshot(spark, warehouse) == logdata.replay(batches)
    state.apply_all(batches[5:])
    assert _revisions(spark, warehouse) == _entries(state)  # seeded from the bootstrap's rows
    offsets = [row[0] for row in read_records(spark, warehouse)]
    expected = [r[0] for r in logdata.record_rows(batches) if r[0] < 8 or r[0] >= 12]
    assert offsets == expected


def _revisions(spark: Any, warehouse: Path) -> dict[str, tuple[int, int, int, int]]:
    rows = spark.read.format("delta").load(table_path(warehouse, SNAPSHOT)).collect()
    return {r.key: (r.create_revision, r.mod_revision, r.version, r.lease) for r in rows}


def _entries(state: Any) -> dict[str, tuple[int, int, int, int]]:
    return {k.decode(): (e.create_offset, e.offset, e.version, e.lease) for k, e in state.items()}


@pytest.mark.parametrize("in_process", [True, False], ids=["delta-rs", "spark"])
def test_an_older_warehouse_gets_the_new_columns_and_keeps_its_rows(
    spark: Any, tmp_path: Path, in_process: bool
) -> None:
    """Tables of a warehouse created before ``voter_directories`` (quorum_events) and the
    revision columns (records, snapshot) existed: start-up adds the columns (older rows read
    null), and the next commits fill them."""
    import datetime
    import uuid

    from pyspark.sql import types as T

    from kraft_spark.delta.tables import QUORUM_EVENTS_SCHEMA
    from kraft_spark.raft.voter_records import voters_batch
    from kraft_spark.raft.voter_set import Voter, VoterSet, directory_text
    from tests.delta.test_snapshot_revisions import old_table

    # Offsets 0-1 (a leader change, a write of "old") as the older version wrote them.
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    path = table_path(tmp_path, QUORUM_EVENTS)
    (spark.createDataFrame([(0, 1, 0, [0], [0], when)], T.StructType(
        QUORUM_EVENTS_SCHEMA.fields[:-2])).write.format("delta")
     .option("txnAppId", DEFAULT_APP_ID).option("txnVersion", "1")
     .option("userMetadata", CommitMetadata(DEFAULT_APP_ID, 0, 1, 2).to_json()).save(path))
    old_table(tmp_path, RECORDS, [(1, 1, 1000, "old", "1", {})], 1)  # no Spark job
    old_table(tmp_path, SNAPSHOT, [("old", "1", 1, 1, 1000)], 1)
    materializer = DeltaMaterializer(spark, str(tmp_path), in_process=in_process)
    assert materializer.prepare() == dict.fromkeys(TABLES, 2)
    assert spark.read.format("delta").load(path).schema.fieldNames()[-2:] == [
        "voter_directories", "restored_from"]
    voters = VoterSet((Voter(0, uuid.UUID(int=5)), Voter(1)))
    written = Batch(3, 1, (Record(b"new", b"2", 1000), Record(b"old", b"3", 1000)))
    materializer.write([voters_batch(2, 1, voters, 1000), written], 5)
    rows = {r.offset: r.voter_directories
            for r in spark.read.format("delta").load(path).collect()}
    assert rows == {0: None, 2: [directory_text(v.directory_id) for v in voters.voters]}
    assert {r.offset: r.revision for r in spark.read.format("delta").load(
        table_path(tmp_path, RECORDS)).collect()} == {1: None, 3: 3, 4: 4}
    # "old": written before, updated since: its creation is unknown; "new": exact.
    assert _revisions(spark, tmp_path) == {"new": (3, 3, 1, 0), "old": (None, 4, None, 0)}


def test_the_snapshot_merge_runs_in_delta_rs_and_spark_reads_it(spark: Any, tmp_path: Path) -> None:
    """A local warehouse's ``snapshot`` MERGE is delta-rs's (no Spark job): its commits say so,
    and Spark reads the table equal to the log's replay (the other tests here check time travel
    and replays over the same path)."""
    from deltalake import DeltaTable as RsTable

    batches = logdata.log()
    materializer = DeltaMaterializer(spark, str(tmp_path))
    materializer.write(batches, CALLS[-1][1])
    assert read_snapshot(spark, tmp_path) == logdata.replay(batches)
    merges = [h for h in RsTable(table_path(tmp_path, SNAPSHOT)).history()
              if h.get("operation") == "MERGE"]
    assert merges and all(str(h.get("clientVersion")).startswith("delta-rs") for h in merges)
    assert json.loads(merges[0]["userMetadata"])["last_offset"] == batches[-1].next_offset - 1
