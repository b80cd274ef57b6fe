"""A campaigning node's state: its current round of pre-votes (Prospective, KIP-996) or votes
(Candidate), and its backoff after a lost round.

The core holds one ``Campaign`` exactly while its role is Prospective or Candidate
(``CoreState.campaign``), a new one for every round, and none in any other role. Only the count
of rounds lost in a row carries from one round to the next (it grows the backoff); it starts
again at 0 when the node begins campaigning from another role.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraft_spark.raft.quorum import VoteTally


@dataclass(slots=True)
class Campaign:
    tally: VoteTally
    pre_vote: bool
    # Rounds lost in a row before this one (the backoff after a lost round grows with it).
    retries: int = 0
    # Set once this round is lost: the next round (through pre-votes) starts then.
    backoff_until: int | None = None

    def next_step_at(self, election_deadline: int) -> int:
        """When the campaign acts next if no answer arrives: the end of its backoff once the
        round is lost, else the round's election deadline."""
        return self.backoff_until if self.backoff_until is not None else election_deadline


__all__ = ["Campaign"]
