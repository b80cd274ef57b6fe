"""The leader's countdowns of leases: keep-alives without a log write (etcd's lessor).

Every voter keeps a ``LeaseClock``; only the leader acts on it. Time is the node's monotonic
clock (injected), never the wall clock: a wall-clock jump expires nothing.

* **Keep-alive** (``countdown`` with ``renew``): once the leader has confirmed that it still
  leads (a read index; ``kraft_spark.store.lease_keepalive``), it restarts the lease's
  countdown at its full TTL in memory and answers the TTL. Nothing is appended, unless the
  lease's last checkpoint set a remaining TTL: then the caller appends a checkpoint clearing
  it (``clear``) and answers once it committed (etcd: at most two writes per lease per
  checkpoint interval).
* **Checkpoint** (``checkpoints``): every ``checkpoint_interval_s`` the leader records the
  remaining TTL of each lease whose countdown ran below ``CHECKPOINT_BELOW`` of its TTL and
  moved by an interval since its last checkpoint, in one ``checkpoint`` record. A lease kept
  alive at etcd's cadence (every third of its TTL) is never checkpointed.
* **Expiry** (``tick``): a countdown that ran out is returned, with the lease's
  ``keepalive_offset`` (``after``): the caller appends ``expire`` records.
* **A new leader** (a new ``term``) starts each lease's countdown at the remaining TTL its last
  checkpoint set, else at its full TTL (etcd's Promote).

Why a new leader never expires a lease early: a holder's keep-alive was acknowledged by a
leader that had confirmed its leadership after the keep-alive arrived, so every later leader
was elected after it arrived and counts at least one TTL from its own election, unless a
checkpoint set a remaining TTL. A checkpoint's remaining TTL was computed from the old leader's
countdown when it proposed it; it commits only if that leader still led then, so the new
leader counts it from a later moment; and a keep-alive acknowledged after it first appended (and
committed) a checkpoint clearing it, which comes later in the log. Why a lease is not kept
forever: while leaders change less often than a checkpoint interval, each new leader starts at
most at the remaining TTL of the last checkpoint, which keeps falling.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from kraft_spark.raft.records import Record
from kraft_spark.store.leases import (
    LEASE_OP_HEADER,
    Lease,
    LeaseTable,
    encode_checkpoint,
    encode_op,
    owner_refusal,
)

# An expiry not applied within this long (the append failed, leadership moved) is sent again.
RESEND_AFTER_S: Final = 2.0
CHECKPOINT_INTERVAL_S: Final = 1.0
# A lease is checkpointed once its countdown is below this share of its TTL.
CHECKPOINT_BELOW: Final = 0.5


class CountdownStatus(IntEnum):
    OK = 0
    NOT_FOUND = 1  # never granted, expired (or expiring now) or revoked
    NOT_OWNER = 2
    NOT_LEADER = 3  # ask the leader (leader_id when known)
    TIMED_OUT = 4  # leadership not confirmed (or the clearing checkpoint not committed) in time
    INVALID = 5  # a malformed request


@dataclass(frozen=True, slots=True)
class CountdownRequest:
    """A keep-alive (``renew``) or a TimeToLive query of one lease, answered by the leader."""

    lease_id: int
    renew: bool
    by: str | None = None  # the caller's credential (None: an administrator, any lease)
    timeout_ms: int = 5000


@dataclass(frozen=True, slots=True)
class CountdownAnswer:
    status: CountdownStatus
    leader_id: int = -1
    ttl_ms: int = 0  # the lease's granted TTL
    remaining_ms: int = 0  # left on the leader's countdown (after the renewal)
    message: str = ""


class LeaseClock:
    def __init__(self, now: Callable[[], float] = time.monotonic,
                 checkpoint_interval_s: float = CHECKPOINT_INTERVAL_S) -> None:
        self._now = now
        self.checkpoint_interval_s = checkpoint_interval_s
        # The leader epoch the countdowns belong to, kept while not leading: a renewal
        # confirmed in that epoch must still see the checkpoints proposed in it.
        self._term = -1
        self._leading = False
        self._deadlines: dict[int, float] = {}
        self._counted_from: dict[int, int] = {}  # lease -> keepalive_offset counted from
        self._sent: dict[int, float] = {}  # lease -> when its expiry was sent
        # lease -> the remaining TTL this leader's last checkpoint of it proposed (dropped
        # once a renewal cleared it): a renewal before it applied must clear it too.
        self._checkpointed: dict[int, int] = {}
        self._heap: list[tuple[float, int]] = []  # (deadline, lease), stale entries skipped
        self._synced_version = -1
        self._next_checkpoint = 0.0

    @property
    def leading(self) -> bool:
        return self._leading

    @property
    def term(self) -> int:
        """The leader epoch the countdowns belong to (-1: never led)."""
        return self._term

    def deadline(self, lease_id: int) -> float | None:
        """When the lease's countdown ends, on the injected clock (None: not counted)."""
        return self._deadlines.get(lease_id)

    def _lead(self, term: int, now: float) -> None:
        """A new term: every countdown starts again (from the table, at the next sync)."""
        self._term = term
        self._deadlines.clear()
        self._counted_from.clear()
        self._sent.clear()
        self._checkpointed.clear()
        self._heap.clear()
        self._synced_version = -1
        self._next_checkpoint = now + self.checkpoint_interval_s

    def _restart(self, lease: Lease, now: float) -> None:
        """Count from the lease's latest keep-alive in the log: its checkpointed remaining
        TTL when one is set, else its full TTL."""
        self._counted_from[lease.lease_id] = lease.keepalive_offset
        self._set(lease.lease_id, now + (lease.remaining_ms or lease.ttl_ms) / 1000)

    def _set(self, lease_id: int, deadline: float) -> None:
        self._deadlines[lease_id] = deadline
        self._sent.pop(lease_id, None)
        heapq.heappush(self._heap, (deadline, lease_id))

    def _sync(self, table: LeaseTable, now: float) -> None:
        """Follow the table when it changed: forget the leases gone, restart those with a
        newer keep-alive in the log (or new to this leader)."""
        if table.version == self._synced_version:
            return
        self._synced_version = table.version
        leases = table.leases
        for lease_id in [i for i in self._deadlines if i not in leases]:
            del self._deadlines[lease_id]
            self._counted_from.pop(lease_id, None)
            self._sent.pop(lease_id, None)
            self._checkpointed.pop(lease_id, None)
        for lease_id, lease in leases.items():
            if self._counted_from.get(lease_id) != lease.keepalive_offset:
                self._restart(lease, now)

    def _follow_term(self, term: int | None, table: LeaseTable) -> bool:
        """Track leadership; False when not leading (or ``term`` is older than the
        countdowns'). A new term starts every countdown again."""
        if term is None or term < self._term:
            self._leading = False
            return False
        if term > self._term:
            self._lead(term, self._now())
        self._leading = True
        self._sync(table, self._now())
        return True

    def tick(self, term: int | None, table: LeaseTable) -> list[tuple[int, int]]:
        """The leases to expire now: (lease id, its ``keepalive_offset``). ``term``: the
        leader epoch while this node leads, else None."""
        if not self._follow_term(term, table):
            return []
        now = self._now()
        heap, leases = self._heap, table.leases
        ran_out: list[tuple[float, int]] = []
        while heap and heap[0][0] <= now:
            deadline, lease_id = heapq.heappop(heap)
            if lease_id in leases and self._deadlines.get(lease_id) == deadline:
                ran_out.append((deadline, lease_id))  # else revoked, expired or renewed since
        due: list[tuple[int, int]] = []
        for deadline, lease_id in ran_out:
            sent = self._sent.get(lease_id)
            if sent is None or now - sent >= RESEND_AFTER_S:
                self._sent[lease_id] = now
                due.append((lease_id, leases[lease_id].keepalive_offset))
            heapq.heappush(heap, (deadline, lease_id))  # kept until its expiry applies
        return due

    def checkpoints(self, term: int | None, table: LeaseTable) -> dict[int, int]:
        """The remaining TTLs to checkpoint now (lease id -> milliseconds; empty until the
        interval elapsed): those below ``CHECKPOINT_BELOW`` of their TTL that moved by an
        interval since their last checkpoint. The caller appends ``checkpoint_record``."""
        if not self._follow_term(term, table):
            return {}
        now = self._now()
        if now < self._next_checkpoint:
            return {}
        self._next_checkpoint = now + self.checkpoint_interval_s
        interval_ms = int(self.checkpoint_interval_s * 1000)
        out: dict[int, int] = {}
        for lease_id, deadline in self._deadlines.items():
            lease = table.leases.get(lease_id)
            remaining = int((deadline - now) * 1000)
            if lease is None or remaining <= 0 or remaining >= lease.ttl_ms * CHECKPOINT_BELOW:
                continue
            last = self._checkpointed.get(lease_id, lease.remaining_ms)
            if not last or last - remaining >= interval_ms:
                out[lease_id] = self._checkpointed[lease_id] = remaining
        return out

    def countdown(self, term: int, table: LeaseTable, request: CountdownRequest
                  ) -> tuple[CountdownAnswer, bool]:
        """Renew (or only read) a lease's countdown as the leader of ``term``, which the
        caller confirmed after the request arrived, with ``table`` applied to the read index.
        Returns the answer and whether a checkpoint clearing the lease's remaining TTL must
        commit before it is given."""
        if not self._follow_term(term, table):
            return CountdownAnswer(CountdownStatus.NOT_LEADER, message="leadership moved"), False
        lease = table.leases.get(request.lease_id)
        if lease is None:
            return CountdownAnswer(CountdownStatus.NOT_FOUND, message=(
                f"lease {request.lease_id} not found (expired or revoked)")), False
        refused = owner_refusal(lease, request.by)
        if refused:
            return CountdownAnswer(CountdownStatus.NOT_OWNER, message=refused), False
        now = self._now()
        deadline = self._deadlines[lease.lease_id]
        if deadline <= now:  # its expiry is decided (etcd waits for it: the answer is the same)
            return CountdownAnswer(CountdownStatus.NOT_FOUND, message=(
                f"lease {request.lease_id} expired")), False
        clear = False
        if request.renew:
            clear = lease.remaining_ms > 0 or lease.lease_id in self._checkpointed
            self._checkpointed.pop(lease.lease_id, None)
            deadline = now + lease.ttl_ms / 1000
            self._set(lease.lease_id, deadline)
        return CountdownAnswer(CountdownStatus.OK, ttl_ms=lease.ttl_ms,
                               remaining_ms=int((deadline - now) * 1000)), clear

    def remaining_ms(self, lease_id: int) -> int | None:
        """Milliseconds left on this leader's countdown (None: not leading or unknown)."""
        deadline = self._deadlines.get(lease_id)
        if not self._leading or deadline is None:
            return None
        return max(0, int((deadline - self._now()) * 1000))


def expire_records(due: list[tuple[int, int]], now_ms: int) -> tuple[Record, ...]:
    """The ``expire`` records of ``LeaseClock.tick``'s answer, each naming the lease's
    ``keepalive_offset`` its countdown ran from (the state machine voids it if a keep-alive
    the log records, or a new grant of the id, landed first)."""
    return tuple(Record(None, None, now_ms,
                        ((LEASE_OP_HEADER, encode_op("expire", lease_id, after=after)),))
                 for lease_id, after in due)


def checkpoint_record(remaining: dict[int, int], now_ms: int) -> Record:
    """One ``checkpoint`` record of ``LeaseClock.checkpoints``' answer, or of a renewal's
    clearing entry (``{lease: 0}``)."""
    return Record(None, None, now_ms, ((LEASE_OP_HEADER, encode_checkpoint(remaining)),))
