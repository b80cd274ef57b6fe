"""Candidates and votes: campaigning, granting votes, backoff, graceful succession."""

from __future__ import annotations

from kraft_spark.raft.base import CoreState, InFlight
from kraft_spark.raft.campaign import Campaign
from kraft_spark.raft.messages import NO_LEADER, ErrorCode, VoteRequest, VoteResponse
from kraft_spark.raft.quorum import Outcome, VoteTally
from kraft_spark.raft.state import Role
from kraft_spark.raft.vote_rules import (
    VoteDecision,
    decide_vote,
    election_timeout_ms,
    failed_election_backoff_ms,
    log_is_up_to_date,
    successor_backoff_ms,
)
from kraft_spark.raft.voter_set import NIL_DIRECTORY


class ElectionMixin(CoreState):
    # ------------------------------------------------------------------ safety rules (hooks)

    def _rule_vote_log_ok(self, req: VoteRequest) -> bool:
        """Grant only to a candidate whose log is at least as up to date as ours."""
        return log_is_up_to_date(
            req.last_offset_epoch, req.last_offset, self.log.last_epoch(), self.log.end_offset()
        )

    def _rule_decide_vote(self, req: VoteRequest) -> VoteDecision:
        listed = self.voters if req.candidate_id in self.voters else (
            (*self.voters, req.candidate_id) if self._heard_though_unlisted(req) else self.voters)
        return decide_vote(
            candidate_id=req.candidate_id,
            voters=listed,
            may_vote=self.may_grant_votes,
            voted_id=self.voted_id,
            leader_known=self.known_leader() != NO_LEADER,
            log_ok=self._rule_vote_log_ok(req),
        )

    # ------------------------------------------------------------------ candidate

    def become_candidate(self) -> None:
        """Vote for ourselves in epoch + 1 and ask every other voter."""
        assert self.may_vote, "non-voting nodes never campaign"
        retries = self.rounds_lost()
        self.transition(Role.CANDIDATE, self.epoch + 1, NO_LEADER, self.node_id)
        self.elections_started += 1
        self.campaign = Campaign(VoteTally.opened_by(self.node_id), pre_vote=False,
                                 retries=retries)
        self.election_deadline = self.now + election_timeout_ms(
            self.rng, self.config.election_timeout_ms
        )
        self._ask_voters(pre_vote=False)
        self._settle_round()

    def _ask_voters(self, *, pre_vote: bool) -> None:
        """Send every other voter a Vote (or a pre-vote) for our current epoch. Each request
        names its voter as our set lists it (KIP-853's voter key): a node that came back on
        another disk refuses it (INVALID_VOTER_KEY)."""
        for voter in self.voters:
            if voter != self.node_id:
                request = VoteRequest(
                    cluster_id=self.cluster_id,
                    candidate_epoch=self.epoch,
                    candidate_id=self.node_id,
                    last_offset_epoch=self.log.last_epoch(),
                    last_offset=self.log.end_offset(),
                    candidate_directory_id=self.directory_id,
                    voter_id=voter,
                    voter_directory_id=self.directory_of_voter(voter),
                    pre_vote=pre_vote,
                )
                self.send(voter, "prevote" if pre_vote else "vote", request,
                          self.config.request_timeout_ms)

    def _settle_round(self) -> None:
        """Our round of votes (won: lead) or pre-votes (won: stand as a candidate): lost, back
        off (then ``_poll_candidate`` starts another round); else wait for more answers."""
        campaign = self.campaigning
        outcome = campaign.tally.outcome(len(self.voters))
        if outcome is Outcome.WON:
            if campaign.pre_vote:
                self.become_candidate()
            else:
                self.become_leader()
        elif outcome is Outcome.LOST:
            self._start_backoff()

    def _start_backoff(self) -> None:
        campaign = self.campaigning
        if campaign.backoff_until is None:
            campaign.backoff_until = self.now + failed_election_backoff_ms(
                self.rng,
                campaign.retries,
                self.config.retry_backoff_ms,
                self.config.election_backoff_max_ms,
            )
            campaign.retries += 1

    def _poll_candidate(self) -> None:
        """A Candidate's or a Prospective's timers: the same backoff after a lost round."""
        backoff_until = self.campaigning.backoff_until
        if backoff_until is not None:
            if self.now >= backoff_until:
                # A failed election is retried through pre-votes (KIP-996): a candidate that
                # cannot win no longer raises the epoch for everyone each time.
                self.become_prospective()
        elif self.now >= self.election_deadline:
            self._start_backoff()

    def on_vote_refused(self, pending: InFlight) -> None:
        """Our Vote request could not be delivered: the voter's host refused the connection, so
        that voter is not running. The request is never retried in this epoch, so its grant
        cannot arrive: count it as rejected. With a majority rejected the candidate backs off
        now (random, growing) instead of sitting out its whole election timeout, which is what
        breaks a split vote between the survivors of a crash quickly. (A pre-vote's:
        ``PreVoteMixin.on_pre_vote_refused``.)"""
        if self.role is not Role.CANDIDATE or pending.epoch != self.epoch:
            return
        self.campaigning.tally.reject(pending.dest)
        self._settle_round()

    def handle_vote_response(self, pending: InFlight, src: int, resp: VoteResponse) -> None:
        """The answer to our Vote (a pre-vote's: ``PreVoteMixin.handle_pre_vote_response``)."""
        if self.observe_epoch(resp.leader_epoch, resp.leader_id):
            return
        if self.role is not Role.CANDIDATE or pending.epoch != self.epoch:
            return
        if resp.error == ErrorCode.NONE and resp.vote_granted:
            self.campaigning.tally.grant(src)
        else:
            self.campaigning.tally.reject(src)
        self._settle_round()

    # ------------------------------------------------------------------ voter

    def refuse_vote_request(self, token: object, req: VoteRequest) -> bool:
        """The checks every Vote request passes first, a vote's or a pre-vote's, in order:
        cluster id, epoch, known voter, voter key. Answers and returns True when one fails.

        A candidate that is not in our voter set and whose log is behind ours is refused
        *before* its epoch is adopted: anyone can open a connection, and adopting the epoch of
        such a request would let one stray frame push every voter to an arbitrary epoch (up to
        2^31 - 1, after which no election can be encoded at all). One whose log is as up to
        date may be a voter our set does not know yet (``_heard_though_unlisted``)."""
        if req.cluster_id != self.cluster_id:
            self.reply(token, self._vote_response(ErrorCode.INCONSISTENT_CLUSTER_ID, False))
            return True
        if req.candidate_epoch < self.epoch:
            self.reply(token, self._vote_response(ErrorCode.FENCED_LEADER_EPOCH, False))
            return True
        if req.candidate_id not in self.voters and not self._heard_though_unlisted(req):
            self.reply(token, self._vote_response(ErrorCode.INCONSISTENT_VOTER_SET, False))
            return True
        if not self.is_own_voter_key(req.voter_id, req.voter_directory_id):
            # Meant for another disk of our id: a vote that disk cast is not ours to repeat or
            # contradict. Refused *before* the epoch is adopted (Kafka adopts it first): the
            # simulator found a wiped voter relaying a removed voter's ever-higher epochs in
            # these answers, knocking every rightful candidate out of its election
            # (--seed 41 --voters 5 --observers 2 --faults MEMBERSHIP_FAULTS).
            self.reply(token, self._vote_response(ErrorCode.INVALID_VOTER_KEY, False))
            return True
        return False

    def handle_vote_request(self, token: object, req: VoteRequest) -> None:
        """A vote (not a pre-vote) that passed ``refuse_vote_request``: one vote per epoch,
        up-to-date log. The grant is persisted (Ready.persist) before the reply leaves the
        node."""
        if req.candidate_epoch > self.epoch:
            campaign_at = self._own_campaign_time()
            self.become_unattached(req.candidate_epoch)
            # Only a granted vote restarts our election timer (below); a candidate we reject
            # must not postpone our own candidacy, or a stale candidate retrying with higher
            # epochs would keep the up-to-date voters from ever campaigning.
            self.election_deadline = min(self.election_deadline, campaign_at)
        decision = self._rule_decide_vote(req)
        if decision.granted and self._voted_other_directory(req):
            decision = VoteDecision(False, "already voted for another directory of this id")
        if decision.granted and self.voted_id != req.candidate_id:
            self.voted_id = req.candidate_id
            self.voted_directory_id = req.candidate_directory_id
            self._persist_needed = True
            if self.role is Role.UNATTACHED:
                # Having voted, give the candidate a full election timeout before campaigning.
                self.election_deadline = self.now + election_timeout_ms(
                    self.rng, self.config.election_timeout_ms
                )
        self.reply(token, self._vote_response(ErrorCode.NONE, decision.granted))

    def _heard_though_unlisted(self, req: VoteRequest) -> bool:
        """A candidate our voter set does not list may still be a voter: our set lags the
        candidate's when its addition sits in records we have not fetched (KIP-853; Kafka's
        voters hear any candidate). The simulator found a voter added by a VotersRecord that
        a lagging voter lacked unable to win the only majority left (`--seed 188 --voters 3
        --observers 2 --faults all,reconfig`). Such a candidate is heard when its log is at
        least as up to date as ours (a real one of a later set holds that VotersRecord), no
        leader is heard from, and its epoch is at most ours + 1 (what a prospective that won
        its pre-votes in our epoch campaigns in). Anything else is refused without adopting its
        epoch, as before: Kafka's voters hear anyone, but then one forged frame of epoch
        2^31 - 1 ends all elections."""
        return (req.candidate_id >= 0 and req.candidate_epoch <= self.epoch + 1
                and not self.hears_from_leader() and self._rule_vote_log_ok(req))

    def _voted_other_directory(self, req: VoteRequest) -> bool:
        """Our vote in this epoch went to this id on another disk (both directories known):
        they are different voters (Kafka's votedKey), so this one is refused."""
        return (
            self.voted_id == req.candidate_id
            and NIL_DIRECTORY not in (self.voted_directory_id, req.candidate_directory_id)
            and self.voted_directory_id != req.candidate_directory_id
        )

    def _vote_response(self, error: ErrorCode, granted: bool) -> VoteResponse:
        return VoteResponse(error, self.known_leader(), self.epoch, granted)

    # ------------------------------------------------------------------ graceful succession

    def schedule_succession(self, successors: tuple[int, ...]) -> None:
        """EndQuorumEpoch received: successor p campaigns after a backoff growing with p;
        a voter not listed waits a normal randomized election timeout."""
        if self.node_id in successors:
            delay = successor_backoff_ms(
                successors.index(self.node_id),
                self.config.retry_backoff_ms,
                self.config.election_backoff_max_ms,
            )
        else:
            delay = election_timeout_ms(self.rng, self.config.election_timeout_ms)
        following = self.following  # None unless Follower
        if following is not None:
            following.resigned = True  # its older Fetch responses must not undo this
            following.fetch_deadline = min(following.fetch_deadline, self.now + delay)
            if delay == 0:
                self.become_candidate()
        else:
            self.election_deadline = min(self.election_deadline, self.now + delay)
            if delay == 0:
                self.become_candidate()
