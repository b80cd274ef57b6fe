"""The leader: appending, serving Fetch (with parking), the high watermark, Produce, check-quorum,
graceful resignation, DescribeQuorum."""

from __future__ import annotations

from kraft_spark.raft.base import CoreState
from kraft_spark.raft.events import LeaderResigned, VoterEvent, VoterStep
from kraft_spark.raft.leader_state import LeaderState, ParkedFetch, ProduceWaiter
from kraft_spark.raft.messages import (
    CLIENT_REPLICA_ID,
    NO_LEADER,
    BeginQuorumEpochRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
    ReadIndexResponse,
)
from kraft_spark.raft.producers import SequenceCheck
from kraft_spark.raft.progress import LeaderProgress
from kraft_spark.raft.read_index import PendingRead
from kraft_spark.raft.records import Batch, LeaderChange, leader_change_batch
from kraft_spark.raft.replication import diverging_epoch, snapshot_to_send
from kraft_spark.raft.state import NEVER, Role
from kraft_spark.raft.vote_rules import election_timeout_ms

# Appends count as one writer at a time (QuorumConfig.lone_append_hold_ms applies) once none
# arrived while another awaited commit for this long.
CONCURRENT_WINDOW_MS = 100
# Every this many lone appends, one is handed to every voter at once (see handle_produce).
HOLD_PROBE_EVERY = 32


class LeaderMixin(CoreState):

    # ------------------------------------------------------------------ safety rules (hooks)

    def _rule_local_durable_offset(self) -> int:
        """The leader's own share of the high watermark: what it has fsync'd."""
        return self.log.flushed_offset()

    def _rule_majority_offset(self, ls: LeaderState) -> int:
        return ls.progress.majority_flushed_offset(self._rule_local_durable_offset())

    def _rule_may_commit(self, ls: LeaderState, offset: int) -> bool:
        """Commit only past the start of our own epoch (the Raft paper's figure 8)."""
        return offset > ls.epoch_start_offset

    def _rule_read_confirmed(self, ls: LeaderState) -> list[PendingRead]:
        """The reads a majority of voters confirmed by fetching after they arrived."""
        return ls.reads.take_confirmed(self.voters, self.node_id)

    # ------------------------------------------------------------------ read index

    def settle_reads(self, ls: LeaderState) -> None:
        """Answer the confirmed reads with the high watermark, once this epoch's first record
        has committed (before, the quorum's committed offset is not known here)."""
        if ls.reads.pending and self.high_watermark > ls.epoch_start_offset:
            for read in self._rule_read_confirmed(ls):
                self.reply(read.token, ReadIndexResponse(
                    ErrorCode.NONE, self.node_id, self.epoch, self.high_watermark))

    # ------------------------------------------------------------------ becoming / leaving

    def become_leader(self) -> None:
        # The LeaderChange record names who granted the round just won.
        granting = tuple(sorted(self.campaigning.tally.granted))
        self.transition(Role.LEADER, self.epoch, self.node_id, self.node_id)
        start = self.log.end_offset()
        others = {v for v in self.voters if v != self.node_id}
        ls = LeaderState(
            progress=LeaderProgress(self.node_id, self.voters, self.directory_id),
            epoch_start_offset=start,
            started_ms=self.now,
            unendorsed=set(others),
        )
        self.leader_state = ls
        change = LeaderChange(
            leader_id=self.node_id,
            voters=self.voters,
            granting_voters=granting,
        )
        self.log.append(leader_change_batch(start, self.epoch, change, self.now))
        self.request_flush()
        self._send_begin_quorum_epoch()
        self.maybe_advance_high_watermark()

    def _send_begin_quorum_epoch(self) -> None:
        ls = self.leader_state
        assert ls is not None
        busy = {
            p.dest
            for p in self.in_flight.values()
            if p.kind == "begin" and p.epoch == self.epoch
        }
        for voter in sorted(ls.unendorsed - busy):
            request = BeginQuorumEpochRequest(self.cluster_id, self.node_id, self.epoch,
                                              voter, self.directory_of_voter(voter))
            self.send(voter, "begin", request, self.config.request_timeout_ms)
        ls.next_begin_epoch_at = self.now + self.config.retry_backoff_ms

    def end_quorum_epoch_request(self, successors: tuple[int, ...]) -> EndQuorumEpochRequest:
        """EndQuorumEpoch naming each successor by its voter key (KIP-853's
        PreferredCandidates), so that a new disk of a successor's id does not act on it."""
        return EndQuorumEpochRequest(self.cluster_id, self.node_id, self.epoch, successors,
                                     tuple(self.directory_of_voter(v) for v in successors))

    def endorsed(self, voter: int) -> None:
        if self.leader_state is not None:
            self.leader_state.unendorsed.discard(voter)

    def on_leave_leader(self) -> None:
        """Answer everything still waiting on this leader: the outcome of pending appends and
        of a voter change is unknown to us now (they may still commit under the next leader)."""
        ls = self.leader_state
        self.leader_state = None
        if ls is not None:
            self._release_leader_state(ls)
        # A leader stays a voter while it leads (rule 4 of membership.py); one that appended
        # its own removal and lost leadership before it committed is no voter of the set in
        # force: it must not campaign with it (found by the simulator: it was elected by the
        # voters of the older set).
        if not self.voter_set.contains(self.node_id, self.directory_id):
            self.is_voter = False
            self.events.append(VoterEvent(VoterStep.NOT_LISTED))

    def _release_leader_state(self, ls: LeaderState) -> None:
        change = ls.voter_change.abandon()
        if change is not None and change.token is not None:
            self.reply(change.token, self.voter_change_response(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"leadership lost before {change.description} committed; it may still commit"))
        for waiter in ls.waiters:
            self.reply(
                waiter.token,
                ProduceResponse(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    NO_LEADER,
                    self.epoch,
                    message="leadership lost before commit; the append may still commit",
                ),
            )
        for parked in ls.parked:
            self.reply(parked.token, self._fetch_error(ErrorCode.NOT_LEADER_OR_FOLLOWER))
        for read in ls.reads.take_all():  # a node that is not the leader answers no read
            self.reply(read.token, ReadIndexResponse(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, self.known_leader(), self.epoch))

    def become_resigned(self, *, graceful: bool) -> None:
        """Step down in this epoch. With ``graceful`` (shutdown), tell the voters who should
        take over: PreferredSuccessors by replicated end offset, highest first."""
        ls = self.leader_state
        assert ls is not None
        successors = ls.progress.preferred_successors()
        self.transition(Role.RESIGNED, self.epoch, self.node_id, self.voted_id)
        self.election_deadline = self.now + election_timeout_ms(
            self.rng, self.config.election_timeout_ms
        )
        request = self.end_quorum_epoch_request(successors)
        for voter in successors:
            self.send(voter, "end", request, self.config.request_timeout_ms)
        self.events.append(LeaderResigned(graceful, tuple(successors)))

    # ------------------------------------------------------------------ timers

    def _poll_leader(self) -> None:
        ls = self.leader_state
        assert ls is not None
        now = self.now
        if ls.voter_change.step_down_due:
            self._step_down_removed(ls)
            return
        unanswered = ls.voter_change.expired(now)
        if unanswered is not None:
            token, description = unanswered
            self.reply(token, self.voter_change_response(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{description} did not commit in time; it may still commit"))
        check = self.config.check_quorum_timeout_ms
        if now - ls.started_ms >= check and not ls.progress.has_fetch_majority_since(now - check):
            self.become_resigned(graceful=False)
            return
        if ls.unendorsed and now >= ls.next_begin_epoch_at:
            self._send_begin_quorum_epoch()
        if now >= ls.flush_due_at:
            ls.flush_due_at = NEVER
            self.request_flush()
        if now >= ls.hw_wakeup_at:
            ls.hw_wakeup_at = NEVER
            self._answer_parked(hw_moved=True)
        if now >= ls.held_until:
            self._answer_parked(hw_moved=False)
        if any(p.deadline <= now for p in ls.parked):
            due = [p for p in ls.parked if p.deadline <= now]
            ls.parked = [p for p in ls.parked if p.deadline > now]
            for parked in due:
                self._complete_fetch(parked.token, parked.request)
        if any(w.deadline <= now for w in ls.waiters):
            expired = [w for w in ls.waiters if w.deadline <= now]
            ls.waiters = [w for w in ls.waiters if w.deadline > now]
            for waiter in expired:
                self.reply(
                    waiter.token,
                    ProduceResponse(
                        ErrorCode.REQUEST_TIMED_OUT,
                        self.node_id,
                        self.epoch,
                        message="not committed in time; the append may still commit",
                    ),
                )
        for read in ls.reads.take_expired(now):
            self.reply(read.token, ReadIndexResponse(
                ErrorCode.REQUEST_TIMED_OUT, self.node_id, self.epoch))
        ls.progress.expire_observers(now, self.config.observer_expiry_ms)

    def leader_next_deadline(self) -> int:
        ls = self.leader_state
        assert ls is not None
        if ls.voter_change.step_down_due:
            return self.now
        deadlines = [
            ls.progress.check_quorum_deadline(ls.started_ms, self.config.check_quorum_timeout_ms),
            ls.flush_due_at,
            ls.hw_wakeup_at,
            ls.held_until,
            ls.voter_change.deadline(),
        ]
        if ls.unendorsed:
            deadlines.append(ls.next_begin_epoch_at)
        deadlines.extend(p.deadline for p in ls.parked)
        deadlines.extend(w.deadline for w in ls.waiters)
        read_deadline = ls.reads.next_deadline()
        if read_deadline is not None:
            deadlines.append(read_deadline)
        return min(deadlines)

    # ------------------------------------------------------------------ high watermark

    def maybe_advance_high_watermark(self) -> None:
        """The majority's flushed offset, only past our epoch start, never backwards."""
        ls = self.leader_state
        if ls is None:
            return
        candidate = self._rule_majority_offset(ls)
        if candidate <= self.high_watermark or not self._rule_may_commit(ls, candidate):
            return
        self.high_watermark = candidate
        self.hw_changed_to = candidate
        self._answer_committed_waiters()
        self.settle_reads(ls)
        self._schedule_hw_wakeup(ls)

    def _schedule_hw_wakeup(self, ls: LeaderState) -> None:
        """Tell parked replicas the new high watermark now, or within hw_wakeup_delay_ms."""
        delay = self.config.hw_wakeup_delay_ms
        if delay == 0:
            self._answer_parked(hw_moved=True)
        elif ls.hw_wakeup_at == NEVER:
            ls.hw_wakeup_at = self.now + delay

    # ------------------------------------------------------------------ Fetch

    def _fetch_error(self, error: ErrorCode) -> FetchResponse:
        return FetchResponse(error, self.known_leader(), self.epoch, self.high_watermark)

    def handle_fetch_request(self, token: object, req: FetchRequest) -> None:
        """Validate (cluster id, epoch, leadership, log position), record progress, then answer
        at once or park until new data, a high-watermark move or MaxWaitMs."""
        if req.cluster_id != self.cluster_id:
            self.reply(token, self._fetch_error(ErrorCode.INCONSISTENT_CLUSTER_ID))
            return
        if req.current_leader_epoch >= 0:
            if req.current_leader_epoch < self.epoch:
                self.reply(token, self._fetch_error(ErrorCode.FENCED_LEADER_EPOCH))
                return
            if req.current_leader_epoch > self.epoch:
                self.reply(token, self._fetch_error(ErrorCode.UNKNOWN_LEADER_EPOCH))
                return
        ls = self.leader_state
        if ls is None:
            self.reply(token, self._fetch_error(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            return
        if req.fetch_offset < 0:
            self.reply(token, self._fetch_error(ErrorCode.OFFSET_OUT_OF_RANGE))
            return
        if req.fetch_offset < self.log.start_offset() and req.replica_id == CLIENT_REPLICA_ID:
            # A read below the log start: those records live only in snapshots now.
            self.reply(token, self._below_log_start(ErrorCode.OFFSET_OUT_OF_RANGE))
            return
        if req.replica_id != CLIENT_REPLICA_ID:
            if snapshot_to_send(self.log, req.fetch_offset, req.last_fetched_epoch) is not None:
                self.reply(token, self._below_log_start(ErrorCode.NONE))
                return
            diverging = diverging_epoch(self.log, req.fetch_offset, req.last_fetched_epoch)
            if diverging is not None:
                self.reply(
                    token,
                    FetchResponse(
                        ErrorCode.NONE,
                        self.node_id,
                        self.epoch,
                        self.high_watermark,
                        diverging_epoch=diverging,
                    ),
                )
                return
            counted = ls.progress.on_fetch(
                req.replica_id,
                self.now,
                req.fetch_offset,
                self.log.end_offset(),
                # KIP-853: a voter's id fetching from another directory (its disk was
                # replaced) is not that voter until it is removed and added again.
                as_observer=req.catching_up
                or not self.voter_set.contains(req.replica_id, req.directory_id),
                directory_id=req.directory_id,
            )
            if counted:
                if req.current_leader_epoch == self.epoch:
                    ls.reads.on_voter_fetch(req.replica_id)
                    self.settle_reads(ls)
                ls.unendorsed.discard(req.replica_id)
                before = self.high_watermark
                self.maybe_advance_high_watermark()
                if self.high_watermark > before:
                    ls.quickest = req.replica_id
                if req.replica_id == ls.quickest and ls.held_until != NEVER:
                    self._answer_parked(hw_moved=False)  # it has the lone append: release
        hw_known = ls.hw_sent.get(req.replica_id, -1) >= self.high_watermark
        tell_hw_now = not hw_known and self.config.hw_wakeup_delay_ms == 0
        if self._has_data_for(req) or req.max_wait_ms <= 0 or tell_hw_now:
            self._complete_fetch(token, req)
        else:
            ls.parked.append(ParkedFetch(token, req, self.now + req.max_wait_ms))
            if not hw_known:
                self._schedule_hw_wakeup(ls)

    def on_replica_contact(self, replica_id: int) -> None:
        if self.leader_state is not None:
            self.leader_state.progress.on_contact(replica_id, self.now)

    def _below_log_start(self, error: ErrorCode) -> FetchResponse:
        """KIP-630: the fetch offset is below our log start; name the snapshot to fetch."""
        return FetchResponse(
            error, self.node_id, self.epoch, self.high_watermark,
            snapshot_id=self.snapshots.latest_id(), log_start_offset=self.log.start_offset(),
        )

    def _has_data_for(self, req: FetchRequest) -> bool:
        limit = (
            self.high_watermark if req.replica_id == CLIENT_REPLICA_ID else self.log.end_offset()
        )
        return req.fetch_offset < limit

    def _complete_fetch(self, token: object, req: FetchRequest) -> None:
        batches: list[Batch] = []
        if self._has_data_for(req):
            batches = self.log.read(req.fetch_offset, req.max_bytes)
            if req.replica_id == CLIENT_REPLICA_ID:
                # Clients see committed records only.
                batches = [b for b in batches if b.last_offset < self.high_watermark]
        if self.leader_state is not None:
            self.leader_state.hw_sent[req.replica_id] = self.high_watermark
            if batches and req.replica_id != CLIENT_REPLICA_ID:
                self.leader_state.progress.on_sent(req.replica_id, batches[-1].last_offset + 1)
        self.reply(
            token,
            FetchResponse(
                ErrorCode.NONE, self.node_id, self.epoch, self.high_watermark, None, tuple(batches)
            ),
        )

    def _answer_parked(self, *, hw_moved: bool, only: int | None = None) -> None:
        """Answer the parked Fetches that have new data (or, ``hw_moved``, a high watermark they
        have not heard); ``only``: just that replica's, the others' stay parked. Otherwise
        this ends a hold of a lone append (nothing is held back any more)."""
        ls = self.leader_state
        if ls is None:
            return
        if only is None:
            ls.held_until = NEVER
        if not ls.parked:
            return
        keep: list[ParkedFetch] = []
        hw = self.high_watermark
        for parked in ls.parked:
            stale = hw_moved and ls.hw_sent.get(parked.request.replica_id, -1) < hw
            if only is not None and parked.request.replica_id != only:
                keep.append(parked)
            elif stale or self._has_data_for(parked.request):
                self._complete_fetch(parked.token, parked.request)
            else:
                keep.append(parked)
        ls.parked = keep
        if not any(ls.hw_sent.get(p.request.replica_id, -1) < hw for p in keep):
            ls.hw_wakeup_at = NEVER

    # ------------------------------------------------------------------ Produce

    def handle_produce(self, token: object, req: ProduceRequest) -> None:
        ls = self.leader_state
        if ls is None:
            self.reply(
                token,
                ProduceResponse(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    self.known_leader(),
                    self.epoch,
                    message="not the leader",
                ),
            )
            return
        if not req.records:
            self.reply(token, self._produce_error(ErrorCode.INVALID_RECORD, "no records"))
            return
        size = sum(r.size_estimate() for r in req.records)
        if size > self.config.max_batch_bytes:
            self.reply(
                token,
                self._produce_error(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"batch of {size} bytes exceeds {self.config.max_batch_bytes}",
                ),
            )
            return
        deadline = self.now + req.timeout_ms
        check, original = self.producers.check(
            req.producer_id, req.producer_epoch, req.base_sequence, len(req.records)
        )
        if check is SequenceCheck.DUPLICATE:
            assert original is not None
            ls.waiters.append(
                ProduceWaiter(
                    token, original.base_offset, original.last_offset, original.epoch, deadline
                )
            )
            self._answer_committed_waiters()
            return
        if check is SequenceCheck.AHEAD:
            # Seen from a leader cut off from a newer one (in the simulator: paused, then fed
            # stale Fetches that passed its check-quorum). Retriable, naming no leader: the
            # client tries the other voters and finds the leader that acknowledged the rest.
            self.reply(token, ProduceResponse(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, NO_LEADER, self.epoch,
                message=f"producer {req.producer_id}'s sequence {req.base_sequence} is ahead "
                "of this node's log: it is not the current leader",
            ))
            return
        if check is not SequenceCheck.NEW:
            code = (
                ErrorCode.INVALID_PRODUCER_EPOCH
                if check is SequenceCheck.FENCED
                else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            )
            self.reply(token, self._produce_error(code, check.value))
            return
        batch = Batch(
            base_offset=self.log.end_offset(),
            epoch=self.epoch,
            records=req.records,
            producer_id=req.producer_id,
            producer_epoch=req.producer_epoch,
            base_sequence=req.base_sequence,
        )
        self.log.append(batch)
        self.producers.on_append(batch)
        ls.waiters.append(
            ProduceWaiter(token, batch.base_offset, batch.last_offset, self.epoch, deadline)
        )
        if ls.flush_due_at == NEVER:
            # The linger lets concurrent appends share one fsync. An append that is the only
            # one awaiting commit has nobody to share with: flush at once, so a lone writer's
            # commit can count the leader's own disk instead of waiting for both followers.
            if self.config.append_linger_ms == 0 or len(ls.waiters) == 1:
                self.request_flush()
            else:
                ls.flush_due_at = self.now + self.config.append_linger_ms
        lone = len(ls.waiters) == 1
        if lone:
            ls.lone_appends += 1
        else:
            ls.concurrent_at = self.now
        hold = self.config.lone_append_hold_ms
        # Only for one writer at a time: under concurrent appends a commit is better off with
        # the faster of two voters (measured: holds cost 16 connections 4-6 %). Only where the
        # leader and that one voter are a majority (3 voters or fewer): with more, the commit
        # needs the held ones too. And every HOLD_PROBE_EVERY-th lone append goes to everyone at
        # once, so that another voter grown faster can acknowledge first and become the
        # quickest (it never could while the appends it gets wait for the quickest's).
        if (hold and lone and self.now - ls.concurrent_at >= CONCURRENT_WINDOW_MS
                and len(self.voters) <= 3 and ls.quickest in self.voters
                and ls.lone_appends % HOLD_PROBE_EVERY != 0
                and any(p.request.replica_id == ls.quickest for p in ls.parked)):
            self._answer_parked(hw_moved=False, only=ls.quickest)
            ls.held_until = self.now + hold
        else:
            self._answer_parked(hw_moved=False)

    def _answer_committed_waiters(self) -> None:
        ls = self.leader_state
        assert ls is not None
        hw = self.high_watermark
        done = [w for w in ls.waiters if w.last_offset < hw]
        ls.waiters = [w for w in ls.waiters if w.last_offset >= hw]
        for w in done:
            self.reply(
                w.token,
                ProduceResponse(
                    ErrorCode.NONE,
                    self.node_id,
                    self.epoch,
                    base_offset=w.base_offset,
                    last_offset=w.last_offset,
                    epoch=w.epoch,
                ),
            )
        change = ls.voter_change.committed(hw, self.node_id in self.voters)
        if change is not None:
            self.events.append(VoterEvent(VoterStep.CHANGE_COMMITTED, change.description))
            if change.token is not None:
                self.reply(change.token, self.voter_change_response(ErrorCode.NONE, None))

    def _step_down_removed(self, ls: LeaderState) -> None:
        """Rule 4 of membership.py: hand over to the remaining voters, then follow as an
        observer."""
        successors = tuple(v for v in ls.progress.preferred_successors() if v in self.voters)
        ls.voter_change.step_down_due = False
        self.transition(Role.UNATTACHED, self.epoch, NO_LEADER, self.voted_id)
        self.is_voter = False
        self._arm_unattached_timer()
        request = self.end_quorum_epoch_request(successors)
        for voter in successors:
            self.send(voter, "end", request, self.config.request_timeout_ms)
        self.events.append(VoterEvent(VoterStep.STEPPED_DOWN, str(successors)))

    def _produce_error(self, error: ErrorCode, message: str) -> ProduceResponse:
        return ProduceResponse(error, self.known_leader(), self.epoch, message=message)

    # ------------------------------------------------------------------ DescribeQuorum

    def handle_describe_quorum(self, token: object) -> None:
        ls = self.leader_state
        if ls is None:
            self.reply(
                token,
                DescribeQuorumResponse(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER, self.known_leader(), self.epoch
                ),
            )
            return
        ls.progress.expire_observers(self.now, self.config.observer_expiry_ms)
        voters, observers = ls.progress.describe(self.now, self.log.end_offset())
        self.reply(
            token,
            DescribeQuorumResponse(
                ErrorCode.NONE, self.node_id, self.epoch, self.high_watermark, voters, observers,
                log_start_offset=self.log.start_offset(),
                latest_snapshot=self.snapshots.latest_id(),
                endpoints=tuple((v.node_id, v.endpoints) for v in self.voter_set.voters),
                target_voters=ls.reassignment_target,
            ),
        )
