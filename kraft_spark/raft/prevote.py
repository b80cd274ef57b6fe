"""Pre-vote (KIP-996): ask before bumping the epoch.

A voter whose election timer fires does not become a candidate at once: it becomes
*Prospective* in its current epoch and sends Vote requests with ``PreVote`` set (Vote v2).
Answering one changes nothing at the receiver (no epoch, no vote, nothing persisted); the grant
says "I would vote for you": the prospective's log is at least as up to date as ours, and we do
not hear from a leader. Only with a majority of such grants does the prospective become a
candidate in epoch + 1.

Why: a voter that cannot win (its log is behind, or it was removed from the voters by a
VotersRecord it never received) used to raise the epoch every election timeout, and every
voter that adopted that epoch dropped out of the election it was about to win. The simulator
found such a removed voter keeping a 5-voter quorum without a leader for 15 s
(``--seed 104 --voters 5 --observers 2 --faults MEMBERSHIP_FAULTS``).

Rules, Kafka's where Kafka has one:

* A follower refuses a pre-vote while it hears from its leader: it has fetched successfully
  since it began following it, its fetch timeout has not expired, and the leader did not
  resign (EndQuorumEpoch). A follower that has not fetched yet grants: it may be following a
  leader that is already gone (Kafka's fix for prospectives sending each other back to a dead
  leader in turn).
* A leader refuses; anyone else (unattached, candidate, prospective, resigned) grants on the
  log comparison alone. The one-vote-per-epoch rule does not apply: the vote asked about
  belongs to the next epoch.
* Unlike Kafka, a pre-vote with a higher epoch is not adopted: nothing at the receiver changes.
* The successors named by a resigning leader's EndQuorumEpoch campaign at once, as before:
  the leader handed over, so there is nothing to protect.
* A candidate whose election fails goes back to Prospective, so repeated failures do not
  raise the epoch either.

The prospective's round is ``Elections.become_prospective`` (elections.py), counted by the
same ``VoteTally`` as a candidate's; this module answers a pre-vote.
"""

from __future__ import annotations

from kraft_spark.raft.base import CoreState
from kraft_spark.raft.messages import ErrorCode, VoteRequest, VoteResponse
from kraft_spark.raft.vote_rules import log_is_up_to_date


def pre_vote_answer(core: CoreState, req: VoteRequest) -> VoteResponse:
    """The answer to a pre-vote, which changes nothing here (see the module docstring), once
    the checks of every vote passed (``Elections.refuse_vote_request``: cluster, epoch, known
    candidate, voter key)."""
    granted = (
        req.candidate_epoch >= core.epoch
        and core.may_grant_votes
        and not core.hears_from_leader()
        and log_is_up_to_date(req.last_offset_epoch, req.last_offset,
                              core.log.last_epoch(), core.log.end_offset())
    )
    error = ErrorCode.FENCED_LEADER_EPOCH if req.candidate_epoch < core.epoch else (
        ErrorCode.NONE)
    return VoteResponse(error, core.known_leader(), core.epoch, granted)
