"""A follower's state: what it knows about the one leader it follows in one epoch.

The core holds one ``Following`` exactly while its role is Follower (``CoreState.following``),
a new one for every leader it follows (``become_follower``, or a restart that finds a leader in
its quorum state) and none in any other role. So nothing learnt about one leader (that its host
refused a connection, that it resigned, that a Fetch to it succeeded, the high watermark it
sent) can outlive it or be read in a role it does not belong to.

The fetch loop itself (the Fetch in flight, when the next one may go, waiting for the log's
flush, which voter an observer asks next) is not here: Unattached observers run it too while
they look for the leader.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Following:
    leader_id: int
    # No successful Fetch by then: a voter campaigns (through pre-votes), an observer looks
    # for the leader elsewhere.
    fetch_deadline: int
    # Added to fetch.timeout.ms while following this leader (voters only: 0 for observers), so
    # the followers of a leader that vanished do not all campaign at once.
    jitter_ms: int = 0
    # A Fetch to this leader succeeded (a pre-vote is refused only by a follower that actually
    # hears from its leader).
    fetched: bool = False
    # Its host refused a connection since our last successful Fetch: the early election
    # deadline is drawn once per leader, not once per refusal, or repeated refusals would pull
    # every follower's deadline towards zero.
    refused: bool = False
    # It told us it resigned in this epoch (EndQuorumEpoch): Fetch responses it sent before,
    # which may arrive after that news on another connection, must not push our succession
    # deadline back by a whole fetch timeout.
    resigned: bool = False
    # The latest high watermark it sent, and the first (the disk-loss rule: follower.py).
    hw_seen: int | None = None
    first_hw: int | None = None

    def fetch_timeout_ms(self, fetch_timeout_ms: int) -> int:
        """How long we go without a successful Fetch from this leader before we give up on it."""
        return fetch_timeout_ms + self.jitter_ms


__all__ = ["Following"]
