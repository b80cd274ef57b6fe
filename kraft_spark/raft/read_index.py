"""Linearizable reads without a log write: the read index (Raft thesis §6.4), for pull-based Raft.

A node that wants to answer a read linearizably asks the leader for a *read index*: an offset
such that every write acknowledged before the read began lies below it. The node then answers
from its own state once it has applied up to that offset (a follower or an observer waits to
apply it locally; the data never passes through the leader).

How the leader proves it is still the leader, in the pull model: there are no heartbeats to
count, but voters fetch continuously, and a voter only fetches from the leader of its epoch.
A read is confirmed once a majority of the voters (the leader counting for itself) sent a Fetch
for this epoch that the leader *received after the read arrived*. Had another leader been
elected in a later epoch before the read arrived (and so possibly acknowledged a write this
leader has not seen), a majority of voters would have moved to that later epoch before the
read arrived and would no longer fetch from this one; two majorities intersect, so at least
one confirming Fetch could not exist. Fetches are numbered in the order received
(``ReadIndexTracker.seq``), so "received after" never depends on clock resolution. No clock
lease is used: a read costs at most one fetch round trip of the slowest voter of the fastest
majority, and to keep that short the leader answers its parked Fetches at once when a read
arrives (the voters fetch again immediately).

The offset answered is the leader's high watermark when the read is confirmed, and only once
that high watermark is past the start of the leader's own epoch: until its LeaderChange record
commits, a new leader does not know how far its predecessors committed (Raft §8).

A node that cannot prove leadership never answers: reads wait (up to their deadline, then fail
with REQUEST_TIMED_OUT) and fail with NOT_LEADER_OR_FOLLOWER when leadership is lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class PendingRead:
    token: object
    # Confirmed by voter fetches numbered above this.
    after_seq: int
    deadline_ms: int


@dataclass(slots=True)
class ReadIndexTracker:
    """One leader epoch's pending reads and the order in which voter Fetches arrived."""

    seq: int = 0
    last_fetch_seq: dict[int, int] = field(default_factory=dict)
    pending: list[PendingRead] = field(default_factory=list)
    # Reads confirmed so far (tests, metrics).
    confirmed: int = 0

    def on_voter_fetch(self, voter_id: int) -> None:
        """A Fetch of this epoch from a voter was received."""
        self.seq += 1
        self.last_fetch_seq[voter_id] = self.seq

    def add(self, token: object, deadline_ms: int) -> None:
        self.pending.append(PendingRead(token, self.seq, deadline_ms))

    def confirmed_since(self, after_seq: int, voters: tuple[int, ...], leader_id: int) -> bool:
        """Whether a majority of ``voters`` is known to have followed this leader after
        ``after_seq`` (the leader counts when it is a voter)."""
        acks = sum(
            1 for v in voters
            if v == leader_id or self.last_fetch_seq.get(v, 0) > after_seq
        )
        return acks * 2 > len(voters)

    def take_confirmed(self, voters: tuple[int, ...], leader_id: int) -> list[PendingRead]:
        """Remove and return the reads a majority has confirmed (oldest first)."""
        done: list[PendingRead] = []
        waiting: list[PendingRead] = []
        for read in self.pending:
            (done if self.confirmed_since(read.after_seq, voters, leader_id)
             else waiting).append(read)
        if done:
            self.pending = waiting
            self.confirmed += len(done)
        return done

    def take_expired(self, now_ms: int) -> list[PendingRead]:
        expired = [r for r in self.pending if r.deadline_ms <= now_ms]
        if expired:
            self.pending = [r for r in self.pending if r.deadline_ms > now_ms]
        return expired

    def take_all(self) -> list[PendingRead]:
        out, self.pending = self.pending, []
        return out

    def next_deadline(self) -> int | None:
        return min((r.deadline_ms for r in self.pending), default=None)

