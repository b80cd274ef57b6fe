"""The leader's state: the bookkeeping of one leader epoch, a value that exists only while the
node leads (``CoreState.leader_state``) and is discarded, answering what still waits on it
(``LeaderState.farewell``), when it stops (``CoreState.transition``). As ``Following`` and
``Campaign`` are the follower's and the candidate's."""

from __future__ import annotations

from dataclasses import dataclass, field

from kraft_spark.raft.messages import (
    NO_LEADER,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    ProduceResponse,
    ReadIndexResponse,
    VoterChangeResponse,
)
from kraft_spark.raft.progress import LeaderProgress
from kraft_spark.raft.read_index import ReadIndexTracker
from kraft_spark.raft.ready import Reply
from kraft_spark.raft.state import NEVER
from kraft_spark.raft.voter_change import VoterChangeSlot


@dataclass(slots=True)
class ParkedFetch:
    token: object
    request: FetchRequest
    deadline: int


@dataclass(slots=True)
class ProduceWaiter:
    """A Produce answered once the high watermark passes ``last_offset``."""

    token: object
    base_offset: int
    last_offset: int
    epoch: int
    deadline: int


@dataclass(slots=True)
class LeaderState:
    """Bookkeeping of one leader epoch; discarded when the node stops leading."""

    progress: LeaderProgress
    # Offset of this epoch's LeaderChange record: nothing commits until it is on a majority.
    epoch_start_offset: int
    started_ms: int
    unendorsed: set[int]
    next_begin_epoch_at: int = 0
    flush_due_at: int = NEVER
    parked: list[ParkedFetch] = field(default_factory=list)
    waiters: list[ProduceWaiter] = field(default_factory=list)
    # The high watermark last sent to each replica: a Fetch from a replica that has not heard
    # the current one is answered at once instead of parked (followers and the observer learn
    # commits without waiting MaxWaitMs).
    hw_sent: dict[int, int] = field(default_factory=dict)
    # When parked Fetches are answered only to tell a newer high watermark (see
    # QuorumConfig.hw_wakeup_delay_ms); NEVER while every parked replica has heard it.
    hw_wakeup_at: int = NEVER
    # The voter whose Fetch last moved the high watermark (-1: none yet): a lone append goes to
    # it first (QuorumConfig.lone_append_hold_ms). While the other parked Fetches wait for it,
    # the time by which they are answered anyway; NEVER when none wait.
    quickest: int = -1
    held_until: int = NEVER
    # When an append last arrived while another awaited commit (concurrent writers).
    concurrent_at: int = -NEVER
    # The voter set a reassignment in progress moves to, as its last step said (membership.py).
    reassignment_target: tuple[int, ...] = ()
    # The voter change in flight and a due step-down (voter_change.py, membership.py).
    voter_change: VoterChangeSlot = field(default_factory=VoterChangeSlot)
    lone_appends: int = 0
    # Linearizable reads waiting for a majority to confirm this leader (read_index.py).
    reads: ReadIndexTracker = field(default_factory=ReadIndexTracker)

    def farewell(self, *, leader: int, epoch: int, high_watermark: int) -> list[Reply]:
        """The answers to everything still waiting on ``leader``, which stops leading in
        ``epoch``: the outcome of pending appends and of a voter change is unknown to it now
        (they may still commit under the next leader)."""
        replies: list[Reply] = []
        change = self.voter_change.abandon()
        if change is not None and change.token is not None:
            replies.append(Reply(change.token, VoterChangeResponse(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"leadership lost before {change.description} committed; it may still commit",
                leader, epoch)))
        for waiter in self.waiters:
            replies.append(Reply(waiter.token, ProduceResponse(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, NO_LEADER, epoch,
                message="leadership lost before commit; the append may still commit")))
        for parked in self.parked:
            replies.append(Reply(parked.token, FetchResponse(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, leader, epoch, high_watermark)))
        for read in self.reads.take_all():  # a node that is not the leader answers no read
            replies.append(Reply(read.token, ReadIndexResponse(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, leader, epoch)))
        return replies
