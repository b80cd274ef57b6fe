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
"""

from __future__ import annotations

from kraft_spark.raft.base import InFlight
from kraft_spark.raft.campaign import Campaign
from kraft_spark.raft.elections import ElectionMixin
from kraft_spark.raft.messages import NO_LEADER, ErrorCode, VoteRequest, VoteResponse
from kraft_spark.raft.quorum import VoteTally
from kraft_spark.raft.state import Role
from kraft_spark.raft.vote_rules import (
    election_timeout_ms,
    log_is_up_to_date,
)


class PreVoteMixin(ElectionMixin):
    # ------------------------------------------------------------------ prospective

    def become_prospective(self) -> None:
        """Start a round of pre-votes in our current epoch (no epoch change, no vote cast)."""
        assert self.may_vote, "non-voting nodes never campaign"
        retries = self.rounds_lost()
        self.transition(Role.PROSPECTIVE, self.epoch, NO_LEADER, self.voted_id)
        self.campaign = Campaign(VoteTally.opened_by(self.node_id), pre_vote=True,
                                 retries=retries)
        self.election_deadline = self.now + election_timeout_ms(
            self.rng, self.config.election_timeout_ms
        )
        self._ask_voters(pre_vote=True)
        self._settle_round()

    def campaign_now(self, now_ms: int) -> None:
        """Become a candidate at ``now_ms`` without a pre-vote round (scripted scenarios)."""
        self.now = max(self.now, now_ms)
        self.become_candidate()

    def handle_pre_vote_response(self, pending: InFlight, src: int, resp: VoteResponse) -> None:
        if resp.leader_epoch > self.epoch:
            self.observe_epoch(resp.leader_epoch, resp.leader_id)
            return
        if self.role is not Role.PROSPECTIVE or pending.epoch != self.epoch:
            return
        if resp.error == ErrorCode.NONE and resp.vote_granted:
            # A grant may still name the leader of our epoch: one the voter does not hear
            # from any more. Following it would undo the round (the simulator found two
            # voters sending each other back to a dead leader this way, --seed 1).
            self.campaigning.tally.grant(src)
        else:
            self.campaigning.tally.reject(src)
            # Refused by a voter that hears from the leader of our epoch: follow it.
            if self.observe_epoch(resp.leader_epoch, resp.leader_id):
                return
        self._settle_round()

    def on_pre_vote_refused(self, pending: InFlight) -> None:
        """The voter's host refused the connection: it will not grant anything soon."""
        if self.role is not Role.PROSPECTIVE or pending.epoch != self.epoch:
            return
        self.campaigning.tally.reject(pending.dest)  # no effect once that voter granted
        self._settle_round()

    # ------------------------------------------------------------------ voter

    def handle_pre_vote_request(self, token: object, req: VoteRequest) -> None:
        """Answer without changing anything (see the module docstring), once the checks of
        every vote passed (``refuse_vote_request``: cluster, epoch, known candidate, voter
        key)."""
        granted = (
            req.candidate_epoch >= self.epoch
            and self.may_grant_votes
            and not self.hears_from_leader()
            and log_is_up_to_date(req.last_offset_epoch, req.last_offset,
                                  self.log.last_epoch(), self.log.end_offset())
        )
        error = ErrorCode.FENCED_LEADER_EPOCH if req.candidate_epoch < self.epoch else (
            ErrorCode.NONE)
        self.reply(token, VoteResponse(error, self.known_leader(), self.epoch, granted))
