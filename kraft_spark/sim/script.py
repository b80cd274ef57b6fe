"""Scripted scenarios: a manually stepped cluster of real ``RaftCore`` nodes, driven by commands.

In the style of etcd-io/raft's ``testdata/*.txt``: a scenario file is a list of cases, each a
command line, a ``----`` line and the command's expected (golden) output, cases separated by a
blank line; lines starting with ``#`` between cases are comments::

    campaign 1
    ----
    n1 @1582: timer
      n1: became Candidate(epoch=1)
      n1: persist epoch=1 leader=- voted=1

Nothing happens unless a command says so: there is no background clock, no automatic delivery and
no automatic fsync. Every node is a ``RaftCore`` over a ``MemoryLog`` with ``QuorumConfig()``
defaults except ``hw_wakeup_delay_ms=0`` and ``lone_append_hold_ms=0`` (a leader tells parked
followers a new high watermark at once, and hands a lone append to every parked follower at once,
as Kafka does, so each step of a script shows it; the random simulation keeps the defaults)
and ``random.Random(seed + node_id)`` (``seed + node_id + 1000 × restarts`` after a restart).
Each node has its own virtual clock in milliseconds (all start at 0), so one node's timer can fire
without firing anyone else's. After every input the node's ``Ready`` is carried out
in its documented order: quorum-state is persisted (synchronously), then its requests and replies
enter the node's outbox; a requested log flush is only remembered until a ``flush`` (or
``stabilize``) command performs it and calls ``on_log_flushed``.

Output: each command prints what happened, deterministically. A delivered message prints as
``nA -> nB <describe(message)>`` (``kraft_spark.sim.trace.describe``) followed, indented, by the
receiver's reaction: ``became``/``truncated``/``resigned`` events, ``persist`` (the quorum-state
written), ``hw -> N`` (high watermark moved) and replies to clients. Messages are not printed when
sent, only when delivered or dropped (``pending`` lists them). A poll that fired a timer and did
something visible prints as ``nID @T: timer`` (T on that node's clock) before its reaction. A
command that printed nothing prints ``ok``.

Commands (node ids are integers; ``ID`` may also be written ``node=ID``):

``add-nodes N [observers=K] [seed=S]``
    Create voters 1..N and observers N+1..N+K (once per script; seed defaults to 0).
``tick ID ms=N``
    Advance node ID's clock by N ms, calling ``poll`` at each of its deadlines on the way.
``advance ms=N``
    ``tick`` every live node by N ms, in id order (no message is delivered meanwhile).
``campaign ID``
    Move node ID's clock to the moment its own timer starts an election (election timeout,
    fetch timeout, or a candidate's timeout and backoff) and poll there, until it is a
    Candidate (or Leader) of a higher epoch. Leaders, observers and catching-up voters refuse.
``propose ID value=V [timeout=MS]``
    A client sends node ID a Produce (acks=-1) of one record with value V (timeout 10000 ms).
    The answer, whenever the node gives it, prints as ``nID: client <- ProduceResp(...)``.
``deliver [from=A] [to=B] [type=T] [count=N] [drop=true] [refuse=true]``
    Deliver (or drop) the messages pending when the command starts, oldest first, that match
    the filters: sender, receiver, message type (``Vote``, ``VoteResp``, ``BeginQuorumEpoch``,
    ``BeginQuorumEpochResp``, ``EndQuorumEpoch``, ``EndQuorumEpochResp``, ``Fetch``,
    ``FetchResp``), at most N of them. Replies produced meanwhile wait for the next command.
    With ``refuse=true`` a request to a node that is down is refused by its host (nothing
    listens on its port) instead of silently lost: the sender's core hears
    ``on_request_failed(refused=True)``, and its reaction prints under the message.
``pending``
    List the pending messages, oldest first.
``flush ID`` / ``flush``
    fsync node ID's log (or every live node's log that has unflushed writes), then call
    ``on_log_flushed``.
``stabilize``
    Repeat {deliver every pending message; flush every live node with unflushed writes} until
    nothing is pending. Time does not move (parked Fetches stay parked).
``crash ID``
    The process dies: writes not flushed are lost (``MemoryLog.crashed(rng, torn=False)``), its
    outbox is lost, the last persisted quorum-state is kept. Messages to it are dropped.
``restart ID [disk-lost=true]``
    Start a new core on what survived; with ``disk-lost=true`` on an empty log and no
    quorum-state, telling the core its disk was lost (docs/concepts/protocol.md).
``partition A,B|C[|D...]``
    Replace the partition: nodes of different groups cannot talk (unlisted nodes talk to all).
    A message is dropped when delivered if its two ends are partitioned now or were when it was
    sent. ``heal`` removes the partition.
``resign ID``
    Graceful shutdown of a leader: ``RaftCore.resign`` (EndQuorumEpoch to the voters).
``describe-quorum ID``
    A client asks node ID for DescribeQuorum: the leader's view of every replica's end offset.
``status``
    One line per node: role, epoch, leader, vote, log end, flushed offset, high watermark, clock.
``timers``
    Each live node's next deadline (``RaftCore.next_deadline``) on its own clock.
``log ID``
    Node ID's batches: offsets, epoch, control (LeaderChange) or data values, unflushed marks.

Assertions (print ``ok``; fail the scenario with ``ScenarioAssertionError`` otherwise):
``expect-role ID ROLE`` (Leader, Follower, Candidate, Unattached, Resigned or Down),
``expect-epoch ID N``, ``expect-leader ID N`` (-1: none), ``expect-voted ID N``,
``expect-hw ID N``, ``expect-log-end ID N``, ``expect-flushed ID N``,
``expect-catching-up ID true|false``, ``expect-data ID V1,V2,...`` (the data values in the log,
in order; ``-`` for none), ``expect-pending N [from=A] [to=B] [type=T]`` (pending messages
matching the filters of ``deliver``), ``expect-converged A,B,...`` (identical logs).

``run_file`` runs a scenario file and returns the file as it should read with the actual
outputs; ``KRAFT_SPARK_REWRITE=1`` in the test makes it rewrite the golden file. A scenario whose
leading comments hold ``# xfail: reason`` exposes a known core bug: its assertions state the
correct behaviour and fail until the core is fixed. ``python -m kraft_spark.sim.script_files FILE``
prints a run case by case.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable

from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.messages import (
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
)
from kraft_spark.raft.records import Record
from kraft_spark.raft.state import PersistedState, Role
from kraft_spark.sim.memlog import MemoryLog
from kraft_spark.sim.script_base import (
    CLIENT_ID,
    CLUSTER_ID,
    DEFAULT_PRODUCE_TIMEOUT_MS,
    MAX_POLLS_AT_ONE_INSTANT,
    MAX_STABILIZE_ROUNDS,
    RESTART_SEED_STRIDE,
    Args,
    Envelope,
    ScenarioError,
    ScriptNode,
    batch_body,
    fmt_id,
    message_type,
    parse_bool,
    parse_int,
    quorum_lines,
)
from kraft_spark.sim.script_expect import ExpectCommands
from kraft_spark.sim.trace import describe


class ScriptedCluster(ExpectCommands):
    """The harness: nodes, their outboxes, the partition, and the command interpreter."""

    def __init__(self, core_class: type[RaftCore] = RaftCore) -> None:
        self.core_class = core_class
        self.nodes: dict[int, ScriptNode] = {}
        self.voters: tuple[int, ...] = ()
        self.seed = 0
        # Kafka's exact timers: the scenarios are written against them (no fetch jitter).
        self.config = QuorumConfig(hw_wakeup_delay_ms=0, lone_append_hold_ms=0,
                                   fetch_timeout_jitter_ms=0)
        self.blocked: set[tuple[int, int]] = set()
        self._seq = 0
        self._client_token = 0
        self._out: list[str] = []
        self._commands: dict[str, Callable[[Args], None]] = {
            "add-nodes": self.cmd_add_nodes,
            "tick": self.cmd_tick,
            "advance": self.cmd_advance,
            "campaign": self.cmd_campaign,
            "propose": self.cmd_propose,
            "deliver": self.cmd_deliver,
            "pending": self.cmd_pending,
            "flush": self.cmd_flush,
            "stabilize": self.cmd_stabilize,
            "crash": self.cmd_crash,
            "restart": self.cmd_restart,
            "partition": self.cmd_partition,
            "heal": self.cmd_heal,
            "resign": self.cmd_resign,
            "status": self.cmd_status,
            "log": self.cmd_log,
            "describe-quorum": self.cmd_describe_quorum,
            "timers": self.cmd_timers,
            "expect-role": self.cmd_expect_role,
            "expect-epoch": self.cmd_expect_epoch,
            "expect-leader": self.cmd_expect_leader,
            "expect-voted": self.cmd_expect_voted,
            "expect-hw": self.cmd_expect_hw,
            "expect-log-end": self.cmd_expect_log_end,
            "expect-flushed": self.cmd_expect_flushed,
            "expect-catching-up": self.cmd_expect_catching_up,
            "expect-data": self.cmd_expect_data,
            "expect-pending": self.cmd_expect_pending,
            "expect-converged": self.cmd_expect_converged,
        }

    # ------------------------------------------------------------------ running commands

    def run(self, command: str) -> str:
        """Run one command line; returns its output (``ok`` when it printed nothing)."""
        words = shlex.split(command)
        if not words:
            raise ScenarioError("empty command")
        handler = self._commands.get(words[0])
        if handler is None:
            raise ScenarioError(f"unknown command {words[0]!r}")
        if words[0] != "add-nodes" and not self.nodes:
            raise ScenarioError("add-nodes must come first")
        self._out = []
        args = Args.parse(words[1:])
        handler(args)
        args.finish()
        lines = self._out or ["ok"]
        return "\n".join(line.rstrip() for line in lines)

    def _print(self, line: str) -> None:
        if not line.strip():
            raise ScenarioError("output lines may not be blank (they end a case)")
        self._out.append(line)

    def node(self, node_id: int) -> ScriptNode:
        node = self.nodes.get(node_id)
        if node is None:
            raise ScenarioError(f"no node {node_id}")
        return node

    def core(self, node_id: int) -> RaftCore:
        core = self.node(node_id).core
        if core is None:
            raise ScenarioError(f"n{node_id} is down")
        return core

    # ------------------------------------------------------------------ the Ready

    def _process(self, node: ScriptNode, indent: str = "", header: str | None = None) -> None:
        """Carry out the node's Ready in its documented order and print what it did. With a
        ``header``, the header is printed only if the Ready had something to show."""
        core = node.core
        assert core is not None
        ready = core.take_ready()
        lines: list[str] = []
        tag = f"n{node.node_id}:"
        for note in ready.events:
            lines.append(f"{tag} {note}")
        # 1. persist before anything leaves the node.
        if ready.persist is not None:
            node.persisted = ready.persist
            p = ready.persist
            extra = " catching-up" if p.pending_catch_up else ""
            lines.append(
                f"{tag} persist epoch={p.epoch} leader={fmt_id(p.leader_id)} "
                f"voted={fmt_id(p.voted_id)}{extra}"
            )
        # 2. requests and replies enter the outbox (clients are answered directly).
        for out in ready.sends:
            self._enqueue(node, out.dest, True, out.request_id, out.message)
        for reply in ready.replies:
            token = reply.token
            assert isinstance(token, tuple) and len(token) == 2
            dest, request_id = token
            if dest == CLIENT_ID:
                lines.append(f"{tag} client <- {describe(reply.message)}")
                if isinstance(reply.message, ProduceResponse) and reply.message.message:
                    lines.append(f"{tag}   ({reply.message.message})")
                if isinstance(reply.message, DescribeQuorumResponse):
                    lines.extend(f"{tag}   {line}" for line in quorum_lines(reply.message))
            else:
                self._enqueue(node, dest, False, request_id, reply.message)
        # 3. a flush waits for a command.
        if ready.flush_log:
            node.flush_requested = True
        # 4. the high watermark.
        if ready.high_watermark is not None:
            lines.append(f"{tag} hw -> {ready.high_watermark}")
        if lines and header is not None:
            self._print(f"{indent}{header}")
            indent += "  "
        for line in lines:
            self._print(f"{indent}{line}")

    def _enqueue(
        self,
        node: ScriptNode,
        dest: int,
        is_request: bool,
        request_id: int,
        message: Request | Response,
    ) -> None:
        self._seq += 1
        dst_node = self.node(dest)
        node.outbox.append(
            Envelope(
                seq=self._seq,
                src=node.node_id,
                dst=dest,
                is_request=is_request,
                request_id=request_id,
                message=message,
                dst_incarnation=dst_node.incarnation,
                blocked_at_send=self._blocked(node.node_id, dest),
            )
        )

    def _blocked(self, a: int, b: int) -> bool:
        return (min(a, b), max(a, b)) in self.blocked

    # ------------------------------------------------------------------ nodes

    def _start(self, node: ScriptNode, *, disk_lost: bool) -> None:
        rng = random.Random(self.seed + node.node_id + RESTART_SEED_STRIDE * node.incarnation)
        node.incarnation += 1
        node.flush_requested = False
        node.core = self.core_class(
            node_id=node.node_id,
            cluster_id=CLUSTER_ID,
            voters=self.voters,
            log=node.log,
            config=self.config,
            rng=rng,
            now_ms=node.clock,
            persisted=node.persisted,
            disk_lost=disk_lost,
        )
        self._process(node)

    def cmd_add_nodes(self, args: Args) -> None:
        if self.nodes:
            raise ScenarioError("add-nodes may be used once")
        if not args.positional:
            raise ScenarioError("add-nodes N")
        n = parse_int(args.positional.pop(0), "N")
        observers = args.int_opt("observers", 0)
        self.seed = args.int_opt("seed", 0)
        if n < 1 or observers < 0:
            raise ScenarioError("need at least one voter")
        self.voters = tuple(range(1, n + 1))
        for node_id in range(1, n + observers + 1):
            self.nodes[node_id] = ScriptNode(node_id, node_id in self.voters)
        for node in self.nodes.values():
            self._start(node, disk_lost=False)

    def cmd_crash(self, args: Args) -> None:
        node = self.node(args.node())
        if node.core is None:
            raise ScenarioError(f"n{node.node_id} is already down")
        before = node.log.end_offset()
        lost_messages = len(node.outbox)
        node.core = None
        node.outbox.clear()
        node.flush_requested = False
        node.log = node.log.crashed(random.Random(self.seed), torn=False)
        self._print(
            f"n{node.node_id}: crashed; log end {before} -> {node.log.end_offset()}, "
            f"{lost_messages} unsent message(s) lost"
        )

    def cmd_restart(self, args: Args) -> None:
        node = self.node(args.node())
        disk_lost = parse_bool(args.opt("disk-lost", "false") or "false")
        if node.core is not None:
            raise ScenarioError(f"n{node.node_id} is running; crash it first")
        if disk_lost:
            node.log = MemoryLog()
            node.persisted = None
        self._start(node, disk_lost=disk_lost)

    def cmd_resign(self, args: Args) -> None:
        node = self.node(args.node())
        core = self.core(node.node_id)
        if core.role is not Role.LEADER:
            raise ScenarioError(f"n{node.node_id} is not the leader")
        core.resign(node.clock)
        self._process(node)

    # ------------------------------------------------------------------ time

    def _tick(self, node: ScriptNode, ms: int) -> None:
        core = node.core
        assert core is not None
        target = node.clock + ms
        polls_at_instant = 0
        while True:
            due = core.next_deadline()
            if due > target:
                break
            if due == node.clock:
                polls_at_instant += 1
                if polls_at_instant > MAX_POLLS_AT_ONE_INSTANT:
                    raise ScenarioError(f"n{node.node_id} busy-loops at {due}: a timer stays due")
            else:
                polls_at_instant = 0
            node.clock = max(node.clock, due)
            core.poll(node.clock)
            self._process(node, header=f"n{node.node_id} @{node.clock}: timer")
        node.clock = target

    def cmd_tick(self, args: Args) -> None:
        node = self.node(args.node())
        ms = args.int_opt("ms")
        if node.core is None:
            raise ScenarioError(f"n{node.node_id} is down")
        self._tick(node, ms)

    def cmd_advance(self, args: Args) -> None:
        ms = args.int_opt("ms")
        for node in self.nodes.values():
            if node.core is not None:
                self._tick(node, ms)
            else:
                node.clock += ms

    def cmd_campaign(self, args: Args) -> None:
        node = self.node(args.node())
        core = self.core(node.node_id)
        if not core.may_vote:
            raise ScenarioError(f"n{node.node_id} may not campaign (observer or catching up)")
        if core.role is Role.LEADER:
            raise ScenarioError(f"n{node.node_id} is the leader")
        start_epoch = core.epoch
        for _ in range(4):
            if core.role in (Role.CANDIDATE, Role.LEADER) and core.epoch > start_epoch:
                return
            role = core.role
            if role is Role.FOLLOWER:
                when = core.followed.fetch_deadline
            elif role in (Role.CANDIDATE, Role.PROSPECTIVE):
                when = core.campaigning.next_step_at(core.election_deadline)
            else:  # Unattached, Resigned, or waiting for its election timeout
                when = core.election_deadline
            node.clock = max(node.clock, when)
            # A scripted campaign skips the pre-vote round (KIP-996): the script says who runs.
            core.campaign_now(node.clock)
            self._process(node, header=f"n{node.node_id} @{node.clock}: timer")
        raise ScenarioError(f"n{node.node_id} did not start an election")

    # ------------------------------------------------------------------ clients

    def cmd_propose(self, args: Args) -> None:
        node = self.node(args.node())
        core = self.core(node.node_id)
        value = args.opt("value")
        if value is None:
            raise ScenarioError("propose ID value=V")
        timeout = args.int_opt("timeout", DEFAULT_PRODUCE_TIMEOUT_MS)
        self._client_token += 1
        request = ProduceRequest(
            records=(Record(None, value.encode(), node.clock),), timeout_ms=timeout
        )
        core.handle_request(node.clock, CLIENT_ID, (CLIENT_ID, self._client_token), request)
        self._process(node)

    def cmd_describe_quorum(self, args: Args) -> None:
        node = self.node(args.node())
        core = self.core(node.node_id)
        self._client_token += 1
        core.handle_request(
            node.clock, CLIENT_ID, (CLIENT_ID, self._client_token), DescribeQuorumRequest()
        )
        self._process(node)

    # ------------------------------------------------------------------ the network

    def _pending(self) -> list[Envelope]:
        return sorted(
            (env for node in self.nodes.values() for env in node.outbox), key=lambda e: e.seq
        )

    def _line(self, env: Envelope) -> str:
        return f"n{env.src} -> n{env.dst} {describe(env.message)}"

    def _deliver(self, env: Envelope, drop: bool, refuse: bool = False) -> None:
        src = self.nodes[env.src]
        src.outbox.remove(env)
        dst = self.nodes[env.dst]
        line = self._line(env)
        reason = None
        if drop:
            reason = "dropped"
        elif env.blocked_at_send or self._blocked(env.src, env.dst):
            reason = "dropped: partitioned"
        elif dst.core is None and refuse and env.is_request and src.core is not None:
            self._print(f"{line} [refused: n{env.dst} is down]")
            src.core.on_request_failed(src.clock, env.request_id, refused=True)
            self._process(src, indent="  ")
            return
        elif dst.core is None:
            reason = f"dropped: n{env.dst} is down"
        elif dst.incarnation != env.dst_incarnation:
            reason = f"dropped: n{env.dst} restarted"
        if reason is not None:
            self._print(f"{line} [{reason}]")
            return
        core = dst.core
        assert core is not None
        message = env.message
        if env.is_request:
            assert isinstance(message, Request)
            core.handle_request(dst.clock, env.src, (env.src, env.request_id), message)
        else:
            assert isinstance(message, Response)
            core.handle_response(dst.clock, env.src, env.request_id, message)
        self._print(line)
        self._process(dst, indent="  ")

    def _select(self, args: Args) -> list[Envelope]:
        """The pending messages matching ``from=``, ``to=`` and ``type=``, oldest first."""
        src = args.opt("from")
        dst = args.opt("to")
        kind = args.opt("type")
        src_id = None if src is None else parse_int(src, "from")
        dst_id = None if dst is None else parse_int(dst, "to")
        return [
            env
            for env in self._pending()
            if (src_id is None or env.src == src_id)
            and (dst_id is None or env.dst == dst_id)
            and (kind is None or message_type(env.message) == kind)
        ]

    def cmd_deliver(self, args: Args) -> None:
        chosen = self._select(args)
        count = args.int_opt("count", -1)
        drop = parse_bool(args.opt("drop", "false") or "false")
        refuse = parse_bool(args.opt("refuse", "false") or "false")
        if count >= 0:
            chosen = chosen[:count]
        for env in chosen:
            self._deliver(env, drop, refuse)

    def cmd_pending(self, args: Args) -> None:
        for env in self._pending():
            self._print(self._line(env))

    def cmd_partition(self, args: Args) -> None:
        if len(args.positional) != 1:
            raise ScenarioError("partition A,B|C,D")
        groups = [
            [parse_int(x, "node") for x in group.split(",") if x]
            for group in args.positional.pop().split("|")
        ]
        if len(groups) < 2:
            raise ScenarioError("a partition needs at least two groups")
        self.blocked = set()
        for i, group in enumerate(groups):
            for other in groups[i + 1 :]:
                for a in group:
                    for b in other:
                        self.node(a)
                        self.node(b)
                        self.blocked.add((min(a, b), max(a, b)))

    def cmd_heal(self, args: Args) -> None:
        self.blocked = set()

    # ------------------------------------------------------------------ disks

    def _flush(self, node: ScriptNode) -> None:
        core = node.core
        assert core is not None
        flushed = node.log.flush()
        node.flush_requested = False
        self._print(f"n{node.node_id}: flushed to {flushed}")
        core.on_log_flushed(node.clock)
        self._process(node, indent="  ")

    def cmd_flush(self, args: Args) -> None:
        if args.positional or "node" in args.options:
            node = self.node(args.node())
            if node.core is None:
                raise ScenarioError(f"n{node.node_id} is down")
            self._flush(node)
            return
        for node in self.nodes.values():
            if node.core is not None and node.needs_flush():
                self._flush(node)

    def cmd_stabilize(self, args: Args) -> None:
        for _ in range(MAX_STABILIZE_ROUNDS):
            pending = self._pending()
            for env in pending:
                self._deliver(env, drop=False)
            flushed = False
            for node in self.nodes.values():
                if node.core is not None and node.needs_flush():
                    self._flush(node)
                    flushed = True
            if not pending and not flushed:
                return
        raise ScenarioError(f"not stable after {MAX_STABILIZE_ROUNDS} rounds")

    # ------------------------------------------------------------------ inspection

    def _role_name(self, node: ScriptNode) -> str:
        return "Down" if node.core is None else node.core.role.value

    def cmd_status(self, args: Args) -> None:
        for node in self.nodes.values():
            kind = "" if node.is_voter else " observer"
            log = node.log
            core = node.core
            if core is None:
                p = node.persisted or PersistedState(epoch=0)
                self._print(
                    f"n{node.node_id}: Down{kind} (quorum-state epoch={p.epoch} "
                    f"leader={fmt_id(p.leader_id)} voted={fmt_id(p.voted_id)}) "
                    f"end={log.end_offset()} clock={node.clock}"
                )
                continue
            flags = kind + (" catching-up" if core.pending_catch_up else "")
            self._print(
                f"n{node.node_id}: {core.role.value:<10} epoch={core.epoch} "
                f"leader={fmt_id(core.known_leader())} voted={fmt_id(core.voted_id)} "
                f"end={log.end_offset()} flushed={log.flushed_offset()} "
                f"hw={core.high_watermark} clock={node.clock}{flags}"
            )

    def cmd_timers(self, args: Args) -> None:
        for node in self.nodes.values():
            if node.core is None:
                self._print(f"n{node.node_id}: down")
                continue
            due = node.core.next_deadline()
            self._print(f"n{node.node_id}: next timer at {due} (in {due - node.clock} ms)")

    def cmd_log(self, args: Args) -> None:
        node = self.node(args.node())
        log = node.log
        hw = node.core.high_watermark if node.core is not None else "?"
        self._print(
            f"n{node.node_id} log: end={log.end_offset()} flushed={log.flushed_offset()} hw={hw}"
        )
        if not log.batches():
            self._print("  (empty)")
        for batch in log.batches():
            span = (
                str(batch.base_offset)
                if batch.base_offset == batch.last_offset
                else f"{batch.base_offset}..{batch.last_offset}"
            )
            mark = " (unflushed)" if batch.last_offset >= log.flushed_offset() else ""
            self._print(f"  [{span}] e{batch.epoch} {batch_body(batch)}{mark}")
