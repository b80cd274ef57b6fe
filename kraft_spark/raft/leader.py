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
from kraft_spark.raft.roles import RESIGNED, UNATTACHED
from kraft_spark.raft.state import NEVER
from kraft_spark.raft.vote_rules import election_timeout_ms

# Appends count as one writer at a time (QuorumConfig.lone_append_hold_ms applies) once none
# arrived while another awaited commit for this long.
CONCURRENT_WINDOW_MS = 100
# Every this many lone appends, one is handed to every voter at once (see handle_produce).
HOLD_PROBE_EVERY = 32


class Leadership:
    """What a leader does (``core.leader_state`` exists exactly while it leads): its epoch's
    start, serving Fetch, the high watermark, Produce, check-quorum, resigning."""

    def __init__(self, core: CoreState) -> None:
        self.core = core

    # ------------------------------------------------------------------ safety rules (hooks)

    def _rule_local_durable_offset(self) -> int:
        """The leader's own share of the high watermark: what it has fsync'd."""
        return self.core.log.flushed_offset()

    def _rule_majority_offset(self, ls: LeaderState) -> int:
        return ls.progress.majority_flushed_offset(self._rule_local_durable_offset())

    def _rule_may_commit(self, ls: LeaderState, offset: int) -> bool:
        """Commit only past the start of our own epoch (the Raft paper's figure 8)."""
        return offset > ls.epoch_start_offset

    def _rule_read_confirmed(self, ls: LeaderState) -> list[PendingRead]:
        """The reads a majority of voters confirmed by fetching after they arrived."""
        return ls.reads.take_confirmed(self.core.voters, self.core.node_id)

    # ------------------------------------------------------------------ read index

    def settle_reads(self, ls: LeaderState) -> None:
        """Answer the confirmed reads with the high watermark, once this epoch's first record
        has committed (before, the quorum's committed offset is not known here)."""
        core = self.core
        if ls.reads.pending and core.high_watermark > ls.epoch_start_offset:
            for read in self._rule_read_confirmed(ls):
                core.reply(read.token, ReadIndexResponse(
                    ErrorCode.NONE, core.node_id, core.epoch, core.high_watermark))

    # ------------------------------------------------------------------ becoming / leaving

    def become_leader(self) -> None:
        # The LeaderChange record names who granted the round just won.
        core = self.core
        granting = tuple(sorted(core.campaigning.tally.granted))
        start = core.log.end_offset()
        others = {v for v in core.voters if v != core.node_id}
        ls = LeaderState(
            progress=LeaderProgress(core.node_id, core.voters, core.directory_id),
            epoch_start_offset=start,
            started_ms=core.now,
            unendorsed=set(others),
        )
        core.transition(ls, core.epoch, core.node_id, core.node_id)
        change = LeaderChange(
            leader_id=core.node_id,
            voters=core.voters,
            granting_voters=granting,
        )
        core.log.append(leader_change_batch(start, core.epoch, change, core.now))
        core.request_flush()
        self._send_begin_quorum_epoch()
        self.maybe_advance_high_watermark()

    def _send_begin_quorum_epoch(self) -> None:
        core = self.core
        ls = core.leader_state
        assert ls is not None
        busy = {
            p.dest
            for p in core.in_flight.values()
            if p.kind == "begin" and p.epoch == core.epoch
        }
        for voter in sorted(ls.unendorsed - busy):
            request = BeginQuorumEpochRequest(core.cluster_id, core.node_id, core.epoch,
                                              voter, core.directory_of_voter(voter))
            core.send(voter, "begin", request, core.config.request_timeout_ms)
        ls.next_begin_epoch_at = core.now + core.config.retry_backoff_ms

    def end_quorum_epoch_request(self, successors: tuple[int, ...]) -> EndQuorumEpochRequest:
        """EndQuorumEpoch naming each successor by its voter key (KIP-853's
        PreferredCandidates), so that a new disk of a successor's id does not act on it."""
        core = self.core
        return EndQuorumEpochRequest(core.cluster_id, core.node_id, core.epoch, successors,
                                     tuple(core.directory_of_voter(v) for v in successors))

    def endorsed(self, voter: int) -> None:
        if self.core.leader_state is not None:
            self.core.leader_state.unendorsed.discard(voter)

    def become_resigned(self, *, graceful: bool) -> None:
        """Step down in this epoch. With ``graceful`` (shutdown), tell the voters who should
        take over: PreferredSuccessors by replicated end offset, highest first."""
        core = self.core
        ls = core.leader_state
        assert ls is not None
        successors = ls.progress.preferred_successors()
        core.transition(RESIGNED, core.epoch, core.node_id, core.voted_id)
        core.election_deadline = core.now + election_timeout_ms(
            core.rng, core.config.election_timeout_ms
        )
        request = self.end_quorum_epoch_request(successors)
        for voter in successors:
            core.send(voter, "end", request, core.config.request_timeout_ms)
        core.events.append(LeaderResigned(graceful, tuple(successors)))

    # ------------------------------------------------------------------ timers

    def poll(self) -> None:
        core = self.core
        ls = core.leader_state
        assert ls is not None
        now = core.now
        if ls.voter_change.step_down_due:
            self._step_down_removed(ls)
            return
        unanswered = ls.voter_change.expired(now)
        if unanswered is not None:
            token, description = unanswered
            core.reply(token, core.voter_change_response(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{description} did not commit in time; it may still commit"))
        check = core.config.check_quorum_timeout_ms
        if now - ls.started_ms >= check and not ls.progress.has_fetch_majority_since(now - check):
            self.become_resigned(graceful=False)
            return
        if ls.unendorsed and now >= ls.next_begin_epoch_at:
            self._send_begin_quorum_epoch()
        if now >= ls.flush_due_at:
            ls.flush_due_at = NEVER
            core.request_flush()
        if now >= ls.hw_wakeup_at:
            ls.hw_wakeup_at = NEVER
            self.answer_parked(hw_moved=True)
        if now >= ls.held_until:
            self.answer_parked(hw_moved=False)
        if any(p.deadline <= now for p in ls.parked):
            due = [p for p in ls.parked if p.deadline <= now]
            ls.parked = [p for p in ls.parked if p.deadline > now]
            for parked in due:
                self.complete_fetch(parked.token, parked.request)
        if any(w.deadline <= now for w in ls.waiters):
            expired = [w for w in ls.waiters if w.deadline <= now]
            ls.waiters = [w for w in ls.waiters if w.deadline > now]
            for waiter in expired:
                core.reply(
                    waiter.token,
                    ProduceResponse(
                        ErrorCode.REQUEST_TIMED_OUT,
                        core.node_id,
                        core.epoch,
                        message="not committed in time; the append may still commit",
                    ),
                )
        for read in ls.reads.take_expired(now):
            core.reply(read.token, ReadIndexResponse(
                ErrorCode.REQUEST_TIMED_OUT, core.node_id, core.epoch))
        ls.progress.expire_observers(now, core.config.observer_expiry_ms)

    def next_deadline(self) -> int:
        core = self.core
        ls = core.leader_state
        assert ls is not None
        if ls.voter_change.step_down_due:
            return core.now
        deadlines = [
            ls.progress.check_quorum_deadline(ls.started_ms, core.config.check_quorum_timeout_ms),
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
        core = self.core
        ls = core.leader_state
        if ls is None:
            return
        candidate = self._rule_majority_offset(ls)
        if candidate <= core.high_watermark or not self._rule_may_commit(ls, candidate):
            return
        core.high_watermark = candidate
        core.hw_changed_to = candidate
        self._answer_committed_waiters()
        self.settle_reads(ls)
        self._schedule_hw_wakeup(ls)

    def _schedule_hw_wakeup(self, ls: LeaderState) -> None:
        """Tell parked replicas the new high watermark now, or within hw_wakeup_delay_ms."""
        delay = self.core.config.hw_wakeup_delay_ms
        if delay == 0:
            self.answer_parked(hw_moved=True)
        elif ls.hw_wakeup_at == NEVER:
            ls.hw_wakeup_at = self.core.now + delay

    # ------------------------------------------------------------------ Fetch

    def _fetch_error(self, error: ErrorCode) -> FetchResponse:
        core = self.core
        return FetchResponse(error, core.known_leader(), core.epoch, core.high_watermark)

    def handle_fetch_request(self, token: object, req: FetchRequest) -> None:
        """Validate (cluster id, epoch, leadership, log position), record progress, then answer
        at once or park until new data, a high-watermark move or MaxWaitMs."""
        core = self.core
        if req.cluster_id != core.cluster_id:
            core.reply(token, self._fetch_error(ErrorCode.INCONSISTENT_CLUSTER_ID))
            return
        if req.current_leader_epoch >= 0:
            if req.current_leader_epoch < core.epoch:
                core.reply(token, self._fetch_error(ErrorCode.FENCED_LEADER_EPOCH))
                return
            if req.current_leader_epoch > core.epoch:
                core.reply(token, self._fetch_error(ErrorCode.UNKNOWN_LEADER_EPOCH))
                return
        ls = core.leader_state
        if ls is None:
            core.reply(token, self._fetch_error(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            return
        if req.fetch_offset < 0:
            core.reply(token, self._fetch_error(ErrorCode.OFFSET_OUT_OF_RANGE))
            return
        if req.fetch_offset < core.log.start_offset() and req.replica_id == CLIENT_REPLICA_ID:
            # A read below the log start: those records live only in snapshots now.
            core.reply(token, self._below_log_start(ErrorCode.OFFSET_OUT_OF_RANGE))
            return
        if req.replica_id != CLIENT_REPLICA_ID:
            if snapshot_to_send(core.log, req.fetch_offset, req.last_fetched_epoch) is not None:
                core.reply(token, self._below_log_start(ErrorCode.NONE))
                return
            diverging = diverging_epoch(core.log, req.fetch_offset, req.last_fetched_epoch)
            if diverging is not None:
                core.reply(
                    token,
                    FetchResponse(
                        ErrorCode.NONE,
                        core.node_id,
                        core.epoch,
                        core.high_watermark,
                        diverging_epoch=diverging,
                    ),
                )
                return
            counted = ls.progress.on_fetch(
                req.replica_id,
                core.now,
                req.fetch_offset,
                core.log.end_offset(),
                # KIP-853: a voter's id fetching from another directory (its disk was
                # replaced) is not that voter until it is removed and added again.
                as_observer=req.catching_up
                or not core.voter_set.contains(req.replica_id, req.directory_id),
                directory_id=req.directory_id,
            )
            if counted:
                if req.current_leader_epoch == core.epoch:
                    ls.reads.on_voter_fetch(req.replica_id)
                    self.settle_reads(ls)
                ls.unendorsed.discard(req.replica_id)
                before = core.high_watermark
                self.maybe_advance_high_watermark()
                if core.high_watermark > before:
                    ls.quickest = req.replica_id
                if req.replica_id == ls.quickest and ls.held_until != NEVER:
                    self.answer_parked(hw_moved=False)  # it has the lone append: release
        hw_known = ls.hw_sent.get(req.replica_id, -1) >= core.high_watermark
        tell_hw_now = not hw_known and core.config.hw_wakeup_delay_ms == 0
        if self._has_data_for(req) or req.max_wait_ms <= 0 or tell_hw_now:
            self.complete_fetch(token, req)
        else:
            ls.parked.append(ParkedFetch(token, req, core.now + req.max_wait_ms))
            if not hw_known:
                self._schedule_hw_wakeup(ls)

    def _below_log_start(self, error: ErrorCode) -> FetchResponse:
        """KIP-630: the fetch offset is below our log start; name the snapshot to fetch."""
        core = self.core
        return FetchResponse(
            error, core.node_id, core.epoch, core.high_watermark,
            snapshot_id=core.snapshots.latest_id(), log_start_offset=core.log.start_offset(),
        )

    def _has_data_for(self, req: FetchRequest) -> bool:
        core = self.core
        limit = core.high_watermark if req.replica_id == CLIENT_REPLICA_ID else (
            core.log.end_offset())
        return req.fetch_offset < limit

    def complete_fetch(self, token: object, req: FetchRequest) -> None:
        core = self.core
        batches: list[Batch] = []
        if self._has_data_for(req):
            batches = core.log.read(req.fetch_offset, req.max_bytes)
            if req.replica_id == CLIENT_REPLICA_ID:
                # Clients see committed records only.
                batches = [b for b in batches if b.last_offset < core.high_watermark]
        if core.leader_state is not None:
            core.leader_state.hw_sent[req.replica_id] = core.high_watermark
            if batches and req.replica_id != CLIENT_REPLICA_ID:
                core.leader_state.progress.on_sent(req.replica_id, batches[-1].last_offset + 1)
        core.reply(
            token,
            FetchResponse(
                ErrorCode.NONE, core.node_id, core.epoch, core.high_watermark, None, tuple(batches)
            ),
        )

    def answer_parked(self, *, hw_moved: bool, only: int | None = None) -> None:
        """Answer the parked Fetches that have new data (or, ``hw_moved``, a high watermark they
        have not heard); ``only``: just that replica's, the others' stay parked. Otherwise
        this ends a hold of a lone append (nothing is held back any more)."""
        ls = self.core.leader_state
        if ls is None:
            return
        if only is None:
            ls.held_until = NEVER
        if not ls.parked:
            return
        keep: list[ParkedFetch] = []
        hw = self.core.high_watermark
        for parked in ls.parked:
            stale = hw_moved and ls.hw_sent.get(parked.request.replica_id, -1) < hw
            if only is not None and parked.request.replica_id != only:
                keep.append(parked)
            elif stale or self._has_data_for(parked.request):
                self.complete_fetch(parked.token, parked.request)
            else:
                keep.append(parked)
        ls.parked = keep
        if not any(ls.hw_sent.get(p.request.replica_id, -1) < hw for p in keep):
            ls.hw_wakeup_at = NEVER

    # ------------------------------------------------------------------ Produce

    def handle_produce(self, token: object, req: ProduceRequest) -> None:
        core = self.core
        ls = core.leader_state
        if ls is None:
            core.reply(
                token,
                ProduceResponse(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    core.known_leader(),
                    core.epoch,
                    message="not the leader",
                ),
            )
            return
        if not req.records:
            core.reply(token, self._produce_error(ErrorCode.INVALID_RECORD, "no records"))
            return
        size = sum(r.size_estimate() for r in req.records)
        if size > core.config.max_batch_bytes:
            core.reply(
                token,
                self._produce_error(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"batch of {size} bytes exceeds {core.config.max_batch_bytes}",
                ),
            )
            return
        deadline = core.now + req.timeout_ms
        check, original = core.producers.check(
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
            core.reply(token, ProduceResponse(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, NO_LEADER, core.epoch,
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
            core.reply(token, self._produce_error(code, check.value))
            return
        batch = Batch(
            base_offset=core.log.end_offset(),
            epoch=core.epoch,
            records=req.records,
            producer_id=req.producer_id,
            producer_epoch=req.producer_epoch,
            base_sequence=req.base_sequence,
        )
        core.log.append(batch)
        core.producers.on_append(batch)
        ls.waiters.append(
            ProduceWaiter(token, batch.base_offset, batch.last_offset, core.epoch, deadline)
        )
        if ls.flush_due_at == NEVER:
            # The linger lets concurrent appends share one fsync. An append that is the only
            # one awaiting commit has nobody to share with: flush at once, so a lone writer's
            # commit can count the leader's own disk instead of waiting for both followers.
            if core.config.append_linger_ms == 0 or len(ls.waiters) == 1:
                core.request_flush()
            else:
                ls.flush_due_at = core.now + core.config.append_linger_ms
        lone = len(ls.waiters) == 1
        if lone:
            ls.lone_appends += 1
        else:
            ls.concurrent_at = core.now
        hold = core.config.lone_append_hold_ms
        # Only for one writer at a time: under concurrent appends a commit is better off with
        # the faster of two voters (measured: holds cost 16 connections 4-6 %). Only where the
        # leader and that one voter are a majority (3 voters or fewer): with more, the commit
        # needs the held ones too. And every HOLD_PROBE_EVERY-th lone append goes to everyone at
        # once, so that another voter grown faster can acknowledge first and become the
        # quickest (it never could while the appends it gets wait for the quickest's).
        if (hold and lone and core.now - ls.concurrent_at >= CONCURRENT_WINDOW_MS
                and len(core.voters) <= 3 and ls.quickest in core.voters
                and ls.lone_appends % HOLD_PROBE_EVERY != 0
                and any(p.request.replica_id == ls.quickest for p in ls.parked)):
            self.answer_parked(hw_moved=False, only=ls.quickest)
            ls.held_until = core.now + hold
        else:
            self.answer_parked(hw_moved=False)

    def _answer_committed_waiters(self) -> None:
        core = self.core
        ls = core.leader_state
        assert ls is not None
        hw = core.high_watermark
        done = [w for w in ls.waiters if w.last_offset < hw]
        ls.waiters = [w for w in ls.waiters if w.last_offset >= hw]
        for w in done:
            core.reply(
                w.token,
                ProduceResponse(
                    ErrorCode.NONE,
                    core.node_id,
                    core.epoch,
                    base_offset=w.base_offset,
                    last_offset=w.last_offset,
                    epoch=w.epoch,
                ),
            )
        change = ls.voter_change.committed(hw, core.node_id in core.voters)
        if change is not None:
            core.events.append(VoterEvent(VoterStep.CHANGE_COMMITTED, change.description))
            if change.token is not None:
                core.reply(change.token, core.voter_change_response(ErrorCode.NONE, None))

    def _step_down_removed(self, ls: LeaderState) -> None:
        """Rule 4 of membership.py: hand over to the remaining voters, then follow as an
        observer."""
        core = self.core
        successors = tuple(v for v in ls.progress.preferred_successors() if v in core.voters)
        ls.voter_change.step_down_due = False
        core.transition(UNATTACHED, core.epoch, NO_LEADER, core.voted_id)
        core.is_voter = False
        core.arm_unattached_timer()
        request = self.end_quorum_epoch_request(successors)
        for voter in successors:
            core.send(voter, "end", request, core.config.request_timeout_ms)
        core.events.append(VoterEvent(VoterStep.STEPPED_DOWN, str(successors)))

    def _produce_error(self, error: ErrorCode, message: str) -> ProduceResponse:
        return ProduceResponse(error, self.core.known_leader(), self.core.epoch, message=message)

    # ------------------------------------------------------------------ DescribeQuorum

    def handle_describe_quorum(self, token: object) -> None:
        core = self.core
        ls = core.leader_state
        if ls is None:
            core.reply(
                token,
                DescribeQuorumResponse(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER, core.known_leader(), core.epoch
                ),
            )
            return
        ls.progress.expire_observers(core.now, core.config.observer_expiry_ms)
        voters, observers = ls.progress.describe(core.now, core.log.end_offset())
        core.reply(
            token,
            DescribeQuorumResponse(
                ErrorCode.NONE, core.node_id, core.epoch, core.high_watermark, voters, observers,
                log_start_offset=core.log.start_offset(),
                latest_snapshot=core.snapshots.latest_id(),
                endpoints=tuple((v.node_id, v.endpoints) for v in core.voter_set.voters),
                target_voters=ls.reassignment_target,
            ),
        )
