"""Election rules: the vote-granting decision and the randomized timers (docs/concepts/
protocol.md, elections).

Randomness always comes from the ``random.Random`` the caller passes in (seeded by the shell or
the simulator), never from the global RNG.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kraft_spark.raft.messages import NO_LEADER


@dataclass(frozen=True, slots=True)
class VoteDecision:
    granted: bool
    reason: str


def log_is_up_to_date(
    candidate_last_epoch: int, candidate_end: int, local_last_epoch: int, local_end: int
) -> bool:
    """The candidate's log is at least as up to date as ours: (last epoch, end) compared
    lexicographically."""
    return (candidate_last_epoch, candidate_end) >= (local_last_epoch, local_end)


def decide_vote(
    *,
    candidate_id: int,
    voters: tuple[int, ...],
    may_vote: bool,
    voted_id: int,
    leader_known: bool,
    log_ok: bool,
) -> VoteDecision:
    """The vote rules after the cluster id and epoch (one vote per epoch, no leader known, a
    known voter, an up-to-date log; docs/concepts/protocol.md) for a request in our (equal)
    epoch; the cluster id and epoch were checked by the caller, in that order, before this."""
    if not may_vote:
        return VoteDecision(False, "this node may not vote (observer or catching up)")
    if voted_id != NO_LEADER:
        if voted_id == candidate_id:
            return VoteDecision(True, "already voted for this candidate in this epoch")
        return VoteDecision(False, f"already voted for {voted_id} in this epoch")
    if leader_known:
        return VoteDecision(False, "a leader of this epoch is known")
    if candidate_id not in voters:
        return VoteDecision(False, f"candidate {candidate_id} is not a voter")
    if not log_ok:
        return VoteDecision(False, "candidate's log is behind ours")
    return VoteDecision(True, "granted")


def election_timeout_ms(rng: random.Random, base_ms: int) -> int:
    """Uniform in [base, 2 × base)."""
    return rng.randrange(base_ms, 2 * base_ms)


def leader_gone_delay_ms(rng: random.Random, election_timeout_ms: int) -> int:
    """How long a follower whose leader's host refused a connection waits before campaigning:
    uniform in [0, election timeout / 2]. Random, because every follower of that leader notices
    the refusal at about the same moment and would otherwise split the vote."""
    return rng.randint(0, election_timeout_ms // 2)


def fetch_timeout_jitter_ms(rng: random.Random, max_jitter_ms: int) -> int:
    """What a voting follower adds to ``fetch.timeout.ms`` while it follows one leader:
    uniform in [0, max_jitter_ms] (default: election timeout / 2), drawn once per leader and
    epoch; nothing, and no draw, when ``max_jitter_ms`` is 0.

    **Deviation from KIP-595** (docs/concepts/protocol.md; there the fetch timeout alone
    starts an election): followers fetch in lockstep, so when a leader freezes or its answers
    are cut off every follower's fetch deadline expires within a millisecond of the others'.
    They all campaigned in the same epoch, split the vote and then waited out a
    failed-election backoff: a SIGSTOP'd leader was replaced after 3.8-4.05 s on Kafka's
    defaults, the split vote costing
    1.75 s of it. With the jitter the first follower's vote request usually reaches the others
    before their own deadline (the Raft paper's randomized election timeout). Liveness only:
    the vote rules still decide who leads."""
    return rng.randint(0, max_jitter_ms) if max_jitter_ms > 0 else 0


def failed_election_backoff_ms(
    rng: random.Random, retries: int, retry_backoff_ms: int, max_backoff_ms: int
) -> int:
    """Random backoff after a failed election, growing with the number of retries."""
    cap = int(min(max_backoff_ms, retry_backoff_ms * (2 ** min(retries, 20))))
    return rng.randint(min(retry_backoff_ms, cap), max(cap, 1))


def successor_backoff_ms(position: int, retry_backoff_ms: int, max_backoff_ms: int) -> int:
    """EndQuorumEpoch: successor 0 campaigns at once, successor p waits longer as p grows."""
    if position <= 0:
        return 0
    return int(min(max_backoff_ms, retry_backoff_ms * (2 ** (position - 1)) * 5))
