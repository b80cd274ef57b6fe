"""What the core reports in ``Ready.events``: typed values, one per thing that happened.

Consumers (the node's log and metrics, the simulator's trace and checker, CPU placement)
switch on the type and read its fields; none parses text. ``str(event)`` is the one line a log
or a scenario transcript shows (``tests/scenarios/*.txt`` hold those lines), so the wording
lives here, beside the fields it is made of.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kraft_spark.raft.state import Role


@dataclass(frozen=True, slots=True)
class RoleChanged:
    """The core entered ``role`` (``started``: the role it started in, not a transition)."""

    role: Role
    epoch: int
    leader_id: int
    voted_id: int
    started: bool = False

    def describe_role(self) -> str:
        if self.role is Role.FOLLOWER:
            return f"Follower(epoch={self.epoch}, leader={self.leader_id})"
        if self.role is Role.UNATTACHED and self.voted_id >= 0:
            return f"Unattached(epoch={self.epoch}, voted={self.voted_id})"
        return f"{self.role.value}(epoch={self.epoch})"

    def __str__(self) -> str:
        return f"{'started as' if self.started else 'became'} {self.describe_role()}"


@dataclass(frozen=True, slots=True)
class LogTruncated:
    """A follower cut its log at ``offset`` (a Fetch answered with a diverging epoch)."""

    offset: int
    diverging_epoch: int

    def __str__(self) -> str:
        return f"truncated to {self.offset} (diverging epoch {self.diverging_epoch})"


@dataclass(frozen=True, slots=True)
class LeaderResigned:
    """The leader gave up its leadership (``graceful``: asked to; else check-quorum)."""

    graceful: bool
    successors: tuple[int, ...]

    def __str__(self) -> str:
        how = "graceful" if self.graceful else "check-quorum"
        return f"resigned ({how}), successors {self.successors}"


@dataclass(frozen=True, slots=True)
class LeaderUnreachable:
    """The leader's host refused our Fetch's connection: an election in ``delay_ms`` unless a
    Fetch succeeds first."""

    leader_id: int
    delay_ms: int

    def __str__(self) -> str:
        return (f"leader {self.leader_id} refused a connection: campaigning in "
                f"{self.delay_ms} ms unless a Fetch succeeds first")


@dataclass(frozen=True, slots=True)
class ForeignCluster:
    """A node refused our Fetch: this log was formatted for another cluster."""

    node_id: int
    cluster_id: str

    def __str__(self) -> str:
        return (f"fetch refused by node {self.node_id}: INCONSISTENT_CLUSTER_ID (our cluster "
                f"id {self.cluster_id!r} is not the quorum's): this log directory was "
                "formatted for another cluster; format it with the quorum's cluster id")


@dataclass(frozen=True, slots=True)
class DiskLossCaughtUp:
    """A voter that lost its disk caught up with the quorum and votes again."""

    def __str__(self) -> str:
        return "caught up after disk loss: voting again"


class SnapshotStep(Enum):
    FETCHING = "fetching"
    UNAVAILABLE = "unavailable"  # cannot begin the download
    REFUSED = "refused"  # a chunk or the whole was invalid
    ABORTED = "aborted"
    INSTALLED = "installed"
    UNREADABLE = "unreadable"  # the newest local snapshot has a part that cannot be read


@dataclass(frozen=True, slots=True)
class SnapshotEvent:
    """A step of a snapshot download (KIP-630), or a local snapshot found unreadable.
    ``snapshot`` names it (``offset-epoch``; empty when no snapshot is meant); ``detail`` is
    the reason, for the log."""

    step: SnapshotStep
    snapshot: str = ""
    detail: str = ""

    def __str__(self) -> str:
        step, snap, detail = self.step, self.snapshot, self.detail
        if step is SnapshotStep.FETCHING:
            return f"fetching snapshot {snap} {detail}"
        if step is SnapshotStep.UNAVAILABLE:
            return f"cannot download snapshot {snap}: {detail}"
        if step is SnapshotStep.REFUSED:
            return f"snapshot {snap} refused: {detail}"
        if step is SnapshotStep.ABORTED:
            return f"snapshot download aborted{': ' + detail if detail else ' by a role change'}"
        if step is SnapshotStep.INSTALLED:
            return f"installed snapshot {snap}: the log now starts at {detail}"
        return f"the newest snapshot's {detail}"


class VoterStep(Enum):
    IN_FORCE = "in force"  # a new voter set took effect on this node
    JOINED = "joined"  # this node became a voter
    LEFT = "left"  # this node is no longer a voter
    NOT_LISTED = "not listed"  # at start: not in the set in force, following as an observer
    CHANGE_APPENDED = "change appended"  # the leader appended a VotersRecord
    CHANGE_COMMITTED = "change committed"
    STEPPED_DOWN = "stepped down"  # a leader removed from the voters handed over
    ENDPOINTS_ASKED = "endpoints asked"  # UpdateRaftVoter sent for our own endpoints
    ENDPOINTS_REFUSED = "endpoints refused"


@dataclass(frozen=True, slots=True)
class VoterEvent:
    """The voter set (KIP-853) as this node saw it change; ``detail`` for the log (the set, the
    change's description, the offset, the successors or the refusal)."""

    step: VoterStep
    detail: str = ""

    def __str__(self) -> str:
        step, detail = self.step, self.detail
        return {
            VoterStep.IN_FORCE: f"voter set in force: {detail}",
            VoterStep.JOINED: "added to the voters",
            VoterStep.LEFT: "removed from the voters",
            VoterStep.NOT_LISTED: "not in the voter set in force: following as an observer",
            VoterStep.CHANGE_APPENDED: detail,
            VoterStep.CHANGE_COMMITTED: f"{detail} committed",
            VoterStep.STEPPED_DOWN: f"removed from the voters: stepped down, successors {detail}",
            VoterStep.ENDPOINTS_ASKED: detail,
            VoterStep.ENDPOINTS_REFUSED: f"endpoint update refused: {detail}",
        }[step]


CoreEvent = (RoleChanged | LogTruncated | LeaderResigned | LeaderUnreachable | ForeignCluster
             | DiskLossCaughtUp | SnapshotEvent | VoterEvent)
"""Everything ``Ready.events`` may hold."""
