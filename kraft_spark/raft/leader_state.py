"""The leader's state: the bookkeeping of one leader epoch, a value that exists only while the
node leads (``LeaderMixin.leader_state``) and is discarded, answering what still waits on it,
when it stops (``LeaderMixin.on_leave_leader``). As ``Following`` and ``Campaign`` are the
follower's and the candidate's."""

from __future__ import annotations

from dataclasses import dataclass, field

from kraft_spark.raft.messages import FetchRequest
from kraft_spark.raft.progress import LeaderProgress
from kraft_spark.raft.read_index import ReadIndexTracker
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
