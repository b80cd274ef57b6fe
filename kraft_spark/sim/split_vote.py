"""The ``split-vote`` fault (opt-in, a targeted schedule): two candidates in one epoch — the
moment the one-vote-per-epoch rule exists for, which pre-vote (KIP-996) makes rare otherwise.

Every 2-6 s, with a leader, every voter in and no cut in force, the leader is cut off from
every node and client, and every follower is paused for longer than a fetch timeout, then
resumed at the same instant: each times out at once and asks the others for pre-votes, grants
theirs (no leader, logs alike), and becomes a candidate of the same epoch within a network round
trip of the others. A correct voter, having voted for itself, refuses the other candidates; one
that votes twice (``double-vote``) grants them, which ``one-vote-per-epoch`` sees, and two may
lead (``single-leader``). The leader's cut outlasts the pause by 0.5-1.5 s.

Its own random stream: the other faults' draws, and every seed run without it, are unchanged.
"""

from __future__ import annotations

from typing import Protocol

from kraft_spark.sim.cluster import Cluster
from kraft_spark.sim.node import SimNode
from kraft_spark.sim.periodic import PeriodicSchedule


class Injector(Protocol):
    """What the schedule needs of the fault injector (sim/faults.py)."""

    healed: bool

    def note(self, text: str) -> None: ...
    def all_in(self, ids: tuple[int, ...]) -> bool: ...
    def cut(self, node_id: int, for_ms: int) -> None: ...
    def block(self, pairs: set[tuple[int, int]], for_ms: int) -> None: ...
    def pause_for(self, node: SimNode, for_us: int) -> None: ...


class SplitVote(PeriodicSchedule[Injector]):
    def __init__(self, cluster: Cluster, until_us: int, injector: Injector) -> None:
        super().__init__(cluster, until_us, injector, stream=(61, 17))

    def move(self) -> None:
        self.split()

    def split(self) -> None:
        cluster = self.cluster
        leader = cluster.current_leader()
        if leader is None or leader.paused or leader.core is None or cluster.network.blocked:
            return
        ids = leader.core.voter_set.ids()
        followers = [i for i in ids if i != leader.node_id]
        if len(followers) < 2 or not self.injector.all_in(ids):
            return
        config = cluster.config
        # Past every follower's fetch timeout (jitter included): all campaign on resuming.
        pause_ms = (config.fetch_timeout_ms + config.max_fetch_jitter_ms
                    + self.rng.randint(100, 800))
        cut_ms = pause_ms + self.rng.randint(500, 1500)
        self.injector.note(f"split-vote: {', '.join(f'n{i}' for i in followers)} paused for "
                           f"{pause_ms} ms while leader n{leader.node_id} is cut off")
        self.injector.cut(leader.node_id, cut_ms)
        # From the clients too: a cut-off leader that still appends would make its log the
        # longest, and itself the next leader when it returns.
        self.injector.block({(c.client_id, leader.node_id) for c in cluster.clients}, cut_ms)
        for i in followers:
            self.injector.pause_for(cluster.nodes[i], pause_ms * 1000)
