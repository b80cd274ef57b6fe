"""etcd's revisions in the Delta tables, by the in-process (delta-rs) path, no Spark: each
``snapshot`` row's create_revision, mod_revision, version and lease are the state machine's
``Entry`` of the key, however the log is cut into commits; each ``records`` row's revision is
the one its write got; a warehouse an older version wrote gets the columns and goes on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from deltalake import CommitProperties, DeltaTable, Schema, Transaction, write_deltalake
from pyspark.sql import types as T

from kraft_spark.delta import DeltaMaterializer
from kraft_spark.delta.arrow_rows import arrow_type
from kraft_spark.delta.log_rows import rows_from
from kraft_spark.delta.tables import (
    ADDED_COLUMNS,
    DEFAULT_APP_ID,
    RECORDS,
    SCHEMAS,
    SNAPSHOT,
    TABLE_PROPERTIES,
    TABLES,
    CommitMetadata,
    table_path,
)
from kraft_spark.raft.records import Batch, LeaderChange, Record, leader_change_batch
from kraft_spark.state.machine import KeyValueState
from kraft_spark.store.leases import LEASE_HEADER, LEASE_OP_HEADER, encode_op
from kraft_spark.store.txn import OUTCOME_HEADER, TXN_HEADER, Condition, encode_header

T0 = 1_700_000_000_000


def _r(key: bytes | None, value: bytes | None, *headers: tuple[str, bytes]) -> Record:
    return Record(key, value, T0, tuple(headers))


def _cas(size: int, key: bytes, version: int) -> tuple[str, bytes]:
    return TXN_HEADER, encode_header(size, [Condition(key, version=version)])


def _op(op: str, lease: int, **fields: Any) -> Record:
    return _r(None, None, (LEASE_OP_HEADER, encode_op(op, lease, **fields)))


def _log() -> list[Batch]:
    """Every way a key changes: plain puts and deletes, a delete and a re-create, conditional
    groups that hold and fail, a leased key whose lease expires, a write to a lease that does
    not exist, a keyless record, a key that is not UTF-8, a leader change between batches."""
    parts: list[list[Record] | None] = [
        None,  # 0: the first leader
        [_r(b"a", b"1"), _r(b"b", b"1"), _r(b"a", b"2")],  # 1-3
        [_r(b"b", None), _r(b"\xffbin", b"x"), _r(None, b"keyless")],  # 4-6
        [_r(b"a", b"3", _cas(2, b"a", 2)), _r(b"c", b"1")],  # 7-8: holds
        [_r(b"a", b"4", _cas(2, b"a", 1)), _r(b"d", b"1")],  # 9-10: fails
        [_op("grant", 7, ttl_ms=1000)],  # 11
        [_r(b"svc", b"up", (LEASE_HEADER, b"7")), _r(b"b", b"2", (LEASE_HEADER, b"7"))],  # 12-13
        None,  # 14: a new leader
        [_r(b"a", None, _cas(2, b"a", 3)), _r(b"b", b"3", (LEASE_HEADER, b"7"))],  # 15-16
        [_r(b"x", b"1", (LEASE_HEADER, b"99"))],  # 17: no such lease
        [_op("expire", 7, after=11)],  # 18: deletes svc and b
        [_r(b"a", b"5"), _r(b"\xffbin", b"y"), _r(b"c", b"2")],  # 19-21
    ]
    batches, offset, epoch = [], 0, 0
    for records in parts:
        if records is None:
            epoch += 1
            change = LeaderChange(leader_id=0, voters=(0,), granting_voters=(0,))
            batches.append(leader_change_batch(offset, epoch, change, T0))
            offset += 1
            continue
        batches.append(Batch(offset, epoch, tuple(records)))
        offset += len(records)
    return batches


def _state(batches: list[Batch]) -> KeyValueState:
    state = KeyValueState()
    state.apply_all(batches)
    return state


def _expected(state: KeyValueState) -> dict[str, tuple[Any, ...]]:
    """key -> (value, create_revision, mod_revision, version, lease) as the state machine has
    it: what etcd's Range and the HTTP API answer."""
    return {k.decode(errors="replace"): (e.value.decode(), e.create_offset, e.offset, e.version,
                                         e.lease) for k, e in state.items()}


def _snapshot(warehouse: Path) -> dict[str, tuple[Any, ...]]:
    rows = DeltaTable(table_path(warehouse, SNAPSHOT)).to_pyarrow_table().to_pylist()
    return {r["key"]: (r["value"], r["create_revision"], r["mod_revision"], r["version"],
                       r["lease"]) for r in rows}


def _records(warehouse: Path) -> dict[int, dict[str, Any]]:
    rows = DeltaTable(table_path(warehouse, RECORDS)).to_pyarrow_table().to_pylist()
    return {r["offset"]: r for r in rows}


def _write(materializer: DeltaMaterializer, batches: list[Batch], state: KeyValueState,
           tables: tuple[str, ...] = TABLES) -> None:
    materializer.write(batches, batches[-1].next_offset, tables,
                       failed_txns=state.failed_txns, lease_deleted=state.leases.deleted)


@pytest.mark.parametrize("cuts", [(), (2, 5, 8), (1, 3, 4, 6, 7, 9, 10, 11)],
                         ids=["one commit", "four commits", "every batch"])
def test_snapshot_rows_are_the_state_machines_entries(tmp_path: Path,
                                                      cuts: tuple[int, ...]) -> None:
    batches = _log()
    state = _state(batches)
    materializer = DeltaMaterializer(None, str(tmp_path))
    assert materializer.in_process
    for start, stop in zip((0, *cuts), (*cuts, len(batches)), strict=True):
        # records ahead of snapshot, as the driver commits them (two threads)
        _write(materializer, batches[:stop], state, (RECORDS, "quorum_events"))
        _write(materializer, batches[start:stop], state, (SNAPSHOT,))
    assert _snapshot(tmp_path) == _expected(state)
    assert _expected(state)["a"] == ("5", 19, 19, 1, 0)  # deleted by a group, created again
    assert _expected(state)["c"][3] == 2  # created by a group, written again
    records = _records(tmp_path)
    applied = {o for o, r in records.items()
               if r["key"] is not None and dict(r["headers"]).get(OUTCOME_HEADER) is None}
    revisions = {o: r["revision"] for o, r in records.items() if r["revision"] is not None}
    assert set(revisions) == applied
    # One revision per record, or one per conditional group (its writes at 7-8 and 15-16).
    assert all(revisions[o] == o for o in applied - {8, 16})
    assert revisions[8] in (7, 8) and revisions[16] in (15, 16)
    mods = DeltaTable(table_path(tmp_path, SNAPSHOT)).to_pyarrow_table().to_pylist()
    assert all(revisions[row["offset"]] == row["mod_revision"] for row in mods)
    assert dict(records[17]["headers"])[OUTCOME_HEADER] == "failed"  # no lease 99
    assert records[6]["revision"] is None and records[9]["revision"] is None


def _old_schema(table: str) -> T.StructType:
    added = {column for t, column, _sql in ADDED_COLUMNS if t == table}
    return T.StructType([f for f in SCHEMAS[table].fields if f.name not in added])


def old_table(warehouse: Path, table: str, rows: list[tuple[Any, ...]], last: int) -> None:
    """``table`` as the version before the revision columns made it: its schema then, and
    one materializer commit of ``rows`` (timestamps in epoch milliseconds) for offsets
    ``[0, last]``."""
    schema = _old_schema(table)
    path = table_path(warehouse, table)
    DeltaTable.create(path, schema=Schema.from_json(schema.json()),
                      configuration=dict(TABLE_PROPERTIES))
    arrays, fields = [], []
    for values, f in zip(zip(*rows, strict=True), schema.fields, strict=True):
        kind = arrow_type(f.dataType)
        if pa.types.is_timestamp(kind):  # as Spark writes them: microseconds
            array = pa.array([v * 1000 for v in values], pa.int64()).cast(
                pa.timestamp("us", tz="UTC"))
        elif pa.types.is_map(kind):
            array = pa.array([list(v.items()) for v in values], kind)
        else:
            array = pa.array(values, kind)
        arrays.append(array)
        fields.append(pa.field(f.name, array.type, f.nullable))
    meta = CommitMetadata(DEFAULT_APP_ID, 0, last, last + 1)
    write_deltalake(path, pa.Table.from_arrays(arrays, schema=pa.schema(fields)), mode="append",
                    commit_properties=CommitProperties(
                        custom_metadata={"userMetadata": meta.to_json()},
                        app_transactions=[Transaction(DEFAULT_APP_ID, last)]))


def test_an_older_warehouse_gets_the_columns_and_goes_on(tmp_path: Path) -> None:
    """Tables written before the revision columns existed: start-up adds them (a metadata-only
    commit), older rows read null; the new code's rows are exact, except create_revision and
    version of a key whose older row did not have them and that was not created again."""
    batches = _log()
    state = _state(batches)
    old = batches[:6]  # offsets 0-12, by the older version
    end = old[-1].next_offset
    before = _state(old)
    old_rows = rows_from(old, 0, before.failed_txns, before.leases.deleted)
    old_table(tmp_path, RECORDS, [r[:6] for r in old_rows.records], end - 1)
    old_table(tmp_path, SNAPSHOT, [(k.decode(errors="replace"), e.value.decode(), e.offset,
                                     e.epoch, e.timestamp_ms) for k, e in before.items()],
               end - 1)
    materializer = DeltaMaterializer(None, str(tmp_path))
    assert materializer.prepare() == {RECORDS: end, SNAPSHOT: end, "quorum_events": 0}
    for table in (RECORDS, SNAPSHOT):
        names = [f.name for f in DeltaTable(table_path(tmp_path, table)).schema().fields]
        assert names == SCHEMAS[table].fieldNames()  # the added columns last, as new tables
    assert {row[1:] for row in _snapshot(tmp_path).values()} == {(None, None, None, None)}
    _write(materializer, batches, state)
    got, expected = _snapshot(tmp_path), _expected(state)
    assert set(got) == set(expected)
    # a: deleted and created again after the upgrade; b: deleted by the lease's expiry.
    assert got["a"] == expected["a"] and got["c"] == ("2", None, 21, None, 0)
    assert got["\ufffdbin"] == ("y", None, 20, None, 0)
    records = _records(tmp_path)
    assert all(records[o]["revision"] is None for o in records if o < end)
    assert [records[o]["revision"] for o in (19, 20, 21)] == [19, 20, 21]


def test_a_key_created_and_deleted_within_a_commit_moves_the_snapshot_on(tmp_path: Path) -> None:
    """Found by the gRPC test (etcd's lock keys live for moments): a ``snapshot`` commit whose
    only change deleted a key the table never held was a MERGE that changed nothing, which
    delta-rs does not commit, so the table's offset never moved and every retry failed alike
    (FileNotFoundError for the commit file). Such a key now has no row: an empty commit."""
    materializer = DeltaMaterializer(None, str(tmp_path))
    assert materializer.write([Batch(0, 1, (_r(b"lk/1", b"x"), _r(b"lk/1", None)))], 2) == 2
    assert _snapshot(tmp_path) == {}
    assert DeltaMaterializer(None, str(tmp_path)).table_offsets()[SNAPSHOT] == 2  # from Delta
    assert materializer.write([Batch(2, 1, (_r(b"a", b"1"), _r(b"a", None)))], 4) == 4
    assert materializer.write([Batch(4, 1, (_r(b"b", b"1"),))], 5) == 5
    assert _snapshot(tmp_path) == {"b": ("1", 4, 4, 1, 0)}
