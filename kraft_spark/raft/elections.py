"""Campaigning and votes: pre-votes (a Prospective's round; what a pre-vote is: prevote.py), votes
(a Candidate's), granting votes, backoff after a lost round, graceful succession."""

from __future__ import annotations

from kraft_spark.raft.base import CoreState, InFlight
from kraft_spark.raft.campaign import Campaign
from kraft_spark.raft.leader import Leadership
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


class Elections:
    """Campaigning (pre-votes as a Prospective, then votes as a Candidate, KIP-996 and
    KIP-595), answering Vote requests, backing off, and a resigned leader's succession."""

    def __init__(self, core: CoreState, leadership: Leadership) -> None:
        self.core = core
        self.leadership = leadership

    # ------------------------------------------------------------------ safety rules (hooks)

    def _rule_vote_log_ok(self, req: VoteRequest) -> bool:
        """Grant only to a candidate whose log is at least as up to date as ours."""
        log = self.core.log
        return log_is_up_to_date(
            req.last_offset_epoch, req.last_offset, log.last_epoch(), log.end_offset())

    def _rule_decide_vote(self, req: VoteRequest) -> VoteDecision:
        core = self.core
        listed = core.voters if req.candidate_id in core.voters else (
            (*core.voters, req.candidate_id) if self._heard_though_unlisted(req) else core.voters)
        return decide_vote(
            candidate_id=req.candidate_id,
            voters=listed,
            may_vote=core.may_grant_votes,
            voted_id=core.voted_id,
            leader_known=core.known_leader() != NO_LEADER,
            log_ok=self._rule_vote_log_ok(req),
        )

    # ------------------------------------------------------------------ prospective

    def become_prospective(self) -> None:
        """Start a round of pre-votes in our current epoch (no epoch change, no vote cast)."""
        core = self.core
        assert core.may_vote, "non-voting nodes never campaign"
        retries = core.rounds_lost()
        round_ = Campaign(VoteTally.opened_by(core.node_id), pre_vote=True, retries=retries)
        core.transition(round_, core.epoch, NO_LEADER, core.voted_id)
        core.election_deadline = core.now + election_timeout_ms(
            core.rng, core.config.election_timeout_ms
        )
        self._ask_voters(pre_vote=True)
        self._settle_round()

    def campaign_now(self, now_ms: int) -> None:
        """Become a candidate at ``now_ms`` without a pre-vote round (scripted scenarios)."""
        self.core.now = max(self.core.now, now_ms)
        self.become_candidate()

    def handle_pre_vote_response(self, pending: InFlight, src: int, resp: VoteResponse) -> None:
        core = self.core
        if resp.leader_epoch > core.epoch:
            core.observe_epoch(resp.leader_epoch, resp.leader_id)
            return
        if core.role is not Role.PROSPECTIVE or pending.epoch != core.epoch:
            return
        if resp.error == ErrorCode.NONE and resp.vote_granted:
            # A grant may still name the leader of our epoch: one the voter does not hear
            # from any more. Following it would undo the round (the simulator found two
            # voters sending each other back to a dead leader this way, --seed 1).
            core.campaigning.tally.grant(src)
        else:
            core.campaigning.tally.reject(src)
            # Refused by a voter that hears from the leader of our epoch: follow it.
            if core.observe_epoch(resp.leader_epoch, resp.leader_id):
                return
        self._settle_round()

    def on_pre_vote_refused(self, pending: InFlight) -> None:
        """The voter's host refused the connection: it will not grant anything soon."""
        core = self.core
        if core.role is not Role.PROSPECTIVE or pending.epoch != core.epoch:
            return
        core.campaigning.tally.reject(pending.dest)  # no effect once that voter granted
        self._settle_round()

    # ------------------------------------------------------------------ candidate

    def become_candidate(self) -> None:
        """Vote for ourselves in epoch + 1 and ask every other voter."""
        core = self.core
        assert core.may_vote, "non-voting nodes never campaign"
        retries = core.rounds_lost()
        round_ = Campaign(VoteTally.opened_by(core.node_id), pre_vote=False, retries=retries)
        core.transition(round_, core.epoch + 1, NO_LEADER, core.node_id)
        core.elections_started += 1
        core.election_deadline = core.now + election_timeout_ms(
            core.rng, core.config.election_timeout_ms
        )
        self._ask_voters(pre_vote=False)
        self._settle_round()

    def _ask_voters(self, *, pre_vote: bool) -> None:
        """Send every other voter a Vote (or a pre-vote) for our current epoch. Each request
        names its voter as our set lists it (KIP-853's voter key): a node that came back on
        another disk refuses it (INVALID_VOTER_KEY)."""
        core = self.core
        for voter in core.voters:
            if voter != core.node_id:
                request = VoteRequest(
                    cluster_id=core.cluster_id,
                    candidate_epoch=core.epoch,
                    candidate_id=core.node_id,
                    last_offset_epoch=core.log.last_epoch(),
                    last_offset=core.log.end_offset(),
                    candidate_directory_id=core.directory_id,
                    voter_id=voter,
                    voter_directory_id=core.directory_of_voter(voter),
                    pre_vote=pre_vote,
                )
                core.send(voter, "prevote" if pre_vote else "vote", request,
                          core.config.request_timeout_ms)

    def _settle_round(self) -> None:
        """Our round of votes (won: lead) or pre-votes (won: stand as a candidate): lost, back
        off (then ``poll`` starts another round); else wait for more answers."""
        campaign = self.core.campaigning
        outcome = campaign.tally.outcome(len(self.core.voters))
        if outcome is Outcome.WON:
            if campaign.pre_vote:
                self.become_candidate()
            else:
                self.leadership.become_leader()
        elif outcome is Outcome.LOST:
            self._start_backoff()

    def _start_backoff(self) -> None:
        core = self.core
        campaign = core.campaigning
        if campaign.backoff_until is None:
            campaign.backoff_until = core.now + failed_election_backoff_ms(
                core.rng,
                campaign.retries,
                core.config.retry_backoff_ms,
                core.config.election_backoff_max_ms,
            )
            campaign.retries += 1

    def poll(self) -> None:
        """A Candidate's or a Prospective's timers: the same backoff after a lost round."""
        core = self.core
        backoff_until = core.campaigning.backoff_until
        if backoff_until is not None:
            if core.now >= backoff_until:
                # A failed election is retried through pre-votes (KIP-996): a candidate that
                # cannot win no longer raises the epoch for everyone each time.
                self.become_prospective()
        elif core.now >= core.election_deadline:
            self._start_backoff()

    def on_vote_refused(self, pending: InFlight) -> None:
        """Our Vote request could not be delivered: the voter's host refused the connection, so
        that voter is not running. The request is never retried in this epoch, so its grant
        cannot arrive: count it as rejected. With a majority rejected the candidate backs off
        now (random, growing) instead of sitting out its whole election timeout, which is what
        breaks a split vote between the survivors of a crash quickly. (A pre-vote's:
        ``on_pre_vote_refused``.)"""
        core = self.core
        if core.role is not Role.CANDIDATE or pending.epoch != core.epoch:
            return
        core.campaigning.tally.reject(pending.dest)
        self._settle_round()

    def handle_vote_response(self, pending: InFlight, src: int, resp: VoteResponse) -> None:
        """The answer to our Vote (a pre-vote's: ``handle_pre_vote_response``)."""
        core = self.core
        if core.observe_epoch(resp.leader_epoch, resp.leader_id):
            return
        if core.role is not Role.CANDIDATE or pending.epoch != core.epoch:
            return
        if resp.error == ErrorCode.NONE and resp.vote_granted:
            core.campaigning.tally.grant(src)
        else:
            core.campaigning.tally.reject(src)
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
        core = self.core
        if req.cluster_id != core.cluster_id:
            core.reply(token, self._vote_response(ErrorCode.INCONSISTENT_CLUSTER_ID, False))
            return True
        if req.candidate_epoch < core.epoch:
            core.reply(token, self._vote_response(ErrorCode.FENCED_LEADER_EPOCH, False))
            return True
        if req.candidate_id not in core.voters and not self._heard_though_unlisted(req):
            core.reply(token, self._vote_response(ErrorCode.INCONSISTENT_VOTER_SET, False))
            return True
        if not core.is_own_voter_key(req.voter_id, req.voter_directory_id):
            # Meant for another disk of our id: a vote that disk cast is not ours to repeat or
            # contradict. Refused *before* the epoch is adopted (Kafka adopts it first): the
            # simulator found a wiped voter relaying a removed voter's ever-higher epochs in
            # these answers, knocking every rightful candidate out of its election
            # (--seed 41 --voters 5 --observers 2 --faults MEMBERSHIP_FAULTS).
            core.reply(token, self._vote_response(ErrorCode.INVALID_VOTER_KEY, False))
            return True
        return False

    def handle_vote_request(self, token: object, req: VoteRequest) -> None:
        """A vote (not a pre-vote) that passed ``refuse_vote_request``: one vote per epoch,
        up-to-date log. The grant is persisted (Ready.persist) before the reply leaves the
        node."""
        core = self.core
        if req.candidate_epoch > core.epoch:
            campaign_at = core.own_campaign_time()
            core.become_unattached(req.candidate_epoch)
            # Only a granted vote restarts our election timer (below); a candidate we reject
            # must not postpone our own candidacy, or a stale candidate retrying with higher
            # epochs would keep the up-to-date voters from ever campaigning.
            core.election_deadline = min(core.election_deadline, campaign_at)
        decision = self._rule_decide_vote(req)
        if decision.granted and self._voted_other_directory(req):
            decision = VoteDecision(False, "already voted for another directory of this id")
        if decision.granted and core.voted_id != req.candidate_id:
            core.voted_id = req.candidate_id
            core.voted_directory_id = req.candidate_directory_id
            core.persist_needed = True
            if core.role is Role.UNATTACHED:
                # Having voted, give the candidate a full election timeout before campaigning.
                core.election_deadline = core.now + election_timeout_ms(
                    core.rng, core.config.election_timeout_ms
                )
        core.reply(token, self._vote_response(ErrorCode.NONE, decision.granted))

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
        return (req.candidate_id >= 0 and req.candidate_epoch <= self.core.epoch + 1
                and not self.core.hears_from_leader() and self._rule_vote_log_ok(req))

    def _voted_other_directory(self, req: VoteRequest) -> bool:
        """Our vote in this epoch went to this id on another disk (both directories known):
        they are different voters (Kafka's votedKey), so this one is refused."""
        core = self.core
        return (
            core.voted_id == req.candidate_id
            and NIL_DIRECTORY not in (core.voted_directory_id, req.candidate_directory_id)
            and core.voted_directory_id != req.candidate_directory_id
        )

    def _vote_response(self, error: ErrorCode, granted: bool) -> VoteResponse:
        return VoteResponse(error, self.core.known_leader(), self.core.epoch, granted)

    # ------------------------------------------------------------------ graceful succession

    def schedule_succession(self, successors: tuple[int, ...]) -> None:
        """EndQuorumEpoch received: successor p campaigns after a backoff growing with p;
        a voter not listed waits a normal randomized election timeout."""
        core = self.core
        if core.node_id in successors:
            delay = successor_backoff_ms(
                successors.index(core.node_id),
                core.config.retry_backoff_ms,
                core.config.election_backoff_max_ms,
            )
        else:
            delay = election_timeout_ms(core.rng, core.config.election_timeout_ms)
        following = core.following  # None unless Follower
        if following is not None:
            following.resigned = True  # its older Fetch responses must not undo this
            following.fetch_deadline = min(following.fetch_deadline, core.now + delay)
            if delay == 0:
                self.become_candidate()
        else:
            core.election_deadline = min(core.election_deadline, core.now + delay)
            if delay == 0:
                self.become_candidate()
