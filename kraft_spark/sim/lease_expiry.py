"""The leaders' lease expiry in the simulator: every node's real ``LeaseClock``
(``kraft_spark.store.lease_clock``) on a clock of its own, ticked as the real ``LeaseExpirer``
ticks it, the leader appending ``expire`` and ``checkpoint`` records to its own core; the same
clock answers the holders' keep-alives (``sim.lease_desk``).

Clock skew: each node's monotonic clock runs at its own rate, up to ``CLOCK_RATE_SPREAD`` off
real time (a fast leader clock counts a TTL down early in real time; lease holders count their
validity with a margin wider than that, as etcd's clients do). A wall-clock jump changes
nothing here: the countdowns never read the wall clock.

The lease schedule (``schedule_leader_cuts``): now and then the leader (or another voter) is
cut off from the other nodes (not from clients) for longer than a lease's TTL, so its
countdowns run out while the holders keep their leases alive through the others: the moment
a node that acts on its own stale view revokes a live lease.

Injected bugs (``LEASE_BUGS``) that the lease checker (``kraft_spark.sim.lease_check``) must
catch. Both act by *revoking* (an unconditional record, not the ``expire`` that names the
keep-alive it counted from), so the replicas still agree and only the checker can tell:

* ``follower-lease-expiry``: every node counts leases down by its own clock as if it led, and a
  follower sends its revokes to the leader once it knows one;
* ``deposed-leader-revoke``: a node that led keeps counting after it lost the leadership (cut
  off, it sees no keep-alive), and sends what it decided to the new leader once it knows it.

The desk's bug (``lease_desk.KEEPS_CHECKPOINT_BUG``) is its own. What catches it besides the
lock checker: ``lease-countdown``, checked every tick, that the leader of the newest epoch
never counts a lease down to before the end of the validity its holder was promised (the first
send of its last acknowledged keep-alive plus 90% of the TTL): a new leader counting from a
checkpoint the keep-alive should have cleared breaks it even when the holder's next keep-alive
reaches the new leader in time to save the lease.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from kraft_spark.raft.messages import ProduceRequest
from kraft_spark.raft.records import Record
from kraft_spark.raft.state import Role
from kraft_spark.sim.invariants import InvariantViolation
from kraft_spark.sim.lease_desk import KEEPS_CHECKPOINT_BUG, SimLeaseDesk
from kraft_spark.store.lease_clock import LeaseClock, checkpoint_record, expire_records
from kraft_spark.store.leases import LEASE_OP_HEADER, encode_op

if TYPE_CHECKING:
    from kraft_spark.sim.cluster import Cluster
    from kraft_spark.sim.faults import FaultInjector
    from kraft_spark.sim.node import SimNode

# The last three are not acted on here: the state machine's (sim/lease_table_bug.py), the
# Produce gate's (sim/lease_intruder.py) and the desk's (sim/lease_desk.py).
LEASE_BUGS = ("follower-lease-expiry", "deposed-leader-revoke", "expired-lease-kept-alive",
              "produce-bypasses-lease-owner", KEEPS_CHECKPOINT_BUG)
TICK_US = 100_000  # LeaseExpirer.TICK_S
CLOCK_RATE_SPREAD = 0.02


def schedule_leader_cuts(cluster: Cluster, injector: FaultInjector, rng: random.Random,
                         ttl_ms: int, until_us: int) -> None:
    """Every 4 to 12 s until ``until_us``, cut the leader (two times in three) or another
    voter off for a TTL plus 0.5 to 2.5 s."""

    def cut() -> None:
        injector.cut_voter(ttl_ms + rng.randint(500, 2500), leader=rng.random() < 2 / 3)
        later = cluster.now + rng.randint(4_000_000, 12_000_000)
        if later < until_us:
            cluster.at(later, cut)

    cluster.at(rng.randint(2_000_000, 8_000_000), cut)


class SimLeaseExpiry:
    def __init__(self, cluster: Cluster, rng: random.Random, expirer_ids: dict[int, int],
                 desk_ids: dict[int, int], bug: str | None = None) -> None:
        if bug is not None and bug not in LEASE_BUGS:
            raise ValueError(f"unknown lease bug {bug!r}; choose from {LEASE_BUGS}")
        self.cluster = cluster
        self.bug = bug
        self.expirer_ids = expirer_ids  # node id -> the client id its requests come from
        self.rates = {n: 1 + rng.uniform(-CLOCK_RATE_SPREAD, CLOCK_RATE_SPREAD)
                      for n in sorted(cluster.nodes)}
        # One clock per process: a restarted node's monotonic clock and countdowns are new.
        self._clocks: dict[tuple[int, int], LeaseClock] = {}
        self._led: dict[int, tuple[int, int]] = {}  # node -> (incarnation, epoch) it last led in
        self._undelivered: dict[int, set[int]] = {}  # deposed-leader-revoke: node -> leases
        self.expiries_sent = 0
        self.checkpoints_sent = 0
        self.bug_revokes_sent = 0
        self.desk = SimLeaseDesk(cluster, self.clock, desk_ids, bug)
        # The holders' validities (client, lease, valid until us), for lease-countdown.
        self.validities: Callable[[], list[tuple[int, int, int]]] | None = None
        cluster.at(TICK_US, self._tick)

    def clock(self, node: SimNode) -> LeaseClock:
        key = (node.node_id, node.incarnation)
        clock = self._clocks.get(key)
        if clock is None:
            rate, cluster = self.rates[node.node_id], self.cluster
            clock = self._clocks[key] = LeaseClock(now=lambda: rate * cluster.now / 1e6)
        return clock

    def _tick(self) -> None:
        cluster = self.cluster
        assert cluster.snapshots is not None, "leases need the nodes' state machines"
        for node_id, node in sorted(cluster.nodes.items()):
            core = node.core
            if not node.alive or node.paused or core is None:
                continue  # a frozen or stopped process runs no timer
            leading = core.role is Role.LEADER
            if leading:
                self._led[node_id] = (node.incarnation, core.epoch)
            led = self._led.get(node_id)
            # The epoch the clock counts in (None: it does not count): the leader's, or a
            # bug's (a follower counting as if it led, a deposed leader still counting).
            term = (core.epoch if leading or self.bug == "follower-lease-expiry"
                    else led[1] if self.bug == "deposed-leader-revoke" and led is not None
                    and led[0] == node.incarnation else None)
            table = cluster.snapshots.of(node_id).state.leases
            clock = self.clock(node)
            due = clock.tick(term, table)
            remaining = clock.checkpoints(term, table) if leading else {}
            if leading and (due or remaining):
                now_ms = cluster.now // 1000
                self._submit(node, node_id, (
                    *expire_records(due, now_ms),
                    *((checkpoint_record(remaining, now_ms),) if remaining else ())))
                self.expiries_sent += len(due)
                self.checkpoints_sent += len(remaining)
            elif self.bug in ("follower-lease-expiry", "deposed-leader-revoke"):
                self._revoke(node, [lease_id for lease_id, _ in due])
        self._check_countdowns()
        cluster.at(cluster.now + TICK_US, self._tick)

    def _check_countdowns(self) -> None:
        """``lease-countdown``: the leader of the newest epoch (its clock just ticked in that
        epoch), once it applied every record of the epochs before its own, ends no lease's
        countdown before its holder's validity ends. (Until then it may count from a
        checkpoint whose clearing it has not applied yet: harmless, since its expiry would
        name an offset that clearing moved, and void.)"""
        cluster = self.cluster
        leaders = [n for n in cluster.nodes.values() if n.alive and not n.paused
                   and n.core is not None and n.core.role is Role.LEADER]
        if self.validities is None or not leaders:
            return
        node = max(leaders, key=lambda n: n.core.epoch if n.core is not None else -1)
        newest = max(n.core.epoch for n in cluster.nodes.values() if n.core is not None)
        clock = self._clocks.get((node.node_id, node.incarnation))
        core, snapshots = node.core, cluster.snapshots
        if (clock is None or core is None or core.epoch < newest or clock.term != core.epoch
                or snapshots is None):
            return  # a deposed leader that does not know it yet is not judged
        leadership = core.leader_state
        if leadership is None or (snapshots.of(node.node_id).state.applied_offset
                                  <= leadership.epoch_start_offset):
            return
        for client, lease_id, valid_until_us in self.validities():
            deadline = clock.deadline(lease_id)
            if deadline is None or valid_until_us <= cluster.now:
                continue
            ends_us = int(deadline / self.rates[node.node_id] * 1e6)
            if ends_us < valid_until_us:
                raise InvariantViolation(
                    "lease-countdown",
                    f"leader {node.node_id} (epoch {core.epoch}) counts lease {lease_id} "
                    f"down to {ends_us} us, before client {client}'s validity ends at "
                    f"{valid_until_us} us")

    def _revoke(self, node: SimNode, due: list[int]) -> None:
        """The bugs: a non-leader revokes what its own countdowns say through the leader,
        once it knows one."""
        assert node.core is not None
        held = self._undelivered.setdefault(node.node_id, set())
        held.update(due)
        leader = node.core.leader_id
        if not held or leader < 0 or leader == node.node_id:
            return
        records = tuple(Record(None, None, self.cluster.now // 1000,
                               ((LEASE_OP_HEADER, encode_op("revoke", lease_id)),))
                        for lease_id in sorted(held))
        self._submit(node, leader, records)
        self.bug_revokes_sent += len(held)
        held.clear()

    def _submit(self, node: SimNode, dest: int, records: tuple[Record, ...]) -> None:
        """A Produce from ``node``'s expirer: to its own core at once, or over the network."""
        cluster = self.cluster
        cluster._seq += 1
        payload = ("req", cluster._seq, ProduceRequest(records, timeout_ms=5000), None)
        src = self.expirer_ids[node.node_id]
        if dest == node.node_id:
            cluster._deliver(dest, None, src, 0, payload)
            return
        for when in cluster.network.delivery_times(cluster.now, node.node_id, dest):
            cluster.at(when, cluster._deliver, dest, None, src, 0, payload)
