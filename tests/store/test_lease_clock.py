"""The leader's lease countdowns (kraft_spark.store.lease_expiry.LeaseClock), on an injected
monotonic clock: only a leader expires, a keep-alive restarts the countdown, a new leader
restarts every countdown, an expiry not applied is sent again later."""

from __future__ import annotations

from kraft_spark.store.lease_expiry import RESEND_AFTER_S, LeaseClock
from kraft_spark.store.leases import Lease


def test_countdowns() -> None:
    now = [100.0]
    clock = LeaseClock(lambda: now[0])
    leases = {7: Lease(7, 2000, 10, 10)}
    assert clock.tick(False, leases) == []  # a follower never expires
    assert clock.tick(True, leases) == []  # becomes leader: the countdown starts now
    now[0] += 1.9
    assert clock.tick(True, leases) == []
    leases[7].keepalive_offset = 15  # a keep-alive applied: another full TTL from now
    assert clock.tick(True, leases) == []
    now[0] += 1.9
    assert clock.tick(True, leases) == []
    now[0] += 0.2
    assert clock.tick(True, leases) == [(7, 15)]  # names the keep-alive it counted from
    assert clock.tick(True, leases) == []  # sent: not again at once
    now[0] += RESEND_AFTER_S
    assert clock.tick(True, leases) == [(7, 15)]  # not applied (leadership moved?): again
    # Leadership lost and regained: the countdown starts over (etcd's rule).
    assert clock.tick(False, leases) == []
    assert clock.tick(True, leases) == []
    now[0] += 1.5
    assert clock.tick(True, leases) == []
    assert clock.remaining_ms(7) == 500
    del leases[7]  # revoked or expired in the log: forgotten
    assert clock.tick(True, leases) == [] and clock.remaining_ms(7) is None
