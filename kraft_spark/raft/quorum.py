"""Quorum arithmetic, kept apart so it can be checked against a naive version: majorities,
the offset a majority reached (the high watermark), and the tally of an election round (votes
and pre-votes alike). Check-quorum counts with ``majority`` too (progress.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum


def majority(n_voters: int) -> int:
    """Smallest number of voters that forms a majority."""
    return n_voters // 2 + 1


def majority_offset(offsets: Iterable[int]) -> int:
    """The largest offset that a majority of the given voter offsets has reached.

    Sort descending, take index ⌊n/2⌋. With n = 3 that is the 2nd largest, with n = 5
    the 3rd: exactly ``majority(n)`` voters are at or beyond it.
    """
    ordered = sorted(offsets, reverse=True)
    return ordered[len(ordered) // 2]


class Outcome(Enum):
    OPEN = "open"  # neither side has a majority yet
    WON = "won"  # a majority granted
    LOST = "lost"  # a majority refused: the round cannot be won


@dataclass(slots=True)
class VoteTally:
    """One round of votes (a Candidate's) or pre-votes (a Prospective's, KIP-996): who granted
    and who refused, counted against a majority of the voters.

    Invariant: ``granted`` and ``rejected`` are disjoint. A grant is final within the round
    (a refusal that arrives after it, or a request to that voter failing, changes nothing); a
    grant replaces an earlier refusal (a voter that refused a pre-vote while it still heard
    from the leader may grant once it no longer does).
    """

    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)

    @classmethod
    def opened_by(cls, node_id: int) -> VoteTally:
        """A round a node opens with its own grant."""
        return cls(granted={node_id})

    def grant(self, voter: int) -> None:
        self.granted.add(voter)
        self.rejected.discard(voter)

    def reject(self, voter: int) -> None:
        if voter not in self.granted:
            self.rejected.add(voter)

    def outcome(self, n_voters: int) -> Outcome:
        needed = majority(n_voters)
        if len(self.granted) >= needed:
            return Outcome.WON
        if len(self.rejected) >= needed:
            return Outcome.LOST
        return Outcome.OPEN
