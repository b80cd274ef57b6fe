"""The outcome window (kraft_spark.state.outcomes): every replica answers an outcome query
alike whether it replayed the log, loaded a snapshot or pruned at other times; below the
horizon the answer is OutcomeUnknown, never "applied"."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import Batch, Record
from kraft_spark.state.machine import TXN_OUTCOME_WINDOW, KeyValueState
from kraft_spark.state.outcomes import OutcomeUnknown
from kraft_spark.state.snapshot_file import (
    OUTCOMES_FROM_HEADER,
    decode_snapshot,
    encode_snapshot,
)
from kraft_spark.store.leases import LEASE_HEADER, LEASE_OP_HEADER, encode_op
from kraft_spark.store.txn import TXN_HEADER, Condition, encode_header

TRUTH_WINDOW = 1 << 40  # a state that never forgets: the log's true outcomes


def _cas(key: bytes, version: int, value: bytes, size: int = 1) -> tuple[Record, ...]:
    header = ((TXN_HEADER, encode_header(size, [Condition(key, version=version)])),)
    return tuple(Record(key, value, 5, header if i == 0 else ()) for i in range(size))


def _lease_op(op: str, lease_id: int, **fields: int) -> Record:
    return Record(None, None, 5, ((LEASE_OP_HEADER, encode_op(op, lease_id, **fields)),))


def _leased(key: bytes, lease_id: int) -> Record:
    return Record(key, b"v", 5, ((LEASE_HEADER, str(lease_id).encode()),))


def _answer(state: KeyValueState, offset: int) -> Any:
    """What a replica tells about the write at ``offset``: unknown, or (failure, deleted)."""
    try:
        return state.txn_failure(offset), state.lease_deleted(offset)
    except OutcomeUnknown:
        return "unknown"


def _snapshot_round_trip(state: KeyValueState, window: int) -> KeyValueState:
    """A state loaded from a snapshot file of ``state`` (as a node writes and reads it)."""
    sid = OffsetAndEpoch(state.applied_offset, max(1, state.applied_epoch))
    outcomes_from, failed, leases = state.outcomes_to_store()
    data = b"".join(encode_snapshot(sid, state.items(), state.producers.export(), 0,
                                    failed_txns=failed, leases=leases,
                                    outcomes_from=outcomes_from))
    content = decode_snapshot(data, sid, "test")
    loaded = KeyValueState(outcome_window=window)
    loaded.load(content.entries, sid.offset, sid.epoch, content.producers,
                failed_txns=content.failed_txns, leases=content.leases,
                outcomes_from=content.outcomes_from)
    return loaded


def test_a_pruned_failure_is_unknown_on_every_replica_never_applied() -> None:
    """The default window: a failed write and a lease revocation, then a window of other
    records. Before the fix the replica that replayed still knew the failure (lazy pruning)
    while one loaded from a snapshot of it said None, "applied": a wrong 200 to a retry."""
    batches = [
        Batch(0, 1, _cas(b"k", 5, b"x")),  # fails: k is absent
        Batch(1, 1, (_lease_op("grant", 7, ttl_ms=1000),)),
        Batch(2, 1, (_leased(b"held", 7),)),
        Batch(3, 1, (_lease_op("revoke", 7),)),
    ]
    filler = Batch(4, 1, (Record(None, None, 5),) * TXN_OUTCOME_WINDOW)
    replayed = KeyValueState()
    replayed.apply_all(batches)
    assert replayed.txn_failure(0) is not None and replayed.lease_deleted(3) == (b"held",)
    replayed.apply(filler)
    loaded = _snapshot_round_trip(replayed, TXN_OUTCOME_WINDOW)
    for offset in range(4):
        for state in (replayed, loaded):
            with pytest.raises(OutcomeUnknown, match=f"offset {offset} is older than the "
                               f"outcome window of {TXN_OUTCOME_WINDOW} offsets"):
                state.txn_failure(offset)
            assert _answer(state, offset) == "unknown"
    assert replayed.outcome_horizon == loaded.outcome_horizon == 4


def test_a_state_knows_nothing_before_where_it_started() -> None:
    state = KeyValueState(100, 1, outcome_window=1000)
    assert state.outcome_horizon == 100
    with pytest.raises(OutcomeUnknown):
        state.txn_failure(99)
    assert state.txn_failure(100) is None


def _build(ops: list[tuple[str, int, int]]) -> list[Batch]:
    """Batches of one operation each: conditional writes that hold or fail (one or two
    records), plain and leased writes, lease operations, keyless filler."""
    truth = KeyValueState(outcome_window=TRUTH_WINDOW)
    batches: list[Batch] = []
    for op, n, lease_id in ops:
        key = b"k%d" % (n % 3)
        records: tuple[Record, ...]
        if op == "cas":
            entry = truth.get(key)
            version = entry.version if entry is not None and n % 2 else n % 4
            records = _cas(key, version, b"v%d" % n, 1 + n % 2)
        elif op == "grant":
            records = (_lease_op("grant", lease_id, ttl_ms=1000),)
        elif op == "revoke":
            records = (_lease_op("revoke", lease_id),)
        elif op == "leased":
            records = (_leased(key, lease_id),)
        elif op == "put":
            records = (Record(key, b"p%d" % n, 5),)
        else:
            records = (Record(None, None, 5),) * (1 + n % 5)
        batch = Batch(truth.applied_offset, 1, records)
        truth.apply(batch)
        batches.append(batch)
    return batches


OPS = st.lists(st.tuples(st.sampled_from(["cas", "cas", "grant", "revoke", "leased", "put",
                                          "filler"]),
                         st.integers(0, 20), st.integers(1, 3)),
               min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(OPS, st.integers(1, 12), st.integers(0, 60), st.integers(0, 60), st.integers(0, 80))
def test_every_replica_answers_every_outcome_alike(
        ops: list[tuple[str, int, int]], window: int, cut: int, cut_held: int,
        hold: int) -> None:
    """Replicas fed the same log: one replays it; one loads a snapshot part-way; one keeps
    outcomes for a local materializer (``outcome_hold``: prunes elsewhere) and loads its own
    snapshot part-way. After every batch, every offset gets the same answer on each: the
    truth at or after ``applied - window``, unknown before."""
    batches = _build(ops)
    cut, cut_held = min(cut, len(batches)), min(cut_held, len(batches))
    truth = KeyValueState(outcome_window=TRUTH_WINDOW)
    replayed = KeyValueState(outcome_window=window)

    def held_state() -> KeyValueState:
        state = KeyValueState(outcome_window=window)
        state.outcome_hold = lambda: hold
        return state

    from_snapshot = KeyValueState(outcome_window=window)
    held = held_state()
    for i, batch in enumerate(batches):
        if i == cut:
            from_snapshot = _snapshot_round_trip(from_snapshot, window)
        if i == cut_held:
            held = _snapshot_round_trip(held, window)
            held.outcome_hold = lambda: hold
        for state in (truth, replayed, from_snapshot, held):
            state.apply(batch)
        applied = truth.applied_offset
        assert {s.outcome_horizon for s in (replayed, from_snapshot, held)} == {
            max(0, applied - window)}
        for offset in range(applied):
            want = ("unknown" if offset < applied - window
                    else (truth.txn_failure(offset), truth.lease_deleted(offset)))
            assert _answer(replayed, offset) == want, offset
            assert _answer(from_snapshot, offset) == want, offset
            assert _answer(held, offset) == want, offset
        assert replayed.txns_in_window() == from_snapshot.txns_in_window() == \
            held.txns_in_window()
        assert replayed.leases_export() == from_snapshot.leases_export() == \
            held.leases_export()
        # The local reader's view: complete from outcomes_from (kept down to the hold).
        start = held.outcomes_from
        assert start <= max(0, min(applied - window, hold))
        assert held.known_outcomes(start, applied) == truth.known_outcomes(start, applied)


def test_memory_stays_bounded_by_the_window() -> None:
    window = 64
    state = KeyValueState(outcome_window=window)
    for _ in range(2000):
        state.apply(Batch(state.applied_offset, 1, _cas(b"k", 9, b"x")))  # every one fails
    assert len(state.failed_txns) <= window + window // 8 + 1
    assert min(state.failed_txns) >= state.applied_offset - window - window // 8 - 1


def test_the_materializer_view_refuses_rather_than_guess() -> None:
    state = KeyValueState(outcome_window=10)
    state.apply(Batch(0, 1, _cas(b"k", 3, b"x")))
    for _ in range(30):
        state.apply(Batch(state.applied_offset, 1, (Record(b"p", b"v", 5),)))
    with pytest.raises(OutcomeUnknown, match="offset 0"):
        state.known_outcomes(0, state.applied_offset)
    held = KeyValueState(outcome_window=10)
    held.outcome_hold = lambda: 0
    held.apply(Batch(0, 1, _cas(b"k", 3, b"x")))
    for _ in range(30):
        held.apply(Batch(held.applied_offset, 1, (Record(b"p", b"v", 5),)))
    failed, _ = held.known_outcomes(0, held.applied_offset)
    assert list(failed) == [0] and failed[0].size == 1
    with pytest.raises(OutcomeUnknown):  # publicly still unknown: the horizon is the window
        held.txn_failure(0)


def test_snapshot_file_carries_where_outcomes_start() -> None:
    state = KeyValueState(outcome_window=5)
    for _ in range(20):
        state.apply(Batch(state.applied_offset, 1, _cas(b"k", 9, b"x")))
    loaded = _snapshot_round_trip(state, 5)
    assert loaded.outcomes_from == 15 == loaded.outcome_horizon
    assert loaded.txns_in_window() == state.txns_in_window()
    # A file written before kraft.outcomes.from held the default window before its end.
    sid = OffsetAndEpoch(20, 1)
    old = decode_snapshot(b"".join(encode_snapshot(sid, [], b"", 0,
                                                   failed_txns=state.txns_in_window())),
                          sid, "old")
    assert old.outcomes_from is None
    legacy = KeyValueState()
    legacy.load([], 20, 1, b"", failed_txns=old.failed_txns)
    assert legacy.outcomes_from == 0
    big = OffsetAndEpoch(3 * TXN_OUTCOME_WINDOW, 1)
    legacy.load([], big.offset, 1, b"")
    assert legacy.outcomes_from == 2 * TXN_OUTCOME_WINDOW
    with pytest.raises(ValueError, match="outside"):
        list(encode_snapshot(sid, [], b"", 0, outcomes_from=21))
    with pytest.raises(ValueError, match="outcomes start at 21"):
        KeyValueState().load([], 20, 1, b"", outcomes_from=21)


def test_a_malformed_outcomes_from_header_is_refused() -> None:
    from kraft_spark.log.codec import decode_batch, encode_batch
    from kraft_spark.raft.snapshot_api import InvalidSnapshotError

    sid = OffsetAndEpoch(20, 1)
    chunks = list(encode_snapshot(sid, [], b"", 0, outcomes_from=3))
    header, _ = decode_batch(chunks[0], 0)
    record = header.records[0]
    bad = replace(record, headers=tuple((n, b"\x00" if n == OUTCOMES_FROM_HEADER else v)
                                        for n, v in record.headers))
    chunks[0] = encode_batch(Batch(0, 1, (bad,), is_control=True))
    with pytest.raises(InvalidSnapshotError, match=OUTCOMES_FROM_HEADER):
        decode_snapshot(b"".join(chunks), sid, "bad")
