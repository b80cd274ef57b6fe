"""When the leader fsyncs its own appends (``QuorumConfig.append_linger_ms``).

The linger lets concurrent appends share one fsync. An append that is the only one awaiting
commit has nobody to share with, so the leader asks for the flush at once: a lone writer's
commit can then count the leader's own disk instead of waiting for both followers.
"""

from __future__ import annotations

from kraft_spark.raft.config import QuorumConfig
from kraft_spark.sim.script import ScriptedCluster


def _leader(linger_ms: int) -> ScriptedCluster:
    cluster = ScriptedCluster()
    cluster.config = QuorumConfig(append_linger_ms=linger_ms, hw_wakeup_delay_ms=0,
                                  lone_append_hold_ms=0)
    cluster.run("add-nodes 3")
    cluster.run("campaign 1")
    cluster.run("stabilize")
    assert cluster.run("expect-role 1 Leader") == "ok"
    assert not cluster.nodes[1].flush_requested
    return cluster


def test_a_lone_append_is_flushed_at_once() -> None:
    cluster = _leader(2)
    cluster.run("propose 1 value=a")
    assert cluster.nodes[1].flush_requested


def test_an_append_behind_an_uncommitted_one_lingers_then_flushes() -> None:
    cluster = _leader(2)
    cluster.run("propose 1 value=a")
    cluster.run("flush 1")  # a is on the leader's disk but not committed: no Fetch delivered
    cluster.run("propose 1 value=b")
    assert not cluster.nodes[1].flush_requested
    cluster.run("tick 1 ms=1")
    assert not cluster.nodes[1].flush_requested
    cluster.run("tick 1 ms=1")
    assert cluster.nodes[1].flush_requested
    cluster.run("stabilize")
    assert cluster.run("expect-hw 1 3") == "ok"
    assert cluster.run("expect-data 1 a,b") == "ok"


def test_the_next_lone_append_after_a_commit_is_flushed_at_once_again() -> None:
    cluster = _leader(2)
    cluster.run("propose 1 value=a")
    cluster.run("stabilize")
    assert cluster.run("expect-hw 1 2") == "ok"
    cluster.run("propose 1 value=b")
    assert cluster.nodes[1].flush_requested


def test_no_linger_flushes_every_append_at_once() -> None:
    cluster = _leader(0)
    cluster.run("propose 1 value=a")
    cluster.run("flush 1")
    cluster.run("propose 1 value=b")
    assert cluster.nodes[1].flush_requested
