"""A Kafka-protocol principal that tries to take other clients' leases away, and the Produce
gate that must stop it.

Over the Kafka wire protocol anyone authenticated may Produce; a record with
``kraft.lease.op`` would revoke, expire or keep alive any lease, since the state machine's
owner check trusts the ``by`` the record names (``kraft_spark.store.leases``). The real node
refuses such records from any principal it does not trust before its core sees them
(``kraft_spark.net.produce_gate``, by ``kraft_spark.store.reserved_headers``). The simulator
has no listener: :class:`ProduceGate` is that door on the simulated nodes, deciding each
sender's standing and applying the same pure rule; the cluster calls it on every client
Produce (``Cluster.produce_gate``).

:class:`LeaseIntruders` are the principals outside ``super.users``: now and then each picks a
lease in force on some node's state and sends it a revocation that names no caller (the form
that acts on any lease). Refused, it changes nothing. Let through (the injected bug
``produce-bypasses-lease-owner``: a gate that waves every sender in), it deletes a lease whose
holder still counts on it, and another holder takes the lock: the lock checker's
``lock-exclusive`` (or ``fencing-order``) sees two holders.

Determinism: the intruders draw from their own random stream and only when enabled
(``--lease-intruders``), so runs without them are unchanged.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from kraft_spark.raft.messages import ErrorCode, ProduceRequest, ProduceResponse
from kraft_spark.raft.records import Record
from kraft_spark.sim.lease_clients import EXPIRER_OFFSET, client_id
from kraft_spark.store.leases import LEASE_OP_HEADER, encode_op
from kraft_spark.store.reserved_headers import Standing, refusal

if TYPE_CHECKING:
    from kraft_spark.sim.cluster import Cluster

# Above the expirers' ids (EXPIRER_OFFSET + node id): LeaseClients.receive drops the answers.
INTRUDER_OFFSET = EXPIRER_OFFSET + 500
# How often an intruder tries (uniform), and its request's timeout.
ATTEMPT_EVERY_US = (200_000, 1_500_000)
TIMEOUT_MS = 400

GATE_BUG = "produce-bypasses-lease-owner"


def intruder_id(index: int) -> int:
    return client_id(INTRUDER_OFFSET + index)


class ProduceGate:
    """The simulated nodes' Produce gate: intruders are ``PRINCIPAL``s, every other client
    (the lease holders, whose lease operations stand for what a node's own HTTP API
    forwards, and the expirers, the node's own) ``TRUSTED``. ``bypass``: the injected bug."""

    def __init__(self, intruders: frozenset[int], *, bypass: bool = False) -> None:
        self._intruders = intruders
        self._bypass = bypass
        self.refused = 0

    def __call__(self, src: int, request: ProduceRequest) -> ProduceResponse | None:
        """The answer refusing ``request`` from ``src``, or None to let the core have it."""
        if self._bypass:
            return None  # broken: the sender's standing is never looked at
        standing = Standing.PRINCIPAL if src in self._intruders else Standing.TRUSTED
        refused = refusal(request.records, standing)
        if refused is None:
            return None
        self.refused += 1
        return ProduceResponse(ErrorCode.INVALID_RECORD, -1, -1, message=str(refused))


class LeaseIntruders:
    """``count`` intruders sending revocations of leases they do not hold (module doc)."""

    def __init__(self, cluster: Cluster, count: int, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.ids = [intruder_id(i) for i in range(count)]
        self.sent = 0
        self.running = True
        for cid in self.ids:
            cluster.at(cluster.now + rng.randint(*ATTEMPT_EVERY_US), self._attempt, cid)

    def _attempt(self, cid: int) -> None:
        if not self.running:
            return
        cluster, rng = self.cluster, self.rng
        voters = cluster.voter_ids
        target = rng.choice(voters)
        snapshots = cluster.snapshots
        if cluster.nodes[target].alive and snapshots is not None:
            leases = sorted(snapshots.of(target).state.leases.leases)
            if leases:
                self._send(cid, target, rng.choice(leases))
        cluster.at(cluster.now + rng.randint(*ATTEMPT_EVERY_US), self._attempt, cid)

    def _send(self, cid: int, target: int, lease_id: int) -> None:
        cluster = self.cluster
        record = Record(None, None, cluster.now // 1000,
                        ((LEASE_OP_HEADER, encode_op("revoke", lease_id)),))
        cluster._seq += 1
        payload = ("req", cluster._seq, ProduceRequest((record,), TIMEOUT_MS), None)
        for when in cluster.network.delivery_times(cluster.now, cid, target):
            cluster.at(when, cluster._deliver, target, None, cid, 0, payload)
        self.sent += 1

    def stop(self) -> None:
        self.running = False
