"""Rebuilding a quorum's log from a real Delta warehouse (kraft_spark/warehouse/restore.py):
the restore snapshot holds exactly the replay of the committed log, it starts from a Raft
snapshot stored in ``_raft_snapshots`` when there is one, it refuses (naming the offsets) when
the tables recorded a high watermark they do not hold, and an unusable warehouse URI is named
with its cause."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kraft_spark.delta import DeltaMaterializer
from kraft_spark.delta.tables import QUORUM_EVENTS, RECORDS, SNAPSHOT
from kraft_spark.log.fs import RealFileSystem
from kraft_spark.state.machine import KeyValueState
from kraft_spark.state.snapshot_file import SnapshotId, decode_snapshot, encode_snapshot
from kraft_spark.state.snapshot_store import FileSnapshotStore
from kraft_spark.warehouse.location import WarehouseError, WarehouseFiles, check_writable
from kraft_spark.warehouse.restore import build_restore, record_restore, warehouse_plan
from kraft_spark.warehouse.restore_plan import RestorePlan, RestoreRefused
from kraft_spark.warehouse.snapshot_copies import SNAPSHOT_DIR, SnapshotCopier, stored_ids
from tests.spark import logdata

pytestmark = pytest.mark.spark
APP = "restore-test"


def _replay(batches: list[Any]) -> KeyValueState:
    state = KeyValueState()
    state.apply_all(batches)
    return state


@pytest.fixture(params=["delta-rs", "spark"])
def read_as(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The warehouse as the restore is given it: a plain path (read by delta-rs in this
    process) or a ``file:`` URI (read through Spark, as an ``s3a:`` or ``hdfs:`` one is)."""
    return str(tmp_path) if request.param == "delta-rs" else tmp_path.as_uri()


def _content(restored: Any) -> dict[bytes, Any]:
    content = decode_snapshot(restored.data, restored.snapshot_id, "restore")
    return dict(content.entries)


def test_the_restore_snapshot_is_the_replay_of_the_committed_log(
        spark: Any, tmp_path: Path, read_as: str) -> None:
    batches = logdata.log()
    end = logdata.end(batches)
    materializer = DeltaMaterializer(spark, str(tmp_path), app_id=APP)
    materializer.write(batches, end)
    plan = warehouse_plan(spark, read_as, APP)
    assert plan == RestorePlan(None, 0, end, end)
    restored = build_restore(spark, read_as, plan)
    assert restored.snapshot_id == SnapshotId(end, 3)  # a new epoch: the log's newest was 2
    assert build_restore(spark, read_as, plan, epoch_seen=7).snapshot_id.epoch == 8
    expected = _replay(batches)
    entries = _content(restored)
    assert {k: e.value for k, e in entries.items()} == expected.view()
    # each key keeps where it was last written (the snapshot table's columns)
    assert {k: (e.offset, e.epoch, e.timestamp_ms) for k, e in entries.items()} == {
        k: (e.offset, e.epoch, e.timestamp_ms) for k, e in expected.items()}


def test_a_stored_raft_snapshot_is_the_start_and_only_later_rows_are_replayed(
        spark: Any, tmp_path: Path, read_as: str) -> None:
    batches = logdata.log()
    end = logdata.end(batches)
    DeltaMaterializer(spark, str(tmp_path), app_id=APP).write(batches, end)
    # the observer's snapshot at offset 9 (after the second leader change), copied as the
    # driver does
    at_nine = _replay([b for b in batches if b.next_offset <= 9])
    (tmp_path / "observer").mkdir()
    store = FileSnapshotStore(RealFileSystem(), str(tmp_path / "observer"))
    sid = SnapshotId(9, 2)
    store.write(sid, at_nine.items(), b"", logdata.T0)
    store.add(sid)
    files = WarehouseFiles(str(tmp_path))
    assert SnapshotCopier(files).copy_new(store) == sid
    assert stored_ids(files) == [sid]
    plan = warehouse_plan(spark, read_as, APP)
    assert plan is not None and plan.snapshot == sid and plan.replay_from == 9
    restored = build_restore(spark, read_as, plan)
    assert restored.replayed_rows == len([r for r in logdata.record_rows(batches) if r[0] >= 9])
    assert {k: e.value for k, e in _content(restored).items()} == _replay(batches).view()


def test_a_recorded_high_watermark_the_tables_do_not_hold_refuses_the_restore(
        spark: Any, tmp_path: Path, read_as: str) -> None:
    batches = logdata.log()
    materializer = DeltaMaterializer(spark, str(tmp_path), app_id=APP)
    head = [b for b in batches if b.next_offset <= 12]
    materializer.write(head, 12, (RECORDS, SNAPSHOT))
    # quorum_events went further and recorded the quorum's high watermark 16; records did not
    materializer.write(batches, logdata.end(batches), (QUORUM_EVENTS,))
    with pytest.raises(RestoreRefused, match=r"high watermark 16.*offsets 12\.\.15"):
        warehouse_plan(spark, read_as, APP)
    assert not (tmp_path / SNAPSHOT_DIR).exists()  # nothing written by the refusal


def test_a_damaged_stored_snapshot_is_named(spark: Any, tmp_path: Path, read_as: str) -> None:
    batches = logdata.log()
    DeltaMaterializer(spark, str(tmp_path), app_id=APP).write(batches, logdata.end(batches))
    data = b"".join(encode_snapshot(SnapshotId(9, 2), [], b"", logdata.T0))
    WarehouseFiles(str(tmp_path)).write(data[:-3], SNAPSHOT_DIR,
                                        "00000000000000000009-0000000002.checkpoint")
    plan = warehouse_plan(spark, read_as, APP)
    assert plan is not None
    with pytest.raises(Exception, match="_raft_snapshots/00000000000000000009-0000000002"):
        build_restore(spark, read_as, plan)


def test_the_restore_is_recorded_in_quorum_events_without_moving_an_offset(
        spark: Any, tmp_path: Path, read_as: str) -> None:
    """``record_restore``: one ``quorum_events`` row at the restored log's start (leader -1,
    the new voters and their directory ids, what it was built from), in a commit that is not
    the materializer's: the table's resume offset stays. Spark reads the row either way."""
    batches = logdata.log()
    end = logdata.end(batches)
    materializer = DeltaMaterializer(spark, str(tmp_path), app_id=APP)
    materializer.write(batches, end)
    plan = warehouse_plan(spark, read_as, APP)
    assert plan is not None
    restored = build_restore(spark, read_as, plan)
    record_restore(spark, read_as, APP, restored, {2: "dir-two", 0: "dir-zero"})
    rows = (spark.read.format("delta").load(str(tmp_path / QUORUM_EVENTS))
            .where("leader_id = -1").collect())
    assert [(r["offset"], r["epoch"], r["voters"], r["restored_from"]) for r in rows] == [
        (end, restored.snapshot_id.epoch, [0, 2], f"warehouse: {plan.describe()}")]
    assert list(rows[0]["voter_directories"]) == ["dir-zero", "dir-two"]
    fresh = DeltaMaterializer(spark, str(tmp_path), app_id=APP)
    assert fresh.table_offsets()[QUORUM_EVENTS] == end


def test_a_warehouse_uri_spark_cannot_reach_is_named_with_its_cause(spark: Any) -> None:
    with pytest.raises(WarehouseError, match=r"kraft.warehouse.uri nosuch://x/wh: cannot "
                       r"write there \(.*No FileSystem for scheme"):
        check_writable("nosuch://x/wh", spark)


def test_warehouse_files_through_hadoops_file_system(spark: Any, tmp_path: Path) -> None:
    """The ``hdfs://``/``s3a://`` path of WarehouseFiles, run on Hadoop's local file system
    (a ``file:`` URI given as is): write, list, read, replace and delete, and the probe."""
    uri = f"file://{tmp_path}/wh"
    files = WarehouseFiles(uri, spark)
    assert files.list(SNAPSHOT_DIR) == []
    files.write(b"one", SNAPSHOT_DIR, "a.checkpoint")
    files.write(b"two", SNAPSHOT_DIR, "a.checkpoint")  # replaced whole
    assert files.list(SNAPSHOT_DIR) == ["a.checkpoint"]
    assert files.read(SNAPSHOT_DIR, "a.checkpoint") == b"two"
    assert (tmp_path / "wh" / SNAPSHOT_DIR / "a.checkpoint").read_bytes() == b"two"
    files.delete(SNAPSHOT_DIR, "a.checkpoint")
    assert files.list(SNAPSHOT_DIR) == []
    check_writable(uri, spark)
