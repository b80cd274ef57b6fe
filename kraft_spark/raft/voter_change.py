"""A leader's voter change in flight (KIP-853, membership.py's rules 1 and 4), as a value of its
``LeaderState``: it exists only while the node leads, so no other role can hold a pending change
or a due step-down, and leaving the leadership drops it with the rest of the epoch's bookkeeping.

The slot decides; the core answers and logs: each method says what became of the change (a
commit, a timeout, an abandonment) and the leader turns that into replies and events.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraft_spark.raft.state import NEVER


@dataclass(slots=True)
class PendingVoterChange:
    """A VotersRecord appended by this leader and not yet committed."""

    token: object | None  # None once answered (timed out)
    offset: int
    deadline: int
    description: str


@dataclass(slots=True)
class VoterChangeSlot:
    """At most one change at a time (rule 1), and whether this leader removed itself."""

    pending: PendingVoterChange | None = None
    # Set when the VotersRecord removing this leader committed: it steps down at its next
    # poll (not inside the high-watermark update that noticed, whose callers still use the
    # leader's state).
    step_down_due: bool = False

    def start(self, change: PendingVoterChange) -> None:
        # Rule 1 (one at a time) is VoterChanges._rule_change_blocked's, checked before
        # every change; the simulator's injected bug that breaks it must reach the checker.
        self.pending = change

    def committed(self, high_watermark: int, leader_listed: bool) -> PendingVoterChange | None:
        """The pending change if ``high_watermark`` passed its VotersRecord (it is then done;
        a leader no longer ``leader_listed`` in the set in force is due to step down)."""
        change = self.pending
        if change is None or high_watermark <= change.offset:
            return None
        self.pending = None
        if not leader_listed:
            self.step_down_due = True
        return change

    def expired(self, now: int) -> tuple[object, str] | None:
        """(token, description) of a change still unanswered at its deadline: answered now as
        timed out by the caller, it stays pending (it may still commit)."""
        change = self.pending
        if change is None or change.token is None or now < change.deadline:
            return None
        token, change.token = change.token, None
        return token, change.description

    def deadline(self) -> int:
        """When ``expired`` next has something to say (NEVER: not before a new change)."""
        change = self.pending
        return change.deadline if change is not None and change.token is not None else NEVER

    def abandon(self) -> PendingVoterChange | None:
        """The leadership is lost: the pending change, whose outcome is now unknown here."""
        change, self.pending = self.pending, None
        return change
