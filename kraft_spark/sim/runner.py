"""Running seeds: faults for a while, then heal and demand liveness; and failover measurements."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.state import Role
from kraft_spark.sim.cluster import Cluster
from kraft_spark.sim.disklog import DiskLog
from kraft_spark.sim.faults import FaultInjector
from kraft_spark.sim.invariants import InvariantViolation
from kraft_spark.sim.lease_clients import LEASE_CLIENT_OFFSET, LeaseClients, desk_id, expirer_id
from kraft_spark.sim.lease_clients import TTL_MS as LEASE_TTL_MS
from kraft_spark.sim.lease_expiry import SimLeaseExpiry, schedule_leader_cuts
from kraft_spark.sim.lease_intruder import GATE_BUG, LeaseIntruders, ProduceGate
from kraft_spark.sim.lease_table_bug import inject as inject_lease_table_bug
from kraft_spark.sim.liveness import SAMPLE_US, PartialLiveness
from kraft_spark.sim.memlog import MemoryLog
from kraft_spark.sim.node import SimNode
from kraft_spark.sim.snapshots import SnapshotStats
from kraft_spark.sim.store_clients import StoreClients
from kraft_spark.sim.trace import Trace
from kraft_spark.sim.watch_clients import SimWatches, WatchStats
from kraft_spark.store.watch import WatchHub

# After the faults stop, a leader must be elected and a new append must commit within this.
LIVENESS_BOUND_MS = 15_000
# With store clients, the run goes on this long after liveness is shown, under no faults.
STORE_SETTLE_US = 2_000_000
LINCHECK_TIMEOUT_S = 60.0
CLIENTS = 3


def sim_config() -> QuorumConfig:
    """Kafka's default timeouts; small fetches so catch-up takes several rounds (one batch per
    Fetch, 64 bytes per FetchSnapshot: a snapshot comes in several chunks)."""
    return QuorumConfig(fetch_max_bytes=1, fetch_snapshot_max_bytes=64)


@dataclass(slots=True)
class SeedResult:
    seed: int
    events: int
    commits: int
    elections: int
    violation: InvariantViolation | None = None
    recent_trace: list[str] = field(default_factory=list)
    snapshots: SnapshotStats | None = None
    # KIP-853: voter changes committed (answered NONE) during the run.
    voter_changes: int = 0
    # The store clients' operations (sim/store_clients.py), for a linearizability checker.
    history: list[dict[str, Any]] = field(default_factory=list)
    # The lease holders' real holds and holder reads (sim/lease_clients.py), all checked.
    lease_holds: int = 0
    lease_reads: int = 0
    # How often each dangerous moment of a voter change happened (sim/coverage.py).
    coverage: dict[str, int] = field(default_factory=dict)
    # What the watch clients did (sim/watch_clients.py; None without them).
    watches: WatchStats | None = None
    # The intruders' revocations the nodes' Produce gate refused (sim/lease_intruder.py).
    intrusions_refused: int = 0


def run_seed(
    seed: int,
    *,
    voters: int,
    observers: int,
    faults: frozenset[str],
    duration_s: float,
    core_class: type[RaftCore] = RaftCore,
    echo: Callable[[str], None] | None = None,
    segmented_log: bool = False,
    snapshots: bool = True,
    shell_bug: str | None = None,
    store_clients: int = 0,
    store_bug: str | None = None,
    lease_clients: int = 0,
    lease_bug: str | None = None,
    watch_clients: int = 0,
    watch_hub: type[WatchHub] = WatchHub,
    lease_intruders: int = 0,
) -> SeedResult:
    """``store_clients``: that many clients also read and compare-and-set keys, recording the
    history ``SeedResult.history`` (own random stream: the rest of the run is as without
    them only when 0); ``store_bug``: one of ``store_clients.STORE_SHELL_BUGS``.
    ``lease_clients``: that many clients contend for a lock on leases, the leaders expire
    leases (``sim.lease_expiry``), and the lock checker runs at the end; ``lease_bug``: one
    of ``lease_expiry.LEASE_BUGS``. ``watch_clients``: that many clients watch keys and
    prefixes on every node's hub (made of ``watch_hub``: ``bugs.WATCH_BUGS`` for a broken one),
    each item checked against the committed history (``sim.watch_check``).
    ``lease_intruders``: that many principals try to revoke leases they do not hold over
    Produce, which the nodes' gate must refuse (``sim.lease_intruder``; its bug, a
    ``lease_bug``, lets them through)."""
    trace = Trace(keep=40, echo=echo)
    cluster = Cluster(
        seed,
        voters=voters,
        observers=observers,
        clients=CLIENTS,
        # Lease runs fetch in pieces of 64 KiB, so a voter catches up in a round trip or two and
        # the lock holders meet the faults, not the one-byte catch-up of the other runs.
        config=QuorumConfig(fetch_max_bytes=65536) if lease_clients else sim_config(),
        core_class=core_class,
        trace=trace,
        log_factory=DiskLog.fresh if segmented_log else MemoryLog,
        snapshots=snapshots,
        shell_bug=shell_bug,
        directories="reconfig" in faults,
    )
    fault_end = int(duration_s * 1_000_000)
    # Lease runs draw their fault kinds per seed (swarm testing): a lock holder needs calm
    # stretches for a bug to meet a live lease.
    injector = FaultInjector(cluster, faults, until_us=fault_end, swarm=bool(lease_clients))
    store = (StoreClients(cluster, store_clients, random.Random(seed * 7919 + 17), store_bug)
             if store_clients else None)
    leases = (LeaseClients(cluster, lease_clients, random.Random(seed * 104729 + 29))
              if lease_clients else None)
    if leases is not None:
        lease_rng = random.Random(seed * 15485863 + 7)
        expiry = SimLeaseExpiry(cluster, lease_rng, {n: expirer_id(n) for n in cluster.nodes},
                                {n: desk_id(n) for n in cluster.nodes}, lease_bug)
        leases.desk = expiry.desk
        expiry.validities = leases.validities
        if faults:
            schedule_leader_cuts(cluster, injector, lease_rng, LEASE_TTL_MS, fault_end)
    cluster.store_clients = _ClientRouter(store, leases)
    # Liveness under partial faults, judged through the fault window (sim/liveness.py).
    partial = PartialLiveness(cluster)
    undo_lease_bug = inject_lease_table_bug(lease_bug)
    watches = (SimWatches(cluster, watch_clients, random.Random(seed * 49979687 + 3), watch_hub)
               if watch_clients else None)
    intruders = (LeaseIntruders(cluster, lease_intruders, random.Random(seed * 32452843 + 11))
                 if lease_intruders else None)
    if intruders is not None:
        cluster.produce_gate = ProduceGate(frozenset(intruders.ids),
                                           bypass=lease_bug == GATE_BUG)
    try:
        cluster.run_until(fault_end, sample=partial.sample, sample_every_us=SAMPLE_US)
        injector.heal()
        healed_at = cluster.now
        committed_before = cluster.checker.committed_end

        def live() -> bool:
            return (
                cluster.checker.committed_end > committed_before and cluster.last_ack_us > healed_at
            )

        cluster.run_until(healed_at + LIVENESS_BOUND_MS * 1000, stop=live)
        if store is not None or leases is not None or watches is not None:
            # let operations after the heal finish
            cluster.run_until(cluster.now + STORE_SETTLE_US)
        if store is not None:
            check_linearizable(seed, _history(store))
        if leases is not None:
            leases.stop()
            if intruders is not None:
                intruders.stop()
            leases.check()
        if not live():
            raise InvariantViolation(
                "liveness",
                f"no new commit within {LIVENESS_BOUND_MS} ms after the faults stopped "
                f"(committed end {cluster.checker.committed_end}; roles: {_roles(cluster)})",
            )
    except InvariantViolation as violation:
        return SeedResult(
            seed, cluster.events, cluster.checker.commits, cluster.elections, violation,
            trace.recent(), _snapshot_stats(cluster), cluster.voter_changes_committed(),
            _history(store), *(leases.summary if leases is not None else (0, 0)),
            dict(cluster.coverage), watches.stop() if watches is not None else None,
        )  # fmt: skip
    finally:
        undo_lease_bug()
    refused = (cluster.produce_gate.refused
               if isinstance(cluster.produce_gate, ProduceGate) else 0)
    return SeedResult(seed, cluster.events, cluster.checker.commits, cluster.elections,
                      intrusions_refused=refused,
                      snapshots=_snapshot_stats(cluster),
                      voter_changes=cluster.voter_changes_committed(),
                      history=_history(store),
                      lease_holds=leases.summary[0] if leases is not None else 0,
                      lease_reads=leases.summary[1] if leases is not None else 0,
                      coverage=dict(cluster.coverage),
                      watches=watches.stop() if watches is not None else None)


class _ClientRouter:
    """Answers to the store clients' id space: the store clients', then the lease holders'
    (and the expirers', which the lease clients drop) from ``LEASE_CLIENT_OFFSET``."""

    def __init__(self, store: StoreClients | None, leases: LeaseClients | None) -> None:
        self.store = store
        self.leases = leases

    def receive(self, index: int, payload: Any) -> None:
        if index >= LEASE_CLIENT_OFFSET:
            if self.leases is not None:
                self.leases.receive(index - LEASE_CLIENT_OFFSET, payload)
        elif self.store is not None:
            self.store.receive(index, payload)


def check_linearizable(seed: int, history: list[dict[str, Any]]) -> None:
    """Raise the ``linearizability`` violation porcupine finds in the store clients' history
    (``kraft_spark.lincheck``; the Go toolchain must be there: ``go_available``)."""
    from kraft_spark.lincheck import check_history

    if not history:
        return
    result = check_history(history, timeout_s=LINCHECK_TIMEOUT_S)
    if not result.ok:
        where = f"; visualization: {result.visualization}" if result.visualization else ""
        raise InvariantViolation(
            "linearizability" if result.verdict == "illegal" else "linearizability-unknown",
            f"seed {seed}: {result.summary}{where}")


def _history(store: StoreClients | None) -> list[dict[str, Any]]:
    if store is None:
        return []
    store.stop()
    return store.history


def _snapshot_stats(cluster: Cluster) -> SnapshotStats | None:
    return cluster.snapshots.stats if cluster.snapshots is not None else None


def _roles(cluster: Cluster) -> str:
    parts = []
    for node_id, node in sorted(cluster.nodes.items()):
        if not node.alive or node.core is None:
            parts.append(f"n{node_id}=down")
        else:
            parts.append(f"n{node_id}={node.core.describe_role()}")
    return ", ".join(parts)


# ---------------------------------------------------------------------- failover measurement


@dataclass(slots=True)
class FailoverSample:
    kind: str  # "crash" or "graceful"
    ms_to_commit: float


def _leader(cluster: Cluster) -> SimNode | None:
    for node in cluster.nodes.values():
        if node.alive and node.core is not None and node.core.role is Role.LEADER:
            return node
    return None


def measure_failover(seed: int, *, voters: int, kind: str, rounds: int = 5) -> list[FailoverSample]:
    """Steady appends, no other faults; repeatedly stop the leader (kill -9 or graceful) and
    measure the virtual time until a record of a later epoch commits."""
    cluster = Cluster(seed, voters=voters, observers=0, clients=CLIENTS, config=sim_config())
    samples: list[FailoverSample] = []
    cluster.run_until(5_000_000)
    for _ in range(rounds):
        leader = _leader(cluster)
        if leader is None or leader.core is None:
            cluster.run_until(cluster.now + 1_000_000)
            continue
        old_epoch = leader.core.epoch
        stopped_at = cluster.now
        if kind == "crash":
            cluster.crash(leader, torn=False)
        else:
            cluster.graceful_stop(leader)
        stop = _committed_after_epoch(cluster, old_epoch)
        cluster.run_until(stopped_at + 30_000_000, stop=stop)
        if stop():
            samples.append(FailoverSample(kind, (cluster.now - stopped_at) / 1000))
        cluster.start_node(leader, disk_lost=False)
        cluster.run_until(cluster.now + 3_000_000)
    return samples


def _committed_after_epoch(cluster: Cluster, epoch: int) -> Callable[[], bool]:
    committed = cluster.checker.committed
    return lambda: bool(committed) and committed[-1].epoch > epoch


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def summarize(values: list[float]) -> str:
    if not values:
        return "no samples"
    return (
        f"n={len(values)} median={statistics.median(values):.1f}ms "
        f"p99={percentile(values, 99):.1f}ms max={max(values):.1f}ms"
    )
