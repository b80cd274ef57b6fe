"""The leader's read index (kraft_spark.raft.read_index): answered only after a majority of the
voters fetched after the read arrived, never by a node that cannot prove it leads, and always
at or above every acknowledged write."""

from __future__ import annotations

import random

from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.messages import (
    ErrorCode,
    ProduceRequest,
    ProduceResponse,
    ReadIndexRequest,
    ReadIndexResponse,
)
from kraft_spark.raft.read_index import ReadIndexTracker
from kraft_spark.raft.records import Record
from kraft_spark.sim.memlog import MemoryLog
from tests.core_net import Net, elect

VOTERS = (1, 2, 3)


def _cluster() -> tuple[Net, RaftCore]:
    net = Net()
    for node in VOTERS:
        net.cores[node] = RaftCore(node_id=node, cluster_id="reads", voters=VOTERS,
                                   log=MemoryLog(), config=QuorumConfig(),
                                   rng=random.Random(node), now_ms=net.now)
    leader = elect(net)
    net.pump(100)  # the LeaderChange record commits
    return net, leader


def _append(net: Net, leader: RaftCore, token: object, value: bytes) -> ProduceResponse:
    leader.handle_request(net.now, 0, token, ProduceRequest((Record(b"k", value),), 5000))
    net.pump(50)
    reply = net.client_replies.pop(token)
    assert isinstance(reply, ProduceResponse)
    return reply


def _read(net: Net, core: RaftCore, token: object, rounds: int,
          timeout_ms: int = 5000) -> ReadIndexResponse | None:
    core.handle_request(net.now, 0, token, ReadIndexRequest(timeout_ms))
    net.pump(rounds)
    reply = net.client_replies.pop(token, None)
    assert reply is None or isinstance(reply, ReadIndexResponse)
    return reply


def test_read_index_covers_every_acknowledged_write() -> None:
    net, leader = _cluster()
    for i in range(5):
        appended = _append(net, leader, ("w", i), b"v%d" % i)
        assert appended.error == ErrorCode.NONE
        reply = _read(net, leader, ("r", i), 20)
        assert reply is not None and reply.error == ErrorCode.NONE
        assert reply.read_offset > appended.base_offset
        assert reply.read_offset == leader.high_watermark
    assert leader.leader_state is not None and leader.leader_state.reads.confirmed == 5


def test_read_needs_fetches_received_after_it_arrived() -> None:
    """The confirmation is not the fetches that came before: with the followers gone, the read
    waits (and then times out) even though both fetched just before it arrived."""
    net, leader = _cluster()
    followers = {n: net.cores.pop(n) for n in VOTERS if n != leader.node_id}
    assert followers
    reply = _read(net, leader, ("r", 0), 40, timeout_ms=30)
    assert reply is not None and reply.error == ErrorCode.REQUEST_TIMED_OUT


def test_a_deposed_leader_never_answers_a_read() -> None:
    """The old leader is cut off, the others elect a new one and commit a write; the old one,
    still believing it leads for a while, must not confirm a read (it would miss the write)."""
    net, old = _cluster()
    cut = net.cores.pop(old.node_id)
    new = elect(net)
    net.pump(100)
    assert _append(net, new, ("w", 1), b"new").error == ErrorCode.NONE
    # The old leader alone, asked for a read: however long it waits, no majority confirms it.
    others = net.cores
    net.cores = {cut.node_id: cut}
    reply = _read(net, cut, ("r", 1), 3000, timeout_ms=100_000)
    assert reply is None or reply.error != ErrorCode.NONE
    net.cores = others


def test_non_leader_refuses_and_names_the_leader() -> None:
    net, leader = _cluster()
    follower = next(c for c in net.cores.values() if c is not leader)
    reply = _read(net, follower, ("r", 0), 2)
    assert reply is not None and reply.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert reply.leader_id == leader.node_id


def test_majority_counting() -> None:
    tracker = ReadIndexTracker()
    tracker.on_voter_fetch(2)
    tracker.add("r", deadline_ms=100)
    assert tracker.take_confirmed((1, 2, 3), leader_id=1) == []  # 2's fetch came before
    tracker.on_voter_fetch(2)
    [read] = tracker.take_confirmed((1, 2, 3), leader_id=1)
    assert read.token == "r"
    tracker.add("r5", deadline_ms=100)
    tracker.on_voter_fetch(2)
    assert tracker.take_confirmed((1, 2, 3, 4, 5), leader_id=1) == []  # 2 of 5
    tracker.on_voter_fetch(4)
    assert [r.token for r in tracker.take_confirmed((1, 2, 3, 4, 5), leader_id=1)] == ["r5"]
    assert tracker.take_expired(100) == []
