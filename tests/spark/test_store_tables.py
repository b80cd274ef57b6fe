"""The store's writes in the Delta tables: a failed conditional write is marked in `records`
and changes nothing in `snapshot`; a lease's expiry deletes its keys from `snapshot`; time
travel to any offset equals the state machine's replay (real Spark and Delta)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kraft_spark.delta import DeltaMaterializer, snapshot
from kraft_spark.raft.records import Batch, Record
from kraft_spark.state.machine import KeyValueState
from kraft_spark.store.leases import LEASE_DELETED_HEADER, LEASE_HEADER, LEASE_OP_HEADER, encode_op
from kraft_spark.store.txn import OUTCOME_HEADER, TXN_HEADER, Condition, encode_header

from .test_materializer import read_records, read_snapshot

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]
T0 = 1_700_000_000_000


def _r(key: str | None, value: str | None, *headers: tuple[str, bytes]) -> Record:
    return Record(None if key is None else key.encode(),
                  None if value is None else value.encode(), T0, tuple(headers))


def _log() -> list[Batch]:
    """Offsets: 0-1 plain; 2 a cas that holds; 3 one that fails; 4 grant; 5 a leased key;
    6 plain; 7 expiry of the lease; 8 plain."""
    cas = lambda version: (TXN_HEADER, encode_header(1, [Condition(b"a", version=version)]))  # noqa: E731
    parts = [
        [_r("a", '"1"'), _r("b", '"1"')],
        [_r("a", '"2"', cas(1))],
        [_r("a", '"3"', cas(1))],
        [_r(None, None, (LEASE_OP_HEADER, encode_op("grant", 9, ttl_ms=1000)))],
        [_r("svc", '"up"', (LEASE_HEADER, b"9"))],
        [_r("c", '"1"')],
        [_r(None, None, (LEASE_OP_HEADER, encode_op("expire", 9, after=4)))],
        [_r("d", '"1"')],
    ]
    batches, offset = [], 0
    for records in parts:
        batches.append(Batch(offset, 1, tuple(records)))
        offset += len(records)
    return batches


def _replay(batches: list[Batch], upto: int) -> dict[str, Any]:
    """key -> (value, offset, create_revision, mod_revision, version, lease): the state
    machine's entries after offset ``upto`` (what etcd's Range and GET answered then)."""
    state = KeyValueState()
    state.apply_all(b for b in batches if b.base_offset <= upto)
    return {k.decode(): (e.value.decode(), e.offset, e.create_offset, e.offset, e.version,
                         e.lease) for k, e in state.items()}


def _rows(df: Any) -> dict[str, Any]:
    return {r.key: (r.value, r.offset, r.create_revision, r.mod_revision, r.version, r.lease)
            for r in df.collect()}


def test_failed_writes_and_lease_expiries_in_the_tables(spark: Any, tmp_path: Path) -> None:
    """Also the revision columns, by both commit paths: the first call's MERGE is delta-rs's,
    the second's Spark's (on the first one's rows); time travel inside the second call
    replays ``records`` through the state machine (``snapshot_rows``)."""
    batches = _log()
    state = KeyValueState()
    state.apply_all(batches)
    materializer = DeltaMaterializer(spark, str(tmp_path))
    # Two calls: time travel inside the second replays `records` rows on the first's version.
    materializer.write(batches[:2], 3, failed_txns=state.failed_txns,
                       lease_deleted=state.leases.deleted)
    DeltaMaterializer(spark, str(tmp_path), in_process=False).write(
        batches[2:], 9, failed_txns=state.failed_txns, lease_deleted=state.leases.deleted)
    rows = {r[0]: r for r in read_records(spark, tmp_path)}
    assert rows[3][5].get(OUTCOME_HEADER) == "failed" and rows[2][5].get(OUTCOME_HEADER) is None
    assert rows[7][5][LEASE_DELETED_HEADER] == '["svc"]'
    final = {k: v[:2] for k, v in read_snapshot(spark, tmp_path).items()}
    assert final == {k: v[:2] for k, v in _replay(batches, 9).items()}
    assert "svc" not in final and final["a"] == ('"2"', 2)
    assert _rows(snapshot(spark, tmp_path)) == _replay(batches, 9)
    revisions = {r.offset: r.revision for r in spark.read.format("delta").load(
        str(tmp_path / "records")).collect()}
    assert revisions == {0: 0, 1: 1, 2: 2, 3: None, 4: None, 5: 5, 6: 6, 7: None, 8: 8}
    for as_of in range(2, 9):
        travelled = _rows(snapshot(spark, tmp_path, as_of_offset=as_of))
        assert travelled == _replay(batches, as_of), as_of
    assert _replay(batches, 6)["svc"] == ('"up"', 5, 5, 5, 1, 9)  # leased, until its expiry


def test_lease_views_answer_who_is_alive_and_each_keys_lease(spark: Any, tmp_path: Path) -> None:
    """``leases`` and ``snapshot_leases`` (kraft_spark.delta.lease_views) over the tables:
    lease 9 expired with its key; lease 10, kept alive, holds ``w``; a keep-alive of the
    expired lease (failed) changes nothing."""
    from kraft_spark.delta.lease_views import register_lease_views

    batches = _log()
    op = lambda *a, **k: _r(None, None, (LEASE_OP_HEADER, encode_op(*a, **k)))  # noqa: E731
    for offset, record in enumerate([op("grant", 10, ttl_ms=5000, owner="alice"),
                                     _r("w", '"1"',
                                     (LEASE_HEADER, b"10")), op("keepalive", 10),
                                     op("keepalive", 9)], start=9):
        batches.append(Batch(offset, 1, (record,)))
    state = KeyValueState()
    state.apply_all(batches)
    assert state.txn_failure(12) is not None  # the keep-alive of the expired lease
    DeltaMaterializer(spark, str(tmp_path)).write(
        batches, 13, failed_txns=state.failed_txns, lease_deleted=state.leases.deleted)
    for table in ("records", "snapshot"):
        spark.read.format("delta").load(str(tmp_path / table)).createOrReplaceTempView(table)
    register_lease_views(spark, temporary=True)
    leases = {r["lease_id"]: r for r in spark.sql("SELECT * FROM leases").collect()}
    assert sorted(leases) == [9, 10]
    gone, alive = leases[9], leases[10]
    assert (gone.ttl_ms, gone.granted_offset, gone.ended_offset, gone.ended_by, gone.alive,
            list(gone.keys)) == (1000, 4, 7, "expire", False, [])
    assert (alive.ttl_ms, alive.granted_offset, alive.ended_offset, alive.alive,
            list(alive.keys)) == (5000, 9, None, True, ["w"])
    assert (gone.owner, alive.owner) == (None, "alice")  # granted without / with a credential
    keyed = {r["key"]: r["lease_id"] for r in spark.sql(
        "SELECT key, lease_id FROM snapshot_leases").collect()}
    assert keyed == {"a": None, "b": None, "c": None, "d": None, "w": 10}
