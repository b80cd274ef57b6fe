"""The MVCC history (``kraft_spark.store.history``) against a naive model that keeps
everything: the real state machine's entries copied at every revision (a conditional group's
writes all at its first offset). Fed exactly as a node
feeds it (``history_feed.feed_batch`` with the state's judgement: failed conditional writes,
a lease's deletes), it must answer every revision from its ``oldest`` on as the state was then,
and drop what compaction and retention allow, never more."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_spark.raft.records import Batch, Record
from kraft_spark.state.machine import KeyValueState
from kraft_spark.store.history import History, Revision
from kraft_spark.store.history_feed import compact_header, feed_batch
from kraft_spark.store.leases import LEASE_HEADER, LEASE_OP_HEADER, encode_op
from kraft_spark.store.txn import TXN_HEADER, Condition, encode_header

KEYS = [b"a", b"b", b"c", b"d/1", b"d/2"]
Model = dict[bytes, tuple[bytes, int, int, int, int]]
Step = tuple[Any, ...]


def _model(state: KeyValueState) -> Model:
    return {k: (e.value, e.offset, e.create_offset, e.version, e.lease) for k, e in state.items()}


def _as_model(found: list[tuple[bytes, Revision]]) -> Model:
    out: Model = {}
    for key, r in found:
        assert r.value is not None
        out[key] = (r.value, r.mod, r.create, r.version, r.lease)
    return out


op = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(KEYS), st.binary(max_size=3)),
    st.tuples(st.just("del"), st.sampled_from(KEYS)),
    # Two distinct keys put and "c" deleted, if the first key's version is the integer.
    st.tuples(st.just("txn"), st.lists(st.sampled_from([b"a", b"b", b"d/1", b"d/2"]),
                                       min_size=2, max_size=2, unique=True),
              st.integers(0, 3)),
    st.tuples(st.just("lease_put"), st.sampled_from(KEYS), st.integers(1, 2)),
    st.tuples(st.just("grant"), st.integers(1, 2)),
    st.tuples(st.just("revoke"), st.integers(1, 2)),
    st.tuples(st.just("compact"), st.integers(0, 40)),
    st.just(("control",)),
)


def _records(step: Step) -> tuple[tuple[Record, ...], bool]:
    kind = step[0]
    if kind == "put":
        return (Record(step[1], step[2]),), False
    if kind == "del":
        return (Record(step[1], None),), False
    if kind == "txn":  # three writes, applied only if the first key's version is step[2]
        first, second = step[1]
        header = (TXN_HEADER, encode_header(3, [Condition(first, version=step[2])]))
        return (Record(first, b"t", headers=(header,)), Record(second, b"u"),
                Record(b"c", None)), False
    if kind == "lease_put":
        return (Record(step[1], b"l", headers=((LEASE_HEADER, str(step[2]).encode()),)),), False
    if kind == "grant":
        return (Record(None, b"", headers=((LEASE_OP_HEADER,
                                            encode_op("grant", step[1], ttl_ms=1000)),)),), False
    if kind == "revoke":
        return (Record(None, b"", headers=((LEASE_OP_HEADER, encode_op("revoke", step[1])),)),
                ), False
    if kind == "compact":
        return (Record(None, None, headers=(compact_header(step[1]),)),), False
    return (Record(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00"),), True


def _run(steps: list[Step], retention: int) -> tuple[History, dict[int, Model], KeyValueState]:
    state = KeyValueState()
    history = History(retention)
    history.reset(state.items(), 0)
    models: dict[int, Model] = {}

    def failed(offset: int) -> int:
        failure = state.txn_failure(offset)
        return failure.size if failure is not None else 0

    for step in steps:
        records, control = _records(step)
        batch = Batch(state.applied_offset, 1, records, is_control=control)
        state.apply(batch)
        feed_batch(history, batch, failed, state.leases.deleted_at)
        # Every batch here is one write (a group at most): a revision inside it reads as the
        # state after it, as etcd's one revision per Txn (the group's first offset).
        for revision in range(batch.base_offset, batch.next_offset):
            models[revision] = _model(state)
    return history, models, state


@settings(max_examples=150, deadline=None)
@given(st.lists(op, min_size=1, max_size=40), st.integers(1, 30))
def test_every_revision_from_oldest_on_reads_as_the_state_did(steps: list[Step],
                                                              retention: int) -> None:
    history, models, state = _run(steps, retention)
    assert history.revision == state.applied_offset - 1
    assert history.oldest >= history.revision - retention
    for revision, model in models.items():
        if revision < history.oldest:
            continue
        assert _as_model(history.range(b"\x00", b"\xff", revision)) == model, revision
        for key in KEYS:
            found = history.get(key, revision)
            assert (found is None) == (key not in model)
    # Bounded: what is held is the retained writes plus one per live key at the point.
    assert len(history) <= (history.revision - history.oldest) * 3 + len(KEYS)


@settings(max_examples=100, deadline=None)
@given(st.lists(op.filter(lambda step: step[0] != "compact"), min_size=1, max_size=30))
def test_written_gives_each_write_and_the_value_before_it(steps: list[Step]) -> None:
    history, models, _ = _run(steps, 1000)
    for model in models.values():
        for key, (value, mod, create, version, lease) in model.items():
            write, prev = history.written(key, mod)
            assert write == Revision(mod, value, create, version, lease)
            if mod - 1 in models:  # the state right before the write is known
                old = models[mod - 1].get(key)
                mine = (prev.value, prev.mod) if prev is not None else None
                assert mine == ((old[0], old[1]) if old is not None else None)


def test_compaction_keeps_the_last_live_revision_and_drops_tombstones() -> None:
    history = History(100)
    history.reset((), 0)
    history.put(1, b"k", b"v1")
    history.put(2, b"k", b"v2")
    history.put(3, b"gone", b"x")
    history.delete(4, b"gone")
    history.put(5, b"k", b"v3")
    history.advance(6)
    assert history.written(b"k", 2) == (Revision(2, b"v2", 1, 2), Revision(1, b"v1", 1, 1))
    history.compact(4)
    assert history.compacted == 4 and history.oldest == 4
    assert history.get(b"k", 4) == Revision(2, b"v2", 1, 2)
    assert history.get(b"k", 5) == Revision(5, b"v3", 1, 3)
    assert history.get(b"gone", 4) is None and len(history) == 2  # k at 2 and 5
    # The write before a kept one is gone: no previous value, as etcd omits prev_kv.
    assert history.written(b"k", 2) == (Revision(2, b"v2", 1, 2), None)
    assert history.written(b"k", 1) == (None, None)
    history.compact(3)  # below the point: nothing
    assert history.compacted == 4
    history.compact(99)  # above the newest: stops there
    assert history.compacted == 5


def test_a_reset_starts_from_the_state_without_copying_entries() -> None:
    state = KeyValueState()
    state.apply(Batch(0, 1, (Record(b"k", b"1"), Record(b"k", b"2"), Record(b"j", b"3"))))
    history = History(10)
    history.reset(state.items(), state.applied_offset)
    assert history.start == history.oldest == 2 and history.compacted == 0
    assert history.get(b"k", 2) == Revision(1, b"2", 0, 2)
    history.put(3, b"k", b"4")
    history.advance(4)
    assert history.get(b"k", 2) == Revision(1, b"2", 0, 2)
    assert history.written(b"k", 3) == (Revision(3, b"4", 0, 3), Revision(1, b"2", 0, 2))


def test_a_group_writing_one_key_twice_keeps_both_writes_at_its_revision() -> None:
    """An HTTP conditional group may write one key twice (etcd's Txn never does): both
    writes are at the group's revision, in order, the state's version counting both."""
    state = KeyValueState()
    history = History(10)
    history.reset(state.items(), 0)
    header = (TXN_HEADER, encode_header(3, []))
    batch = Batch(0, 1, (Record(b"k", b"1", headers=(header,)), Record(b"k", b"2"),
                         Record(b"j", b"3")))
    state.apply(batch)
    feed_batch(history, batch, lambda offset: 0, state.leases.deleted_at)
    entry = state.get(b"k")
    assert entry is not None and (entry.offset, entry.create_offset, entry.version) == (0, 0, 2)
    assert history.written(b"k", 0) == (Revision(0, b"1", 0, 1), None)
    assert history.written(b"k", 0, 1) == (Revision(0, b"2", 0, 2), Revision(0, b"1", 0, 1))
    assert history.written(b"k", 0, 2) == (None, None)
    assert history.get(b"k", 2) == Revision(0, b"2", 0, 2)
