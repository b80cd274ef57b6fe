"""The leader's countdowns of leases (``kraft_spark.store.leases`` says why this is safe).

Every node keeps a ``LeaseClock``, but only the leader acts on it: each ``tick`` it restarts a
lease's countdown when a newer keep-alive (or the grant) has been applied, and returns the leases
whose countdown ran out, each with the offset of the keep-alive it counted from; the node appends
an ``expire`` record for each. When a node becomes leader it restarts every countdown (etcd's
rule on a leader change): a holder that kept its lease alive through the old leader gets a full
TTL under the new one. Time is the node's monotonic clock (injected), never the wall clock: a
wall-clock jump expires nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kraft_spark.store.leases import Lease

# An expiry not applied within this long (the append failed, leadership moved) is sent again.
RESEND_AFTER_S = 2.0


class LeaseClock:
    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._leading = False
        self._deadlines: dict[int, float] = {}
        self._counted_from: dict[int, int] = {}  # lease -> keep-alive offset counted from
        self._sent: dict[int, float] = {}  # lease -> when its expiry was sent

    def tick(self, leading: bool, leases: dict[int, Lease]) -> list[tuple[int, int]]:
        """The leases to expire now: (lease id, the keep-alive offset counted from)."""
        if not leading:
            self._leading = False
            return []
        now = self._now()
        if not self._leading:  # just became leader: every countdown starts again
            self._leading = True
            self._deadlines.clear()
            self._counted_from.clear()
            self._sent.clear()
        for lease_id in [i for i in self._deadlines if i not in leases]:
            del self._deadlines[lease_id]
            self._counted_from.pop(lease_id, None)
            self._sent.pop(lease_id, None)
        due: list[tuple[int, int]] = []
        for lease_id, lease in leases.items():
            if self._counted_from.get(lease_id) != lease.keepalive_offset:
                self._counted_from[lease_id] = lease.keepalive_offset
                self._deadlines[lease_id] = now + lease.ttl_ms / 1000
                self._sent.pop(lease_id, None)
            elif self._deadlines[lease_id] <= now:
                sent = self._sent.get(lease_id)
                if sent is None or now - sent >= RESEND_AFTER_S:
                    self._sent[lease_id] = now
                    due.append((lease_id, lease.keepalive_offset))
        return due

    def remaining_ms(self, lease_id: int) -> int | None:
        """Milliseconds left on this leader's countdown (None: not leading or unknown)."""
        deadline = self._deadlines.get(lease_id)
        if not self._leading or deadline is None:
            return None
        return max(0, int((deadline - self._now()) * 1000))
