"""The leader's view of every replica: replicated offsets and KIP-836 timestamps.

Reset at every new leader epoch: a ``LeaderProgress`` lives exactly as long as one Leader role.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kraft_spark.raft.messages import ReplicaState
from kraft_spark.raft.quorum import majority, majority_offset
from kraft_spark.raft.voter_set import NIL_DIRECTORY

UNKNOWN = -1


@dataclass(slots=True)
class ReplicaProgress:
    """One replica as seen by the leader. Invariant: ``end_offset`` is the FetchOffset of the
    replica's latest valid Fetch in this epoch, which the replica had fsync'd (the fsync rule:
    docs/concepts/protocol.md)."""

    replica_id: int
    end_offset: int = UNKNOWN
    last_fetch_ts: int = UNKNOWN
    last_caught_up_ts: int = UNKNOWN
    # The leader's end offset at the previous Fetch (KIP-836 bookkeeping).
    last_fetch_leader_end: int = UNKNOWN
    # Where the records of the last Fetch response sent to it end: what its log most likely
    # holds now, one round ahead of ``end_offset`` (which it acknowledges with its next Fetch).
    sent_end_offset: int = UNKNOWN
    # The directory id its latest Fetch carried (KIP-853; NIL when it sent none).
    directory_id: uuid.UUID = NIL_DIRECTORY

    def on_fetch(self, now_ms: int, fetch_offset: int, leader_end: int) -> None:
        """KIP-836's rule, in order: caught up now; or caught up to where the leader was at the
        previous fetch; then remember this fetch."""
        if fetch_offset >= leader_end:
            self.last_caught_up_ts = max(self.last_caught_up_ts, now_ms)
        elif self.last_fetch_leader_end > 0 and fetch_offset >= self.last_fetch_leader_end:
            self.last_caught_up_ts = max(self.last_caught_up_ts, self.last_fetch_ts)
        self.last_fetch_leader_end = leader_end
        self.last_fetch_ts = max(self.last_fetch_ts, now_ms)
        self.end_offset = fetch_offset

    def as_state(self) -> ReplicaState:
        return ReplicaState(
            replica_id=self.replica_id,
            log_end_offset=self.end_offset,
            last_fetch_timestamp=self.last_fetch_ts,
            last_caught_up_timestamp=self.last_caught_up_ts,
            directory_id=self.directory_id,
        )


# Observers a leader tracks at most (DescribeQuorum lists them all): anyone may fetch with a
# made-up replica id, and 20,000 such made /v1/quorum 2 MB and slowed other requests. At the
# limit the observer seen least recently is forgotten (as if it had expired).
MAX_OBSERVERS = 1000


class LeaderProgress:
    """Replication progress of all voters and recently seen observers for one leader epoch."""

    def __init__(self, local_id: int, voters: tuple[int, ...],
                 local_directory: uuid.UUID = NIL_DIRECTORY) -> None:
        self.local_id = local_id
        self.local_directory = local_directory
        self.voters: dict[int, ReplicaProgress] = {
            v: ReplicaProgress(v) for v in voters if v != local_id
        }
        self.observers: dict[int, ReplicaProgress] = {}
        self.n_voters = len(voters)
        # False once a VotersRecord removing the leader is appended (KIP-853): from then on
        # its own offset and liveness no longer count (it leads until the removal commits).
        self.local_is_voter = True

    def set_voters(self, voters: tuple[int, ...], *, local_is_voter: bool) -> None:
        """The voter set in force changed: a new voter's progress (it fetched as an observer)
        moves over and counts at once; a removed one's becomes an observer's."""
        wanted = {v for v in voters if v != self.local_id}
        for removed in set(self.voters) - wanted:
            self.observers[removed] = self.voters.pop(removed)
        for added in wanted - set(self.voters):
            seen = self.observers.pop(added, None)
            self.voters[added] = seen if seen is not None else ReplicaProgress(added)
        self.n_voters = len(voters)
        self.local_is_voter = local_is_voter

    def on_fetch(
        self,
        replica_id: int,
        now_ms: int,
        fetch_offset: int,
        leader_end: int,
        *,
        as_observer: bool = False,
        directory_id: uuid.UUID = NIL_DIRECTORY,
    ) -> bool:
        """Record a valid Fetch; returns True when it counts as a voter's (affects the HW).
        ``as_observer``: a voter catching up after disk loss, tracked but never counted."""
        progress = None if as_observer else self.voters.get(replica_id)
        if progress is None:
            progress = self.observers.get(replica_id)
            if progress is None:
                if len(self.observers) >= MAX_OBSERVERS:
                    stalest = min(self.observers.values(), key=lambda p: p.last_fetch_ts)
                    del self.observers[stalest.replica_id]
                progress = self.observers[replica_id] = ReplicaProgress(replica_id)
            progress.directory_id = directory_id
            progress.on_fetch(now_ms, fetch_offset, leader_end)
            return False
        progress.directory_id = directory_id
        progress.on_fetch(now_ms, fetch_offset, leader_end)
        return True

    def on_contact(self, replica_id: int, now_ms: int) -> None:
        """A voter fetched a snapshot chunk (KIP-630): alive for check-quorum (as in Kafka),
        but its offsets are unchanged (it holds the snapshot only once it is complete)."""
        progress = self.voters.get(replica_id)
        if progress is not None:
            progress.last_fetch_ts = max(progress.last_fetch_ts, now_ms)

    def majority_flushed_offset(self, local_flushed: int) -> int:
        """The offset a majority of voters have fsync'd (unknown replicas count as 0)."""
        offsets = [max(p.end_offset, 0) for p in self.voters.values()]
        if self.local_is_voter:
            offsets.append(local_flushed)
        return majority_offset(offsets)

    def has_fetch_majority_since(self, since_ms: int) -> bool:
        """Check-quorum: did a majority (the leader included) fetch at or after ``since_ms``?"""
        fetched = int(self.local_is_voter) + sum(
            1 for p in self.voters.values() if p.last_fetch_ts >= since_ms)
        return fetched >= majority(self.n_voters)

    def check_quorum_deadline(self, started_ms: int, timeout_ms: int) -> int:
        """When check-quorum could next fail: the timeout after the fetch that the majority
        condition currently rests on (or after the start of the epoch, if later)."""
        times = sorted((p.last_fetch_ts for p in self.voters.values()), reverse=True)
        needed = majority(self.n_voters) - int(self.local_is_voter)  # the leader, itself
        if needed == 0:
            return 2**63 - 1
        return max(times[needed - 1], started_ms) + timeout_ms + 1

    def on_sent(self, replica_id: int, end_offset: int) -> None:
        """A Fetch response carrying records up to ``end_offset`` went to a voter."""
        progress = self.voters.get(replica_id)
        if progress is not None:
            progress.sent_end_offset = max(progress.sent_end_offset, end_offset)

    def preferred_successors(self) -> tuple[int, ...]:
        """Other voters by how far their log most likely reaches, highest first: what the
        last Fetch response sent to each carried, then what each acknowledged, then lower id
        first. Ranking only by the acknowledged offsets is one round behind under load: two
        voters that acknowledged the same offset tie, and the one picked first may be the one
        that was not yet sent the latest batch, so the other refuses its vote (its log is
        longer) and the handoff falls back to an election timeout."""
        ranked = sorted(
            self.voters.values(),
            key=lambda p: (-max(p.end_offset, p.sent_end_offset), -p.end_offset, p.replica_id),
        )
        return tuple(p.replica_id for p in ranked)

    def lowest_observer_offset(self) -> int | None:
        """The lowest offset a recently seen observer has fetched to (None: no observer):
        retention's ``kraft.retention.hold.observers``."""
        if not self.observers:
            return None
        return min(max(p.end_offset, 0) for p in self.observers.values())

    def expire_observers(self, now_ms: int, expiry_ms: int) -> None:
        stale = [i for i, p in self.observers.items() if p.last_fetch_ts < now_ms - expiry_ms]
        for replica_id in stale:
            del self.observers[replica_id]

    def describe(
        self, now_ms: int, leader_end: int
    ) -> tuple[tuple[ReplicaState, ...], tuple[ReplicaState, ...]]:
        """Voters (the leader first, reporting itself as caught up now) and observers."""
        me = ReplicaState(self.local_id, leader_end, now_ms, now_ms, self.local_directory)
        others = tuple(self.voters[v].as_state() for v in sorted(self.voters))
        observers = tuple(self.observers[o].as_state() for o in sorted(self.observers))
        if not self.local_is_voter:
            return others, (me, *observers)
        return (me, *others), observers
