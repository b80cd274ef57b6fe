"""The Delta materializer against a real Spark + Delta (SPEC §11).

The tables must equal the input log and its replay; every commit is idempotent; a crash between
the three tables' commits neither duplicates nor skips a row on restart; time travel by Raft
offset equals replaying the log up to that offset.
"""

from __future__ import annotations

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
    TableCommit,
    history_of_key,
    snapshot,
    snapshot_version,
)
from kraft_spark.delta.tables import latest_version, table_path, txn_version_from_log
from kraft_spark.raft.records import Batch
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
    assert stats[2].rows == {RECORDS: 7, QUORUM_EVENTS: 0, SNAPSHOT: 6}
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
    assert restarted.last_commit_stats.rows == {SNAPSHOT: 4}  # only the missing table
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
