"""Fault injection for the simulator: the faults of ``kraft-spark sim --faults``.

Faults arrive at random (exponential gaps) until the fault window closes; ``heal`` then restarts
every crashed node, resumes paused ones and repairs the network, and liveness is judged from
there. At most a minority of voters is down (crashed or paused) at any moment, so the quorum
keeps committing through the faults and the interesting interleavings happen under load.
"""

from __future__ import annotations

import random

from kraft_spark.raft.state import Role
from kraft_spark.sim.cluster import Cluster, SimNode
from kraft_spark.sim.disk_faults import RESTART_AFTER_US

FAULT_KINDS = (
    "crash",
    "restart",
    "partition",
    "drop",
    "duplicate",
    "reorder",
    "delay",
    "pause",
    "one-way",
    "disk-full",
    "io-error",
    "bit-rot",
    "torn-write",
    "disk-loss",
)


def parse_faults(text: str) -> frozenset[str]:
    if text in ("all", ""):
        return frozenset(FAULT_KINDS) if text == "all" else frozenset()
    if text == "none":
        return frozenset()
    kinds = frozenset(k.strip() for k in text.split(",") if k.strip())
    unknown = sorted(kinds - set(FAULT_KINDS))
    if unknown:
        raise ValueError(
            f"unknown fault(s) {', '.join(unknown)}; "
            f"choose from all, none, {', '.join(FAULT_KINDS)}"
        )
    return kinds


class FaultInjector:
    def __init__(
        self, cluster: Cluster, kinds: frozenset[str], until_us: int, mean_gap_us: int = 700_000
    ) -> None:
        self.cluster = cluster
        self.kinds = sorted(kinds)
        self.until_us = until_us
        self.mean_gap_us = mean_gap_us
        self.rng = random.Random(cluster.rng.random())
        self.down: set[int] = set()  # crashed or paused nodes
        self.healed = False
        if self.kinds:
            self._schedule_next()
        if "crash" in kinds or "partition" in kinds:
            cluster.on_new_leader = self._maybe_strike_new_leader

    def _schedule_next(self) -> None:
        gap = int(self.rng.expovariate(1.0 / self.mean_gap_us))
        when = self.cluster.now + max(gap, 1000)
        if when < self.until_us:
            self.cluster.at(when, self._fire)

    def _note(self, text: str) -> None:
        self.cluster.trace.add(self.cluster.now, None, None, f"FAULT {text}")

    def _fire(self) -> None:
        if self.healed:
            return
        kind = self.rng.choice(self.kinds)
        getattr(self, "_" + kind.replace("-", "_"))()
        self._schedule_next()

    # ------------------------------------------------------------------ choosing victims

    def _may_take_down(self, node: SimNode) -> bool:
        if not node.is_voter:
            return True
        voters_down = sum(1 for i in self.down if self.cluster.nodes[i].is_voter)
        return voters_down < (len(self.cluster.voter_ids) - 1) // 2

    def _pick_up_node(self, voters_only: bool = False) -> SimNode | None:
        nodes = [
            n
            for n in self.cluster.nodes.values()
            if n.alive
            and not n.paused
            and n.node_id not in self.down
            and (n.is_voter or not voters_only)
            and self._may_take_down(n)
        ]
        return self.rng.choice(nodes) if nodes else None

    def _later(self, lo_ms: int, hi_ms: int) -> int:
        return self.cluster.now + self.rng.randint(lo_ms, hi_ms) * 1000

    # ------------------------------------------------------------------ node faults

    def _crash(self, torn: bool | None = None, wipe: bool = False) -> None:
        node = self._pick_up_node(voters_only=wipe)
        if node is None:
            return
        if torn is None:
            torn = "torn-write" in self.kinds and self.rng.random() < 0.5
        self._note(
            f"crash n{node.node_id}{' torn-write' if torn else ''}{' disk-loss' if wipe else ''}"
        )
        self.cluster.crash(node, torn=torn, wipe=wipe)
        self.down.add(node.node_id)
        self.cluster.at(self._later(200, 3000), self._restart_node, node.node_id, wipe)

    def _maybe_strike_new_leader(self, node: SimNode) -> None:
        """The most dangerous moment is just after an election, while the new leader's first
        record is not yet on a majority: crash or isolate new leaders there now and then."""
        if self.healed or self.cluster.now >= self.until_us or self.rng.random() >= 0.5:
            return
        delay = self.rng.randint(0, 8) * 1000
        strikes = [k for k in ("crash", "partition") if k in self.kinds]
        if self.rng.choice(strikes) == "crash":
            self.cluster.at(
                self.cluster.now + delay, self._crash_leader, node.node_id, node.incarnation
            )
        else:
            self.cluster.at(self.cluster.now + delay, self._isolate, node.node_id)

    def _isolate(self, node_id: int) -> None:
        others = sorted(i for i in self.cluster.nodes if i != node_id)
        self._note(f"isolate new leader n{node_id}")
        self.cluster.network.partition([node_id], others)
        self.cluster.at(self._later(300, 3000), self._heal_partition)

    def _crash_leader(self, node_id: int, incarnation: int) -> None:
        node = self.cluster.nodes[node_id]
        if self.healed or not node.alive or node.paused or node.incarnation != incarnation:
            return
        if node_id in self.down or not self._may_take_down(node):
            return
        torn = "torn-write" in self.kinds and self.rng.random() < 0.5
        self._note(f"crash new leader n{node_id}{' torn-write' if torn else ''}")
        self.cluster.crash(node, torn=torn)
        self.down.add(node_id)
        self.cluster.at(self._later(100, 2000), self._restart_node, node_id, False)

    def _torn_write(self) -> None:
        self._crash(torn=True)

    def _disk_loss(self) -> None:
        if any(n.wiped or n.log.rotten for n in self.cluster.nodes.values()) \
                or self.cluster.excused():
            return  # one lost disk at a time: two would lose committed data (by design)
        self._crash(torn=False, wipe=True)

    def _restart_node(self, node_id: int, disk_lost: bool) -> None:
        node = self.cluster.nodes[node_id]
        if node.alive:
            return
        self.down.discard(node_id)
        self._note(f"restart n{node_id}")
        self.cluster.start_node(node, disk_lost=disk_lost)

    def _restart(self) -> None:
        """Graceful restart: a leader resigns with EndQuorumEpoch first. Prefer the leader."""
        leaders = [
            n
            for n in self.cluster.nodes.values()
            if n.alive
            and not n.paused
            and n.core is not None
            and n.core.role.value == "Leader"
            and self._may_take_down(n)
        ]
        node = leaders[0] if leaders and self.rng.random() < 0.7 else self._pick_up_node()
        if node is None:
            return
        self._note(f"graceful restart n{node.node_id}")
        self.cluster.graceful_stop(node)
        self.down.add(node.node_id)
        self.cluster.at(self._later(50, 1000), self._restart_node, node.node_id, False)

    def _leader_or_any(self) -> SimNode | None:
        """Half the time the current leader when it may go down (gray failures hurt most
        there: a paused or cut-off leader still believes it leads), else any node."""
        leaders = [n for n in self.cluster.nodes.values()
                   if n.alive and not n.paused and n.node_id not in self.down
                   and n.core is not None and n.core.role is Role.LEADER
                   and self._may_take_down(n)]
        if leaders and self.rng.random() < 0.5:
            return max(leaders, key=lambda n: n.core.epoch if n.core is not None else -1)
        return self._pick_up_node()

    def _pause(self) -> None:
        node = self._leader_or_any()
        if node is None:
            return
        self._note(f"pause n{node.node_id}")
        node.paused = True
        self.down.add(node.node_id)
        self.cluster.at(self._later(300, 4000), self._resume, node.node_id, node.incarnation)

    def _resume(self, node_id: int, incarnation: int) -> None:
        node = self.cluster.nodes[node_id]
        if not node.alive or not node.paused or node.incarnation != incarnation:
            return
        self.down.discard(node_id)
        self._note(f"resume n{node_id}")
        self.cluster.resume(node)

    # ------------------------------------------------------------------ network faults

    def _partition(self) -> None:
        ids = sorted(self.cluster.nodes)
        self.rng.shuffle(ids)
        cut = self.rng.randint(1, len(ids) - 1)
        a, b = sorted(ids[:cut]), sorted(ids[cut:])
        self._note(f"partition {a} | {b}")
        self.cluster.network.partition(a, b)
        self.cluster.at(self._later(500, 4000), self._heal_partition)

    def _one_way(self) -> None:
        """A one-sided cut: everything one node sends (or receives) is lost while the other
        direction works; it counts as down, like a pause, for the minority rule."""
        node = self._leader_or_any()
        if node is None:
            return
        me = node.node_id
        others = sorted(i for i in self.cluster.nodes if i != me)
        outbound = self.rng.random() < 0.5
        pairs = {(me, o) for o in others} if outbound else {(o, me) for o in others}
        self._note(f"one-way cut: {'sends from' if outbound else 'sends to'} n{me} are lost")
        self.cluster.network.one_way |= pairs
        self.down.add(me)
        self.cluster.at(self._later(300, 4000), self._heal_one_way, me, frozenset(pairs))

    def _heal_one_way(self, node_id: int, pairs: frozenset[tuple[int, int]]) -> None:
        if self.healed:
            return
        self._note(f"one-way cut of n{node_id} healed")
        self.cluster.network.one_way -= pairs
        self.down.discard(node_id)

    def _disk_full(self) -> None:
        self._disk_fault("ENOSPC")

    def _io_error(self) -> None:
        self._disk_fault("EIO")

    def _disk_fault(self, name: str) -> None:
        """Appends and flushes of one node fail with ``name`` for a while (disk_faults)."""
        node = self._leader_or_any()
        if node is None:
            return
        self._note(f"disk fault {name} on n{node.node_id}")
        node.log.failing = name
        self.down.add(node.node_id)
        self.cluster.at(self._later(300, 3000), self._clear_disk_fault, node.node_id)

    def _bit_rot(self) -> None:
        """One durable batch of a voter's log goes bad (disk_faults). The node counts as down
        until the faults heal: its copy of that batch is not one the quorum can count on."""
        if self.cluster.catching_up_voters():
            # Another voter is catching up after losing data: a second one would leave too few
            # voters allowed to vote (the disk-loss rule) for any leader to be elected.
            return
        node = self._leader_or_any()
        if node is None or not node.is_voter:
            return
        the_log = node.log
        candidates = [b.base_offset for b in the_log.durable_batches()
                      if b.base_offset >= the_log.start_offset()]
        if not candidates:
            return
        base = self.rng.choice(candidates)
        self._note(f"bit rot in n{node.node_id}'s batch at offset {base}")
        the_log.rotten.add(base)
        self.down.add(node.node_id)

    def _clear_disk_fault(self, node_id: int) -> None:
        if self.healed:
            return
        self._note(f"disk fault on n{node_id} cleared")
        self.cluster.nodes[node_id].log.failing = None
        # Down until the supervisor's restart has had its chance.
        self.cluster.at(self.cluster.now + RESTART_AFTER_US + 1000, self.down.discard, node_id)

    def _heal_partition(self) -> None:
        self._note("partition healed")
        self.cluster.network.blocked.clear()

    def _network_fault(self, name: str, value: float | int) -> None:
        self._note(f"{name}={value}")
        setattr(self.cluster.network.faults, name, value)
        self.cluster.at(self._later(500, 3000), self._clear_network_fault, name)

    def _clear_network_fault(self, name: str) -> None:
        setattr(
            self.cluster.network.faults, name, type(getattr(self.cluster.network.faults, name))()
        )

    def _drop(self) -> None:
        self._network_fault("drop_probability", round(self.rng.uniform(0.05, 0.4), 3))

    def _duplicate(self) -> None:
        self._network_fault("duplicate_probability", round(self.rng.uniform(0.05, 0.4), 3))

    def _reorder(self) -> None:
        self._network_fault("reorder_jitter_us", self.rng.randint(1000, 30_000))

    def _delay(self) -> None:
        self.cluster.network.faults.delay_max_us = self.rng.randint(100_000, 1_500_000)
        self._network_fault("delay_probability", round(self.rng.uniform(0.05, 0.3), 3))

    # ------------------------------------------------------------------ the end of the faults

    def heal(self) -> None:
        self.healed = True
        self._note("heal: restart crashed nodes, resume paused ones, repair the network")
        self.cluster.network.heal()
        for node in self.cluster.nodes.values():
            node.log.failing = None
        for node_id in sorted(self.down):
            node = self.cluster.nodes[node_id]
            if not node.alive:
                self.cluster.start_node(node, disk_lost=node.wiped)
            elif node.paused:
                self.cluster.resume(node)
        self.down.clear()
