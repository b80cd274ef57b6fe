"""Vote, BeginQuorumEpoch and EndQuorumEpoch are voter-only requests: one from a node id that
is not in the voter set is refused with INCONSISTENT_VOTER_SET and changes nothing, not even
the epoch. Anyone can open a connection to a voter; before this rule one Vote of a stranger
with epoch 2^31 - 1 moved every voter to that epoch for good (no later election could be
encoded), and a stranger's BeginQuorumEpoch made a voter follow a leader that does not exist.
"""

from __future__ import annotations

import itertools
import random

import pytest

from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.events import CoreEvent, ForeignCluster
from kraft_spark.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    VoteRequest,
)
from kraft_spark.raft.records import Batch, Record
from kraft_spark.raft.state import Role
from kraft_spark.sim.memlog import MemoryLog

CLUSTER = "unit-cluster"
T0 = 50_000
INT32_MAX = 2**31 - 1
STRANGER = 999


def follower() -> RaftCore:
    """Node 3, Follower of node 1 in epoch 1, holding one record."""
    log = MemoryLog()
    log.append(Batch(0, 1, (Record(None, b"a"),)))
    log.flush()
    core = RaftCore(node_id=3, cluster_id=CLUSTER, voters=(1, 2, 3), log=log,
                    config=QuorumConfig(), rng=random.Random(7), now_ms=T0)
    core.handle_request(T0, 1, "bqe", BeginQuorumEpochRequest(CLUSTER, 1, 1))
    core.take_ready()
    assert core.role is Role.FOLLOWER and (core.epoch, core.leader_id) == (1, 1)
    return core


@pytest.mark.parametrize(
    "request_",
    [
        VoteRequest(CLUSTER, INT32_MAX, STRANGER, 1, 1),
        VoteRequest(CLUSTER, 2, -1, 1, 1),
        BeginQuorumEpochRequest(CLUSTER, STRANGER, INT32_MAX),
        BeginQuorumEpochRequest(CLUSTER, STRANGER, 2),
        EndQuorumEpochRequest(CLUSTER, STRANGER, INT32_MAX, (3,)),
        EndQuorumEpochRequest(CLUSTER, STRANGER, 1, (3,)),
    ],
    ids=["vote-max-epoch", "vote-negative-id", "bqe-max-epoch", "bqe-next-epoch",
         "eqe-max-epoch", "eqe-same-epoch"],
)
def test_a_voter_only_request_from_a_stranger_changes_nothing(request_: object) -> None:
    core = follower()
    deadline = core.election_deadline
    core.handle_request(T0 + 1, STRANGER, "req", request_)
    ready = core.take_ready()
    [reply] = ready.replies
    assert reply.message.error == ErrorCode.INCONSISTENT_VOTER_SET  # type: ignore[attr-defined]
    assert ready.persist is None  # no new quorum-state on disk
    assert (core.role, core.epoch, core.leader_id, core.voted_id) == (Role.FOLLOWER, 1, 1, -1)
    assert core.election_deadline == deadline


def test_the_same_vote_from_a_voter_is_still_adopted() -> None:
    """The check is on who asks, not on what: a voter's Vote of a later epoch moves us."""
    core = follower()
    core.handle_request(T0 + 1, 2, "vote", VoteRequest(CLUSTER, 5, 2, 1, 1))
    ready = core.take_ready()
    [reply] = ready.replies
    assert reply.message.error == ErrorCode.NONE  # type: ignore[attr-defined]
    assert core.epoch == 5 and ready.persist is not None


def test_an_observer_of_another_cluster_says_so_and_retries_slowly() -> None:
    """An observer whose directory was formatted for another cluster: every voter answers its
    Fetch INCONSISTENT_CLUSTER_ID. It flipped Follower/Unattached ~90 times a second without
    ever naming the cause; now it keeps its state (another cluster's epoch and leader mean
    nothing here), says why once per 10 s, and retries after 1 s."""
    core = RaftCore(node_id=9, cluster_id="wrong-cluster", voters=(1, 2, 3), log=MemoryLog(),
                    config=QuorumConfig(), rng=random.Random(3), now_ms=T0)
    core.take_ready()
    notes: list[CoreEvent] = []
    now, refused_at = T0, []
    while now < T0 + 15_000:
        core.poll(now)
        ready = core.take_ready()
        notes += ready.events
        for fetch in (s for s in ready.sends if isinstance(s.message, FetchRequest)):
            refused_at.append(now)
            core.handle_response(now, fetch.dest, fetch.request_id,
                                 FetchResponse(ErrorCode.INCONSISTENT_CLUSTER_ID, 2, 7, 0))
            notes += core.take_ready().events
            assert core.epoch == 0 and core.leader_id == -1
        now += 10
    gaps = [b - a for a, b in itertools.pairwise(refused_at)]
    assert len(refused_at) >= 10 and min(gaps) >= 1000, refused_at
    assert len(notes) == 2, notes  # at 0 s and 10 s
    assert isinstance(notes[0], ForeignCluster) and notes[0].cluster_id == "wrong-cluster"
    assert "INCONSISTENT_CLUSTER_ID (our cluster id 'wrong-cluster' is not" in str(notes[0])


def test_an_unlisted_candidate_is_heard_only_when_it_could_be_a_voter_we_do_not_know() -> None:
    """KIP-853: our voter set may lag (the candidate's addition is in records we have not
    fetched). A candidate we do not list gets a vote by the usual rules when its log is as up
    to date as ours, we hear from no leader, and its epoch is at most ours + 1; otherwise it
    is refused without any change, as a stranger."""
    for request_ in (
        VoteRequest(CLUSTER, 2, STRANGER, 0, 0),  # behind our log
        VoteRequest(CLUSTER, 3, STRANGER, 1, 1),  # more than one epoch ahead
    ):
        core = follower()
        core.handle_request(T0 + 1, STRANGER, "req", request_)
        [reply] = core.take_ready().replies
        assert reply.message.error == ErrorCode.INCONSISTENT_VOTER_SET  # type: ignore[attr-defined]
        assert core.epoch == 1
    core = follower()  # it has not fetched from leader 1 yet: it hears from nobody
    core.handle_request(T0 + 1, STRANGER, "req", VoteRequest(CLUSTER, 2, STRANGER, 1, 1))
    [reply] = core.take_ready().replies
    assert reply.message.vote_granted and core.epoch == 2  # type: ignore[attr-defined]
    # A follower that fetches from its leader does not hear an unlisted candidate.
    core = follower()
    fetch_id = core.fetch_in_flight
    assert fetch_id is not None
    core.handle_response(T0 + 2, 1, fetch_id, FetchResponse(ErrorCode.NONE, 1, 1, 1))
    assert core.hears_from_leader()
    core.handle_request(T0 + 3, STRANGER, "req", VoteRequest(CLUSTER, 2, STRANGER, 1, 1))
    [reply] = core.take_ready().replies
    assert reply.message.error == ErrorCode.INCONSISTENT_VOTER_SET  # type: ignore[attr-defined]
    assert core.epoch == 1


def test_an_observer_waiting_for_its_flush_sets_no_due_timer() -> None:
    """Seed 1793009 of the membership faults: a leader removed itself and went on as an
    observer (Unattached) with appends not yet flushed. Its next Fetch waits for the flush,
    which the shell reports with on_log_flushed; next_deadline still counted the fetch timer,
    due at once, so the node busy-looped until the flush ended."""
    log = MemoryLog()
    log.append(Batch(0, 1, (Record(b"k", b"v"),)))  # appended, not flushed
    core = RaftCore(node_id=9, cluster_id="c", voters=(1, 2, 3), log=log,
                    config=QuorumConfig(), rng=random.Random(1), now_ms=T0)
    core.take_ready()
    assert core.role is Role.UNATTACHED and not core.may_vote
    now = T0 + 10_000
    core.poll(now)
    ready = core.take_ready()
    assert ready.flush_log and not ready.sends  # the Fetch waits for the flush
    assert core.next_deadline() > now  # and no timer is due meanwhile
    log.flush()
    core.on_log_flushed(now + 1)
    assert [type(s.message) for s in core.take_ready().sends] == [FetchRequest]
