"""``JudgedReplay`` (kraft_spark/state/judged_replay.py) against the state machine itself, on
random logs of puts, deletes, conditional groups that hold or fail, leased writes (to leases
that exist or not), grants, revocations and control records: replayed from any batch boundary
on the entries as of it, with the full state's judgement, it holds exactly the full state's
entries; from seeds of unknown creation, every field but create_offset and version."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from kraft_spark.raft.records import Batch
from kraft_spark.state.judged_replay import UNKNOWN_CREATE, JudgedReplay, write_revisions
from kraft_spark.state.machine import Entry, KeyValueState
from tests.store.test_history import KEYS, Step, _records, op

steps_without_compact = st.lists(op.filter(lambda step: step[0] != "compact"), min_size=1,
                                 max_size=40)
# Each path of the judgement, whatever the random search finds: a revocation deleting a leased
# key; conditional groups that fail and hold; a write to a lease that does not exist.
REVOKED = [("grant", 1), ("lease_put", b"a", 1), ("put", b"b", b"1"), ("revoke", 1)]
GROUPS = [("put", b"a", b"x"), ("txn", [b"a", b"b"], 0), ("txn", [b"a", b"b"], 1),
          ("put", b"c", b"y")]
NO_LEASE = [("put", b"b", b"1"), ("lease_put", b"b", 2), ("put", b"d/1", b"z")]


def _run(steps: list[Step]) -> tuple[list[Batch], KeyValueState, dict[int, dict[bytes, Entry]]]:
    """The log, the state after it, and the entries after each batch (by its next offset)."""
    state = KeyValueState()
    batches: list[Batch] = []
    entries: dict[int, dict[bytes, Entry]] = {0: {}}
    for step in steps:
        records, control = _records(step)
        batch = Batch(state.applied_offset, 1, records, is_control=control)
        state.apply(batch)
        batches.append(batch)
        entries[batch.next_offset] = state.copy_entries()
    return batches, state, entries


def _replay(batches: list[Batch], state: KeyValueState, cut: int,
            seed: dict[bytes, Entry]) -> JudgedReplay:
    failed = state.failed_txns
    replay = JudgedReplay(seed.items(), lambda o: failed[o].size if o in failed else 0,
                          lambda o: state.leases.deleted.get(o, ()))
    replay.replay(batches, cut)
    return replay


@settings(max_examples=100, deadline=None)
@given(steps_without_compact, st.integers(0, 40))
@example(REVOKED, 1)
@example(GROUPS, 1)
@example(NO_LEASE, 1)
def test_a_replay_from_any_batch_holds_the_state_machines_entries(steps: list[Step],
                                                                   at: int) -> None:
    batches, state, entries = _run(steps)
    cut = sorted(entries)[at % len(entries)]
    replay = _replay(batches, state, cut, entries[cut])
    for key in KEYS:
        assert replay.get(key) == state.get(key), key
    revisions = write_revisions(batches, cut, lambda o: state.failed_txns[o].size
                                if o in state.failed_txns else 0)
    assert all(cut <= revision <= offset for offset, revision in revisions.items())
    assert {e.offset for e in state.copy_entries().values() if e.offset >= cut} <= set(
        revisions.values())


@settings(max_examples=100, deadline=None)
@given(steps_without_compact, st.integers(0, 40))
@example(REVOKED, 1)
@example(GROUPS, 1)
@example(NO_LEASE, 1)
def test_seeds_of_unknown_creation_leave_only_creation_and_version_unknown(
        steps: list[Step], at: int) -> None:
    batches, state, entries = _run(steps)
    cut = sorted(entries)[at % len(entries)]
    unknown = {k: e._replace(create_offset=UNKNOWN_CREATE, version=0)
               for k, e in entries[cut].items()}
    replay = _replay(batches, state, cut, unknown)
    for key in KEYS:
        got, full = replay.get(key), state.get(key)
        assert (got is None) == (full is None), key
        if got is None or full is None:
            continue
        if got.create_offset == UNKNOWN_CREATE:  # continued from before the cut
            assert full.create_offset < cut and got._replace(
                create_offset=full.create_offset, version=full.version) == full
        else:
            assert got == full
