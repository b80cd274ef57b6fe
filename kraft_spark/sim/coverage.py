"""Coverage of the dangerous moments of a voter change (KIP-853), counted per run and printed
with the summary (``kraft-spark sim ... --faults ...,reconfig``), so that a schedule too weak
to reach them shows without a bug to miss:

* ``change-before-leader-change``: a leader is elected holding a voter change it has not
  committed (appended just before the previous leader went);
* ``add-while-catching-up``: a node is asked to become a voter while its log is behind the
  leader's;
* ``leader-removed``: the leader is asked to remove itself;
* ``racing-changes``: two changes asked back to back across a cut (``reconfig-race``);
* ``change-during-snapshot-install``: a change is asked while some node downloads a snapshot;
* ``disk-loss-of-joining-voter``: a voter whose addition is not committed loses its disk.

Counting only reads the nodes' state: it draws no random numbers and changes no trajectory.
"""

from __future__ import annotations

from typing import Any

from kraft_spark.raft.messages import AddVoterRequest, RemoveVoterRequest

# The cluster (sim/cluster.py) and its nodes, which import this module: typed loosely here so
# that the dependency runs one way.
Cluster = Any
SimNode = Any

MOMENTS = (
    "change-before-leader-change",
    "add-while-catching-up",
    "leader-removed",
    "racing-changes",
    "change-during-snapshot-install",
    "disk-loss-of-joining-voter",
)


def note_new_leader(cluster: Cluster, node: SimNode) -> None:
    core = node.core
    if core is not None and 0 <= core.history.latest_offset() >= core.high_watermark:
        cluster.coverage["change-before-leader-change"] += 1


def note_voter_change(cluster: Cluster, leader: SimNode, request: Any) -> None:
    if isinstance(request, RemoveVoterRequest) and request.voter_id == leader.node_id:
        cluster.coverage["leader-removed"] += 1
    if isinstance(request, AddVoterRequest) and leader.core is not None:
        joining = cluster.nodes.get(request.voter_id)
        if joining is not None and joining.log.end_offset() < leader.log.end_offset():
            cluster.coverage["add-while-catching-up"] += 1
    if any(n.alive and n.core is not None and n.core.download is not None
           for n in cluster.nodes.values()):
        cluster.coverage["change-during-snapshot-install"] += 1


def note_disk_loss(cluster: Cluster, node: SimNode) -> None:
    leader = cluster.current_leader()
    if leader is None or leader.core is None:
        return
    core = leader.core
    if (core.voter_set.get(node.node_id) is not None
            and core.history.at(core.high_watermark).get(node.node_id) is None):
        cluster.coverage["disk-loss-of-joining-voter"] += 1


def summary(coverage: dict[str, int]) -> str:
    return " ".join(f"{moment}={coverage.get(moment, 0)}" for moment in MOMENTS)
