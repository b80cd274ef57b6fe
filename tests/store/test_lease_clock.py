"""The leader's lease countdowns (kraft_spark.store.lease_clock.LeaseClock), on an injected
monotonic clock, over a real LeaseTable fed the records the clock asks for: only a leader
expires, a keep-alive restarts the countdown without a record, a checkpoint is taken only of a
lease well below its TTL and cleared by the next keep-alive, a new leader counts from the
checkpoint (never from scratch when one is set), an old keep-alive record still applies."""

from __future__ import annotations

from kraft_spark.store.lease_clock import (
    CHECKPOINT_INTERVAL_S,
    RESEND_AFTER_S,
    CountdownRequest,
    CountdownStatus,
    LeaseClock,
)
from kraft_spark.store.leases import LeaseTable, decode_op, encode_checkpoint, encode_op


class Log:
    """A lease table and the offsets of the records applied to it."""

    def __init__(self) -> None:
        self.table = LeaseTable()
        self.offset = 0

    def apply(self, raw: bytes) -> str:
        self.offset += 1
        return self.table.apply(decode_op(raw), self.offset)[0]


def renew(clock: LeaseClock, term: int, log: Log, lease_id: int = 7, **fields: str
          ) -> tuple[CountdownStatus, int, bool]:
    answer, clear = clock.countdown(term, log.table, CountdownRequest(lease_id, True,
                                                                      fields.get("by")))
    return answer.status, answer.ttl_ms, clear


def test_keepalives_restart_the_countdown_without_a_record() -> None:
    now = [100.0]
    clock = LeaseClock(lambda: now[0])
    log = Log()
    log.apply(encode_op("grant", 7, ttl_ms=2000, owner="alice"))
    assert clock.tick(None, log.table) == []  # a follower never expires
    assert clock.tick(1, log.table) == []  # becomes leader: the countdown starts now
    for _ in range(5):  # kept alive every 0.6 s (under a third of the TTL): no record
        now[0] += 0.6
        assert renew(clock, 1, log) == (CountdownStatus.OK, 2000, False)
        assert clock.tick(1, log.table) == [] and clock.checkpoints(1, log.table) == {}
    assert log.offset == 1 and clock.remaining_ms(7) == 2000
    assert renew(clock, 1, log, by="bob")[0] is CountdownStatus.NOT_OWNER
    assert renew(clock, 1, log, 8)[0] is CountdownStatus.NOT_FOUND
    now[0] += 2.0
    assert clock.tick(1, log.table) == [(7, 1)]  # names the lease's keepalive_offset
    assert renew(clock, 1, log)[0] is CountdownStatus.NOT_FOUND  # its expiry is decided
    assert clock.tick(1, log.table) == []  # sent: not again at once
    now[0] += RESEND_AFTER_S
    assert clock.tick(1, log.table) == [(7, 1)]  # not applied (leadership moved?): again
    assert log.apply(encode_op("expire", 7, after=1)) == ""
    assert 7 not in log.table.leases and clock.tick(1, log.table) == []
    assert clock.remaining_ms(7) is None


def test_a_checkpoint_is_cleared_by_the_next_keepalive_and_counted_by_a_new_leader() -> None:
    now = [0.0]
    old, new = LeaseClock(lambda: now[0]), LeaseClock(lambda: now[0])
    log = Log()
    log.apply(encode_op("grant", 7, ttl_ms=6000))
    assert old.tick(1, log.table) == []
    now[0] += 2.0  # 4 s left: above half the TTL, no checkpoint
    assert old.checkpoints(1, log.table) == {}
    now[0] += 1.5  # 2.5 s left: checkpointed
    assert old.checkpoints(1, log.table) == {7: 2500}
    log.apply(encode_checkpoint({7: 2500}))
    assert log.table.leases[7].remaining_ms == 2500 and log.table.leases[7].keepalive_offset == 1
    assert old.checkpoints(1, log.table) == {}  # not before the next interval
    now[0] += CHECKPOINT_INTERVAL_S / 2
    assert old.checkpoints(1, log.table) == {}  # not moved by an interval since
    now[0] += CHECKPOINT_INTERVAL_S
    assert old.checkpoints(1, log.table) == {7: 1000}  # lower again: a leader change counts less
    # A keep-alive now must first clear it (the new leader would count 1 s, not 6).
    assert renew(old, 1, log) == (CountdownStatus.OK, 6000, True)
    assert log.apply(encode_checkpoint({7: 0})) == ""
    lease = log.table.leases[7]
    assert lease.remaining_ms == 0 and lease.keepalive_offset == log.offset
    assert renew(old, 1, log) == (CountdownStatus.OK, 6000, False)  # cleared: no record
    # A new leader: the full TTL, since the clear landed.
    assert new.tick(2, log.table) == [] and new.remaining_ms(7) == 6000
    # The old leader's expiry decided before the clear is void.
    assert log.apply(encode_op("expire", 7, after=1)) != "" and 7 in log.table.leases


def test_a_new_leader_counts_from_the_checkpoint_never_longer() -> None:
    now = [0.0]
    old, new = LeaseClock(lambda: now[0]), LeaseClock(lambda: now[0])
    log = Log()
    log.apply(encode_op("grant", 7, ttl_ms=6000))
    old.tick(1, log.table)
    now[0] += 4.0
    log.apply(encode_checkpoint(old.checkpoints(1, log.table)))  # 2 s left
    now[0] += 0.5  # the old leader is cut off; a new one is elected
    assert old.tick(None, log.table) == []
    assert new.tick(2, log.table) == [] and new.remaining_ms(7) == 2000
    now[0] += 2.0
    assert new.tick(2, log.table) == [(7, 1)]  # the holder went silent: it expires
    # The old leader, leading again in a later term, starts over from the checkpoint too.
    assert old.tick(3, log.table) == [] and old.remaining_ms(7) == 2000
    assert old.countdown(2, log.table, CountdownRequest(7, True))[0].status \
        is CountdownStatus.NOT_LEADER  # confirmed for an older term than it counts in


def test_a_checkpoint_proposed_in_a_term_is_cleared_by_a_renewal_confirmed_in_it() -> None:
    """The leader proposed a checkpoint (not applied yet), saw itself deposed, and then a
    keep-alive confirmed earlier in its term comes to be answered: it must still clear it,
    or a successor applying that checkpoint would count from its stale remaining TTL."""
    now = [0.0]
    clock = LeaseClock(lambda: now[0])
    log = Log()
    log.apply(encode_op("grant", 7, ttl_ms=6000))
    clock.tick(1, log.table)
    now[0] += 4.0
    assert clock.checkpoints(1, log.table) == {7: 2000}  # proposed, not applied
    assert clock.tick(None, log.table) == [] and not clock.leading
    assert renew(clock, 1, log) == (CountdownStatus.OK, 6000, True)


def test_an_old_keepalive_record_still_restarts_the_countdown() -> None:
    now = [0.0]
    clock = LeaseClock(lambda: now[0])
    log = Log()
    log.apply(encode_op("grant", 7, ttl_ms=2000))
    clock.tick(1, log.table)
    now[0] += 1.5
    log.apply(encode_checkpoint({7: 500}))
    log.apply(encode_op("keepalive", 7))  # from a log written before keep-alives left it
    assert log.table.leases[7].keepalive_offset == 3 and log.table.leases[7].remaining_ms == 0
    assert clock.tick(1, log.table) == [] and clock.remaining_ms(7) == 2000
    assert log.apply(encode_op("expire", 7, after=1)) != ""  # decided before it: void


def test_snapshots_keep_the_remaining_ttl_and_read_older_entries() -> None:
    log = Log()
    log.apply(encode_op("grant", 7, ttl_ms=2000))
    log.apply(encode_op("grant", 8, ttl_ms=3000, owner="alice"))
    log.apply(encode_checkpoint({7: 900, 9: 100}))  # 9 is gone: skipped
    exported = log.table.export()
    assert exported["leases"] == [[7, 2000, 1, 1, "", 900], [8, 3000, 2, 2, "alice"]]
    again = LeaseTable()
    again.load(exported, {})
    assert again.leases[7].remaining_ms == 900 and again.leases[8].owner == "alice"
    again.load({"leases": [[7, 2000, 1, 1]]}, {})  # written before owners
    assert again.leases[7].remaining_ms == 0 and again.leases[7].owner == ""
