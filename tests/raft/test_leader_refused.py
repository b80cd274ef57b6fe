"""``RaftCore.on_request_failed``: a failed request, and a refused connection to the leader.

A refusal (the leader's host answers that nothing listens on its port: the process is gone)
brings a voting follower's election forward to a random delay in [0, election timeout / 2],
drawn once per leader from the injected RNG; everything else leaves the timers alone.
"""

from __future__ import annotations

import random

from kraft_spark.raft.base import InFlight
from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.events import LeaderUnreachable
from kraft_spark.raft.messages import (
    BeginQuorumEpochRequest,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from kraft_spark.raft.ready import Ready
from kraft_spark.raft.state import Role
from kraft_spark.sim.memlog import MemoryLog
from tests.core_net import grant_pre_votes

CLUSTER = "unit-cluster"
VOTERS = (1, 2, 3)
# Kafka's defaults (fetch timeout 2000 ms, election timeout 1000 ms) and Kafka's exact fetch
# timeout: the jitter is tested on its own at the end.
CONFIG = QuorumConfig(fetch_timeout_jitter_ms=0)
WINDOW = CONFIG.election_timeout_ms // 2
T0 = 10_000


def make_core(node_id: int = 2, seed: int = 0, config: QuorumConfig = CONFIG) -> RaftCore:
    core = RaftCore(
        node_id=node_id,
        cluster_id=CLUSTER,
        voters=VOTERS,
        log=MemoryLog(),
        config=config,
        rng=random.Random(seed),
        now_ms=T0,
    )
    core.take_ready()
    return core


def fetches(ready: Ready) -> list[int]:
    """Request ids of the Fetches in ``ready``."""
    return [out.request_id for out in ready.sends if isinstance(out.message, FetchRequest)]


def follow(core: RaftCore, leader: int, epoch: int, now: int) -> int:
    """Make ``core`` a Follower of ``leader`` in ``epoch``; returns its outstanding Fetch id."""
    core.handle_request(now, leader, "bqe", BeginQuorumEpochRequest(CLUSTER, leader, epoch))
    ready = core.take_ready()
    assert core.role is Role.FOLLOWER and core.leader_id == leader and core.epoch == epoch
    [fetch_id] = fetches(ready)
    return fetch_id


def test_refused_fetch_brings_the_election_forward_within_bounds() -> None:
    deadlines = set()
    for seed in range(60):
        core = make_core(seed=seed)
        fetch_id = follow(core, leader=1, epoch=1, now=T0)
        assert core.followed.fetch_deadline == T0 + CONFIG.fetch_timeout_ms
        now = T0 + 3
        core.on_request_failed(now, fetch_id, refused=True)
        assert now <= core.followed.fetch_deadline <= now + WINDOW
        assert core.role is Role.FOLLOWER  # nothing else changed yet
        events = core.take_ready().events
        if core.followed.fetch_deadline < T0 + CONFIG.fetch_timeout_ms:
            assert LeaderUnreachable(1, core.followed.fetch_deadline - now) in events, events
        deadlines.add(core.followed.fetch_deadline - now)
        # The shortened deadline fires like the fetch timeout: pre-votes (KIP-996), then a
        # Candidate of the next epoch.
        core.poll(core.followed.fetch_deadline)
        assert core.role is Role.PROSPECTIVE and core.epoch == 1
    # Randomized (so two followers rarely tie), and spread over the window.
    assert len(deadlines) > 30
    assert min(deadlines) < WINDOW // 4 and max(deadlines) > WINDOW * 3 // 4


def test_the_delay_comes_from_the_injected_rng() -> None:
    def delay(seed: int) -> int:
        core = make_core(seed=seed)
        fetch_id = follow(core, leader=1, epoch=1, now=T0)
        core.on_request_failed(T0, fetch_id, refused=True)
        return core.followed.fetch_deadline - T0

    assert [delay(s) for s in range(10)] == [delay(s) for s in range(10)]


def test_the_delay_is_drawn_once_per_leader() -> None:
    core = make_core(seed=0)
    fetch_id = follow(core, leader=1, epoch=1, now=T0)
    core.on_request_failed(T0, fetch_id, refused=True)
    first = core.followed.fetch_deadline
    retry_at = T0 + CONFIG.retry_backoff_ms
    assert first > retry_at + 10 * CONFIG.retry_backoff_ms  # seed 0 draws a long delay
    # The Fetch is retried every retry.backoff.ms and refused again: the deadline stays.
    for _ in range(10):
        assert core.take_ready().next_deadline_ms == retry_at
        core.poll(retry_at)
        [retry_id] = fetches(core.take_ready())
        core.on_request_failed(retry_at, retry_id, refused=True)
        assert core.followed.fetch_deadline == first
        retry_at += CONFIG.retry_backoff_ms


def test_a_successful_fetch_clears_the_refusal() -> None:
    core = make_core(seed=1)
    fetch_id = follow(core, leader=1, epoch=1, now=T0)
    core.on_request_failed(T0, fetch_id, refused=True)
    assert core.followed.refused
    core.poll(T0 + CONFIG.retry_backoff_ms)
    [retry_id] = fetches(core.take_ready())
    now = T0 + CONFIG.retry_backoff_ms + 1
    core.handle_response(now, 1, retry_id, FetchResponse(ErrorCode.NONE, 1, 1, 0))
    assert not core.followed.refused
    assert core.followed.fetch_deadline == now + CONFIG.fetch_timeout_ms


def test_a_failure_that_is_not_a_refusal_only_retries_the_fetch_sooner() -> None:
    core = make_core()
    fetch_id = follow(core, leader=1, epoch=1, now=T0)
    core.on_request_failed(T0 + 5, fetch_id, refused=False)  # e.g. the connection was reset
    assert core.followed.fetch_deadline == T0 + CONFIG.fetch_timeout_ms
    assert not core.followed.refused
    ready = core.take_ready()
    assert not ready.events
    # Retried after retry.backoff.ms instead of at the request's own deadline (1.5 s later).
    assert ready.next_deadline_ms == T0 + 5 + CONFIG.retry_backoff_ms
    core.poll(ready.next_deadline_ms)
    assert len(fetches(core.take_ready())) == 1


def test_a_refusal_from_an_older_epoch_is_ignored() -> None:
    core = make_core()
    old_fetch = follow(core, leader=1, epoch=1, now=T0)
    follow(core, leader=1, epoch=2, now=T0 + 1)  # the same node leads again, in epoch 2
    core.on_request_failed(T0 + 2, old_fetch, refused=True)
    assert core.followed.fetch_deadline == T0 + 1 + CONFIG.fetch_timeout_ms
    assert not core.followed.refused


def test_a_refusal_from_another_node_than_the_leader_is_ignored() -> None:
    core = make_core()
    old_fetch = follow(core, leader=1, epoch=1, now=T0)
    follow(core, leader=3, epoch=2, now=T0 + 1)  # n1 is no longer our leader
    core.on_request_failed(T0 + 2, old_fetch, refused=True)
    assert core.followed.fetch_deadline == T0 + 1 + CONFIG.fetch_timeout_ms
    # And directly: a refused Fetch to a node that is not our leader, in our epoch.
    core.fetching.maybe_hasten_election(InFlight(dest=1, kind="fetch", epoch=2, deadline=T0 + 99))
    assert core.followed.fetch_deadline == T0 + 1 + CONFIG.fetch_timeout_ms
    assert not core.followed.refused


def test_a_candidate_ignores_a_refused_fetch() -> None:
    core = make_core()
    fetch_id = follow(core, leader=1, epoch=1, now=T0)
    core.poll(T0 + CONFIG.fetch_timeout_ms)  # the plain fetch timeout
    grant_pre_votes(core, T0 + CONFIG.fetch_timeout_ms)
    assert core.role is Role.CANDIDATE and core.epoch == 2
    deadline = core.election_deadline
    core.on_request_failed(T0 + CONFIG.fetch_timeout_ms + 1, fetch_id, refused=True)
    assert core.role is Role.CANDIDATE
    assert core.election_deadline == deadline and core.campaigning.backoff_until is None


def test_observers_never_hasten_an_election() -> None:
    core = make_core(node_id=4)  # not a voter
    fetch_id = follow(core, leader=1, epoch=1, now=T0)
    core.on_request_failed(T0, fetch_id, refused=True)
    # An observer whose leader is gone looks for it elsewhere (as on a Fetch timeout).
    assert core.role is Role.UNATTACHED
    assert core.following is None  # nothing about the gone leader outlives following it


def test_unknown_or_answered_requests_are_ignored() -> None:
    core = make_core()
    follow(core, leader=1, epoch=1, now=T0)
    before = (core.role, core.followed.fetch_deadline, core.fetch_in_flight)
    core.on_request_failed(T0, 9999, refused=True)
    assert (core.role, core.followed.fetch_deadline, core.fetch_in_flight) == before


def _candidate(seed: int = 0) -> tuple[RaftCore, dict[int, int]]:
    core = make_core(seed=seed)
    core.poll(core.election_deadline)
    grant_pre_votes(core, core.now)
    assert core.role is Role.CANDIDATE
    ready = core.take_ready()
    votes = {out.dest: out.request_id for out in ready.sends
             if isinstance(out.message, VoteRequest)}
    assert sorted(votes) == [1, 3]
    return core, votes


def test_a_refused_vote_counts_as_rejected() -> None:
    core, votes = _candidate()
    now = core.now
    core.on_request_failed(now, votes[1], refused=True)
    # No majority yet.
    assert core.campaigning.tally.rejected == {1} and core.campaigning.backoff_until is None
    # The other voter rejects too (it voted for itself): a majority rejected -> back off now,
    # instead of waiting for the election timeout.
    core.handle_response(now + 1, 3, votes[3], VoteResponse(ErrorCode.NONE, -1, core.epoch, False))
    assert core.campaigning.backoff_until is not None
    assert core.campaigning.backoff_until - (now + 1) <= CONFIG.election_backoff_max_ms
    assert core.campaigning.backoff_until < core.election_deadline


def test_a_refused_vote_does_not_stop_a_win() -> None:
    core, votes = _candidate()
    core.on_request_failed(core.now, votes[1], refused=True)
    core.handle_response(core.now, 3, votes[3], VoteResponse(ErrorCode.NONE, -1, core.epoch, True))
    assert core.role is Role.LEADER


def test_a_vote_failure_that_is_not_a_refusal_waits_for_an_answer_or_the_timeout() -> None:
    core, votes = _candidate()
    core.on_request_failed(core.now, votes[1], refused=False)
    assert core.campaigning.tally.rejected == set()
    assert votes[1] in core.in_flight


def test_a_leader_keeps_retrying_begin_quorum_epoch_at_its_pace() -> None:
    core, votes = _candidate()
    core.handle_response(core.now, 3, votes[3], VoteResponse(ErrorCode.NONE, -1, core.epoch, True))
    assert core.role is Role.LEADER
    ready = core.take_ready()
    [begin_to_1] = [out.request_id for out in ready.sends
                    if isinstance(out.message, BeginQuorumEpochRequest) and out.dest == 1]
    core.on_request_failed(core.now, begin_to_1, refused=True)
    assert core.role is Role.LEADER
    assert begin_to_1 in core.in_flight  # expires at its deadline, then is sent again


def test_followers_of_one_leader_time_out_at_different_moments() -> None:
    """The fetch timeout gets a jitter in [0, election timeout / 2], drawn once per leader:
    followers that fetched in lockstep from a leader that froze do not all campaign in the
    same millisecond (which split the vote on every freeze before)."""
    jitters = set()
    for seed in range(60):
        core = make_core(seed=seed, config=QuorumConfig())  # the default jitter
        follow(core, leader=1, epoch=1, now=T0)
        jitter = core.followed.jitter_ms
        assert 0 <= jitter <= CONFIG.election_timeout_ms // 2
        assert core.followed.fetch_deadline == T0 + CONFIG.fetch_timeout_ms + jitter
        jitters.add(jitter)
        core.poll(T0 + CONFIG.fetch_timeout_ms + jitter - 1)
        assert core.role is Role.FOLLOWER
        core.poll(T0 + CONFIG.fetch_timeout_ms + jitter)
        assert core.role is Role.PROSPECTIVE and core.epoch == 1
    assert len(jitters) > 30
