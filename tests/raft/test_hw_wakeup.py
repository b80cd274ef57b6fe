"""The leader's deferred high-watermark wake-up (``QuorumConfig.hw_wakeup_delay_ms``).

A parked Fetch that has no new data is answered only to tell a newer high watermark after the
delay; an append arriving meanwhile answers it with the data and the new high watermark in one
response. With the delay at 0 the leader answers at once, as Kafka does (the scripted scenarios
run that way).
"""

from __future__ import annotations

from kraft_spark.raft.config import QuorumConfig
from kraft_spark.sim.script import ScriptedCluster


def _committed_once(delay_ms: int) -> ScriptedCluster:
    """Three voters, node 1 leading, one record committed; the followers' Fetches that
    confirmed it are delivered (and answered or parked), nothing else."""
    cluster = ScriptedCluster()
    cluster.config = QuorumConfig(hw_wakeup_delay_ms=delay_ms, lone_append_hold_ms=0)
    cluster.run("add-nodes 3")
    cluster.run("campaign 1")
    cluster.run("stabilize")
    assert cluster.run("expect-role 1 Leader") == "ok"
    cluster.run("propose 1 value=a")
    cluster.run("flush 1")
    cluster.run("deliver type=FetchResp")  # the parked Fetches get the record
    cluster.run("flush")
    cluster.run("deliver type=Fetch")  # their next Fetches commit it on the leader
    return cluster


def test_with_no_delay_followers_hear_the_high_watermark_at_once() -> None:
    cluster = _committed_once(0)
    assert cluster.run("expect-hw 1 2") == "ok"
    assert cluster.run("expect-pending 2 from=1 type=FetchResp") == "ok"


def test_with_a_delay_the_wakeup_waits_and_then_comes() -> None:
    cluster = _committed_once(5)
    assert cluster.run("expect-hw 1 2") == "ok"
    # Committed, the client answered, but the followers' Fetches stay parked...
    assert cluster.run("expect-pending 0 from=1 type=FetchResp") == "ok"
    assert cluster.core(1).next_deadline() <= cluster.core(1).now + 5
    cluster.run("tick 1 ms=4")
    assert cluster.run("expect-pending 0 from=1 type=FetchResp") == "ok"
    # ...until the delay is over: then each learns the new high watermark.
    cluster.run("tick 1 ms=1")
    assert cluster.run("expect-pending 2 from=1 type=FetchResp") == "ok"
    cluster.run("deliver type=FetchResp")
    assert cluster.run("expect-hw 2 2") == "ok"
    assert cluster.run("expect-hw 3 2") == "ok"


def test_an_append_within_the_delay_carries_the_new_high_watermark() -> None:
    cluster = _committed_once(5)
    cluster.run("tick 1 ms=1")
    cluster.run("propose 1 value=b")
    # One response per follower, with the record and the high watermark of the first one.
    assert cluster.run("expect-pending 2 from=1 type=FetchResp") == "ok"
    out = cluster.run("deliver type=FetchResp")
    assert "hw=2" in out and "[2..2]" in out, out
    assert cluster.run("expect-hw 2 2") == "ok"
    # Nobody is left to wake: the delay's deadline is gone.
    cluster.run("tick 1 ms=10")
    assert cluster.run("expect-pending 0 from=1 type=FetchResp") == "ok"
