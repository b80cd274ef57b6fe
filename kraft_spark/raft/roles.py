"""The role a node is in, as one value: its type is the role, its fields that role's own state.

A node holds exactly one ``RoleValue`` (``CoreState.role_value``), replaced as a whole at every
transition (``CoreState.transition``), so a combination the protocol forbids cannot be written
down: no follower without the leader it follows, no leader without its epoch's bookkeeping, no
campaign outside Prospective and Candidate, nothing of one role left over in the next.

* ``Unattached``: no leader known in this epoch (a voter waits for its election timer, a
  non-voting node fetches from the voters in turn to find the leader);
* ``Campaign``: Prospective (``pre_vote``, KIP-996) or Candidate, its round and backoff
  (campaign.py);
* ``Following``: Follower, what it knows of the one leader it follows (following.py);
* ``LeaderState``: Leader, the bookkeeping of its epoch (leader_state.py);
* ``Resigned``: led this epoch and stepped down; campaigns again at its election deadline.

What several roles share (the election deadline of Unattached, Resigned and campaigning nodes;
the fetch loop of followers and of observers looking for the leader) stays on ``CoreState``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraft_spark.raft.campaign import Campaign
from kraft_spark.raft.following import Following
from kraft_spark.raft.leader_state import LeaderState
from kraft_spark.raft.state import Role


@dataclass(frozen=True, slots=True)
class Unattached:
    """No leader known in this epoch."""


@dataclass(frozen=True, slots=True)
class Resigned:
    """Led this epoch and stepped down (shutdown, or check-quorum failed)."""


UNATTACHED = Unattached()
RESIGNED = Resigned()

RoleValue = Unattached | Campaign | Following | LeaderState | Resigned


def role_of(value: RoleValue) -> Role:
    """The role a value stands for."""
    if isinstance(value, Following):
        return Role.FOLLOWER
    if isinstance(value, LeaderState):
        return Role.LEADER
    if isinstance(value, Campaign):
        return Role.PROSPECTIVE if value.pre_vote else Role.CANDIDATE
    if isinstance(value, Resigned):
        return Role.RESIGNED
    return Role.UNATTACHED
