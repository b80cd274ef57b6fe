"""An observer paces its Fetches (kraft.quorum.observer.fetch.interval.ms): one answer carries
every commit of the interval; voters are not paced."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kraft_spark.raft.config import ConfigError, QuorumConfig
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.messages import FetchRequest, ProduceRequest
from kraft_spark.raft.records import Record
from kraft_spark.sim.memlog import MemoryLog
from tests.core_net import Net, elect


def _fetches_while_appending(interval_ms: int) -> tuple[int, int, int]:
    """A leader (1) and voter (2) and an observer (5) paced at ``interval_ms``; 200 appends, one
    per ms. Returns (the observer's Fetches, the voter's, how far behind the observer ends)."""
    net = Net()
    config = QuorumConfig(observer_fetch_interval_ms=interval_ms)
    for node in (1, 2, 5):
        net.cores[node] = RaftCore(node_id=node, cluster_id="pace", voters=(1, 2),
                                   log=MemoryLog(), config=config, rng=random.Random(node),
                                   now_ms=net.now)
    leader = elect(net)
    voter = 2 if leader.node_id == 1 else 1
    counts = {5: 0, voter: 0}
    handle = leader.handle_request

    def counting(now: int, src: int, token: Any, message: Any) -> None:
        if isinstance(message, FetchRequest) and src in counts:
            counts[src] += 1
        handle(now, src, token, message)

    leader.handle_request = counting  # type: ignore[method-assign]
    for i in range(200):
        leader.handle_request(net.now, 0, ("client", i),
                              ProduceRequest((Record(b"k", b"v%d" % i),), 1000))
        net.pump(1)
    net.pump(200)  # quiet: everyone catches up
    behind = leader.log.end_offset() - net.cores[5].log.end_offset()
    return counts[5], counts[voter], behind


def test_a_paced_observer_fetches_once_per_interval_and_catches_up() -> None:
    paced, voter_paced, behind = _fetches_while_appending(50)
    eager, voter_eager, _ = _fetches_while_appending(0)
    assert eager >= 100  # unpaced: about one Fetch per commit
    assert paced <= 12  # 200 ms of appends + the quiet tail, one per 50 ms
    assert behind == 0  # and nothing is left behind
    assert voter_paced >= 100 and voter_eager >= 100  # voters are never paced


def test_the_interval_is_a_quorum_setting() -> None:
    props = {"kraft.quorum.observer.fetch.interval.ms": "50"}
    assert QuorumConfig.from_properties(props).observer_fetch_interval_ms == 50
    with pytest.raises(ConfigError, match="observer_fetch_interval_ms"):
        QuorumConfig(observer_fetch_interval_ms=-1)
