"""Roles of a node and the transitions allowed between them (docs/concepts/protocol.md).

A voter is in exactly one role per epoch::

    Unattached(epoch, voted?) --election timer--------------> Candidate(epoch+1)
    Unattached                --learns leader of >= epoch----> Follower
    Unattached                --higher epoch-----------------> Unattached(higher)
    Candidate(e)              --majority granted-------------> Leader(e)
    Candidate(e)              --timeout, then backoff--------> Candidate(e+1)
    Candidate(e)              --learns leader of >= e--------> Follower
    Candidate(e)              --higher epoch, no leader------> Unattached(higher)
    Leader(e)                 --graceful shutdown / check-quorum fails--> Resigned(e)
    Leader(e)                 --higher epoch-----------------> Unattached / Follower
    Follower(e, l)            --fetch timeout----------------> Candidate(e+1)
                                (brought forward to a short random delay when l's host refuses
                                connections: RaftCore.on_request_failed, a deviation from KIP-595)
    Follower(e, l)            --higher epoch-----------------> Unattached / Follower
    Resigned(e)               --election timer---------------> Candidate(e+1)
    Resigned(e)               --higher epoch-----------------> Unattached / Follower

Observers (and voters that lost their disk and have not caught up yet) never vote and
never campaign: they are Unattached or Follower only. Their fetch timeout moves them from
Follower to Unattached, where they try another voter::

    Unattached <--> Follower, Follower -> Follower (higher epoch), Unattached -> Unattached

``ALLOWED_TRANSITIONS`` is this table as data; ``check_transition`` enforces it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kraft_spark.raft.messages import NO_LEADER
from kraft_spark.raft.voter_set import NIL_DIRECTORY, directory_text, parse_directory

# Sentinel for "no deadline" (about 292 million years of milliseconds).
NEVER = 2**63 - 1


class Role(Enum):
    UNATTACHED = "Unattached"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"
    PROSPECTIVE = "Prospective"  # KIP-996: asking for pre-votes, epoch unchanged


U, C, L, F, R = Role.UNATTACHED, Role.CANDIDATE, Role.LEADER, Role.FOLLOWER, Role.RESIGNED
P = Role.PROSPECTIVE

# Candidate is entered from Prospective (a majority of pre-votes) or, for the successors a
# resigning leader names, directly; a failed candidate goes back to Prospective.
ALLOWED_TRANSITIONS: frozenset[tuple[Role, Role]] = frozenset(
    {
        (U, U), (U, C), (U, F), (U, P),
        (C, C), (C, L), (C, F), (C, U), (C, P),
        (L, R), (L, U), (L, F),
        (F, C), (F, U), (F, F), (F, P),
        (R, C), (R, U), (R, F), (R, P),
        (P, P), (P, C), (P, F), (P, U),
    }
)  # fmt: skip

# Roles a node that may not vote (observer, or voter catching up after disk loss) may take.
# Plus Resigned -> Unattached / Follower: a leader removed from the voters (KIP-853) that
# lost leadership before the removal committed leaves Resigned as a non-voting node.
NON_VOTING_TRANSITIONS: frozenset[tuple[Role, Role]] = frozenset(
    {(U, U), (U, F), (F, U), (F, F), (R, U), (R, F)})


class IllegalTransitionError(RuntimeError):
    """A local bug: the core tried a transition the table forbids."""


def check_transition(old: Role, new: Role, *, may_vote: bool, epoch_changed: bool) -> None:
    table = ALLOWED_TRANSITIONS if may_vote else NON_VOTING_TRANSITIONS
    if (old, new) not in table:
        kind = "voter" if may_vote else "non-voting node"
        raise IllegalTransitionError(f"{kind} may not move from {old.value} to {new.value}")
    if old is new and new in (U, F) and not epoch_changed and may_vote:
        # Unattached -> Unattached and Follower -> Follower only happen with a higher epoch for
        # a voter; an observer may switch leaders' endpoints within an epoch.
        raise IllegalTransitionError(f"{old.value} -> {new.value} requires a higher epoch")


@dataclass(frozen=True, slots=True)
class PersistedState:
    """What ``quorum-state`` holds (Kafka's layout plus one extension field).

    Invariant: written durably before any message that depends on it leaves the node. ``epoch``
    never decreases on a node (disk loss aside). ``pending_catch_up`` is our extension: the node
    lost its disk and must not vote or campaign until it has caught up from a leader
    (docs/concepts/protocol.md, a voter that lost its disk).
    """

    epoch: int
    leader_id: int = NO_LEADER
    voted_id: int = NO_LEADER
    pending_catch_up: bool = False
    # KIP-853: the directory of the candidate voted for (Kafka's QuorumStateData v1
    # VotedDirectoryId); NIL when the vote named none.
    voted_directory_id: uuid.UUID = NIL_DIRECTORY

    def to_json_dict(self, cluster_id: str, voters: tuple[int, ...]) -> dict[str, Any]:
        return {
            "clusterId": cluster_id,
            "leaderId": self.leader_id,
            "leaderEpoch": self.epoch,
            "votedId": self.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in voters],
            "data_version": 0,
            "kraftSparkPendingCatchUp": self.pending_catch_up,
            **({"votedDirectoryId": directory_text(self.voted_directory_id)}
               if self.voted_directory_id != NIL_DIRECTORY else {}),
        }

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> PersistedState:
        return cls(
            epoch=int(data["leaderEpoch"]),
            leader_id=int(data.get("leaderId", NO_LEADER)),
            voted_id=int(data.get("votedId", NO_LEADER)),
            pending_catch_up=bool(data.get("kraftSparkPendingCatchUp", False)),
            voted_directory_id=parse_directory(str(data["votedDirectoryId"]))
            if data.get("votedDirectoryId") else NIL_DIRECTORY,
        )
