"""A simulated cluster: nodes running the real core, a network, disks, clients, one event queue.

Virtual time is integer microseconds; the core sees milliseconds. Events are processed in
(time, sequence) order, so a seed fixes the whole run. After every event the invariants that the
event could affect are checked (``kraft_spark.sim.invariants``).

Connections die with a process: when a node crashes or stops, the requests its peers still wait
for from it fail (``on_request_failed(refused=False)``, a reset). A request sent to a node that is
down (crashed or stopped, not paused or partitioned) is refused by the host, as on a real network
where nothing listens on the port: the sender's core gets ``on_request_failed(refused=True)`` a
round trip later. The network may lose either notice, like any packet.
"""

from __future__ import annotations

import contextlib
import heapq
import random
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from kraft_spark.log.errors import CorruptSegmentError, LogError
from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.events import RoleChanged
from kraft_spark.raft.messages import (
    ErrorCode,
    ProduceRequest,
    ProduceResponse,
    Request,
    VoteRequest,
)
from kraft_spark.raft.ready import Ready
from kraft_spark.raft.records import Record
from kraft_spark.raft.state import Role
from kraft_spark.raft.voter_set import NIL_DIRECTORY
from kraft_spark.sim.append_client import (
    STORE_CLIENT_BASE,
    SimClient,
    StoreClientsReceiver,
    retry_target,
)
from kraft_spark.sim.catch_up import CatchUpLedger
from kraft_spark.sim.coverage import note_new_leader, note_voter_change
from kraft_spark.sim.disk_faults import DISK_BUGS, RESTART_AFTER_US
from kraft_spark.sim.durability import DurabilityCheck, catching_up
from kraft_spark.sim.invariants import Checker, InvariantViolation
from kraft_spark.sim.memlog import MemoryLog
from kraft_spark.sim.network import Network
from kraft_spark.sim.node import SimNode
from kraft_spark.sim.snapshots import SimSnapshots
from kraft_spark.sim.trace import Trace

CLUSTER_ID = "sim-cluster-0000000000"
CLIENT_TIMEOUT_MS = 4000
OBSERVER_BASE_ID = 100
# The "client" that sends AddRaftVoter / RemoveRaftVoter (the reconfig fault): answers to it
# are traced, not delivered.
ADMIN_ID = -1_000_000


class ProcessListener(Protocol):
    """Told when a node's process starts (its state loaded, before it runs) and when it dies
    (``sim.watch_clients``: a node's watch hub lives and dies with its process)."""

    def on_start(self, node: SimNode) -> None: ...

    def on_crash(self, node: SimNode) -> None: ...


class Cluster:
    def __init__(
        self,
        seed: int,
        *,
        voters: int,
        observers: int,
        clients: int,
        config: QuorumConfig,
        core_class: type[RaftCore] = RaftCore,
        trace: Trace | None = None,
        log_factory: Callable[[], MemoryLog] = MemoryLog,
        snapshots: bool = False,
        shell_bug: str | None = None,
        directories: bool = False,
    ) -> None:
        """``directories``: give every disk a directory id (KIP-853), so that a lost disk comes
        back as another voter key (the ``reconfig`` fault needs it)."""
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0  # microseconds
        self.config = config
        self.core_class = core_class
        self.trace = trace or Trace(keep=60)
        self.initial_voters = tuple(range(voters))
        ids = list(self.initial_voters) + [OBSERVER_BASE_ID + i for i in range(observers)]
        self.log_factory = log_factory
        self.disk_bug = shell_bug in DISK_BUGS
        self.directories = directories
        self.nodes = {i: SimNode(i, i in self.initial_voters, log_factory()) for i in ids}
        for node in self.nodes.values():
            node.directory_id = self._new_directory()
        for node in self.nodes.values():
            node.log.ignore_fsync_error = self.disk_bug
        self.network = Network(random.Random(self.rng.random()))
        self.checker = Checker(self.initial_voters)
        self.catch_up = CatchUpLedger(2 * self.config.fetch_timeout_ms)
        self.durability = DurabilityCheck(self.checker)
        self.admin_answers: list[str] = []
        # KIP-630: every node's snapshot store and state machine (None: no snapshots).
        self.snapshots = (
            SimSnapshots(random.Random(self.rng.random()), self.checker, shell_bug)
            if snapshots else None
        )
        self.clients = [SimClient(client_id=-(i + 1), producer_id=1000 + i) for i in range(clients)]
        self._queue: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self.events = 0
        self.elections = 0
        self.acks = 0
        self.last_ack_us = -1
        self.fsync_latency_us = (500, 4000)
        self.client_think_us = (20_000, 200_000)
        self.clients_running = True
        self.store_clients: StoreClientsReceiver | None = None  # the runner's, when asked for
        # The nodes' door for clients' Produce requests (sim/lease_intruder.py): an answer
        # refusing one, or None to hand it to the core. None: every Produce goes in.
        self.produce_gate: Callable[[int, ProduceRequest], ProduceResponse | None] | None = None
        # Serves a request beside the core when it says so (sim/lease_desk.py).
        self.side_door: Callable[[SimNode, int, int, Any, int | None], bool] | None = None
        self.watches: ProcessListener | None = None  # the runner's watch clients, when asked for
        # Called with each node that becomes leader (the fault injector targets new leaders).
        self.on_new_leader: Callable[[SimNode], None] | None = None
        # How often each dangerous moment of a voter change happened (sim/coverage.py).
        self.coverage: Counter[str] = Counter()
        for node in self.nodes.values():
            self.start_node(node, disk_lost=False)
        for client in self.clients:
            self.at(self.rng.randint(*self.client_think_us), self._client_send, client)

    @property
    def voter_ids(self) -> tuple[int, ...]:
        """The voters of the committed log (the static set until a VotersRecord commits)."""
        return self.checker.voters

    def _new_directory(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128)) if self.directories else NIL_DIRECTORY

    # ------------------------------------------------------------------ event queue

    def at(self, when_us: int, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (when_us, self._seq, fn, args))

    def run_until(self, end_us: int, stop: Callable[[], bool] | None = None, *,
                  sample: Callable[[], None] | None = None, sample_every_us: int = 0) -> None:
        """Run the events due by ``end_us``, or until ``stop()`` says so after one. ``sample``:
        called after the first event at or past each multiple of ``sample_every_us`` from the
        first event on, reading the cluster only (it adds no event: trajectories and event
        counts are as without it); checked inline, since a call per event cost a sim run 20 %."""
        queue = self._queue
        next_sample = -1
        while queue and queue[0][0] <= end_us:
            when, _, fn, args = heapq.heappop(queue)
            self.now = when
            self.events += 1
            fn(*args)
            if sample is not None and when >= next_sample:
                next_sample = when + sample_every_us
                sample()
            if stop is not None and stop():
                return
        self.now = max(self.now, end_us)

    # ------------------------------------------------------------------ nodes

    def start_node(self, node: SimNode, *, disk_lost: bool) -> None:
        try:
            self._start_node(node, disk_lost=disk_lost)
        except LogError as exc:  # the disk still fails: the start fails like the real one
            self.storage_failure(node, exc)

    def _cut_at_damage(self, node: SimNode) -> None:
        """The restart's repair: cut the log at the damaged batch; the node then catches up
        before it votes, excused from the majority check meanwhile (like a lost disk)."""
        cut, node.damaged_at = node.damaged_at, None
        assert cut is not None
        the_log = node.log
        if the_log.start_offset() <= cut < the_log.end_offset():
            the_log.truncate_to(cut)
            the_log.flush()
        self.trace.add(self.now, node.node_id, None, f"REPAIR log cut at {cut} (damaged batch)")
        node.wiped = True
        # KIP-853: the cut log may have lost committed VotersRecords; it is no longer the
        # voter it was (a new directory id, as after a disk loss) until removed and added.
        node.directory_id = self._new_directory()

    def _start_node(self, node: SimNode, *, disk_lost: bool) -> None:
        if node.damaged_at is not None:
            self._cut_at_damage(node)
        node.incarnation += 1
        node.alive, node.paused = True, False
        node.inbox.clear()
        node.wake_at = -1
        node.flushing = node.flush_again = False
        self.checker.on_restart(node.node_id, node.log, disk_lost)
        store = (
            self.snapshots.on_start(node.node_id, node.log) if self.snapshots is not None
            else None
        )
        node.core = self.core_class(
            node_id=node.node_id,
            cluster_id=CLUSTER_ID,
            voters=self.initial_voters,
            log=node.log,
            config=self.config,
            rng=random.Random(self.rng.random()),
            now_ms=self.now // 1000,
            persisted=node.persisted,
            # A wiped node stays wiped until its core says it caught up, across restarts.
            disk_lost=disk_lost or node.wiped,
            snapshots=store,
            directory_id=node.directory_id,
        )
        if self.watches is not None:
            self.watches.on_start(node)
        self._after(node)

    def crash(self, node: SimNode, *, torn: bool, wipe: bool = False) -> None:
        """The process dies: unflushed writes are lost (a torn write keeps part of them)."""
        node.alive = False
        node.core = None
        if self.watches is not None:
            self.watches.on_crash(node)
        failing = node.log.failing  # the disk fault outlives the process
        if wipe:
            # Known limit (KIP-853 territory): a vote granted just before the disk was lost and
            # still in flight could count after the node votes again. Connections die with the
            # process, so such messages are dropped here; see the README's notes.
            node.silenced_incarnation = node.incarnation
            node.log = self.log_factory()
            node.persisted = None
            node.wiped = True
            node.directory_id = self._new_directory()
        else:
            node.log = node.log.crashed(self.rng, torn)
        node.log.failing, node.log.ignore_fsync_error = failing, self.disk_bug
        if self.snapshots is not None:
            self.snapshots.on_crash(node.node_id, torn=torn, wipe=wipe)
        self._reset_connections(node.node_id)
        self.check_durability()

    def _reset_connections(self, dead: int) -> None:
        """The process's connections die with it: every request a peer still waits for from it
        fails (a reset, not a refusal) once the news crosses the link, after anything the dead
        node had already sent on it (links are FIFO), unless the network loses it."""
        for peer in self.nodes.values():
            if peer.node_id == dead or not peer.alive or peer.core is None:
                continue
            waiting = sorted(rid for rid, p in peer.core.in_flight.items() if p.dest == dead)
            for request_id in waiting:
                for when in self.network.delivery_times(self.now, dead, peer.node_id)[:1]:
                    self.at(when, self._failed, peer.node_id, peer.incarnation, dead,
                            request_id, False)

    def graceful_stop(self, node: SimNode) -> None:
        """Shutdown: resign if leader, flush, stop (the shell's order)."""
        core = node.core
        assert core is not None
        core.resign(self.now // 1000)
        self._after(node)
        if not node.alive:
            return  # the resignation's writes failed: it stopped on a storage failure
        with contextlib.suppress(LogError):  # a failed last flush loses what it would keep
            node.log.flush()
        self.crash(node, torn=False)

    def _deliver(
        self, node_id: int, incarnation: int | None, src: int, src_incarnation: int, payload: Any
    ) -> None:
        node = self.nodes[node_id]
        if not node.alive or (incarnation is not None and incarnation != node.incarnation):
            return  # the connection this was sent on died with the old process
        if src >= 0 and src_incarnation <= self.nodes[src].silenced_incarnation:
            return
        if node.paused:
            node.inbox.append((src, payload))
            return
        self._handle(node, src, payload)

    def storage_failure(self, node: SimNode, exc: LogError) -> None:
        """What the real node does on a log-directory failure: the process stops (what was
        not fsync'd is lost) and its supervisor starts it again a second later; a damaged
        batch is noted for the restart to cut (kraft_spark.net.log_repair)."""
        self.trace.add(self.now, node.node_id, None, f"STORAGE FAILURE {exc}: process stops")
        if isinstance(exc, CorruptSegmentError):
            node.damaged_at = exc.offset
        self.crash(node, torn=False)
        self.at(self.now + RESTART_AFTER_US, self._supervised_restart, node.node_id)

    def _supervised_restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if not node.alive:
            self.start_node(node, disk_lost=False)

    def _handle(self, node: SimNode, src: int, payload: Any) -> None:
        try:
            self._handle_inner(node, src, payload)
        except LogError as exc:  # the core appends as it handles (a disk fault)
            self.storage_failure(node, exc)

    def _handle_inner(self, node: SimNode, src: int, payload: Any) -> None:
        core = node.core
        assert core is not None
        now_ms = self.now // 1000
        kind = payload[0]
        self.trace.add(self.now, node.node_id, src, payload[2])
        vote: VoteRequest | None = None  # a Vote (not a pre-vote), and the voter's state before
        before, own = node.persisted, (0, 0)
        if kind == "req":
            _, request_id, message, src_incarnation = payload
            if self.side_door is not None and self.side_door(node, src, request_id, message,
                                                             src_incarnation):
                return
            if (src < 0 and self.produce_gate is not None
                    and isinstance(message, ProduceRequest)):
                refused = self.produce_gate(src, message)
                if refused is not None:  # the core never sees it
                    self._send(node.node_id, src, ("resp", request_id, refused),
                               src_incarnation)
                    return
            if isinstance(message, VoteRequest) and not message.pre_vote:
                vote, own = message, (node.log.last_epoch(), node.log.end_offset())
            core.handle_request(now_ms, src, (src, request_id, src_incarnation), message)
        elif kind == "failed":
            _, request_id, _, refused = payload
            core.on_request_failed(now_ms, request_id, refused=refused)
        else:
            _, request_id, message = payload
            core.handle_response(now_ms, src, request_id, message)
        self._after(node)
        # The election restriction, checked on what the node persisted: a vote it gave now
        # went to a log at least as up to date as its own was.
        after = node.persisted
        if (vote is not None and after is not None and after is not before
                and after.voted_id == vote.candidate_id and after.epoch == vote.candidate_epoch):
            self.checker.on_vote_given(node.node_id, vote.candidate_id,
                                       (vote.last_offset_epoch, vote.last_offset), own)

    def _wake(self, node_id: int, incarnation: int, when: int) -> None:
        node = self.nodes[node_id]
        if not node.alive or node.incarnation != incarnation or node.wake_at != when:
            return  # a dead process, or superseded by an earlier wake-up
        node.wake_at = -1
        if node.paused:
            return  # resume() polls
        core = node.core
        assert core is not None
        try:
            core.poll(self.now // 1000)
        except LogError as exc:
            self.storage_failure(node, exc)
            return
        if core.next_deadline() <= self.now // 1000 and not core.replies and not core.sends:
            raise InvariantViolation(
                "liveness", f"node {node_id} busy-loops: a timer stays due after poll"
            )
        self._after(node)

    def resume(self, node: SimNode) -> None:
        node.paused = False
        while node.inbox and node.alive and not node.paused:
            src, payload = node.inbox.popleft()
            self._handle(node, src, payload)
        if node.alive and node.core is not None:
            try:
                node.core.poll(self.now // 1000)
            except LogError as exc:
                self.storage_failure(node, exc)
                return
            self._after(node)

    def _flush_done(self, node_id: int, incarnation: int) -> None:
        node = self.nodes[node_id]
        if not node.alive or node.incarnation != incarnation:
            return
        try:
            node.log.flush()
        except LogError as exc:
            node.flushing = False
            self.storage_failure(node, exc)
            return
        node.flushing = False
        if node.paused:
            node.flush_again = True
            return
        assert node.core is not None
        node.core.on_log_flushed(self.now // 1000)
        if node.flush_again:
            node.flush_again = False
            self._start_flush(node)
        self._after(node)

    def _start_flush(self, node: SimNode) -> None:
        if node.flushing:
            node.flush_again = True
            return
        node.flushing = True
        self.at(
            self.now + self.rng.randint(*self.fsync_latency_us),
            self._flush_done,
            node.node_id,
            node.incarnation,
        )

    def _after(self, node: SimNode) -> None:
        """``_carry_out``, where a write that fails (a disk fault) stops the process."""
        try:
            self._carry_out(node)
        except LogError as exc:
            self.storage_failure(node, exc)

    def _carry_out(self, node: SimNode) -> None:
        """Carry out the node's Ready in the documented order, then check invariants."""
        core = node.core
        assert core is not None
        nid = node.node_id
        checker = self.checker
        ready: Ready = core.take_ready()
        self.catch_up.note(nid, self.now, node.log.end_offset())
        if ready.persist is not None:
            node.persisted = ready.persist
            checker.on_persist(nid, ready.persist.epoch, ready.persist.voted_id)
        new_leader = False
        for event in ready.events:
            if isinstance(event, RoleChanged) and not event.started:
                if event.role is Role.CANDIDATE:
                    self.elections += 1
                new_leader = new_leader or event.role is Role.LEADER
            self.trace.add(self.now, nid, None, str(event))
        if ready.truncated_to is not None:
            checker.check_truncation(nid, ready.truncated_to)
        if core.role is Role.LEADER and new_leader:
            checker.on_leader(nid, core.epoch, node.log)
            note_new_leader(self, node)
            if self.on_new_leader is not None:
                self.on_new_leader(node)
        for out in ready.sends:
            self._send(nid, out.dest, ("req", out.request_id, out.message, node.incarnation))
        for reply in ready.replies:
            dest, request_id, dest_incarnation = _route(reply.token)
            if dest == ADMIN_ID:
                answer = f"voter change answered by n{nid}: {reply.message}"
                self.admin_answers.append(answer)
                self.trace.add(self.now, nid, None, answer)
                continue
            self._send(nid, dest, ("resp", request_id, reply.message), dest_incarnation)
        if ready.flush_log:
            self._start_flush(node)
        if ready.snapshot_installed is not None and self.snapshots is not None:
            self.snapshots.on_installed(nid, ready.snapshot_installed, node.log)
        if ready.high_watermark is not None:
            leading = core.epoch if core.role is Role.LEADER else None
            checker.on_high_watermark(nid, ready.high_watermark, leading, node.log)
            if self.snapshots is not None:
                self.snapshots.on_high_watermark(nid, ready.high_watermark, node.log)
            self.check_durability()
        checker.check_log(nid, node.log)
        deadline_us = ready.next_deadline_ms * 1000
        if node.wake_at < 0 or deadline_us < node.wake_at:
            node.wake_at = max(deadline_us, self.now)
            self.at(node.wake_at, self._wake, nid, node.incarnation, node.wake_at)

    def _send(self, src: int, dest: int, payload: Any, dest_incarnation: int | None = None) -> None:
        if dest < 0:
            for when in self.network.delivery_times(self.now, src, dest):
                self.at(when, self._client_receive, -dest - 1, payload)
            return
        src_incarnation = self.nodes[src].incarnation
        if payload[0] == "req" and not self.nodes[dest].alive:
            # A new connection to a host where the process is not running: refused.
            for when in self.network.delivery_times(self.now, src, dest):
                self.at(when, self._bounce, dest, src, src_incarnation, payload)
            return
        for when in self.network.delivery_times(self.now, src, dest):
            self.at(when, self._deliver, dest, dest_incarnation, src, src_incarnation, payload)

    def _bounce(self, dest: int, src: int, src_incarnation: int, payload: Any) -> None:
        """A request sent while ``dest`` was down reaches its host: if the process is back it
        is served, otherwise the host's kernel answers that nothing listens (the shell's
        ``on_request_failed(refused=True)``), unless the answer is lost on the way."""
        if self.nodes[dest].alive:
            self._deliver(dest, None, src, src_incarnation, payload)
            return
        for when in self.network.delivery_times(self.now, dest, src):
            self.at(when, self._failed, src, src_incarnation, dest, payload[1], True)

    def _failed(
        self, node_id: int, incarnation: int, dest: int, request_id: int, refused: bool
    ) -> None:
        """Node ``node_id``'s shell learns that its request to ``dest`` will not be answered."""
        node = self.nodes[node_id]
        if not node.alive or node.incarnation != incarnation:
            return
        text = "connection refused" if refused else "connection reset"
        payload = ("failed", request_id, text, refused)
        if node.paused:
            node.inbox.append((dest, payload))
            return
        self._handle(node, dest, payload)

    def check_durability(self) -> None:
        """The committed log is durably on a majority and no voter lacking it can be elected
        (sim/durability.py)."""
        self.durability.check(self.nodes, self.voter_ids, self.current_leader())

    def submit_voter_change(self, node: SimNode, request: Request) -> None:
        """Hand an AddRaftVoter / RemoveRaftVoter to ``node`` (the reconfig fault)."""
        core = node.core
        assert core is not None
        self.trace.add(self.now, node.node_id, None, f"ADMIN {request}")
        note_voter_change(self, node, request)
        self._handle_admin(node, request)

    def _handle_admin(self, node: SimNode, request: Request) -> None:
        core = node.core
        if core is None or not node.alive or node.paused:
            return
        before = core.voter_set.ids()
        try:
            core.handle_request(self.now // 1000, ADMIN_ID, (ADMIN_ID, 0, None), request)
        except LogError as exc:
            self.storage_failure(node, exc)
            return
        for added in set(core.voter_set.ids()) - set(before):
            self.catch_up.check_added(node.node_id, added, self.now)
        self._after(node)

    def voter_changes_committed(self) -> int:
        return sum(1 for a in self.admin_answers if "error=<ErrorCode.NONE" in a)

    def current_leader(self) -> SimNode | None:
        """The live leader of the highest epoch, if any."""
        leaders = [n for n in self.nodes.values()
                   if n.alive and n.core is not None and n.core.role is Role.LEADER]
        return max(leaders, key=lambda n: n.core.epoch if n.core else -1, default=None)

    def voter_logs(self) -> dict[int, MemoryLog]:
        return {i: self.nodes[i].log for i in self.voter_ids}

    def catching_up_voters(self) -> set[int]:
        return catching_up(self.nodes, self.voter_ids)

    def excused(self) -> int:
        return len(self.catching_up_voters())

    # ------------------------------------------------------------------ clients

    def _client_send(self, client: SimClient) -> None:
        if not self.clients_running:
            return
        self._seq += 1
        client.request_id = self._seq
        client.attempt_deadline = self.now + CLIENT_TIMEOUT_MS * 1000
        request = ProduceRequest(
            records=(Record(f"k{client.seq % 7}".encode(), client.value(), self.now // 1000),),
            timeout_ms=CLIENT_TIMEOUT_MS - 500,
            producer_id=client.producer_id,
            producer_epoch=0,
            base_sequence=client.seq,
        )
        payload = ("req", client.request_id, request, None)
        for when in self.network.delivery_times(self.now, client.client_id, client.target):
            self.at(when, self._deliver, client.target, None, client.client_id, 0, payload)
        self.at(client.attempt_deadline, self._client_timeout, client, client.request_id)

    def _client_timeout(self, client: SimClient, request_id: int) -> None:
        if client.request_id == request_id:
            client.target = self.rng.choice(self.voter_ids)
            self._client_send(client)

    def _client_receive(self, index: int, payload: Any) -> None:
        if index >= STORE_CLIENT_BASE and self.store_clients is not None:  # store_clients.py
            self.store_clients.receive(index - STORE_CLIENT_BASE, payload)
            return
        client = self.clients[index]
        _, request_id, message = payload
        if request_id != client.request_id or not isinstance(message, ProduceResponse):
            return  # a duplicate or an answer to an abandoned attempt
        client.request_id = 0
        if message.error == ErrorCode.NONE:
            self.checker.on_ack(client.client_id, client.value(), message.base_offset)
            client.seq += 1
            client.acked += 1
            self.acks += 1
            self.last_ack_us = self.now
            self.at(self.now + self.rng.randint(*self.client_think_us), self._client_send, client)
            return
        if message.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            raise InvariantViolation(
                "acknowledged-exactly-once",
                f"leader lost producer {client.producer_id}'s sequence before {client.seq}",
            )
        client.target, delay = retry_target(self.rng, self.voter_ids, client.target,
                                            message.leader_id)
        self.at(self.now + delay, self._client_send, client)


def _route(token: object) -> tuple[int, int, int | None]:
    """The simulator's reply token: (requester, its request id, its incarnation)."""
    assert isinstance(token, tuple) and len(token) == 3
    return token[0], token[1], token[2]
