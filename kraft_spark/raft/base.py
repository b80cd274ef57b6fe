"""The state every part of the core shares, and the role transitions themselves."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from kraft_spark.raft.campaign import Campaign
from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.events import (
    CoreEvent,
    DiskLossCaughtUp,
    RoleChanged,
    SnapshotEvent,
    SnapshotStep,
    VoterEvent,
    VoterStep,
)
from kraft_spark.raft.following import Following
from kraft_spark.raft.leader_state import LeaderState
from kraft_spark.raft.log_api import OffsetAndEpoch, RaftLog
from kraft_spark.raft.messages import (
    NO_LEADER,
    ErrorCode,
    FetchRequest,
    Request,
    Response,
    VoterChangeResponse,
)
from kraft_spark.raft.producers import ProducerStateTable
from kraft_spark.raft.ready import Outbound, Reply
from kraft_spark.raft.roles import UNATTACHED, RoleValue, role_of
from kraft_spark.raft.snapshot_api import SnapshotDownload, SnapshotStore
from kraft_spark.raft.snapshot_log import SnapshotAwareLog
from kraft_spark.raft.state import NEVER, PersistedState, Role, check_transition
from kraft_spark.raft.vote_rules import election_timeout_ms, fetch_timeout_jitter_ms
from kraft_spark.raft.voter_history import VoterHistory
from kraft_spark.raft.voter_records import decode_voters
from kraft_spark.raft.voter_set import NIL_DIRECTORY, Endpoint, VoterSet

# How many bytes of log a start-up scan reads at a time (rebuilding producer state).
SCAN_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class InFlight:
    """A request we sent and still wait for. ``epoch`` and ``role`` are ours when we sent it."""

    dest: int
    kind: str
    epoch: int
    deadline: int


class CoreState:
    """Fields and transitions shared by the election, leader and follower parts of the core."""

    def __init__(
        self,
        *,
        node_id: int,
        cluster_id: str,
        voters: Iterable[int],
        log: RaftLog,
        config: QuorumConfig,
        rng: random.Random,
        snapshots: SnapshotStore,
        voter_set: VoterSet | None = None,
        directory_id: uuid.UUID = NIL_DIRECTORY,
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.directory_id = directory_id
        # KIP-853: the static set (controller.quorum.voters, with the configured endpoints
        # when the shell knows them), then whatever VotersRecords the log and snapshot hold
        # (voter_history; adopted by voters_changed).
        self.history = VoterHistory(voter_set or VoterSet.of_ids(voters))
        self.voter_set = self.history.static
        self.voters: tuple[int, ...] = self.voter_set.ids()
        self.is_voter = self.voter_set.contains(node_id, directory_id)
        # Where this node listens, which it keeps its VotersRecord entry in line with
        # (voter_update.py; empty: unknown). Set by RaftCore.
        self.local_endpoints: tuple[Endpoint, ...] = ()
        # The log as the core reads it: the injected log after its start, plus the snapshot
        # at its start (KIP-630).
        self.log = SnapshotAwareLog(log, snapshots)
        self.snapshots = snapshots
        # A snapshot being downloaded from the leader (snapshot_fetch.py), and the one
        # installed in this step (reported in the Ready).
        self.download: SnapshotDownload | None = None
        self.snapshot_installed: OffsetAndEpoch | None = None
        self.config = config
        self.rng = rng
        self.now = 0
        # --- persisted (quorum-state); invariant: epoch never decreases.
        self.epoch = 0
        self.leader_id = NO_LEADER
        self.voted_id = NO_LEADER
        # The directory of the candidate voted for (KIP-853); meaningful only while
        # voted_id names that candidate (set together when a vote is granted).
        self.voted_directory_id = NIL_DIRECTORY
        self.pending_catch_up = False
        self.persist_needed = False
        # --- role: one value, whose type is the role (roles.py); ``role`` is derived from it,
        # and both are written only together (``_enter``).
        self.role_value: RoleValue = UNATTACHED
        self._role = Role.UNATTACHED
        self.high_watermark = 0  # never decreases within one run of the node
        # Unattached, Resigned, Prospective and Candidate: when the election timer fires.
        self.election_deadline = NEVER
        # The fetch loop, a follower's and an observer's looking for the leader.
        self.fetch_in_flight: int | None = None
        self.next_fetch_at = 0
        self.awaiting_flush = False
        # When we last said that a voter refused us as another cluster's node (follower.py).
        self.foreign_cluster_noted_at = -(10**12)
        self.fetch_target_index = rng.randrange(max(len(self.voters), 1))
        # --- outputs accumulated until take_ready()
        self.sends: list[Outbound] = []
        self.replies: list[Reply] = []
        self.events: list[CoreEvent] = []
        self.flush_requested = False
        self.hw_changed_to: int | None = None
        self.truncated_to: int | None = None
        self.in_flight: dict[int, InFlight] = {}
        self._next_request_id = 1
        self.producers = ProducerStateTable()
        self.elections_started = 0

    # ------------------------------------------------------------------ small queries

    @property
    def may_vote(self) -> bool:
        """Voters vote and campaign; observers and voters catching up after disk loss do not."""
        return self.is_voter and not self.pending_catch_up

    @property
    def may_grant_votes(self) -> bool:
        """Granting is not campaigning: a node outside the set in force at it (its own removal
        not committed yet, or its addition not fetched yet) may still be a voter of the set a
        candidate counts with, and must answer as one; it never campaigns. That holds in a
        quorum whose log it holds is still static too: the first VotersRecord (the one that
        added it) may be exactly what it has not fetched; a candidate counts only the voters of
        its own set, so an observer's grant elects nobody (as in Kafka, whose replicas answer
        votes whatever set they know). Seed 422352 of the membership faults: voter 101, added
        by the quorum's first VotersRecord and cut off before fetching it, refused every
        candidate of the set that needed it, and no leader was ever elected again. A node
        catching up after disk loss grants nothing (its rule: docs/concepts/protocol.md), and
        neither does one whose id is in the set under another directory id: it is a new disk
        of that id, and the vote the old disk may have cast in this epoch is forgotten (Kafka's
        Vote v1 names the voter's directory for the same reason)."""
        if self.pending_catch_up:
            return False
        if self.is_voter:
            return True
        return self.voter_set.get(self.node_id) is None

    def directory_of_voter(self, node_id: int) -> uuid.UUID:
        """The directory id our voter set lists for ``node_id`` (NIL: not listed or unknown):
        what KIP-853's requests name as the voter key of their recipient."""
        voter = self.voter_set.get(node_id)
        return voter.directory_id if voter is not None else NIL_DIRECTORY

    def is_own_voter_key(self, voter_id: int, voter_directory_id: uuid.UUID) -> bool:
        """KIP-853: a Vote or BeginQuorumEpoch v1 names the voter it is meant for. One meant for
        another node, or for another disk of this id (a directory we no longer have), is not
        ours to answer as a voter: INVALID_VOTER_KEY. A v0 request names nobody (-1)."""
        if voter_id < 0:
            return True
        return voter_id == self.node_id and voter_directory_id in (
            NIL_DIRECTORY, self.directory_id)

    def known_leader(self) -> int:
        return self.node_id if self.role is Role.LEADER else self.leader_id

    def hears_from_leader(self) -> bool:
        """We lead, or we follow a leader we have fetched from within the fetch timeout, that
        has not resigned and whose host has not refused a connection since (its process is
        gone): a pre-vote now would only unseat a working leader. Without the refusal rule a
        killed leader's followers refused each other's pre-votes until their own (randomly
        shortened) deadlines passed: `kraft-spark bench voters` failover 632 ms, not 309."""
        if self.role is Role.LEADER:
            return True
        following = self.following  # None unless Follower
        return (
            following is not None
            and following.fetched
            and not following.resigned
            and not following.refused
            and self.now < following.fetch_deadline
        )

    def voter_change_response(self, error: ErrorCode, message: str | None) -> VoterChangeResponse:
        """The answer to AddVoter, RemoveVoter or UpdateVoter (KIP-853)."""
        return VoterChangeResponse(error, message, self.known_leader(), self.epoch)

    def describe_role(self) -> str:
        return self.role_event().describe_role()

    def role_event(self, *, started: bool = False) -> RoleChanged:
        """The role this core is in now, as the event that reports it."""
        return RoleChanged(self.role, self.epoch, self.leader_id, self.voted_id, started)

    def persisted_state(self) -> PersistedState:
        return PersistedState(
            epoch=self.epoch,
            leader_id=self.known_leader(),
            voted_id=self.voted_id,
            pending_catch_up=self.pending_catch_up,
            voted_directory_id=self.voted_directory_id if self.voted_id != NO_LEADER
            else NIL_DIRECTORY,
        )

    # ------------------------------------------------------------------ outputs

    def send(self, dest: int, kind: str, message: Request, timeout_ms: int) -> int:
        request_id = self._next_request_id
        self._next_request_id += 1
        self.in_flight[request_id] = InFlight(dest, kind, self.epoch, self.now + timeout_ms)
        self.sends.append(Outbound(dest, request_id, message))
        return request_id

    def reply(self, token: object, message: Response) -> None:
        self.replies.append(Reply(token, message))

    def request_flush(self) -> None:
        self.flush_requested = True

    # ------------------------------------------------------------------ transitions

    # ------------------------------------------------------------------ the role's value

    @property
    def campaign(self) -> Campaign | None:
        """Prospective or Candidate: its round and backoff (campaign.py); else None."""
        value = self.role_value
        return value if isinstance(value, Campaign) else None

    @property
    def following(self) -> Following | None:
        """Follower: the leader it follows (following.py); else None."""
        value = self.role_value
        return value if isinstance(value, Following) else None

    @property
    def leader_state(self) -> LeaderState | None:
        """Leader: its epoch's bookkeeping (leader_state.py); else None."""
        value = self.role_value
        return value if isinstance(value, LeaderState) else None

    @property
    def role(self) -> Role:
        """The role ``role_value`` stands for (kept beside it: read on every input)."""
        return self._role

    def _enter(self, value: RoleValue) -> None:
        """The only writer of the role: its value, and the role that value stands for."""
        self.role_value = value
        self._role = role_of(value)

    # ------------------------------------------------------------------ transitions

    def transition(self, value: RoleValue, epoch: int, leader_id: int, voted_id: int) -> None:
        """The one place roles change, into ``value`` (a new one for every role entered, so
        nothing of the last role carries over). Persists when epoch, leader or vote changed."""
        if epoch < self.epoch:
            raise AssertionError(f"epoch may not decrease ({self.epoch} -> {epoch})")
        check_transition(
            self.role, role_of(value), may_vote=self.may_vote, epoch_changed=epoch != self.epoch
        )
        if self.role is Role.LEADER:
            self._leave_leadership()
        if (epoch, leader_id, voted_id) != (self.epoch, self.known_leader(), self.voted_id):
            self.persist_needed = True
        self._enter(value)
        self.epoch, self.leader_id, self.voted_id = epoch, leader_id, voted_id
        self.fetch_in_flight = None
        self.awaiting_flush = False
        if self.download is not None:  # a snapshot download belongs to one leader and role
            self.download.abort()
            self.download = None
            self.events.append(SnapshotEvent(SnapshotStep.ABORTED))
        self.events.append(self.role_event())

    def _leave_leadership(self) -> None:
        """Answer everything still waiting on this leader (``LeaderState.farewell``)."""
        ls = self.leader_state
        if ls is not None:
            self.replies.extend(ls.farewell(leader=self.known_leader(), epoch=self.epoch,
                                            high_watermark=self.high_watermark))
        # A leader stays a voter while it leads (rule 4 of membership.py); one that appended
        # its own removal and lost leadership before it committed is no voter of the set in
        # force: it must not campaign with it (found by the simulator: it was elected by the
        # voters of the older set).
        if not self.voter_set.contains(self.node_id, self.directory_id):
            self.is_voter = False
            self.events.append(VoterEvent(VoterStep.NOT_LISTED))

    def become_unattached(self, epoch: int) -> None:
        voted = self.voted_id if epoch == self.epoch else NO_LEADER
        self.transition(UNATTACHED, epoch, NO_LEADER, voted)
        self.arm_unattached_timer()

    def become_follower(self, epoch: int, leader_id: int) -> None:
        voted = self.voted_id if epoch == self.epoch else NO_LEADER
        following = Following()
        self.transition(following, epoch, leader_id, voted)
        # Drawn once the old role is left (a leader leaving may stop being a voter).
        if self.may_vote:
            following.jitter_ms = fetch_timeout_jitter_ms(self.rng, self.config.max_fetch_jitter_ms)
        self.push_fetch_deadline()
        self.next_fetch_at = self.now
        if leader_id in self.voters:
            self.fetch_target_index = self.voters.index(leader_id)
        self.maybe_send_fetch()

    @property
    def campaigning(self) -> Campaign:
        """Our round of pre-votes or votes: only while Prospective or Candidate (else an
        AssertionError, a bug)."""
        campaign = self.campaign
        assert campaign is not None, f"no campaign in role {self.role.value}"
        return campaign

    def rounds_lost(self) -> int:
        """Rounds lost in a row so far: carried into the next round while we campaign, 0 when
        we begin campaigning from another role."""
        return self.campaign.retries if self.campaign is not None else 0

    @property
    def followed(self) -> Following:
        """The leader we follow: only while Follower (else an AssertionError, a bug)."""
        following = self.following
        assert following is not None, f"no leader is followed in role {self.role.value}"
        return following

    def push_fetch_deadline(self) -> None:
        """We began following, or a Fetch (or a snapshot chunk) from our leader succeeded:
        ``Following.restart_deadline`` now."""
        self.followed.restart_deadline(self.now, self.config.fetch_timeout_ms)

    def arm_unattached_timer(self) -> None:
        if self.may_vote:
            self.election_deadline = self.now + election_timeout_ms(
                self.rng, self.config.election_timeout_ms
            )
        else:
            # Non-voting nodes look for the leader by fetching from the voters in turn.
            self.fetch_target_index = (self.fetch_target_index + 1) % max(len(self.voters), 1)
            self.next_fetch_at = self.now + self.config.retry_backoff_ms

    def own_campaign_time(self) -> int:
        """When this node would next campaign if nothing else happened."""
        if self.role is Role.UNATTACHED or self.role is Role.RESIGNED:
            return self.election_deadline
        if self.role is Role.CANDIDATE or self.role is Role.PROSPECTIVE:
            return self.campaigning.next_step_at(self.election_deadline)
        if self.role is Role.FOLLOWER:
            return self.followed.fetch_deadline
        return NEVER

    def observe_epoch(self, epoch: int, leader_id: int) -> bool:
        """React to an epoch and leader seen in any message. Returns True when our role changed
        because of it (the caller should then drop what it was doing)."""
        if epoch > self.epoch:
            if leader_id not in (NO_LEADER, self.node_id):
                self.become_follower(epoch, leader_id)
            else:
                # Learning of a later epoch without its leader never postpones our own
                # candidacy (as for a Vote request): a successor's turn after EndQuorumEpoch,
                # or an election brought forward because the leader's host refused us, stands.
                campaign_at = self.own_campaign_time()
                self.become_unattached(epoch)
                if self.may_vote:
                    self.election_deadline = min(self.election_deadline, campaign_at)
            return True
        if (
            epoch == self.epoch
            and leader_id not in (NO_LEADER, self.node_id)
            and self.role in (Role.UNATTACHED, Role.CANDIDATE, Role.PROSPECTIVE)
        ):
            self.become_follower(epoch, leader_id)
            return True
        return False

    # ------------------------------------------------------------------ the fetch loop

    # A Follower's, and a non-voting node's looking for the leader while Unattached.

    def _rule_fetch_waits_for_flush(self) -> bool:
        """The fsync rule: a Fetch reports the end offset only once the log is fsync'd to it."""
        return True

    def _fetch_target(self) -> int | None:
        if self.role is Role.FOLLOWER:
            return self.leader_id
        candidates = [v for v in self.voters if v != self.node_id]
        if not candidates:
            return None
        return candidates[self.fetch_target_index % len(candidates)]

    def maybe_send_fetch(self) -> None:
        """Send the next Fetch if we pull, none is outstanding, and the log is durable."""
        if self.role is not Role.FOLLOWER and not (
            self.role is Role.UNATTACHED and not self.may_vote
        ):
            return
        if self.fetch_in_flight is not None or self.now < self.next_fetch_at:
            return
        if self.log.flushed_offset() < self.log.end_offset() and self._rule_fetch_waits_for_flush():
            self.awaiting_flush = True
            self.request_flush()
            return
        self.awaiting_flush = False
        self._maybe_finish_catch_up()
        target = self._fetch_target()
        if target is None:
            return
        request = FetchRequest(
            cluster_id=self.cluster_id,
            replica_id=self.node_id,
            current_leader_epoch=self.epoch,
            fetch_offset=self.log.end_offset(),
            last_fetched_epoch=self.log.last_epoch(),
            max_wait_ms=self.config.fetch_max_wait_ms,
            max_bytes=self.config.fetch_max_bytes,
            catching_up=self.pending_catch_up,
            directory_id=self.directory_id,
        )
        timeout = self.config.fetch_max_wait_ms + self.config.request_timeout_ms // 2
        self.fetch_in_flight = self.send(target, "fetch", request, timeout)

    def _maybe_finish_catch_up(self) -> None:
        """The disk-loss rule: a voter that lost its disk votes again only once it holds what a
        leader committed *without it*: our Fetches do not count toward the high watermark while we
        catch up, so a high watermark that moved past the start of the leader's epoch while we
        watched was put there by a majority of the other voters (a zombie leader cannot)."""
        following = self.following  # None unless Follower
        if following is None:
            return
        hw, first = following.hw_seen, following.first_hw
        if (
            self.pending_catch_up
            and hw is not None
            and first is not None
            and hw > first
            and hw > self.log.end_offset_for_epoch(self.epoch - 1).offset
            and self.log.end_offset() >= hw
        ):
            self.pending_catch_up = False
            self.persist_needed = True
            self.events.append(DiskLossCaughtUp())

    # ------------------------------------------------------------------ the voter set in force

    def _rule_voters_in_force(self) -> VoterSet:
        """The newest VotersRecord, committed or not (KIP-853)."""
        return self.history.latest()

    def voters_changed(self) -> None:
        """Adopt the voter set in force after the log or the high watermark moved."""
        voters = self._rule_voters_in_force()
        if voters == self.voter_set:
            return
        self.voter_set = voters
        self.voters = voters.ids()
        self.events.append(VoterEvent(VoterStep.IN_FORCE, voters.describe()))
        ls = self.leader_state
        if self.role is Role.LEADER and ls is not None:
            if ls.reassignment_target == self.voters:
                ls.reassignment_target = ()  # the reassignment is done
            # The leader stays a voter until it steps down (rule 4); its own offset counts
            # only while it is in the set.
            ls.progress.set_voters(self.voters, local_is_voter=self.node_id in self.voters)
            return
        is_voter = voters.contains(self.node_id, self.directory_id)
        if is_voter == self.is_voter:
            return
        if not is_voter and self.role in (Role.CANDIDATE, Role.RESIGNED):
            self.become_unattached(self.epoch)
        self.is_voter = is_voter
        self.events.append(VoterEvent(VoterStep.JOINED if is_voter else VoterStep.LEFT))
        if self.role is Role.UNATTACHED:
            self.arm_unattached_timer()

    # ------------------------------------------------------------------ producer state

    def _rebuild_from_log(self) -> None:
        """The producer table and the voter history as of the newest snapshot (stored in
        it), then the log after it."""
        latest = self.snapshots.latest_id()
        offset = self.log.start_offset()
        self.producers.rebuild([])
        if latest is not None and latest.offset >= offset:
            try:
                self.producers.load(self.snapshots.producer_state())
            except ValueError:
                self.events.append(SnapshotEvent(SnapshotStep.UNREADABLE,
                                                 detail="producer table is unreadable"))
            self.history.reset(self.snapshot_voters())
            offset = latest.offset
        first = offset
        end = self.log.end_offset()
        while offset < end:
            chunk = self.log.read(offset, SCAN_BYTES)
            if not chunk:
                break
            for batch in chunk:
                if batch.base_offset >= first:
                    self.producers.on_append(batch)
                    if batch.is_control:
                        self.history.on_batch(batch)
            offset = chunk[-1].next_offset

    def snapshot_voters(self) -> VoterSet | None:
        """The voter set stored in the newest snapshot (None: it holds none)."""
        raw = self.snapshots.voters_state()
        if raw is None:
            return None
        try:
            return decode_voters(raw)
        except ValueError as exc:
            self.events.append(SnapshotEvent(SnapshotStep.UNREADABLE,
                                             detail=f"VotersRecord is unreadable: {exc}"))
            return None
