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
    """The leader itself is the core's ``leader_id`` (set with the role, never apart from it)."""

    # Added to fetch.timeout.ms while following this leader (voters only: 0 for observers), so
    # the followers of a leader that vanished do not all campaign at once.
    jitter_ms: int = 0
    # No successful Fetch by then: a voter campaigns (through pre-votes), an observer looks
    # for the leader elsewhere. Set by ``restart_deadline`` as soon as the value is made.
    fetch_deadline: int = 0
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

    def restart_deadline(self, now: int, fetch_timeout_ms: int) -> None:
        """We began following, or a Fetch (or a snapshot chunk) from the leader succeeded at
        ``now``: give it a whole fetch timeout (plus our jitter) again, unless it resigned (its
        succession deadline stands)."""
        if not self.resigned:
            self.fetch_deadline = now + fetch_timeout_ms + self.jitter_ms


__all__ = ["Following"]
