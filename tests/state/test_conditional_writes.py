"""Conditional writes in the state machine: judged at apply, all or nothing, deterministic on
replay from the log and from a snapshot; revisions (create offset, version) as etcd's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import Batch, Record
from kraft_spark.state.machine import FailedTxn, KeyValueState
from kraft_spark.state.snapshot_file import decode_snapshot, encode_snapshot
from kraft_spark.store.leases import LEASE_OP_HEADER, encode_checkpoint
from kraft_spark.store.txn import (
    TXN_HEADER,
    Condition,
    Failure,
    decode_header,
    encode_header,
)


def _txn(conditions: list[Condition], *writes: tuple[bytes, bytes | None]) -> list[Record]:
    header = ((TXN_HEADER, encode_header(len(writes), conditions)),)
    return [Record(k, v, 5, header if i == 0 else ()) for i, (k, v) in enumerate(writes)]


def _plain(*writes: tuple[bytes, bytes | None]) -> list[Record]:
    return [Record(k, v, 5) for k, v in writes]


def _apply(state: KeyValueState, records: list[Record], epoch: int = 1) -> int:
    base = state.applied_offset
    state.apply(Batch(base, epoch, tuple(records)))
    return base


def test_revisions_count_writes_since_creation() -> None:
    state = KeyValueState()
    _apply(state, _plain((b"a", b"1"), (b"a", b"2"), (b"b", b"x")))
    a = state.get(b"a")
    assert a is not None
    assert (a.create_offset, a.offset, a.version) == (0, 1, 2)
    _apply(state, _plain((b"a", None), (b"a", b"3")))  # offsets 3, 4: deleted, created again
    a = state.get(b"a")
    assert a is not None
    assert (a.create_offset, a.offset, a.version) == (4, 4, 1)


def test_group_applies_all_or_nothing() -> None:
    state = KeyValueState()
    _apply(state, _plain((b"a", b"1")))
    base = _apply(state, _txn([Condition(b"a", version=1), Condition(b"b", exists=False)],
                              (b"a", b"2"), (b"b", b"2")))
    assert state.view() == {b"a": b"2", b"b": b"2"}
    assert state.txn_failure(base) is None
    # a's version is now 2: the whole group fails, b is not deleted either
    base = _apply(state, _txn([Condition(b"a", version=1)], (b"a", b"3"), (b"b", None)))
    assert state.view() == {b"a": b"2", b"b": b"2"}
    assert state.txn_failure(base) == FailedTxn(2, (Failure(b"a", 1, 2),))
    assert state.applied_offset == base + 2


def test_groups_share_a_batch_with_plain_writes_and_see_earlier_ones() -> None:
    """Coalesced appends: a plain write, a group judged after it, a plain write after."""
    state = KeyValueState()
    records = (_plain((b"k", b"1"))
               + _txn([Condition(b"k", mod_offset=0)], (b"k", b"2"))   # holds: k at 0
               + _txn([Condition(b"k", mod_offset=0)], (b"k", b"3"))   # fails: k now at 1
               + _plain((b"z", b"9")))
    _apply(state, records)
    assert state.view() == {b"k": b"2", b"z": b"9"}
    assert state.txn_failure(1) is None
    assert state.txn_failure(2) == FailedTxn(1, (Failure(b"k", 1, 2),))


@pytest.mark.parametrize("raw", [b"", b"not json", b'{"n": 0}', b'{"n": 1, "if": 3}',
                                 b'{"n": 1, "x": 1}', b'{"n": 1, "if": [{"key": 1}]}',
                                 pytest.param(b"[" * 100_000, id="past-json-recursion")])
def test_malformed_header_fails_the_record_deterministically(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode_header(raw)
    states = [KeyValueState(), KeyValueState()]
    for state in states:
        _apply(state, [Record(b"a", b"1", 5, ((TXN_HEADER, raw),)), Record(b"b", b"2", 5)])
    assert states[0].view() == states[1].view() == {b"b": b"2"}
    assert states[0].txn_failure(0) == FailedTxn(1, ())


def test_group_running_past_its_batch_fails() -> None:
    state = KeyValueState()
    header = ((TXN_HEADER, encode_header(3, [])),)
    _apply(state, [Record(b"a", b"1", 5, header), Record(b"b", b"2", 5)])
    assert state.view() == {}
    assert state.txn_failure(0) == FailedTxn(2, ())


def test_condition_validation() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Condition(b"k")
    with pytest.raises(ValueError, match="exactly one"):
        Condition(b"k", version=1, exists=True)
    with pytest.raises(ValueError, match=">= 0"):
        Condition(b"k", version=-1)
    with pytest.raises(ValueError, match="unknown condition fields"):
        Condition.from_json({"key": "k", "version": 1, "lease": 3})
    assert Condition.from_json({"key": "a/b", "exists": False}) == Condition(b"a/b", exists=False)


_keys = st.sampled_from([b"a", b"b", b"c"])
_condition = st.one_of(
    st.builds(lambda k, v: Condition(k, version=v), _keys, st.integers(0, 3)),
    st.builds(lambda k, o: Condition(k, mod_offset=o), _keys, st.integers(0, 12)),
    st.builds(lambda k, e: Condition(k, exists=e), _keys, st.booleans()),
)
_write = st.tuples(_keys, st.one_of(st.none(), st.binary(min_size=1, max_size=3)))
_piece = st.one_of(
    st.lists(_write, min_size=1, max_size=3).map(lambda ws: _plain(*ws)),
    st.tuples(st.lists(_condition, max_size=3), st.lists(_write, min_size=1, max_size=3)).map(
        lambda cw: _txn(cw[0], *cw[1])),
)
_batches = st.lists(st.lists(_piece, min_size=1, max_size=3), min_size=1, max_size=8)


Revisions = dict[bytes, tuple[bytes, int, int, int]]


def _revisions(state: KeyValueState) -> Revisions:
    return {k: (e.value, e.offset, e.create_offset, e.version) for k, e in state.items()}


def _expected(model: Revisions, piece: list[Record], offset: int, applied: bool) -> None:
    """``piece`` at ``offset`` on ``model``: a group that applied is one write, every key it
    writes at its first offset (etcd's one revision per Txn); plain records one each."""
    grouped = bool(piece[0].headers)
    if not applied:
        return
    for i, record in enumerate(piece):
        assert record.key is not None
        revision = offset if grouped else offset + i
        old = model.pop(record.key, None)
        if record.value is not None:
            model[record.key] = (record.value, revision, old[2] if old else revision,
                                 old[3] + 1 if old else 1)


@settings(max_examples=150, deadline=None)
@given(_batches, st.integers(0, 8))
def test_replay_through_a_snapshot_equals_replay_from_the_log(
        batches: list[list[list[Record]]], cut: int) -> None:
    """State equals replay, with conditional writes: a node that loads a snapshot taken after
    ``cut`` batches and applies the rest ends exactly where a full replay ends (values,
    revisions and the outcomes of conditional writes). Every key a group that applied wrote
    has the group's first offset as its revision, on apply and on both replays."""
    full, before = KeyValueState(), KeyValueState()
    epoch = 1
    encoded: list[Batch] = []
    model: Revisions = {}
    for pieces in batches:
        records = tuple(r for piece in pieces for r in piece)
        encoded.append(Batch(full.applied_offset, epoch, records))
        offset = full.applied_offset
        full.apply(encoded[-1])
        for piece in pieces:
            _expected(model, piece, offset, full.txn_failure(offset) is None)
            offset += len(piece)
        assert _revisions(full) == model
    cut = min(cut, len(encoded))
    before.apply_all(encoded[:cut])
    sid = OffsetAndEpoch(before.applied_offset, epoch)
    data = b"".join(encode_snapshot(sid, before.items(), before.producers.export(), 0,
                                    failed_txns=before.txns_in_window()))
    content = decode_snapshot(data, sid, "test")
    resumed = KeyValueState()
    resumed.load(content.entries, sid.offset, sid.epoch, content.producers,
                 failed_txns=content.failed_txns)
    resumed.apply_all(encoded[cut:])
    assert dict(resumed.items()) == dict(full.items())
    assert resumed.txns_in_window() == full.txns_in_window()
    replayed = KeyValueState()
    replayed.apply_all(encoded)
    assert _revisions(replayed) == _revisions(resumed) == model


def test_delta_rows_mark_failed_groups_and_leave_them_out_of_snapshot() -> None:
    from kraft_spark.delta.log_rows import rows_from
    from kraft_spark.store.txn import OUTCOME_HEADER

    state = KeyValueState()
    batch = Batch(0, 1, tuple(_plain((b"a", b"1"))
                              + _txn([Condition(b"a", version=2)], (b"a", b"2"), (b"b", b"2"))
                              + _txn([Condition(b"a", version=1)], (b"a", b"3"))))
    state.apply(batch)
    rows = rows_from([batch], 0, state.failed_txns)
    outcomes = [r[5].get(OUTCOME_HEADER) for r in rows.records]
    assert outcomes == [None, "failed", "failed", None]
    assert {k: v[1] for k, v in rows.latest.items()} == {"a": "3"}
    with pytest.raises(ValueError, match="conditional write"):
        rows_from([batch], 0)


# --------------------------------------------------------------------------- leases

def _lease_op(op: str, lease_id: int, **fields: int) -> Record:
    from kraft_spark.store.leases import LEASE_OP_HEADER, encode_op

    return Record(None, None, 5, ((LEASE_OP_HEADER, encode_op(op, lease_id, **fields)),))


def _leased(key: bytes, value: bytes | None, lease_id: int) -> Record:
    from kraft_spark.store.leases import LEASE_HEADER

    return Record(key, value, 5, ((LEASE_HEADER, str(lease_id).encode()),))


def test_lease_keys_go_with_the_lease_and_a_keepalive_voids_a_stale_expiry() -> None:
    state = KeyValueState()
    _apply(state, [_lease_op("grant", 7, ttl_ms=3000)])                       # 0
    _apply(state, [_leased(b"a", b"1", 7), _leased(b"b", b"2", 7), Record(b"c", b"3", 5)])
    assert state.get(b"a") is not None and state.get(b"a").lease == 7  # type: ignore[union-attr]
    assert state.leases.leases[7].keys == {b"a", b"b"}
    _apply(state, [Record(b"b", b"plain", 5)])  # written without the lease: detached
    assert state.leases.leases[7].keys == {b"a"}
    _apply(state, [_lease_op("keepalive", 7)])                                # 5
    base = _apply(state, [_lease_op("expire", 7, after=0)])  # decided before the keep-alive
    assert state.txn_failure(base) is not None and 7 in state.leases.leases
    assert state.get(b"a") is not None
    _apply(state, [_lease_op("expire", 7, after=5)])
    assert 7 not in state.leases.leases
    assert state.view() == {b"b": b"plain", b"c": b"3"}
    # A write to a lease that is gone fails; so does a conditional group holding one.
    base = _apply(state, [_leased(b"d", b"4", 7)])
    failure = state.txn_failure(base)
    assert failure is not None and "lease 7 not found" in failure.reason
    group = encode_header(2, [Condition(b"e", exists=False)])
    base = _apply(state, [Record(b"e", b"5", 5, ((TXN_HEADER, group),)),
                          _leased(b"f", b"6", 7)])
    assert state.get(b"e") is None and state.get(b"f") is None  # all or nothing
    assert "lease 7" in state.txn_failure(base).reason  # type: ignore[union-attr]


def test_a_checkpoint_cleared_by_a_keepalive_voids_a_stale_expiry() -> None:
    state = KeyValueState()
    _apply(state, [_lease_op("grant", 7, ttl_ms=3000), _leased(b"a", b"1", 7)])  # 0, 1
    checkpoint = Record(None, None, 5, ((LEASE_OP_HEADER, encode_checkpoint({7: 900})),))
    clear = Record(None, None, 5, ((LEASE_OP_HEADER, encode_checkpoint({7: 0})),))
    _apply(state, [checkpoint])                                               # 2
    assert state.leases.leases[7].remaining_ms == 900
    _apply(state, [clear])                                                    # 3: a keep-alive
    base = _apply(state, [_lease_op("expire", 7, after=0)])  # decided before the keep-alive
    assert state.txn_failure(base) is not None and state.get(b"a") is not None
    _apply(state, [_lease_op("expire", 7, after=3)])
    assert 7 not in state.leases.leases and state.get(b"a") is None
    base = _apply(state, [Record(None, None, 5, ((LEASE_OP_HEADER, b'{"op":"checkpoint",'
                                                  b'"remaining":{"x":1}}'),))])
    assert "checkpoint entries" in state.txn_failure(base).reason  # type: ignore[union-attr]


def test_revoke_and_grant_rules() -> None:
    state = KeyValueState()
    _apply(state, [_lease_op("grant", 1, ttl_ms=2000), _leased(b"k", b"v", 1)])
    base = _apply(state, [_lease_op("grant", 1, ttl_ms=2000)])
    assert "already exists" in state.txn_failure(base).reason  # type: ignore[union-attr]
    base = _apply(state, [_lease_op("grant", 2, ttl_ms=1)])
    assert "outside" in state.txn_failure(base).reason  # type: ignore[union-attr]
    _apply(state, [_lease_op("revoke", 1)])
    assert state.view() == {} and not state.leases.leases


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["grant", "keepalive", "revoke", "expire", "put",
                                           "plain", "delete", "checkpoint"]),
                          st.integers(1, 3), st.sampled_from([b"a", b"b"]),
                          st.integers(0, 20)), min_size=1, max_size=40),
       st.integers(0, 40))
def test_leases_survive_a_snapshot_exactly(ops: list[tuple[str, int, bytes, int]],
                                           cut: int) -> None:
    batches: list[Batch] = []
    full = KeyValueState()
    for op, lease_id, key, n in ops:
        if op == "grant":
            record = _lease_op("grant", lease_id, ttl_ms=1000)
        elif op in ("keepalive", "revoke"):
            record = _lease_op(op, lease_id)
        elif op == "expire":
            record = _lease_op("expire", lease_id, after=n)
        elif op == "checkpoint":  # sets (or, n = 0, clears) a remaining TTL
            record = Record(None, None, 5, ((LEASE_OP_HEADER, encode_checkpoint(
                {lease_id: n % 3 * 100, 3 - lease_id % 3: n * 10})),))
        elif op == "put":
            record = _leased(key, b"v%d" % n, lease_id)
        else:
            record = Record(key, b"p" if op == "plain" else None, 5)
        batches.append(Batch(full.applied_offset, 1, (record,)))
        full.apply(batches[-1])
    cut = min(cut, len(batches))
    before = KeyValueState()
    before.apply_all(batches[:cut])
    sid = OffsetAndEpoch(before.applied_offset, 1)
    data = b"".join(encode_snapshot(sid, before.items(), b"", 0,
                                    failed_txns=before.txns_in_window(),
                                    leases=before.leases_export()))
    content = decode_snapshot(data, sid, "test")
    resumed = KeyValueState()
    resumed.load(content.entries, sid.offset, 1, content.producers,
                 failed_txns=content.failed_txns, leases=content.leases)
    resumed.apply_all(batches[cut:])
    assert dict(resumed.items()) == dict(full.items())
    assert resumed.leases_export() == full.leases_export()
    assert {i: x.keys for i, x in resumed.leases.leases.items()} == {
        i: x.keys for i, x in full.leases.leases.items()}
    assert resumed.txns_in_window() == full.txns_in_window()


def test_delta_rows_delete_the_keys_of_an_expired_lease() -> None:
    from kraft_spark.delta.log_rows import rows_from
    from kraft_spark.store.leases import LEASE_DELETED_HEADER

    state = KeyValueState()
    batches = [Batch(0, 1, (_lease_op("grant", 3, ttl_ms=1000), _leased(b"svc/a", b"1", 3),
                            Record(b"other", b"x", 5)))]
    state.apply(batches[0])
    batches.append(Batch(3, 1, (_lease_op("expire", 3, after=0),)))
    state.apply(batches[1])
    rows = rows_from(batches, 0, state.failed_txns, state.leases.deleted)
    assert rows.records[3][5][LEASE_DELETED_HEADER] == '["svc/a"]'
    assert {k: v[1] for k, v in rows.latest.items()} == {"svc/a": None, "other": "x"}


def test_a_lease_operation_nested_too_deeply_fails_its_record_not_the_state() -> None:
    # Deep enough for json's RecursionError, which used to escape apply: every replica's
    # state machine failed on the record, and again on each replay of the log.
    from kraft_spark.store.leases import LEASE_OP_HEADER

    state = KeyValueState()
    _apply(state, [Record(None, None, 5, ((LEASE_OP_HEADER, b"[" * 100_000),)),
                   Record(b"b", b"2", 5)])
    assert state.view() == {b"b": b"2"}
    failed = state.txn_failure(0)
    assert failed is not None and "nested too deeply" in failed.reason
