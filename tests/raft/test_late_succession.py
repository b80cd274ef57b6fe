"""Graceful handoff when the first successor's Vote overtakes the resigning leader's
EndQuorumEpoch (docs/concepts/protocol.md): a voter that rejected that Vote (its log is ahead)
still campaigns at
its successor time, not after a whole election timeout."""

from __future__ import annotations

import random

from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    ErrorCode,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from kraft_spark.raft.records import Batch, Record
from kraft_spark.raft.state import Role
from kraft_spark.raft.vote_rules import successor_backoff_ms
from kraft_spark.sim.memlog import MemoryLog

CLUSTER = "unit-cluster"
CONFIG = QuorumConfig()
T0 = 50_000


def follower_of_1_with_one_record() -> RaftCore:
    """Node 3, Follower of node 1 in epoch 1, holding one record of epoch 1."""
    log = MemoryLog()
    log.append(Batch(0, 1, (Record(None, b"a"),)))
    log.flush()
    core = RaftCore(node_id=3, cluster_id=CLUSTER, voters=(1, 2, 3), log=log, config=CONFIG,
                    rng=random.Random(7), now_ms=T0)
    core.handle_request(T0, 1, "bqe", BeginQuorumEpochRequest(CLUSTER, 1, 1))
    core.take_ready()
    assert core.role is Role.FOLLOWER and core.epoch == 1
    assert core.fetch_in_flight is not None
    return core


def vote_from_2(core: RaftCore, now: int, last: tuple[int, int]) -> VoteResponse:
    core.handle_request(now, 2, "vote", VoteRequest(CLUSTER, 2, 2, last[0], last[1]))
    [reply] = core.take_ready().replies
    assert isinstance(reply.message, VoteResponse)
    return reply.message


def end_quorum_epoch(core: RaftCore, now: int) -> EndQuorumEpochResponse:
    core.handle_request(now, 1, "eqe", EndQuorumEpochRequest(CLUSTER, 1, 1, (2, 3)))
    [reply] = core.take_ready().replies
    assert isinstance(reply.message, EndQuorumEpochResponse)
    return reply.message


def test_a_late_end_quorum_epoch_still_sets_the_successor_time() -> None:
    core = follower_of_1_with_one_record()
    # Successor 0 (n2) campaigns at once; its Vote arrives first and its log is behind ours.
    assert not vote_from_2(core, T0 + 1, last=(0, 0)).vote_granted
    assert core.role is Role.UNATTACHED and core.epoch == 2
    assert core.election_deadline >= T0 + 1 + CONFIG.election_timeout_ms - 1
    # The EndQuorumEpoch of epoch 1 arrives after: fenced, but we are successor 1.
    assert end_quorum_epoch(core, T0 + 2).error == ErrorCode.FENCED_LEADER_EPOCH
    delay = successor_backoff_ms(1, CONFIG.retry_backoff_ms, CONFIG.election_backoff_max_ms)
    assert core.election_deadline == T0 + 2 + delay
    core.poll(core.election_deadline)
    assert core.role is Role.PROSPECTIVE and core.epoch == 2  # pre-votes first (KIP-996)


def test_a_voter_that_granted_the_vote_ignores_a_late_end_quorum_epoch() -> None:
    core = follower_of_1_with_one_record()
    assert vote_from_2(core, T0 + 1, last=(1, 1)).vote_granted  # as up to date: granted
    deadline = core.election_deadline
    assert end_quorum_epoch(core, T0 + 2).error == ErrorCode.FENCED_LEADER_EPOCH
    assert core.election_deadline == deadline  # the candidate we voted for is not disturbed


def test_in_order_end_quorum_epoch_is_unchanged() -> None:
    core = follower_of_1_with_one_record()
    assert end_quorum_epoch(core, T0 + 1).error == ErrorCode.NONE
    delay = successor_backoff_ms(1, CONFIG.retry_backoff_ms, CONFIG.election_backoff_max_ms)
    assert core.followed.fetch_deadline == T0 + 1 + delay


def test_a_fetch_answered_before_the_resignation_does_not_undo_the_succession() -> None:
    """The resigning leader answered our parked Fetch, then sent EndQuorumEpoch on another
    connection; we read the EndQuorumEpoch first. The late Fetch response must not push our
    campaign back by a whole fetch timeout."""
    core = follower_of_1_with_one_record()
    fetch_id = core.fetch_in_flight
    assert fetch_id is not None
    assert end_quorum_epoch(core, T0 + 1).error == ErrorCode.NONE
    delay = successor_backoff_ms(1, CONFIG.retry_backoff_ms, CONFIG.election_backoff_max_ms)
    assert core.followed.fetch_deadline == T0 + 1 + delay
    core.handle_response(T0 + 2, 1, fetch_id, FetchResponse(ErrorCode.NONE, 1, 1, 1))
    assert core.followed.fetch_deadline == T0 + 1 + delay
    assert core.high_watermark == 1  # the response itself is still used
    core.poll(T0 + 1 + delay)
    assert core.role is Role.PROSPECTIVE and core.epoch == 1  # pre-votes first (KIP-996)


def test_a_later_epoch_seen_in_a_response_keeps_the_successor_time() -> None:
    """The resigned leader already moved to epoch 2 (the first successor's Vote reached it)
    and answers our Fetch with that epoch and no leader: we become Unattached(2), and still
    campaign at our successor time rather than after a fresh election timeout."""
    core = follower_of_1_with_one_record()
    fetch_id = core.fetch_in_flight
    assert fetch_id is not None
    assert end_quorum_epoch(core, T0 + 1).error == ErrorCode.NONE
    delay = successor_backoff_ms(1, CONFIG.retry_backoff_ms, CONFIG.election_backoff_max_ms)
    stale = FetchResponse(ErrorCode.FENCED_LEADER_EPOCH, -1, 2, 0)
    core.handle_response(T0 + 2, 1, fetch_id, stale)
    assert core.role is Role.UNATTACHED and core.epoch == 2
    assert core.election_deadline == T0 + 1 + delay
