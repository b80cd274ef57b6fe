"""What a restore from the warehouse may rebuild (kraft_spark/warehouse/restore_plan.py), and
the warehouse's location and identity rules: pure functions over the tables' commit metadata
and the stored Raft snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft_spark.delta.tables import CommitMetadata
from kraft_spark.state.snapshot_file import SnapshotId
from kraft_spark.warehouse.identity import ID_FILE, settle_cluster_id
from kraft_spark.warehouse.location import (
    WarehouseError,
    WarehouseFiles,
    check_writable,
    normalize_warehouse,
)
from kraft_spark.warehouse.restore_plan import RestorePlan, RestoreRefused, plan_restore

WHERE = "/wh/_raft_snapshots"


def commit(first: int, last: int, hw: int, boot: str | None = None) -> CommitMetadata:
    return CommitMetadata("c", first, last, hw, bootstrap_snapshot=boot)


def test_an_empty_warehouse_has_nothing_to_restore() -> None:
    assert plan_restore([], 0, [], WHERE) is None


def test_records_without_gaps_replay_from_zero_or_from_the_newest_snapshot() -> None:
    commits = [commit(0, 9, 10), commit(10, 24, 25)]
    assert plan_restore(commits, 25, [], WHERE) == RestorePlan(None, 0, 25, 25)
    stored = [SnapshotId(8, 1), SnapshotId(20, 2)]
    assert plan_restore(commits, 25, stored, WHERE) == RestorePlan(SnapshotId(20, 2), 20, 25, 25)


def test_a_snapshot_past_the_records_end_restarts_the_log_at_it() -> None:
    plan = plan_restore([commit(0, 9, 10)], 30, [SnapshotId(30, 3)], WHERE)
    assert plan == RestorePlan(SnapshotId(30, 3), 30, 30, 30)


def test_committed_offsets_in_no_table_or_snapshot_refuse_and_are_named() -> None:
    with pytest.raises(RestoreRefused, match=r"high watermark 40.*offsets 25\.\.39"):
        plan_restore([commit(0, 24, 40)], 40, [SnapshotId(20, 2)], WHERE)


def test_a_bootstrap_gap_needs_a_snapshot_at_or_after_it() -> None:
    commits = [commit(0, 49, 60, boot="50-2"), commit(50, 59, 60)]
    with pytest.raises(RestoreRefused, match=r"below offset 50.*skipped.*50-2.*holds: 10-1"):
        plan_restore(commits, 60, [SnapshotId(10, 1)], WHERE)
    plan = plan_restore(commits, 60, [SnapshotId(10, 1), SnapshotId(50, 2)], WHERE)
    assert plan == RestorePlan(SnapshotId(50, 2), 50, 60, 60)
    with pytest.raises(RestoreRefused, match=r"no commit holds offsets 0\.\.4"):
        plan_restore([commit(5, 9, 10)], 10, [], WHERE)


def test_warehouse_uris_are_normalized_or_refused_with_the_fix(tmp_path: Path) -> None:
    assert normalize_warehouse(f"file://{tmp_path}/wh") == f"{tmp_path}/wh"
    assert normalize_warehouse("s3a://bucket/kraft/") == "s3a://bucket/kraft"
    assert normalize_warehouse("hdfs://nn:8020/kraft") == "hdfs://nn:8020/kraft"
    with pytest.raises(ValueError, match="file:///path"):
        normalize_warehouse("file://otherhost/wh")
    with pytest.raises(ValueError, match="s3a://<authority>/<path>"):
        normalize_warehouse("s3a:bucket")


def test_an_unwritable_warehouse_is_named_with_the_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(WarehouseError, match=r"kraft.warehouse.uri .*file/wh: cannot write"):
        check_writable(str(blocker / "wh"))
    check_writable(str(tmp_path / "wh"))
    assert list((tmp_path / "wh").iterdir()) == []  # the probe is gone


def test_the_cluster_id_is_kept_beside_the_tables_and_adopted_or_refused(
        tmp_path: Path) -> None:
    files = WarehouseFiles(str(tmp_path / "wh"))
    assert settle_cluster_id(str(tmp_path / "d1"), files, "first") == ("first", "new")
    assert (tmp_path / "wh" / ID_FILE).read_text() == "first\n"
    # a driver on a new disk adopts the warehouse's cluster
    assert settle_cluster_id(str(tmp_path / "d2"), files, "other") == ("first", "adopted")
    assert (tmp_path / "d2" / "cluster.id").read_text() == "first\n"
    (tmp_path / "d3").mkdir()
    (tmp_path / "d3" / "cluster.id").write_text("third\n")
    with pytest.raises(WarehouseError, match=r"belongs to cluster first.*cluster third"):
        settle_cluster_id(str(tmp_path / "d3"), files, "x")
