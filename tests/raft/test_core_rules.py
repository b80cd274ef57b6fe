"""Unit tests of the core's pure rules: quorum arithmetic, votes, divergence, KIP-836, producers."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.producers import (
    KEYED_PRODUCER_BASE,
    ProducerStateTable,
    SequenceCheck,
    key_producer_id,
)
from kraft_spark.raft.progress import MAX_OBSERVERS, LeaderProgress, ReplicaProgress
from kraft_spark.raft.quorum import Outcome, VoteTally, majority, majority_offset
from kraft_spark.raft.records import (
    Batch,
    LeaderChange,
    Record,
    decode_leader_change,
    encode_leader_change,
)
from kraft_spark.raft.replication import diverging_epoch, truncation_offset
from kraft_spark.raft.state import (
    ALLOWED_TRANSITIONS,
    IllegalTransitionError,
    Role,
    check_transition,
)
from kraft_spark.raft.vote_rules import (
    decide_vote,
    election_timeout_ms,
    failed_election_backoff_ms,
    log_is_up_to_date,
)
from kraft_spark.sim.memlog import MemoryLog


@given(st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=9))
def test_majority_offset_matches_naive_definition(offsets: list[int]) -> None:
    # Naive: the largest offset that at least a majority of entries reach.
    naive = max(o for o in offsets if sum(1 for x in offsets if x >= o) >= majority(len(offsets)))
    assert majority_offset(offsets) == naive


@given(st.integers(min_value=1, max_value=7),
       st.lists(st.tuples(st.integers(min_value=1, max_value=6), st.booleans()), max_size=20))
def test_a_vote_tally_counts_each_voters_final_answer(
    n_voters: int, answers: list[tuple[int, bool]]
) -> None:
    """Against a naive replay: a voter's grant is final, a refusal counts only until it grants;
    the round is won by a majority of grants, else lost by a majority of refusals."""
    tally = VoteTally.opened_by(0)
    granted, refused = {0}, set()
    for voter, grants in answers:
        if grants:
            tally.grant(voter)
            granted.add(voter)
            refused.discard(voter)
        else:
            tally.reject(voter)
            if voter not in granted:
                refused.add(voter)
    assert (tally.granted, tally.rejected) == (granted, refused)
    assert not tally.granted & tally.rejected
    expected = (Outcome.WON if len(granted) >= majority(n_voters)
                else Outcome.LOST if len(refused) >= majority(n_voters) else Outcome.OPEN)
    assert tally.outcome(n_voters) is expected


def test_vote_rules_in_spec_order() -> None:
    base = {"candidate_id": 2, "voters": (0, 1, 2), "may_vote": True, "leader_known": False}
    assert decide_vote(**base, voted_id=-1, log_ok=True).granted
    assert decide_vote(**base, voted_id=2, log_ok=True).granted  # same candidate again
    refused = decide_vote(**base, voted_id=1, log_ok=True)
    assert not refused.granted and "already voted for 1" in refused.reason
    assert not decide_vote(**base, voted_id=-1, log_ok=False).granted
    assert not decide_vote(**{**base, "candidate_id": 9}, voted_id=-1, log_ok=True).granted
    assert not decide_vote(**{**base, "may_vote": False}, voted_id=-1, log_ok=True).granted


def test_log_up_to_date_is_lexicographic() -> None:
    assert log_is_up_to_date(3, 10, 2, 50)
    assert not log_is_up_to_date(2, 49, 2, 50)
    assert log_is_up_to_date(2, 50, 2, 50)


def test_timers_are_bounded_and_seeded() -> None:
    rng_a, rng_b = random.Random(5), random.Random(5)
    draws = [election_timeout_ms(rng_a, 1000) for _ in range(200)]
    assert draws == [election_timeout_ms(rng_b, 1000) for _ in range(200)]
    assert all(1000 <= d < 2000 for d in draws)
    backoffs = [failed_election_backoff_ms(rng_a, r, 20, 1000) for r in range(30)]
    assert all(0 < b <= 1000 for b in backoffs)


def _log(*epochs_and_counts: tuple[int, int]) -> MemoryLog:
    log = MemoryLog()
    offset = 0
    for epoch, count in epochs_and_counts:
        for _ in range(count):
            log.append(Batch(offset, epoch, (Record(None, b"v"),)))
            offset += 1
    return log


def test_diverging_epoch_and_truncation_converge_in_two_steps() -> None:
    leader = _log((1, 10), (2, 5), (4, 5))
    follower = _log((1, 10), (3, 10))
    first = diverging_epoch(leader, follower.end_offset(), follower.last_epoch())
    assert first == OffsetAndEpoch(15, 2)  # largest leader epoch <= 3 is 2, ending at 15
    follower.truncate_to(truncation_offset(follower, first))
    assert follower.end_offset() == 10  # the follower does not hold epoch 2 at all
    assert diverging_epoch(leader, follower.end_offset(), follower.last_epoch()) is None


def test_consistent_fetch_positions_are_accepted() -> None:
    leader = _log((1, 10), (2, 5))
    assert diverging_epoch(leader, 0, 0) is None
    assert diverging_epoch(leader, 10, 1) is None  # start of the next epoch
    assert diverging_epoch(leader, 12, 2) is None
    assert diverging_epoch(leader, 16, 2) == OffsetAndEpoch(15, 2)  # beyond the leader's end


def test_kip836_caught_up_timestamps() -> None:
    p = ReplicaProgress(1)
    p.on_fetch(now_ms=100, fetch_offset=5, leader_end=10)  # behind, nothing known yet
    assert (p.last_fetch_ts, p.last_caught_up_ts, p.end_offset) == (100, -1, 5)
    p.on_fetch(now_ms=200, fetch_offset=10, leader_end=12)  # reached the previous leader end
    assert p.last_caught_up_ts == 100
    p.on_fetch(now_ms=300, fetch_offset=12, leader_end=12)  # fully caught up
    assert p.last_caught_up_ts == 300


def test_producer_dedup_and_sequence_gaps() -> None:
    table = ProducerStateTable()
    batch = Batch(7, 1, (Record(None, b"a"), Record(None, b"b")), False, 42, 0, 0)
    assert table.check(42, 0, 0, 2)[0] is SequenceCheck.NEW
    table.on_append(batch)
    verdict, original = table.check(42, 0, 0, 2)
    assert verdict is SequenceCheck.DUPLICATE and original is not None
    assert (original.base_offset, original.last_offset) == (7, 8)
    assert table.check(42, 0, 2, 1)[0] is SequenceCheck.NEW
    # Ahead of the next expected sequence (2): the batches between were acknowledged by a
    # leader whose log this node lacks; behind it and no known batch: out of order.
    assert table.check(42, 0, 5, 1)[0] is SequenceCheck.AHEAD
    assert table.check(42, 0, 1, 1)[0] is SequenceCheck.OUT_OF_ORDER
    table.on_truncate(7)
    assert table.check(42, 0, 0, 2)[0] is SequenceCheck.NEW


def _one(offset: int, producer_id: int, seq: int = 0) -> Batch:
    return Batch(offset, 1, (Record(None, b"v"),), False, producer_id, 0, seq)


def test_producer_table_is_bounded_and_evicts_the_same_producers_on_every_replica() -> None:
    # Replica A appends 1..5 then 2 again, and B holds the same log from a snapshot of A's
    # table taken halfway plus the rest: both must forget the same producer when full.
    a = ProducerStateTable(max_producers=3)
    for offset, pid in enumerate([1, 2, 3]):
        a.on_append(_one(offset, pid))
    b = ProducerStateTable(max_producers=3)
    b.load(a.export())
    for table in (a, b):
        table.on_append(_one(3, 1, seq=1))  # producer 1 is now the newest
        table.on_append(_one(4, 4))  # full: producer 2 (newest batch at 1) is forgotten
    assert len(a) == len(b) == 3
    assert a.export() == b.export()
    assert a.check(2, 0, 0, 1)[0] is SequenceCheck.NEW  # forgotten
    assert a.check(1, 0, 1, 1)[0] is SequenceCheck.DUPLICATE
    # A truncation keeps the order a replica that never had the cut batches has.
    c = ProducerStateTable(max_producers=3)
    for offset, pid in enumerate([1, 3, 1]):
        c.on_append(_one(offset, pid, seq=0 if offset < 2 else 1))
    c.on_truncate(2)  # producer 1's newest batch is now offset 0, before producer 3's
    fresh = ProducerStateTable(max_producers=3)
    fresh.on_append(_one(0, 1))
    fresh.on_append(_one(1, 3))
    assert c.export() == fresh.export()


def test_idempotency_keys_have_their_own_producer_ids() -> None:
    ids = {key_producer_id(f"key-{i}") for i in range(1000)}
    assert len(ids) == 1000 and min(ids) >= KEYED_PRODUCER_BASE and max(ids) < 1 << 63
    assert key_producer_id("key-1") == key_producer_id("key-1")


def test_leader_change_message_round_trip() -> None:
    msg = LeaderChange(leader_id=2, voters=(0, 1, 2), granting_voters=(1, 2))
    assert decode_leader_change(encode_leader_change(msg)) == msg
    with pytest.raises(ValueError):
        decode_leader_change(encode_leader_change(msg)[:-4])


def test_transition_table_is_enforced() -> None:
    assert (Role.FOLLOWER, Role.LEADER) not in ALLOWED_TRANSITIONS
    with pytest.raises(IllegalTransitionError):
        check_transition(Role.FOLLOWER, Role.LEADER, may_vote=True, epoch_changed=True)
    with pytest.raises(IllegalTransitionError):
        check_transition(Role.UNATTACHED, Role.CANDIDATE, may_vote=False, epoch_changed=True)
    check_transition(Role.CANDIDATE, Role.LEADER, may_vote=True, epoch_changed=False)


def test_observers_tracked_are_bounded_stalest_forgotten_first() -> None:
    """Anyone can fetch with a made-up replica id: the leader tracks at most MAX_OBSERVERS and
    forgets the one seen least recently; voters are never affected."""
    progress = LeaderProgress(local_id=0, voters=(0, 1, 2))
    for i in range(MAX_OBSERVERS + 5):
        assert not progress.on_fetch(1000 + i, now_ms=i, fetch_offset=0, leader_end=10)
    assert len(progress.observers) == MAX_OBSERVERS
    assert min(progress.observers) == 1005 and max(progress.observers) == 1000 + MAX_OBSERVERS + 4
    # An observer that keeps fetching stays; the stalest other one goes.
    progress.on_fetch(1005, now_ms=10_000, fetch_offset=0, leader_end=10)
    progress.on_fetch(9999, now_ms=10_001, fetch_offset=0, leader_end=10)
    assert 1005 in progress.observers and 1006 not in progress.observers
    assert progress.on_fetch(1, now_ms=10_002, fetch_offset=10, leader_end=10)  # a voter counts
    assert set(progress.voters) == {1, 2}
