"""RaftCore: the KIP-595 quorum protocol as a deterministic, sans-I/O state machine.

The allowed role transitions are listed in ``kraft_spark.raft.state`` and enforced there. This
class holds the node's state and drives it from five kinds of input, each taking ``now_ms``:

* ``poll(now)``: timers (election, fetch, check-quorum, parked fetches, request deadlines);
* ``handle_request(now, src, token, message)``: an inbound request, answered by ``token``;
* ``handle_response(now, src, request_id, message)``: the answer to one of our requests;
* ``on_request_failed(now, request_id, refused=...)``: the shell knows one of our requests will
  never be answered (its connection failed), and whether the peer's host *refused* it;
* ``on_log_flushed(now)``: the shell made the log durable.

One deliberate deviation from KIP-595 (docs/concepts/protocol.md, deviations) lives behind
``on_request_failed``: when a voting follower's Fetch is refused (the kernel on the leader's
host answered that nothing listens on the leader's port: the process is gone), it does not
sit out ``fetch.timeout.ms`` but campaigns after a random delay in
[0, ``election.timeout.ms`` / 2] drawn from the injected RNG
(``Fetching.maybe_hasten_election``); and a candidate counts a refused Vote request as
rejected (``Elections.on_vote_refused``). Both only move timers, which safety never relies
on; a timeout, a reset or a slow leader never counts as a refusal.

The graceful handoff (docs/concepts/protocol.md) does not depend on message order either: a
follower's successor turn from EndQuorumEpoch is not pushed back by Fetch responses the leader
sent before resigning (``Following.resigned``), survives learning of the successor's newer epoch
from any message (``observe_epoch``), and still applies when the first successor's Vote
overtakes the
EndQuorumEpoch (``_maybe_late_succession``).

After each input the shell calls ``take_ready()`` and carries out the Ready in the order its
module documents (persist, then send, flush, apply). The core touches nothing but the injected
``RaftLog`` (writes are buffered there until the shell flushes) and the injected ``random.Random``.

``RaftCore`` is the shared state (``CoreState``: persisted fields, the role and its value,
the outputs, the transitions) and composes one object per concern, each holding the core:
``Elections`` (Prospective and Candidate, answering votes), ``Leadership`` (serving Fetch and
Produce, the high watermark, check-quorum) with ``LeaderReads`` and ``VoterChanges``,
``Fetching`` (a follower's and an observer's answers, truncation), ``SnapshotTransfer`` and
``OwnEndpoints``. The parts call each other only down that list: a part is handed the parts it
uses when it is made, and none calls back up. Hooks whose names start with ``_rule_`` are single
safety rules, kept as methods so the simulator can run deliberately broken variants (a
subclass of the part, chosen by a ``RaftCore`` subclass through its ``*_class`` attributes).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable

from kraft_spark.raft.base import CoreState, InFlight
from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.elections import Elections
from kraft_spark.raft.follower import Fetching
from kraft_spark.raft.following import Following
from kraft_spark.raft.leader import Leadership
from kraft_spark.raft.leader_reads import LeaderReads
from kraft_spark.raft.log_api import RaftLog
from kraft_spark.raft.membership import VoterChanges
from kraft_spark.raft.messages import (
    NO_LEADER,
    AddVoterRequest,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    ProduceRequest,
    ReadIndexRequest,
    RemoveVoterRequest,
    Request,
    Response,
    UpdateVoterRequest,
    VoterChangeResponse,
    VoteRequest,
    VoteResponse,
)
from kraft_spark.raft.prevote import pre_vote_answer
from kraft_spark.raft.ready import Ready
from kraft_spark.raft.roles import RESIGNED, UNATTACHED
from kraft_spark.raft.snapshot_api import NoSnapshots, SnapshotStore
from kraft_spark.raft.snapshot_fetch import SnapshotTransfer
from kraft_spark.raft.state import PersistedState, Role
from kraft_spark.raft.vote_rules import election_timeout_ms
from kraft_spark.raft.voter_set import NIL_DIRECTORY, Endpoint, VoterSet
from kraft_spark.raft.voter_update import OwnEndpoints


class RaftCore(CoreState):
    """One node of the quorum (voter or observer)."""

    # The parts' classes: a deliberately broken core (kraft_spark.sim.bugs) swaps one.
    leadership_class: type[Leadership] = Leadership
    voter_changes_class: type[VoterChanges] = VoterChanges
    elections_class: type[Elections] = Elections
    fetching_class: type[Fetching] = Fetching

    def __init__(
        self,
        *,
        node_id: int,
        cluster_id: str,
        voters: Iterable[int],
        log: RaftLog,
        config: QuorumConfig,
        rng: random.Random,
        now_ms: int,
        persisted: PersistedState | None = None,
        disk_lost: bool = False,
        snapshots: SnapshotStore | None = None,
        voter_set: VoterSet | None = None,
        directory_id: uuid.UUID = NIL_DIRECTORY,
        local_endpoints: tuple[Endpoint, ...] = (),
    ) -> None:
        """``persisted`` is the quorum-state read at start-up (None when absent). ``disk_lost``
        tells that this voter's directory was wiped after it may have voted (the disk-loss
        rule: docs/concepts/protocol.md).
        ``snapshots``: the node's snapshot store (KIP-630); its newest snapshot must not end
        past the log's end (the shell restarts the log at it first). ``voter_set``: the
        static voters with their endpoints (else ``voters``, ids only); ``directory_id``: this
        node's ``directory.id`` (KIP-853: a voter is an id and a directory); ``local_endpoints``:
        where this node listens, which it keeps its VotersRecord entry in line with
        (UpdateRaftVoter; empty: unknown)."""
        super().__init__(
            node_id=node_id, cluster_id=cluster_id, voters=voters, log=log, config=config,
            rng=rng, snapshots=snapshots or NoSnapshots(), voter_set=voter_set,
            directory_id=directory_id,
        )
        self.local_endpoints = local_endpoints
        # The parts, each made with the parts it calls (module docstring).
        self.leadership = self.leadership_class(self)
        self.leader_reads = LeaderReads(self, self.leadership)
        self.voter_changes = self.voter_changes_class(self, self.leadership)
        self.elections = self.elections_class(self, self.leadership)
        self.snapshot_transfer = SnapshotTransfer(self)
        self.own_endpoints = OwnEndpoints(self)
        self.fetching = self.fetching_class(self, self.elections, self.snapshot_transfer,
                                            self.own_endpoints)
        self.now = now_ms
        # The log start is a snapshot's end offset, and snapshots cover committed records only.
        self.high_watermark = self.log.start_offset()
        state = persisted or PersistedState(epoch=0)
        self._rebuild_from_log()
        self.voters_changed()
        self.pending_catch_up = self.is_voter and (disk_lost or state.pending_catch_up)
        self.epoch = state.epoch
        self.voted_id = state.voted_id
        self.voted_directory_id = state.voted_directory_id
        self.leader_id = state.leader_id
        log_epoch = self.log.last_epoch()  # a snapshot's epoch when the log is empty after it
        if log_epoch > self.epoch:
            # The log holds an epoch that quorum-state never recorded (a crash between the two
            # writes): adopt it, knowing neither leader nor vote.
            self.epoch, self.voted_id, self.leader_id = log_epoch, NO_LEADER, NO_LEADER
            self.persist_needed = True
        if self.leader_id == self.node_id and self.may_vote:
            # A leader that restarts does not lead again in the same epoch (Kafka: Resigned).
            self._enter(RESIGNED)
            self.election_deadline = now_ms + election_timeout_ms(
                rng, config.election_timeout_ms
            )
        elif self.leader_id not in (NO_LEADER, self.node_id):
            self._enter(Following())  # no jitter drawn at a restart
            self.push_fetch_deadline()
        else:
            self._enter(UNATTACHED)
            self.leader_id = NO_LEADER
            self.arm_unattached_timer()
        if disk_lost and state.pending_catch_up != self.pending_catch_up:
            self.persist_needed = True
        self.events.append(self.role_event(started=True))

    # ------------------------------------------------------------------ the shell's interface

    def poll(self, now_ms: int) -> None:
        """Fire every timer that is due at ``now_ms``."""
        self.now = max(self.now, now_ms)
        self._expire_in_flight()
        role = self.role
        if role is Role.LEADER:
            self.leadership.poll()
        elif role is Role.CANDIDATE or role is Role.PROSPECTIVE:
            self.elections.poll()
        elif role is Role.FOLLOWER:
            self.fetching.poll()
            self.own_endpoints.maybe_update()
        elif role is Role.UNATTACHED:
            if self.may_vote:
                if self.now >= self.election_deadline:
                    self.elections.become_prospective()
            else:
                self.maybe_send_fetch()
        elif self.now >= self.election_deadline:  # Resigned
            if self.may_vote:
                self.elections.become_prospective()
            else:  # removed from the voters while it led (KIP-853): it follows from now on
                self.become_unattached(self.epoch)

    def handle_request(self, now_ms: int, src: int, token: object, message: Request) -> None:
        """An inbound request from node ``src`` (or a client); answered later through
        ``Ready.replies`` with the same ``token``."""
        self.now = max(self.now, now_ms)
        if isinstance(message, FetchRequest):
            self.leadership.handle_fetch_request(token, message)
        elif isinstance(message, VoteRequest):
            if self.elections.refuse_vote_request(token, message):
                pass
            elif message.pre_vote:
                self.reply(token, pre_vote_answer(self, message))
            else:
                self.elections.handle_vote_request(token, message)
        elif isinstance(message, BeginQuorumEpochRequest):
            self.handle_begin_quorum_epoch(token, message)
        elif isinstance(message, EndQuorumEpochRequest):
            self.handle_end_quorum_epoch(token, message)
        elif isinstance(message, ProduceRequest):
            self.leadership.handle_produce(token, message)
        elif isinstance(message, DescribeQuorumRequest):
            self.leadership.handle_describe_quorum(token)
        elif isinstance(message, FetchSnapshotRequest):
            self.snapshot_transfer.serve_chunk(token, message)
        elif isinstance(message, AddVoterRequest):
            self.voter_changes.handle_add_voter(token, message)
        elif isinstance(message, RemoveVoterRequest):
            self.voter_changes.handle_remove_voter(token, message)
        elif isinstance(message, UpdateVoterRequest):
            self.voter_changes.handle_update_voter(token, message)
        elif isinstance(message, ReadIndexRequest):
            self.leader_reads.handle_read_index(token, message)
        else:  # pragma: no cover - the union is exhaustive
            raise TypeError(f"unknown request {message!r}")

    def handle_response(self, now_ms: int, src: int, request_id: int, message: Response) -> None:
        """The answer to request ``request_id`` that we sent to ``src``. Answers to requests we
        no longer wait for (timed out, duplicated, from an older role) are ignored."""
        self.now = max(self.now, now_ms)
        pending = self.in_flight.pop(request_id, None)
        if pending is None or pending.dest != src:
            return
        if isinstance(message, FetchResponse):
            self.fetching.handle_fetch_response(request_id, pending, message)
        elif isinstance(message, VoteResponse) and pending.kind == "prevote":
            self.elections.handle_pre_vote_response(pending, src, message)
        elif isinstance(message, VoteResponse):
            self.elections.handle_vote_response(pending, src, message)
        elif isinstance(message, BeginQuorumEpochResponse):
            self.handle_begin_quorum_epoch_response(pending, src, message)
        elif isinstance(message, EndQuorumEpochResponse):
            self.observe_epoch(message.leader_epoch, message.leader_id)
        elif isinstance(message, FetchSnapshotResponse):
            self.snapshot_transfer.handle_chunk(request_id, pending, message)
        elif isinstance(message, VoterChangeResponse) and pending.kind == "update":
            self.own_endpoints.handle_response(message)

    def on_request_failed(self, now_ms: int, request_id: int, *, refused: bool) -> None:
        """Request ``request_id`` will never be answered: the shell could not send it or its
        connection failed before the answer came. ``refused`` is True only when connecting was
        actively refused (``ECONNREFUSED``: nothing listens at that node's address, so its
        process is not running); never for a timeout, a reset or an unreachable host.

        A failed Fetch is retried after ``retry.backoff.ms`` instead of at its deadline (as
        Kafka does after a disconnect); a refused one may bring the election forward (see the
        module docstring). A refused Vote counts as rejected. Other requests keep waiting for
        their deadline, so BeginQuorumEpoch and EndQuorumEpoch keep their retry pace. A request
        we no longer wait for is ignored."""
        self.now = max(self.now, now_ms)
        pending = self.in_flight.get(request_id)
        if pending is None:
            return
        if pending.kind in ("fetch", "fetch_snapshot"):
            del self.in_flight[request_id]
            self.on_request_expired(request_id, pending)
            if refused:
                self.fetching.maybe_hasten_election(pending)
        elif pending.kind == "prevote" and refused:
            del self.in_flight[request_id]
            self.elections.on_pre_vote_refused(pending)
        elif pending.kind == "vote" and refused:
            del self.in_flight[request_id]
            self.elections.on_vote_refused(pending)
        elif pending.kind == "update":
            del self.in_flight[request_id]
            self.own_endpoints.on_lost(pending)

    def on_log_flushed(self, now_ms: int) -> None:
        """The shell finished ``RaftLog.flush``: durable offsets may now be reported."""
        self.now = max(self.now, now_ms)
        if self.role is Role.LEADER:
            self.leadership.maybe_advance_high_watermark()
        elif self.role in (Role.FOLLOWER, Role.UNATTACHED):
            self.maybe_send_fetch()

    def resign(self, now_ms: int) -> None:
        """Graceful shutdown: a leader hands over with EndQuorumEpoch (to its named successors)."""
        self.now = max(self.now, now_ms)
        if self.role is Role.LEADER:
            self.leadership.become_resigned(graceful=True)

    def take_ready(self) -> Ready:
        """Everything the shell must do now, in the documented order."""
        ready = Ready(
            sends=self.sends,
            replies=self.replies,
            flush_log=self.flush_requested,
            high_watermark=self.hw_changed_to,
            truncated_to=self.truncated_to,
            events=self.events,
            snapshot_installed=self.snapshot_installed,
        )
        self.snapshot_installed = None
        if self.persist_needed:
            ready.persist = self.persisted_state()
            self.persist_needed = False
        self.sends, self.replies, self.events = [], [], []
        self.flush_requested = False
        self.hw_changed_to = None
        self.truncated_to = None
        ready.next_deadline_ms = self.next_deadline()
        return ready

    # ------------------------------------------------------------------ timers

    def next_deadline(self) -> int:
        deadlines = [d.deadline for d in self.in_flight.values()]
        role = self.role
        if role is Role.LEADER:
            deadlines.append(self.leadership.next_deadline())
        elif role is Role.CANDIDATE or role is Role.PROSPECTIVE:
            deadlines.append(self.campaigning.next_step_at(self.election_deadline))
        elif role is Role.FOLLOWER:
            deadlines.append(self.followed.fetch_deadline)
            if self.fetch_in_flight is None and not self.awaiting_flush:
                deadlines.append(self.next_fetch_at)
        elif role is Role.UNATTACHED:
            if self.may_vote:
                deadlines.append(self.election_deadline)
            elif self.fetch_in_flight is None:
                # A Fetch waiting on the log's flush is sent by on_log_flushed; its timer, due
                # already, busy-looped an observer that had just led with appends unflushed
                # (seed 1793009: a leader that removed itself). Meanwhile: a recheck only.
                deadlines.append(self.now + self.config.retry_backoff_ms if self.awaiting_flush
                                 else self.next_fetch_at)
        else:
            deadlines.append(self.election_deadline)
        return max(min(deadlines), self.now)

    def _expire_in_flight(self) -> None:
        expired = [rid for rid, p in self.in_flight.items() if p.deadline <= self.now]
        for rid in expired:
            pending = self.in_flight.pop(rid)
            self.on_request_expired(rid, pending)

    def on_request_expired(self, request_id: int, pending: InFlight) -> None:
        if pending.kind == "update":
            self.own_endpoints.on_lost(pending)
        if request_id == self.fetch_in_flight:
            self.fetch_in_flight = None
            self.next_fetch_at = self.now + self.config.retry_backoff_ms
            if not self.may_vote and self.role is Role.FOLLOWER:
                # An observer whose leader went quiet tries another voter.
                self.become_unattached(self.epoch)
            elif not self.may_vote and self.role is Role.UNATTACHED:
                # ...and one looking for the leader does not keep asking a voter that is down.
                self.arm_unattached_timer()

    # ------------------------------------------------------------------ inbound control RPCs

    def handle_begin_quorum_epoch(self, token: object, req: BeginQuorumEpochRequest) -> None:
        if req.cluster_id != self.cluster_id:
            self.reply(token, self._bqe_response(ErrorCode.INCONSISTENT_CLUSTER_ID))
            return
        if req.leader_epoch < self.epoch:
            self.reply(token, self._bqe_response(ErrorCode.FENCED_LEADER_EPOCH))
            return
        if req.leader_id not in self.voters and not self.history.dynamic:
            # Only a voter can lead: never adopt a leader (or its epoch) from anyone else.
            # With dynamic voters (KIP-853) our set may lag the leader's (it was added by a
            # VotersRecord we have not fetched yet), so the leader is taken at its word.
            self.reply(token, self._bqe_response(ErrorCode.INCONSISTENT_VOTER_SET))
            return
        if req.leader_epoch == self.epoch and self.leader_id not in (NO_LEADER, req.leader_id):
            # Two leaders in one epoch would be a safety violation; refuse, never adopt.
            self.reply(token, self._bqe_response(ErrorCode.INVALID_REQUEST))
            return
        if req.leader_id != self.node_id:
            self.observe_epoch(req.leader_epoch, req.leader_id)
        if not self.is_own_voter_key(req.voter_id, req.voter_directory_id):
            # Kafka's order: follow the leader, but do not endorse it as the voter it names
            # (another disk of this id): its check-quorum must not count us.
            self.reply(token, self._bqe_response(ErrorCode.INVALID_VOTER_KEY))
            return
        self.reply(token, self._bqe_response(ErrorCode.NONE))

    def _bqe_response(self, error: ErrorCode) -> BeginQuorumEpochResponse:
        return BeginQuorumEpochResponse(error, self.known_leader(), self.epoch)

    def handle_end_quorum_epoch(self, token: object, req: EndQuorumEpochRequest) -> None:
        if req.cluster_id != self.cluster_id:
            self.reply(token, self._eqe_response(ErrorCode.INCONSISTENT_CLUSTER_ID))
            return
        if req.leader_id not in self.voters and not self.history.dynamic:
            # Neither its epoch nor its successor ranking counts (see handle_vote_request).
            # With dynamic voters, a leader that removed itself hands over with this.
            self.reply(token, self._eqe_response(ErrorCode.INCONSISTENT_VOTER_SET))
            return
        if req.leader_epoch < self.epoch:
            self._maybe_late_succession(req)
            self.reply(token, self._eqe_response(ErrorCode.FENCED_LEADER_EPOCH))
            return
        if req.leader_epoch > self.epoch:
            self.observe_epoch(req.leader_epoch, NO_LEADER)
        if (
            self.may_vote
            and self.role in (Role.FOLLOWER, Role.UNATTACHED)
            and self.leader_id in (req.leader_id, NO_LEADER)
        ):
            self.elections.schedule_succession(self._successors_for_us(req))
        self.reply(token, self._eqe_response(ErrorCode.NONE))

    def _maybe_late_succession(self, req: EndQuorumEpochRequest) -> None:
        """An EndQuorumEpoch overtaken by the first successor's Vote: that Vote already moved
        us to a later epoch, and we did not grant it (its log is behind ours: the leader ranked
        successors by what it had seen us fetch, one round behind). No leader is known in our
        epoch and nobody has our vote, so the resigned leader's ranking is still the best
        guide to when we should campaign; without it we would wait a whole election timeout.
        The request itself is still fenced; only our election timer moves (earlier)."""
        if (
            self.may_vote
            and self.role is Role.UNATTACHED
            and self.leader_id == NO_LEADER
            and self.voted_id == NO_LEADER
        ):
            self.elections.schedule_succession(self._successors_for_us(req))

    def _successors_for_us(self, req: EndQuorumEpochRequest) -> tuple[int, ...]:
        """The successor ranking, in which our id stands for us only with our directory (or
        an unnamed one): a new disk of a successor's id is not that successor."""
        if not req.successor_directories:
            return req.preferred_successors
        return tuple(
            NO_LEADER if node == self.node_id and directory not in (NIL_DIRECTORY,
                                                                      self.directory_id)
            else node
            for node, directory in zip(req.preferred_successors, req.successor_directories,
                                       strict=False))

    def _eqe_response(self, error: ErrorCode) -> EndQuorumEpochResponse:
        return EndQuorumEpochResponse(error, self.known_leader(), self.epoch)

    def handle_begin_quorum_epoch_response(
        self, pending: InFlight, src: int, resp: BeginQuorumEpochResponse
    ) -> None:
        if self.observe_epoch(resp.leader_epoch, resp.leader_id):
            return
        same_epoch = pending.epoch == self.epoch
        if self.role is Role.LEADER and same_epoch and resp.error == ErrorCode.NONE:
            self.leadership.endorsed(src)

    def campaign_now(self, now_ms: int) -> None:
        """Become a candidate at ``now_ms`` without a pre-vote round (scripted scenarios)."""
        self.elections.campaign_now(now_ms)
