"""Simulated store clients: linearizable reads and conditional writes, recorded as a history
for a linearizability checker (``kraft_spark.lincheck``: porcupine).

Each client runs one operation at a time on a few shared keys, as the HTTP API runs them:

* **get**: the client's *home* node (mostly one fixed voter per client, sometimes any node,
  an observer included) gets the read index (``ReadIndexRequest`` to itself, or, when it does
  not lead, NOT_LEADER_OR_FOLLOWER naming the leader it knows, which is then asked), then reads
  the key from its own state machine once it has applied that offset, as a node's HTTP API
  does. A read that gets no answer has no effect and leaves the history.
* **put / cas / delete**: a Produce with an idempotent producer id and sequence (retried with the
  same sequence until acknowledged, so it lands at most once); a cas carries a ``kraft.txn``
  header (``kraft_spark.store.txn``) on the record's version. Once committed, the outcome is
  read from the home node's state machine, after it applied the write (as the HTTP API
  answers 200 or 409). An operation whose outcome is never learned is *unknown*: the
  checker may take it as applied or not.

Times are the simulation's microseconds; a seed's history is a pure function of the seed.

Shell bugs the checker must catch (``STORE_SHELL_BUGS``): ``read-before-apply`` reads a node's state
without waiting for it to apply the read index; ``outcome-before-apply`` tells a conditional
write's outcome from the node's state before it applied the write (a condition judged against
unapplied state). The core bug ``unconfirmed-read`` (``sim.bugs``) answers read indexes
without a majority's confirmation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kraft_spark.raft.messages import (
    ErrorCode,
    ProduceRequest,
    ProduceResponse,
    ReadIndexRequest,
    ReadIndexResponse,
)
from kraft_spark.raft.records import Record
from kraft_spark.sim.append_client import STORE_CLIENT_BASE, retry_target
from kraft_spark.store.txn import TXN_HEADER, Condition, encode_header

if TYPE_CHECKING:
    from kraft_spark.sim.cluster import Cluster

STORE_SHELL_BUGS = ("read-before-apply", "outcome-before-apply")
KEYS = ("x", "y")
ATTEMPT_TIMEOUT_US = 1_000_000
OP_TIMEOUT_US = 12_000_000
POLL_US = 1_000
THINK_US = (5_000, 80_000)


@dataclass(slots=True)
class SimStoreClient:
    index: int
    producer_id: int
    seq: int = 0
    target: int = 0
    # The node this client talks to, as an HTTP client talks to one node's API: it answers
    # reads from its own state and tells write outcomes from it, whoever leads.
    home: int = 0
    request_id: int = 0
    op: dict[str, Any] | None = None
    op_deadline: int = 0
    attempt_deadline: int = 0
    # The last version this client read of each key: what its next cas expects.
    seen_versions: dict[str, int] = field(default_factory=dict)
    ops_started: int = 0

    @property
    def client_id(self) -> int:
        return -(STORE_CLIENT_BASE + 1 + self.index)


class StoreClients:
    """The store clients of one simulated cluster; ``history`` is what they saw."""

    def __init__(self, cluster: Cluster, count: int, rng: random.Random,
                 bug: str | None = None) -> None:
        if bug is not None and bug not in STORE_SHELL_BUGS:
            raise ValueError(f"unknown store client bug {bug!r}; choose from {STORE_SHELL_BUGS}")
        self.cluster = cluster
        self.rng = rng
        self.bug = bug
        self.clients = [SimStoreClient(i, 5000 + i) for i in range(count)]
        self.history: list[dict[str, Any]] = []
        self.running = True
        for client in self.clients:
            cluster.at(rng.randint(*THINK_US), self._next_op, client)

    # ------------------------------------------------------------------ operations

    def _next_op(self, client: SimStoreClient) -> None:
        if not self.running:
            return
        rng = self.rng
        key = rng.choice(KEYS)
        roll = rng.random()
        now = self.cluster.now
        client.ops_started += 1
        op: dict[str, Any] = {"client": client.index, "key": key, "call_ns": now * 1000,
                              "return_ns": None, "value": None, "expect_version": None,
                              "ok": None, "present": None, "out_value": None,
                              "out_version": None}
        if roll < 0.45:
            op["kind"] = "get"
        elif roll < 0.65:
            op["kind"] = "put"
            op["value"] = f"c{client.index}-{client.ops_started}"
        elif roll < 0.95:
            op["kind"] = "cas"
            op["value"] = f"c{client.index}-{client.ops_started}"
            seen = client.seen_versions.get(key, 0)
            op["expect_version"] = seen if rng.random() < 0.8 else seen + rng.randint(-1, 1)
            op["expect_version"] = max(0, op["expect_version"])
        else:
            op["kind"] = "delete"
        client.op = op
        client.op_deadline = now + OP_TIMEOUT_US
        # The node the client talks to (now and then another one, an observer included): it
        # takes the request, asks the leader it knows of (a non-leader answers with a hint the
        # client follows), and answers from its own state machine.
        voters = self.cluster.voter_ids
        client.home = (voters[client.index % len(voters)] if rng.random() < 0.8
                       else rng.choice(sorted(self.cluster.nodes)))
        client.target = client.home if client.home in voters else rng.choice(voters)
        self._attempt(client)

    def _attempt(self, client: SimStoreClient, op: dict[str, Any] | None = None) -> None:
        if op is not None and client.op is not op:
            return  # a retry of an operation that ended meanwhile
        op = client.op
        assert op is not None
        cluster = self.cluster
        if cluster.now >= client.op_deadline:
            self._give_up(client)
            return
        cluster._seq += 1
        client.request_id = cluster._seq
        client.attempt_deadline = cluster.now + ATTEMPT_TIMEOUT_US
        if op["kind"] == "get":
            message: Any = ReadIndexRequest(timeout_ms=ATTEMPT_TIMEOUT_US // 1000 - 500)
        else:
            message = ProduceRequest(
                records=(self._record(op),), timeout_ms=ATTEMPT_TIMEOUT_US // 1000 - 500,
                producer_id=client.producer_id, producer_epoch=0, base_sequence=client.seq)
        payload = ("req", client.request_id, message, None)
        for when in cluster.network.delivery_times(cluster.now, client.client_id,
                                                   client.target):
            cluster.at(when, cluster._deliver, client.target, None, client.client_id, 0,
                       payload)
        cluster.at(client.attempt_deadline, self._attempt_timeout, client, client.request_id)

    def _record(self, op: dict[str, Any]) -> Record:
        key = op["key"].encode()
        now_ms = self.cluster.now // 1000
        if op["kind"] == "delete":
            return Record(key, None, now_ms)
        value = f'"{op["value"]}"'.encode()
        if op["kind"] == "put":
            return Record(key, value, now_ms)
        header = encode_header(1, [Condition(key, version=op["expect_version"])])
        return Record(key, value, now_ms, ((TXN_HEADER, header),))

    def _attempt_timeout(self, client: SimStoreClient, request_id: int) -> None:
        if client.request_id == request_id:
            client.target = self.rng.choice(self.cluster.voter_ids)
            self._attempt(client)

    def _give_up(self, client: SimStoreClient) -> None:
        """No answer in time: a read leaves the history; a write's outcome is unknown."""
        op = client.op
        assert op is not None
        if op["kind"] != "get":
            self.history.append(op)  # return_ns None: unknown
            # A write in doubt may still land under its sequence: the next write starts a
            # new producer (as a real client would), so no sequence is reused or skipped.
            client.producer_id += len(self.clients)
            client.seq = 0
        self._done(client)

    def _done(self, client: SimStoreClient) -> None:
        client.op = None
        client.request_id = 0
        self.cluster.at(self.cluster.now + self.rng.randint(*THINK_US), self._next_op, client)

    # ------------------------------------------------------------------ answers

    def receive(self, index: int, payload: Any) -> None:
        client = self.clients[index]
        _, request_id, message = payload
        if request_id != client.request_id or client.op is None:
            return
        client.request_id = 0
        if isinstance(message, ReadIndexResponse):
            self._on_read_index(client, message)
        elif isinstance(message, ProduceResponse):
            self._on_produced(client, message)

    def _retry_elsewhere(self, client: SimStoreClient, leader_id: int) -> None:
        client.target, delay = retry_target(self.rng, self.cluster.voter_ids, client.target,
                                            leader_id)
        self.cluster.at(self.cluster.now + delay, self._attempt, client, client.op)

    def _on_read_index(self, client: SimStoreClient, message: ReadIndexResponse) -> None:
        if message.error != ErrorCode.NONE:
            self._retry_elsewhere(client, message.leader_id)
            return
        wait = 0 if self.bug == "read-before-apply" else message.read_offset
        self._when_applied(client, client.op, client.home, wait, self._answer_read)

    def _on_produced(self, client: SimStoreClient, message: ProduceResponse) -> None:
        if message.error != ErrorCode.NONE:
            self._retry_elsewhere(client, message.leader_id)
            return
        client.seq += 1
        # The node that took the write tells its outcome from its own state (the leader's, or
        # a follower's that forwarded it: it must wait until it applied the write too).
        end = 0 if self.bug == "outcome-before-apply" else message.base_offset + 1
        self._when_applied(client, client.op, client.home, end,
                           lambda c, n: self._answer_write(c, n, message.base_offset))

    def _when_applied(self, client: SimStoreClient, op: dict[str, Any] | None, node_id: int,
                      offset: int, then: Any) -> None:
        """Call ``then(client, node_id)`` once that node is up and its state has applied
        everything below ``offset``; give up at the operation's deadline."""
        if client.op is not op or op is None:
            return  # the operation ended meanwhile (the run stopped)
        cluster = self.cluster
        node = cluster.nodes[node_id]
        snapshots = cluster.snapshots
        assert snapshots is not None, "store clients need the nodes' state machines"
        if (node.alive and not node.paused
                and snapshots.of(node_id).state.applied_offset >= offset):
            then(client, node_id)
        elif cluster.now >= client.op_deadline:
            self._give_up(client)
        else:
            cluster.at(cluster.now + POLL_US, self._when_applied, client, op, node_id, offset,
                       then)

    def _answer_read(self, client: SimStoreClient, node_id: int) -> None:
        op = client.op
        assert op is not None and self.cluster.snapshots is not None
        entry = self.cluster.snapshots.of(node_id).state.get(op["key"].encode())
        op["return_ns"] = self.cluster.now * 1000
        op["ok"] = True
        op["present"] = entry is not None
        op["out_value"] = entry.value.decode().strip('"') if entry is not None else None
        op["out_version"] = entry.version if entry is not None else 0
        client.seen_versions[op["key"]] = op["out_version"]
        self.history.append(op)
        self._done(client)

    def _answer_write(self, client: SimStoreClient, node_id: int, base_offset: int) -> None:
        op = client.op
        assert op is not None and self.cluster.snapshots is not None
        failure = self.cluster.snapshots.of(node_id).state.txn_failure(base_offset)
        op["return_ns"] = self.cluster.now * 1000
        op["ok"] = failure is None
        self.history.append(op)
        self._done(client)

    def stop(self) -> None:
        """End of the run: operations in flight are unknown (writes) or dropped (reads)."""
        self.running = False
        for client in self.clients:
            if client.op is not None:
                self._give_up(client)
