"""Simulated lease holders contending for one lock, as ``kraft_spark.client.concurrency``'s
users do: grant a lease, create the lock key attached to it with a compare-and-set (version 0:
only if absent), keep the lease alive while holding, read the key now and then, and let go by
revoking the lease, or freeze (a paused process) and let it expire. Each lease holds 1 to 4
keys: the lock and up to three keys of the holder's (``<lock>/<holder>/<n>``) written with it,
in the lock's compare-and-set (all or nothing) or after it in the same batch (landing even when
the lock is taken), so a revoke or an expiry deletes several keys at one offset.

Every request goes to a node as an HTTP client's request does (mostly the client's own voter,
now and then any node; a non-leader's NOT_LEADER hint is followed), and its outcome is read
from the state machine of the node that answered, once it applied the write (or the read
index): the leader's, as its HTTP API would answer. A keep-alive is no write: the leader's desk
answers it from its countdown (``kraft_spark.sim.lease_desk``). A lease is kept alive every
sixth of its TTL, or (one lease in two) every 4.2 to 4.8 s, which lets its countdown fall
below half the TTL between keep-alives, so the leader checkpoints it and the next keep-alive
clears the checkpoint. (The store clients of
``kraft_spark.sim.store_clients`` test the followers' and observers' read paths.) Writes are
idempotent Produces (retried under the same producer sequence). What each client believed is
recorded as holds and reads for ``kraft_spark.sim.lease_check``.

A holder counts its lease valid until the first send of its last acknowledged keep-alive plus
``VALID_SHARE`` of the TTL: the leader counts the TTL from when it saw that keep-alive applied,
on a clock whose rate is at most 2% off (``kraft_spark.sim.lease_expiry``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
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
from kraft_spark.sim.lease_check import Hold, HolderRead, check_holds
from kraft_spark.store.lease_clock import CountdownAnswer, CountdownRequest, CountdownStatus
from kraft_spark.store.leases import LEASE_HEADER, LEASE_OP_HEADER, encode_op
from kraft_spark.store.txn import TXN_HEADER, Condition, encode_header

if TYPE_CHECKING:
    from kraft_spark.sim.cluster import Cluster

# Lease clients' indexes among the store clients' (sim.append_client.STORE_CLIENT_BASE);
# the nodes' expirers are at EXPIRER_OFFSET + node id above it (their answers are dropped),
# their desks at DESK_OFFSET + node id (answers of their own cores, for sim.lease_desk).
LEASE_CLIENT_OFFSET = 1000
EXPIRER_OFFSET = 900
DESK_OFFSET = 800
# A holder keeps its lease through a leader change: the followers notice a lost leader after
# the fetch timeout (2 s) and elect within about a second, inside the validity's 5.4 s.
TTL_MS = 6_000
VALID_SHARE = 0.9
KEEPALIVE_US = 1_000_000
# The slower cadence, of this share of the leases: past half the TTL (a checkpoint), within
# the holder's validity.
SLOW_KEEPALIVE_US = (4_200_000, 4_800_000)
SLOW_SHARE = 1 / 2
ATTEMPT_TIMEOUT_US = 500_000
OP_TIMEOUT_US = 8_000_000
READ_TIMEOUT_US = 1_000_000  # a read that cannot finish soon is dropped: the next is fresh
POLL_US = 1_000
THINK_US = (20_000, 300_000)
LOCKS = (b"lock-a", b"lock-b")


def client_id(index: int) -> int:
    return -(STORE_CLIENT_BASE + 1 + LEASE_CLIENT_OFFSET + index)


def expirer_id(node_id: int) -> int:
    """The client id a node's lease expirer sends its Produce requests from."""
    return client_id(EXPIRER_OFFSET + node_id)


def desk_id(node_id: int) -> int:
    """The client id a node's lease desk asks its own core from."""
    return client_id(DESK_OFFSET + node_id)


@dataclass(slots=True)
class LeaseOp:
    kind: str  # grant, acquire, keepalive, read, revoke
    lease_id: int
    first_sent_us: int
    deadline_us: int
    records: int = 1  # in its Produce


@dataclass(slots=True)
class Channel:
    """One request at a time, as one connection carries them: a holder's operations go on one
    and its keep-alives on another (etcd's client keeps leases alive on a stream of its own),
    so a slow read never starves the lease."""

    client_id: int
    producer_id: int
    seq: int = 0
    target: int = 0
    home: int = 0
    request_id: int = 0
    op: LeaseOp | None = None


@dataclass(slots=True)
class LeaseHolder:
    index: int
    main: Channel
    keepalives: Channel
    lease_id: int = 0  # the lease in use (0: none; a revoked one is not in use)
    lock: bytes = LOCKS[0]
    leases_granted: int = 0
    valid_until_us: int = 0
    hold: Hold | None = None
    hold_until_us: int = 0
    freeze: bool = False
    frozen: bool = False
    resume_token: int = 0  # back from a freeze: the token of the hold it would resume
    extras: int = 0  # keys attached to the lease besides the lock
    keepalive_us: int = KEEPALIVE_US  # this lease's cadence
    grouped: bool = False  # written in the lock's compare-and-set (else unconditionally)


class LeaseClients:
    """The lease holders of one simulated cluster; ``holds`` and ``reads`` are what they saw."""

    def __init__(self, cluster: Cluster, count: int, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.clients = [LeaseHolder(i, Channel(client_id(2 * i), 7000 + 2 * i),
                                    Channel(client_id(2 * i + 1), 7001 + 2 * i))
                        for i in range(count)]
        self.holds: list[Hold] = []
        self.reads: list[HolderRead] = []
        self.desk: Any = None  # the desks' answers go there (sim.lease_desk.SimLeaseDesk)
        self.running = True
        for client in self.clients:
            cluster.at(rng.randint(*THINK_US), self._begin, client)

    # ------------------------------------------------------------------ the holder's cycle

    def _begin(self, client: LeaseHolder) -> None:
        """A new lease, then an attempt at the lock."""
        if not self.running:
            return
        client.frozen = False
        client.hold = None
        client.leases_granted += 1
        client.lease_id = (client.index + 1) * 1_000_000 + client.leases_granted
        client.lock = self.rng.choice(LOCKS)
        client.extras = self.rng.randint(0, 3)
        client.grouped = self.rng.random() < 0.5
        client.keepalive_us = (self.rng.randint(*SLOW_KEEPALIVE_US)
                               if self.rng.random() < SLOW_SHARE else KEEPALIVE_US)
        self._start(client, client.main, "grant")

    def _think(self, client: LeaseHolder) -> None:
        client.lease_id = 0
        self.cluster.at(self.cluster.now + self.rng.randint(*THINK_US), self._begin, client)

    def _holding_step(self, client: LeaseHolder) -> None:
        """What a holder does next: let go, freeze, or read the lock key again."""
        if not self.running or client.main.op is not None or client.hold is None:
            return
        now = self.cluster.now
        if now >= client.valid_until_us:
            self._end_hold(client, client.valid_until_us)
            self._think(client)
        elif now >= client.hold_until_us:
            if client.freeze:  # paused past its TTL: it learns nothing, then resumes (_thaw)
                token = client.hold.token
                self._end_hold(client, client.valid_until_us)
                client.frozen = True
                for channel in (client.main, client.keepalives):
                    channel.op, channel.request_id = None, 0
                    self._new_producer(channel)
                pause = self.rng.randint(3 * TTL_MS * 500, 3 * TTL_MS * 1000)
                self.cluster.at(now + pause, self._thaw, client, client.lease_id, token)
            else:
                self._end_hold(client, now)
                self._start(client, client.main, "revoke")
        else:  # reads back to back: a lease revoked under a live holder is seen at once
            self._start(client, client.main, "read")

    def _end_hold(self, client: LeaseHolder, at_us: int) -> None:
        hold = client.hold
        if hold is not None:
            hold.end_us = min(hold.end_us, at_us)
        client.hold = None

    def _keepalive(self, client: LeaseHolder, lease_id: int) -> None:
        """The keep-alive stream of ``lease_id``: one every third of the TTL while in use."""
        if not self.running or client.frozen or client.lease_id != lease_id:
            return
        if client.keepalives.op is not None:  # the previous one is still on its way
            self.cluster.at(self.cluster.now + 50_000, self._keepalive, client, lease_id)
            return
        self._start(client, client.keepalives, "keepalive")

    # ------------------------------------------------------------------ requests

    def _start(self, client: LeaseHolder, channel: Channel, kind: str) -> None:
        now = self.cluster.now
        timeout = READ_TIMEOUT_US if kind == "read" else OP_TIMEOUT_US
        channel.op = LeaseOp(kind, client.lease_id, now, now + timeout,
                             1 + client.extras if kind == "acquire" else 1)
        voters = self.cluster.voter_ids
        channel.target = (voters[client.index % len(voters)] if self.rng.random() < 0.8
                          else self.rng.choice(voters))
        self._attempt(client, channel, channel.op)

    def _message(self, client: LeaseHolder, channel: Channel, op: LeaseOp) -> Any:
        timeout_ms = ATTEMPT_TIMEOUT_US // 1000 - 100
        if op.kind == "read":
            return ReadIndexRequest(timeout_ms=timeout_ms)
        if op.kind == "keepalive":
            return CountdownRequest(op.lease_id, renew=True, timeout_ms=timeout_ms)
        now_ms = self.cluster.now // 1000
        if op.kind == "acquire":
            # The lock first (its offset is the fencing token), then the lease's other keys.
            value = f'"l{client.index}-{op.lease_id}"'.encode()
            lease = (LEASE_HEADER, str(op.lease_id).encode())
            group = op.records if client.grouped else 1
            records = (Record(client.lock, value, now_ms, (
                (TXN_HEADER, encode_header(group, [Condition(client.lock, version=0)])), lease)),
                # Every committed value is unique (the checker's exactly-once rule).
                *(Record(client.lock + f"/{client.index}/{n}".encode(),
                         value[:-1] + f'-{n}"'.encode(), now_ms, (lease,))
                  for n in range(op.records - 1)))
        else:
            fields = {"ttl_ms": TTL_MS} if op.kind == "grant" else {}
            records = (Record(None, None, now_ms,
                              ((LEASE_OP_HEADER, encode_op(op.kind, op.lease_id, **fields)),)),)
        return ProduceRequest(records=records, timeout_ms=timeout_ms,
                              producer_id=channel.producer_id, producer_epoch=0,
                              base_sequence=channel.seq)

    def _attempt(self, client: LeaseHolder, channel: Channel, op: LeaseOp) -> None:
        if channel.op is not op:
            return
        cluster = self.cluster
        if cluster.now >= op.deadline_us:
            self._give_up(client, channel)
            return
        cluster._seq += 1
        channel.request_id = cluster._seq
        payload = ("req", channel.request_id, self._message(client, channel, op), None)
        for when in cluster.network.delivery_times(cluster.now, channel.client_id,
                                                   channel.target):
            cluster.at(when, cluster._deliver, channel.target, None, channel.client_id, 0,
                       payload)
        cluster.at(cluster.now + ATTEMPT_TIMEOUT_US, self._attempt_timeout, client, channel,
                   channel.request_id)

    def _attempt_timeout(self, client: LeaseHolder, channel: Channel, request_id: int) -> None:
        if channel.request_id == request_id and channel.op is not None:
            channel.target = self.rng.choice(self.cluster.voter_ids)
            self._attempt(client, channel, channel.op)

    def _new_producer(self, channel: Channel) -> None:
        """A write in doubt may still land under its sequence: never reuse or skip one."""
        channel.producer_id += 2 * len(self.clients)
        channel.seq = 0

    def _give_up(self, client: LeaseHolder, channel: Channel) -> None:
        """No answer in time; a write's outcome stays unknown."""
        op = channel.op
        assert op is not None
        channel.op = None
        channel.request_id = 0
        if op.kind not in ("read", "keepalive"):
            self._new_producer(channel)
        if op.kind == "keepalive":
            self._keepalive(client, op.lease_id)
        elif client.hold is not None:
            self._holding_step(client)
        else:
            self._think(client)

    def receive(self, index: int, payload: Any) -> None:
        if index >= EXPIRER_OFFSET:
            return  # an expirer's answer: the clock sends again if it did not land
        if index >= DESK_OFFSET:
            if self.desk is not None:
                self.desk.receive(payload)
            return
        client = self.clients[index // 2]
        channel = client.keepalives if index % 2 else client.main
        _, request_id, message = payload
        op = channel.op
        if request_id != channel.request_id or op is None:
            return
        channel.request_id = 0
        if isinstance(message, CountdownAnswer):
            self._countdown_answered(client, channel, op, message)
            return
        error = getattr(message, "error", ErrorCode.NONE)
        if error != ErrorCode.NONE:
            channel.target, delay = retry_target(self.rng, self.cluster.voter_ids,
                                                 channel.target, message.leader_id)
            self.cluster.at(self.cluster.now + delay, self._attempt, client, channel, op)
        elif isinstance(message, ReadIndexResponse):
            channel.home = channel.target  # the node that answered tells the outcome
            self._when_applied(client, channel, op, message.read_offset, None)
        elif isinstance(message, ProduceResponse):
            channel.home = channel.target
            channel.seq += op.records  # a sequence number per record
            self._when_applied(client, channel, op, message.base_offset + 1,
                               message.base_offset)

    def _countdown_answered(self, client: LeaseHolder, channel: Channel, op: LeaseOp,
                            answer: CountdownAnswer) -> None:
        """A desk's answer to a keep-alive: the lease is alive (OK) or gone (NOT_FOUND);
        anything else is tried again, on the hinted leader."""
        if answer.status in (CountdownStatus.OK, CountdownStatus.NOT_FOUND):
            channel.op = None
            self._write_done(client, op, -1, answer.status is CountdownStatus.OK)
            return
        channel.target, delay = retry_target(self.rng, self.cluster.voter_ids, channel.target,
                                             answer.leader_id)
        self.cluster.at(self.cluster.now + delay, self._attempt, client, channel, op)

    def _when_applied(self, client: LeaseHolder, channel: Channel, op: LeaseOp, offset: int,
                      write_offset: int | None) -> None:
        """Once the channel's node is up and applied everything below ``offset``, take the
        outcome from its state (``write_offset``: the write's, or None for a read)."""
        if channel.op is not op:
            return
        cluster = self.cluster
        node = cluster.nodes[channel.home]
        assert cluster.snapshots is not None
        state = cluster.snapshots.of(channel.home).state
        if node.alive and not node.paused and state.applied_offset >= offset:
            channel.op = None
            if write_offset is None:
                entry = state.get(client.lock)
                self._read_done(client, op, entry.offset if entry is not None else None)
            else:
                self._write_done(client, op, write_offset,
                                 state.txn_failure(write_offset) is None)
        elif cluster.now >= op.deadline_us:
            self._give_up(client, channel)
        else:
            cluster.at(cluster.now + POLL_US, self._when_applied, client, channel, op, offset,
                       write_offset)

    def _read_done(self, client: LeaseHolder, op: LeaseOp, found: int | None) -> None:
        hold = client.hold
        if hold is not None:
            self.reads.append(HolderRead(client.index, hold.token, op.first_sent_us,
                                         self.cluster.now, found))
        self._holding_step(client)

    def _write_done(self, client: LeaseHolder, op: LeaseOp, offset: int, ok: bool) -> None:
        now = self.cluster.now
        if op.kind == "keepalive" and client.resume_token and op.lease_id == client.lease_id:
            self._resumed(client, op, ok)
            return
        if op.kind in ("grant", "keepalive") and op.lease_id == client.lease_id:
            if ok:
                client.valid_until_us = max(
                    client.valid_until_us, op.first_sent_us + int(VALID_SHARE * TTL_MS * 1000))
                if client.hold is not None:
                    client.hold.end_us = client.valid_until_us
                self.cluster.at(max(now, op.first_sent_us + client.keepalive_us),
                                self._keepalive, client, op.lease_id)
            elif op.kind == "keepalive":  # the lease is gone: the hold ends with its validity
                self._end_hold(client, client.valid_until_us)
        if op.kind == "grant":
            if ok and op.lease_id == client.lease_id:
                self._start(client, client.main, "acquire")
            else:
                self._think(client)
        elif op.kind == "acquire":
            if ok and now < client.valid_until_us:
                client.hold = Hold(client.lock.decode(), client.index, offset, now,
                                   client.valid_until_us)
                self.holds.append(client.hold)
                # Short holds hand the lock over often; long ones outlast a voter's cut (a
                # TTL and more), the window where a node's stale countdown meets a live lease.
                client.hold_until_us = now + (self.rng.randint(500_000, 4_000_000)
                                              if self.rng.random() < 0.5
                                              else self.rng.randint(8_000_000, 16_000_000))
                client.freeze = self.rng.random() < 0.25
                self._holding_step(client)
            else:  # taken by another (or our lease lapsed): let our lease go, try again later
                self._start(client, client.main, "revoke")
        elif op.kind == "revoke":
            self._think(client)

    def _thaw(self, client: LeaseHolder, lease_id: int, token: int) -> None:
        """Back from its freeze, a holder keeps its old lease alive first, as etcd's client
        resumes its keep-alive stream after a pause (a GC pause, a stopped VM): the lease
        expired meanwhile (its keep-alive fails and it starts over), or it is still in force,
        and so is the lock key attached to it, which it then holds again (``_resumed``)."""
        if not self.running:
            return
        client.frozen = False
        client.lease_id, client.resume_token = lease_id, token
        self._start(client, client.keepalives, "keepalive")

    def _resumed(self, client: LeaseHolder, op: LeaseOp, ok: bool) -> None:
        """What a holder back from a freeze believes from its keep-alive's outcome: the
        lease, and so the key it holds the lock with, is alive or not (a lease's keys go
        with it and with nothing else: a keep-alive that succeeds means they are there)."""
        now = self.cluster.now
        token, client.resume_token = client.resume_token, 0
        if not ok:
            self._begin(client)
            return
        client.valid_until_us = max(client.valid_until_us,
                                    op.first_sent_us + int(VALID_SHARE * TTL_MS * 1000))
        self.cluster.at(max(now, op.first_sent_us + client.keepalive_us), self._keepalive,
                        client, op.lease_id)
        if now >= client.valid_until_us:
            self._start(client, client.main, "revoke")
            return
        client.hold = Hold(client.lock.decode(), client.index, token, now, client.valid_until_us)
        self.holds.append(client.hold)
        client.hold_until_us = now + self.rng.randint(500_000, 4_000_000)
        client.freeze = False
        self._holding_step(client)

    def validities(self) -> list[tuple[int, int, int]]:
        """(client, lease, valid until us) of each lease in use that its holder counts valid
        (for ``sim.lease_expiry``'s ``lease-countdown``)."""
        now = self.cluster.now
        return [(c.index, c.lease_id, c.valid_until_us) for c in self.clients
                if self.running and c.lease_id and not c.frozen and c.valid_until_us > now]

    def stop(self) -> None:
        """End of the run: holds end where their validity does."""
        self.running = False
        for client in self.clients:
            client.hold = None
            client.main.op = client.keepalives.op = None

    def check(self) -> None:
        check_holds(self.holds, self.reads)

    @property
    def summary(self) -> tuple[int, int]:
        """(holds that were real, holder reads made)."""
        return sum(h.real for h in self.holds), len(self.reads)
