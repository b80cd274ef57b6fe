"""Liveness under partial faults: while a majority of the voters is up and mutually connected,
commits go on, even though a minority stays down or cut off.

The end-of-run check (``runner.LIVENESS_BOUND_MS``) only asks for a commit once every fault
healed, so a core that can commit only with *every* voter (a leader that forgets to count one
follower's progress toward the high watermark) passes it: its availability is lost at the
first minority failure and comes back at the heal. This monitor judges the fault window itself.

**A healthy span.** At each sample (every ``SAMPLE_US`` of virtual time, read-only: it draws no
random number and schedules no event, so no trajectory changes), the span is healthy when there
is a set Q of nodes such that:

* Q holds a majority of *every* voter set in force somewhere: the committed set and each live
  node's (KIP-853: a change appended but not committed makes the leader's set differ from its
  followers'; a candidate counts votes with its own set, so Q must be a majority of each);
* every member of Q is *up*: running, not paused, its disk neither failing (``disk-full``,
  ``io-error``) nor rotten nor damaged, not catching up after a disk loss, and a voter under
  its own directory id (KIP-853: a lost disk that came back under a new id does not vote);
* Q is *mutually connected*: every link between two members works in both directions (no
  partition, no one-way cut);
* the network loses and stalls nothing: no ``drop`` and no ``delay`` fault is in force.

**Tolerated faults** (the span stays healthy): anything that happens to the minority outside Q
(crashed, paused, partitioned, one-way cut, disk faults, bit rot, a lost disk), ``duplicate``
and ``reorder`` (every message still arrives, within 30 ms of jitter). **Not tolerated** (the
span ends, and the next one starts afresh): ``drop`` (up to 40 % loss: a lost Fetch is re-sent
only after the request timeout, and several in a row legitimately stall commits for as long as
the loss lasts) and ``delay`` (spikes of up to 1.5 s, a large share of the fetch timeout: a
delayed Fetch answer can legitimately start an election); and any fault on a member of Q.

**What must happen.** While the span is healthy and work is pending, the committed end (the
largest high watermark a leader announced) must grow. Work is pending when the live leader is
in Q and holds records beyond the committed end (a client's append or its own epoch's first
record), or when no member of Q leads (an election is due, and its winner's first record must
commit). Each growth restarts the clock.

**The bounds** (Kafka's defaults in the simulator: fetch timeout FT = 2000 ms, its jitter
J <= election timeout / 2 = 500 ms, election timeout ET = 1000 ms (a round lasts less than
2 ET), failed-election backoff EB <= 1000 ms, request timeout RT = 2000 ms, Fetch long-poll
W = 500 ms, check-quorum CQ = 1.5 FT = 3000 ms):

* ``led`` -- one leader in Q throughout the wait: a Q follower's Fetch lost just before the span
  began (sent into a cut) is sent again after RT at the latest; the leader answers it at once
  (it holds records to send) or within W; the follower's catch-up of what it missed while it
  was out (one batch per Fetch here, a few ms a round) fits in the rest of W.
  ``RT + W`` = 2500 ms.
* ``election`` -- no leader in Q at some sample of the wait (or the leader changed): the old
  leader, outside Q but still heard by part of it, resigns after CQ at the latest (check-quorum);
  the followers of Q notice after FT + J; up to two failed rounds (pre-vote then vote) cost
  2 ET + EB each; the winner then commits its first record as in ``led``.
  ``CQ + FT + J + 2 (2 ET + EB) + (RT + W)`` = 3000 + 2500 + 6000 + 2500 = 14000 ms.

Measured (the longest waits of healthy spans, ``LivenessStats``): ``led`` 1.46 s and
``election`` 3.8 s on seeds 0:200 of ``all`` (3 voters); 1.42 s and 5.1 s with 5 voters and an
observer; 1.74 s and 9.3 s on 9300:9500 of the membership faults. A lost follower count stalls
for as long as the other follower is out (a pause or cut of up to 4 s), so the ``led`` bound is
kept under the longest single fault: ``uncounted-follower`` is caught within the first few
dozen seeds of a range.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.voter_set import NIL_DIRECTORY
from kraft_spark.sim.invariants import InvariantViolation

if TYPE_CHECKING:
    from kraft_spark.sim.cluster import Cluster
    from kraft_spark.sim.node import SimNode

SAMPLE_US = 20_000
# Every failed election round of the budget (pre-vote or vote), beyond the first that wins.
FAILED_ROUNDS = 2


def led_bound_ms(config: QuorumConfig) -> int:
    """A leader in Q commits pending records within this (module docstring)."""
    return config.request_timeout_ms + config.fetch_max_wait_ms


def election_bound_ms(config: QuorumConfig) -> int:
    """Q elects a leader and it commits within this (module docstring)."""
    notice = config.check_quorum_timeout_ms + config.fetch_timeout_ms + config.max_fetch_jitter_ms
    rounds = FAILED_ROUNDS * (2 * config.election_timeout_ms + config.election_backoff_max_ms)
    return notice + rounds + led_bound_ms(config)


@dataclass(slots=True)
class LivenessStats:
    """The longest wait for a commit seen in healthy spans (ms), per kind: how close a clean
    run comes to the bounds."""

    longest_led_ms: float = 0.0
    longest_election_ms: float = 0.0
    healthy_samples: int = 0


class PartialLiveness:
    """Pass ``sample`` as ``Cluster.run_until``'s ``sample``, every ``SAMPLE_US``: it raises
    ``InvariantViolation("liveness-partial", ...)``."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.led_bound_us = led_bound_ms(cluster.config) * 1000
        self.election_bound_us = election_bound_ms(cluster.config) * 1000
        self.stats = LivenessStats()
        self._wait_start: int | None = None  # when the current wait for a commit began
        self._wait_committed = 0  # the committed end then
        self._wait_leader: int | None = None  # the leader in Q then (None: none)
        self._election = False  # an election belongs to the current wait

    def sample(self) -> None:
        cluster = self.cluster
        now = cluster.now
        committed = cluster.checker.committed_end
        found = self.healthy_quorum()
        if found is None:
            self._wait_start = None
            return
        quorum, leader = found
        self.stats.healthy_samples += 1
        pending = leader is None or leader.log.end_offset() > committed
        if not pending:
            self._wait_start = None
            return
        leader_id = None if leader is None else leader.node_id
        if self._wait_start is None or committed > self._wait_committed:
            self._wait_start, self._wait_committed = now, committed
            self._wait_leader, self._election = leader_id, leader is None
        elif leader_id != self._wait_leader:
            self._wait_leader, self._election = leader_id, True
        waited = now - self._wait_start
        if self._election:
            self.stats.longest_election_ms = max(self.stats.longest_election_ms, waited / 1000)
        else:
            self.stats.longest_led_ms = max(self.stats.longest_led_ms, waited / 1000)
        bound = self.election_bound_us if self._election else self.led_bound_us
        if waited > bound:
            kind = "an election" if self._election else f"leader n{leader_id}"
            raise InvariantViolation(
                "liveness-partial",
                f"voters {sorted(quorum)} (a majority of every voter set in force) were up and "
                f"connected, with {kind}, for {waited // 1000} ms without a commit (bound "
                f"{bound // 1000} ms; committed end {committed}; "
                f"leader's log end {leader.log.end_offset() if leader else '-'})",
            )

    # ------------------------------------------------------------------ the healthy span

    def healthy_quorum(self) -> tuple[frozenset[int], SimNode | None] | None:
        """(Q, the live leader if it is in Q) when the span is healthy, else None."""
        cluster = self.cluster
        faults = cluster.network.faults
        if faults.drop_probability or faults.delay_probability:
            return None
        nodes = cluster.nodes
        sets = {cluster.voter_ids}
        sets.update(n.core.voters for n in nodes.values() if n.alive and n.core is not None)
        members = sorted({i for s in sets for i in s})
        up = [i for i in members if _up(nodes[i])]
        leader = cluster.current_leader()
        leader_id = leader.node_id if leader is not None else None
        if _majority_of_each(up, sets) and self._connected(up):  # the common case
            return frozenset(up), (leader if leader_id in up else None)
        # A quorum holding the leader wins over one without (it should commit; the others
        # follow it and elect nobody), whatever their sizes.
        best: frozenset[int] | None = None
        for size in range(len(up) - 1, 0, -1):
            for group in itertools.combinations(up, size):
                if not _majority_of_each(group, sets) or not self._connected(group):
                    continue
                if leader_id in group:
                    assert leader is not None
                    return frozenset(group), leader
                best = best or frozenset(group)
        return None if best is None else (best, None)

    def _connected(self, group: Iterable[int]) -> bool:
        network = self.cluster.network
        for a, b in itertools.combinations(group, 2):
            if (not network.can_talk(a, b) or (a, b) in network.one_way
                    or (b, a) in network.one_way):
                return False
        return True


def _majority_of_each(group: Iterable[int], sets: set[tuple[int, ...]]) -> bool:
    chosen = set(group)
    return all(len(chosen.intersection(s)) >= len(s) // 2 + 1 for s in sets)


def _up(node: SimNode) -> bool:
    core = node.core
    if not node.alive or node.paused or core is None or node.wiped:
        return False
    the_log = node.log
    if the_log.failing is not None or the_log.rotten or node.damaged_at is not None:
        return False
    if core.pending_catch_up or not core.is_voter:
        return False
    # KIP-853: voted in under another directory id (its disk was lost): not that voter.
    voter = core.voter_set.get(node.node_id)
    return voter is None or voter.directory_id in (NIL_DIRECTORY, node.directory_id)
