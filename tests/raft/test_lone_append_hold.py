"""A lone append goes first to the quickest voter (``QuorumConfig.lone_append_hold_ms``).

The leader hands an append that is the only one awaiting commit to the voter whose Fetch moved
the high watermark last; the other parked Fetches get it when that voter acknowledges it, or
when the hold expires. Appends that queue behind another go to everyone at once, and a hold of
0 is Kafka's behaviour.
"""

from __future__ import annotations

from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.messages import FetchResponse
from kraft_spark.sim.script import ScriptedCluster


def _leading(hold_ms: int) -> tuple[ScriptedCluster, int, int]:
    """Node 1 leading three voters, its LeaderChange committed and both followers parked;
    (cluster, the quickest follower, the other)."""
    cluster = ScriptedCluster()
    cluster.config = QuorumConfig(hw_wakeup_delay_ms=0, lone_append_hold_ms=hold_ms)
    cluster.run("add-nodes 3")
    cluster.run("campaign 1")
    cluster.run("stabilize")
    assert cluster.run("expect-role 1 Leader") == "ok"
    leader = cluster.core(1).leader_state
    assert leader is not None and len(leader.parked) == 2
    quickest = leader.quickest
    assert quickest in (2, 3)
    return cluster, quickest, 5 - quickest


def test_a_lone_append_goes_to_the_quickest_then_to_the_other_on_its_ack() -> None:
    cluster, quickest, other = _leading(2)
    cluster.run("propose 1 value=a")
    assert cluster.run(f"expect-pending 1 from=1 to={quickest} type=FetchResp") == "ok"
    assert cluster.run(f"expect-pending 0 from=1 to={other} type=FetchResp") == "ok"
    cluster.run("flush 1")
    cluster.run(f"deliver to={quickest} type=FetchResp")
    cluster.run(f"flush {quickest}")
    cluster.run(f"deliver from={quickest} to=1 type=Fetch")  # the ack: commits and releases
    end = cluster.core(1).log.end_offset()
    assert cluster.run(f"expect-hw 1 {end}") == "ok"
    out = cluster.run(f"deliver to={other} type=FetchResp")
    assert f"hw={end}" in out and f"[{end - 1}..{end - 1}]" in out, out
    assert cluster.core(1).leader_state.held_until > 10**15  # NEVER: nothing held any more


def test_without_an_ack_the_hold_expires() -> None:
    cluster, _, other = _leading(2)
    cluster.run("propose 1 value=a")
    assert cluster.core(1).next_deadline() <= cluster.core(1).now + 2
    cluster.run("tick 1 ms=1")
    assert cluster.run(f"expect-pending 0 from=1 to={other} type=FetchResp") == "ok"
    cluster.run("tick 1 ms=1")
    assert cluster.run(f"expect-pending 1 from=1 to={other} type=FetchResp") == "ok"
    # The other voter and the leader commit it without the quickest.
    cluster.run("flush 1")
    cluster.run(f"deliver to={other} type=FetchResp")
    cluster.run(f"flush {other}")
    cluster.run(f"deliver from={other} to=1 type=Fetch")
    end = cluster.core(1).log.end_offset()
    assert cluster.run(f"expect-hw 1 {end}") == "ok"
    assert cluster.core(1).leader_state.quickest == other  # it moved the high watermark


def test_an_append_behind_another_goes_to_everyone() -> None:
    cluster, quickest, other = _leading(2)
    cluster.run("propose 1 value=a")
    cluster.run(f"deliver to={quickest} type=FetchResp")  # its Fetch is no longer parked
    cluster.run("propose 1 value=b")  # two appends await commit: not a lone one
    assert cluster.run(f"expect-pending 1 from=1 to={other} type=FetchResp") == "ok"
    out = cluster.run(f"deliver to={other} type=FetchResp")
    assert "[1..2]" in out, out  # both appends, the held one included


def test_with_five_voters_nothing_is_held() -> None:
    """The leader and one voter are not a majority of five: the commit needs the others too."""
    cluster = ScriptedCluster()
    cluster.config = QuorumConfig(hw_wakeup_delay_ms=0, lone_append_hold_ms=2)
    cluster.run("add-nodes 5")
    cluster.run("campaign 1")
    cluster.run("stabilize")
    assert cluster.core(1).leader_state.quickest in (2, 3, 4, 5)
    cluster.run("propose 1 value=a")
    assert cluster.run("expect-pending 4 from=1 type=FetchResp") == "ok"


def test_a_hold_of_zero_hands_it_to_everyone_at_once() -> None:
    cluster, _, _ = _leading(0)
    cluster.run("propose 1 value=a")
    assert cluster.run("expect-pending 2 from=1 type=FetchResp") == "ok"


def test_after_concurrent_appends_nothing_is_held_for_a_while() -> None:
    """Concurrent writers are better off with the faster of two voters: once an append arrived
    while another awaited commit, lone appends are not held for CONCURRENT_WINDOW_MS."""
    from kraft_spark.raft.leader import CONCURRENT_WINDOW_MS

    cluster, _, _ = _leading(2)
    cluster.run("propose 1 value=a")
    cluster.run("propose 1 value=b")  # concurrent: b arrived while a awaited commit
    cluster.run("stabilize")  # both committed; the followers parked again
    assert cluster.core(1).high_watermark == cluster.core(1).log.end_offset()
    cluster.run("propose 1 value=c")  # lone, but within the window
    assert cluster.run("expect-pending 2 from=1 type=FetchResp") == "ok"
    cluster.run("stabilize")
    cluster.run(f"tick 1 ms={CONCURRENT_WINDOW_MS}")
    cluster.run("stabilize")
    cluster.run("propose 1 value=d")  # lone, the window over: held again
    assert cluster.run("expect-pending 1 from=1 type=FetchResp") == "ok"


def test_every_so_often_a_lone_append_goes_to_everyone() -> None:
    """So that another voter, grown faster, can acknowledge first and become the quickest."""
    from kraft_spark.raft.leader import HOLD_PROBE_EVERY

    cluster, _, _ = _leading(2)
    leader = cluster.core(1).leader_state
    assert leader is not None
    pending = []
    for _ in range(2 * HOLD_PROBE_EVERY):
        cluster.run("propose 1 value=x")
        pending.append(sum(1 for env in cluster.nodes[1].outbox
                           if isinstance(env.message, FetchResponse)))
        cluster.run("stabilize")
    probes = [i for i, n in enumerate(pending, start=1) if n == 2]
    assert probes == [HOLD_PROBE_EVERY, 2 * HOLD_PROBE_EVERY], pending
    assert all(n == 1 for i, n in enumerate(pending, start=1) if i not in probes)
