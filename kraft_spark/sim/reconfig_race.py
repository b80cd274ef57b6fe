"""The ``reconfig-race`` fault (opt-in, a targeted schedule): two voter changes racing across an
election, the moment KIP-853's one-change-at-a-time rule exists for.

Every 2-6 s, with a leader and no cut in force, the network is split so that the leader's
side would be a majority of the set two changes from now but a minority of the set in force,
and the other side a majority of the set in force; then two changes are asked of the leader
back to back:

* three voters and two nodes outside: the leader and both outsiders | the other two voters,
  and both outsiders added (a majority of five is the leader and the two new ones);
* five voters: the leader and one voter | the other three, and two of those three removed (a
  majority of three is the leader and its companion).

A correct leader appends the first change and refuses the second until the first commits, which
needs the other side: nothing commits on the leader's side while the other side elects a leader
of its own. A leader that takes both (``concurrent-voter-changes``) commits under a set whose
majority does not meet the old one's: two leaders commit different records at the same offsets,
which the checker sees when the cut heals. The cut lasts past an election (1.5-4 s).

Two more moves of the same schedule: an outsider asked to join and its disk lost before the
change commits, and the leader asked to remove itself.

Its own random stream: the other faults' draws, and every seed run without it, are unchanged.
"""

from __future__ import annotations

from typing import Protocol

from kraft_spark.raft.messages import AddVoterRequest, RemoveVoterRequest
from kraft_spark.raft.state import Role
from kraft_spark.raft.voter_set import Endpoint
from kraft_spark.sim.cluster import CLUSTER_ID, Cluster
from kraft_spark.sim.node import SimNode
from kraft_spark.sim.periodic import PeriodicSchedule


class Injector(Protocol):
    """What the race needs of the fault injector (sim/faults.py)."""

    healed: bool

    def note(self, text: str) -> None: ...
    def all_in(self, ids: tuple[int, ...]) -> bool: ...
    def may_lose_disk(self) -> bool: ...
    def lose_disk(self, node_id: int, restart_in_us: int) -> None: ...


class ReconfigRace(PeriodicSchedule[Injector]):
    def __init__(self, cluster: Cluster, until_us: int, injector: Injector) -> None:
        # The injector: its minority rule, its notes, its disk losses.
        super().__init__(cluster, until_us, injector, stream=(53, 11))

    def move(self) -> None:
        move = self.rng.random()
        if move < 0.2:
            self.join_then_lose_disk()
        elif move < 0.3:
            self.remove_the_leader()
        else:
            self.race()

    def race(self) -> None:
        cluster = self.cluster
        leader = cluster.current_leader()
        if leader is None or leader.paused or leader.core is None or cluster.network.blocked:
            return
        core = leader.core
        voters = core.voter_set
        if not self.injector.all_in(voters.ids()):
            return  # a voter out already: the race would take the quorum past its tolerance
        ids = list(voters.ids())
        others = [i for i in ids if i != leader.node_id]
        outside = [i for i, n in sorted(cluster.nodes.items())
                   if n.alive and not n.paused and n.core is not None and voters.get(i) is None
                   and not n.wiped]
        requests: list[AddVoterRequest | RemoveVoterRequest]
        if len(ids) == 3 and len(outside) >= 2:
            joining = self.rng.sample(outside, 2)
            side = [leader.node_id, *joining]
            requests = [_add(cluster.nodes[i]) for i in joining]
        elif len(ids) == 5:
            companion = self.rng.choice(others)
            rest = [i for i in others if i != companion]
            removed = self.rng.sample(rest, 2)
            side = [leader.node_id, companion]
            requests = []
            for i in removed:
                voter = voters.get(i)
                assert voter is not None
                requests.append(RemoveVoterRequest(CLUSTER_ID, i, voter.directory_id))
        else:
            return
        rest_of_cluster = sorted(i for i in cluster.nodes if i not in side)
        self.injector.note(f"reconfig-race: cut {sorted(side)} | {rest_of_cluster}, then "
                  + " and ".join(f"{type(r).__name__} n{r.voter_id}" for r in requests)
                  + f" via n{leader.node_id}")
        cluster.coverage["racing-changes"] += 1
        cluster.network.partition(sorted(side), rest_of_cluster)
        for request in requests:
            cluster.submit_voter_change(leader, request)
        cluster.at(cluster.now + self.rng.randint(1_500_000, 4_000_000), self._heal)

    def _heal(self) -> None:
        self.injector.note("reconfig-race: cut healed")
        self.cluster.network.blocked.clear()

    def remove_the_leader(self) -> None:
        """The leader asked to remove itself (it leads until the change commits, then resigns)."""
        leader = self.cluster.current_leader()
        if leader is None or leader.paused or leader.core is None:
            return
        voters = leader.core.voter_set
        me = voters.get(leader.node_id)
        if me is None or len(voters.voters) < 4 or not self.injector.all_in(voters.ids()):
            return
        self.injector.note(f"reconfig-race: n{leader.node_id} asked to remove itself")
        self.cluster.submit_voter_change(
            leader, RemoveVoterRequest(CLUSTER_ID, leader.node_id, me.directory_id))

    def join_then_lose_disk(self) -> None:
        """An outsider asked to join, then its disk lost before its addition commits."""
        cluster = self.cluster
        leader = cluster.current_leader()
        if leader is None or leader.paused or leader.core is None or cluster.network.blocked:
            return
        voters = leader.core.voter_set
        outside = [i for i, n in sorted(cluster.nodes.items())
                   if n.alive and not n.paused and n.core is not None and voters.get(i) is None
                   and not n.wiped]
        if (not outside or len(voters.voters) > 4 or not self.injector.all_in(voters.ids())
                or not self.injector.may_lose_disk()):
            return
        joining = self.rng.choice(outside)
        self.injector.note(f"reconfig-race: n{joining} joins via n{leader.node_id}, then loses "
                           "its disk")
        cluster.submit_voter_change(leader, _add(cluster.nodes[joining]))
        cluster.at(cluster.now + self.rng.randint(0, 3000), self.injector.lose_disk, joining,
                   self.rng.randint(200_000, 3_000_000))


def _add(node: SimNode) -> AddVoterRequest:
    return AddVoterRequest(CLUSTER_ID, 5000, node.node_id, node.directory_id,
                           (Endpoint("CONTROLLER", "sim", node.node_id),))


def uncommitted_voter_change(node: SimNode) -> bool:
    """``node`` has a VotersRecord at or above its high watermark (a change not yet known to
    be committed)."""
    core = node.core
    return (core is not None and core.history.latest_offset() >= 0
            and core.history.latest_offset() >= core.high_watermark)


def leading(node: SimNode) -> bool:
    return node.alive and node.core is not None and node.core.role is Role.LEADER
