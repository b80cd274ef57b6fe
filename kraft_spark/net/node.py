"""``RaftNode``: the asyncio shell that runs one ``RaftCore`` over TCP and a ``SegmentedLog``.

Everything the core decides happens on the event loop thread; the shell only carries out each
``Ready`` in the order ``kraft_spark.raft.ready`` documents:

1. **persist** quorum-state on a worker thread; every later Ready waits in ``_backlog`` until it
   is on disk, so no message that depends on a vote or an epoch leaves before the vote does;
2. **send and reply**: requests go to peers through one pipelined connection each, their
   answers coming back as callbacks (``node_peers.PeerRequests``); replies go back on the
   connection the request came from, Fetch's on the hand-written codecs (``fast_wire``);
3. **flush the log** with group commit (``node_flush.GroupCommit``): one flush at a time, so
   N concurrent appends cost one fsync; inline on the loop, after this Ready's messages went
   out, while the disk is fast (handing a fast fsync to the disk thread and back costs two loop
   wake-ups, about as much as the fsync), on the disk thread once it is slow;
4. **high watermark**: listeners (the sidecar, the driver's materializer) are told.

Local requests: ``submit_local`` hands the core a client request from this process (the
embedded HTTP API's, ``embedded_http``), its answer a callback (``local_requests``). ``stop``
stops that HTTP server first and fails local requests still unanswered with
``NodeStoppedError``. A peer's refused connection (``ECONNREFUSED``) reaches the core as
``on_request_failed(refused=True)``: followers of a killed leader campaign early.

Timers: after every input the shell re-arms one timer for ``Ready.next_deadline_ms``. The clock
is wall-clock milliseconds (DescribeQuorum reports wall-clock timestamps); the core never lets
its clock go backwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kraft_spark.log.errors import CorruptSegmentError, LogError
from kraft_spark.log.segmented_log import SegmentedLog
from kraft_spark.net.cluster_acl import refused_unauthorized
from kraft_spark.net.config import NodeConfig
from kraft_spark.net.cpu_placement import AFFINITY_ROLE, RolePlacement
from kraft_spark.net.embedded_http import EmbeddedHttpFactory, EmbeddedHttpServer
from kraft_spark.net.frame_server import FrameServer, ServerConnection
from kraft_spark.net.local_requests import (
    LocalCallback,
    LocalRequest,
    LocalToken,
    NodeStoppedError,
)
from kraft_spark.net.log_repair import note_damage, open_with_repair
from kraft_spark.net.node_flush import GroupCommit
from kraft_spark.net.node_listener import node_listener
from kraft_spark.net.node_peers import PeerRequests
from kraft_spark.net.node_voters import (
    VoterEndpoints,
    directory_of,
    local_endpoints,
    static_voter_set,
)
from kraft_spark.net.produce_gate import ProduceGate
from kraft_spark.net.reply_token import Token, wall_ms
from kraft_spark.net.scrub import LogScrubber
from kraft_spark.net.state_keeper import StateKeeper, Storage, open_storage
from kraft_spark.net.stats import NodeStats
from kraft_spark.net.storage_failure import STORAGE_FAILURE_EXIT, storage_failure_text
from kraft_spark.protocol import ApiKey, RequestHeader, decode_request
from kraft_spark.protocol.fast_wire import (
    FETCH_VERSION,
    decode_fetch_request,
    encode_fetch_response,
)
from kraft_spark.protocol.wire import (
    VERSIONS,
    WireError,
    error_response_body,
    request_from_wire,
    response_to_wire,
)
from kraft_spark.protocol.wire_leases import SideHandler, not_here
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.events import RoleChanged
from kraft_spark.raft.messages import FetchRequest, FetchResponse, request_source
from kraft_spark.raft.ready import Ready
from kraft_spark.raft.state import PersistedState, Role
from kraft_spark.store.reserved_headers import Standing

log = logging.getLogger(__name__)


class RaftNode:
    """One voter or observer. ``await start()``, then ``await stop()``."""

    def __init__(
        self, config: NodeConfig, *, lock_timeout_s: float = 30.0,
        http: EmbeddedHttpFactory | None = None,
    ) -> None:
        """``http`` starts the embedded HTTP API when ``kraft.http.listener`` is set."""
        self.config = config
        self.node_id = config.node_id
        self._lock_timeout_s = lock_timeout_s
        self._log: SegmentedLog | None = None
        self._keeper: StateKeeper | None = None
        self.scrubber: LogScrubber | None = None  # net.scrub, once started
        self._core: RaftCore | None = None
        self.cluster_id = ""
        self._server: FrameServer | None = None
        self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"node-{config.node_id}-disk")
        # kraft.cpu.affinity=role: the leader and the others on separate CPUs (one machine).
        self._placement = (
            RolePlacement.for_this_process() if config.cpu_affinity == AFFINITY_ROLE else None
        )
        self._backlog: deque[Ready] = deque()
        self._persisting = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = -1
        self._timer_due = 0.0  # loop time at which the armed timer fires
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self._failed: BaseException | None = None
        self._done: asyncio.Future[None] | None = None
        self.high_watermark = 0
        self._hw_listeners: list[Callable[[int], None]] = []
        self.stats = NodeStats()
        self._group_commit = GroupCommit(
            log=lambda: self.log, stopping=lambda: self._stopping, flushed=self._log_flushed,
            fail=self._fail, spawn=self._spawn, worker=self._worker,
            inline_max_ms=config.inline_flush_max_ms, stats=self.stats,
        )
        self._local: set[LocalToken] = set()
        self._produce_gate = ProduceGate(config)
        self.side_requests: dict[int, SideHandler] = {ApiKey.LEASE_COUNTDOWN: not_here}
        self.lease_desk: Any = None  # serves LeaseCountdown beside the core (lease_keepalive)
        # True while a local request's callback runs (inside _dispatch): a submission from it
        # drains on the next loop turn (_drain_soon), not nested in this Ready.
        self._settling_local = False
        self._drain_soon = False
        self._http_factory = http
        self._http: EmbeddedHttpServer | None = None
        self._http_stop: asyncio.Future[None] | None = None
        self.voter_endpoints = VoterEndpoints(
            config, core=lambda: self._core, cluster_id=lambda: self.cluster_id,
            stopping=lambda: self._stopping, spawn=self._spawn, hand_to_core=self._hand_to_core,
        )
        self._peer_requests = PeerRequests(
            config, self.node_id, voter_address=self.voter_endpoints.address,
            core=lambda: self._core, stopping=lambda: self._stopping, drain=self._drain,
            fail=self._fail,
        )

    # ------------------------------------------------------------------ life cycle

    @property
    def core(self) -> RaftCore:
        assert self._core is not None, "node not started"
        return self._core

    @property
    def log(self) -> SegmentedLog:
        assert self._log is not None, "node not started"
        return self._log

    @property
    def keeper(self) -> StateKeeper:
        """The state machine, its snapshots and retention (KIP-630)."""
        assert self._keeper is not None, "node not started"
        return self._keeper

    def _observer_hold(self) -> int | None:
        """Retention's observer hold; only the leader knows it, other voters hold nothing."""
        ls = self._core.leader_state if self._core is not None else None
        return ls.progress.lowest_observer_offset() if ls is not None else None

    @property
    def port(self) -> int:
        return self._server.port if self._server is not None else self.config.port

    @property
    def http(self) -> EmbeddedHttpServer | None:
        """The embedded HTTP API (``kraft.http.listener``) while it serves, else None."""
        return self._http

    @property
    def http_url(self) -> str | None:
        """``http://host:port`` of the embedded HTTP API while it serves, else None."""
        return self._http.url if self._http is not None else None

    @property
    def is_leader(self) -> bool:
        """This node leads (and is running): a Produce handed to ``submit_local`` now is
        appended to its log, or refused for its content, never for want of leadership."""
        core = self._core
        return (core is not None and not self._stopping and self._failed is None
                and core.role is Role.LEADER)

    async def start(self) -> None:
        """Open (and recover) the log, start the core and the listener."""
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        cfg = self.config

        def build(storage: Storage, repaired: bool) -> None:
            self._log = storage.log
            self._keeper = StateKeeper(storage, cfg.snapshots, node_id=cfg.node_id,
                                       now_ms=wall_ms, observer_hold=self._observer_hold)
            meta = self._log.meta
            assert meta is not None
            self.cluster_id = meta.cluster_id
            stored = self._log.read_quorum_state()
            self._core = RaftCore(
                node_id=cfg.node_id, cluster_id=self.cluster_id, voters=sorted(cfg.voters),
                log=self._log, config=cfg.quorum, rng=random.Random(), now_ms=wall_ms(),
                persisted=PersistedState.from_json_dict(stored) if stored is not None else None,
                disk_lost=cfg.disk_lost or storage.lost_history or repaired,
                snapshots=storage.store, voter_set=static_voter_set(cfg),
                directory_id=directory_of(meta), local_endpoints=local_endpoints(cfg),
            )

        await open_with_repair(
            lambda blocking: loop.run_in_executor(self._worker, blocking),
            lambda: open_storage(cfg.log_dir, cfg.snapshots, node_id=cfg.node_id,
                                 lock_timeout_s=self._lock_timeout_s,
                                 preallocate=cfg.log_preallocate),
            build, cfg.node_id)
        assert self._core is not None and self._log is not None  # built by build()
        self.stats.boot_timestamp_ms = wall_ms()
        if self._placement is not None:
            self._placement.on_role(self._core.role is Role.LEADER)
        self._server = node_listener(cfg, self._on_request, self._decode_request)
        await self._server.start()
        log.info(
            "node %d (%s) listening on %s:%d, cluster %s, log end offset %d",
            cfg.node_id, "voter" if cfg.is_voter else "observer", cfg.host, self.port,
            self.cluster_id, self._log.end_offset(),
        )
        self._drain()
        if cfg.scrub_bytes_per_second > 0:
            self.scrubber = LogScrubber(self._log, cfg.scrub_bytes_per_second, loop,
                                        self._fail).start()
        if cfg.http_listener is not None:
            if self._http_factory is None:
                await self.stop(graceful=False)
                raise ValueError(
                    "kraft.http.listener is set but this node was started without the HTTP "
                    "layer: run it with `kraft-spark node` (or pass http=serve_node_http)"
                )
            try:
                self._http = await self._http_factory(self, cfg)
            except BaseException:
                await self.stop(graceful=False)
                raise
            log.info("node %d: HTTP API on %s", cfg.node_id, self._http.url)

    async def wait_closed(self) -> None:
        """Return when the node stops (raises if it failed)."""
        assert self._done is not None
        await asyncio.shield(self._done)

    async def stop(self, *, graceful: bool = True, timeout_s: float = 2.0) -> None:
        """Stop: a leader first resigns with EndQuorumEpoch (``graceful``), then the log is
        flushed and closed (releasing the directory lock)."""
        if self._stopping:
            if self._done is not None:
                await asyncio.shield(self._done)
            return
        if self._http is not None and await self._stop_http():
            # Another stop (a fatal error's) went ahead while the HTTP server stopped.
            if self._done is not None:
                await asyncio.shield(self._done)
            return
        core = self._core
        if graceful and core is not None and self._failed is None and core.role is Role.LEADER:
            core.resign(wall_ms())
            self._drain()
            await self._settle(timeout_s)
        self._stopping = True
        if self.scrubber is not None:
            self.scrubber.stop()
        if self._timer is not None:
            self._timer.cancel()
        if self._server is not None:
            await self._server.close()
        # Not the task running this stop (the fatal-stop task is one of ours).
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._peer_requests.close()
        if self._keeper is not None:
            with contextlib.suppress(Exception):
                await self._keeper.wait_idle()
            self._keeper.close()
        if self._log is not None:
            the_log = self._log
            with contextlib.suppress(Exception):
                await asyncio.get_running_loop().run_in_executor(self._worker, the_log.close)
        self._worker.shutdown(wait=True)
        self._abort_local("the node stopped")
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    async def _stop_http(self) -> bool:
        """Stop the HTTP server first, while the core still runs: no new requests, those in
        flight finish. A second stop meanwhile waits for the same one. True when the node
        started stopping meanwhile."""
        assert self._http is not None
        if self._http_stop is None:
            self._http_stop = asyncio.ensure_future(self._http.stop())
        await asyncio.shield(self._http_stop)
        self._http = None
        return self._stopping

    async def _settle(self, timeout_s: float) -> None:
        """Wait until the resignation's EndQuorumEpoch requests were answered or gave up."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self._peer_requests.resigning and not self._backlog and not self._persisting:
                return
            await asyncio.sleep(0.01)

    def add_commit_listener(self, callback: Callable[[int], None]) -> None:
        """``callback(high_watermark)`` on the loop thread whenever the high watermark moves."""
        self._hw_listeners.append(callback)

    def _fail(self, exc: BaseException) -> None:
        """A storage failure is fatal (a failed fsync cannot be retried; see
        ``storage_failure``): stop serving, once, with one line naming what failed."""
        if self._failed is not None:
            return
        self._failed = exc
        if isinstance(exc, CorruptSegmentError):
            note_damage(exc)  # the restart cuts the log there (log_repair)
        log.critical("node %d: log directory failure: %s; stopping (exit %d: the supervisor "
                     "restarts the node, which reopens the log from its durable state)",
                     self.node_id, storage_failure_text(exc), STORAGE_FAILURE_EXIT)
        self._abort_local(f"the node failed: {exc}")
        if self._done is not None and not self._done.done():
            self._done.set_exception(exc)
        self._spawn(self.stop(graceful=False), "fatal-stop")

    def _log_flushed(self) -> None:
        """Group commit made the log durable to where it was asked: tell the core, then carry
        out what it answers."""
        if self._core is not None and not self._stopping:
            self._core.on_log_flushed(wall_ms())
            self._drain()

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ inputs

    def _decode_request(self, payload: bytes) -> tuple[RequestHeader, Any]:
        """A follower's Fetch straight to the core's message (the hand-written codec); any
        other request, or unusual bytes, to the generic body dict."""
        fast = decode_fetch_request(payload, self.cluster_id)
        if fast is not None:
            return fast
        return decode_request(payload)

    def _on_request(self, conn: ServerConnection, header: RequestHeader, body: Any) -> None:
        if self._stopping or self._core is None:
            conn.close()
            return
        # DescribeCluster and Metadata: answered from what the node knows.
        if self.voter_endpoints.answered_without_core(conn, header, body):
            return
        if refused_unauthorized(self.config.acl, conn, header, self.node_id):  # ALTER CLUSTER
            return
        side = self.side_requests.get(header.api_key)
        if side is not None:
            side(conn, header, body, self._produce_gate.standing(conn) is Standing.TRUSTED)
            return
        try:
            message = (
                body if type(body) is FetchRequest
                else request_from_wire(header.api_key, body, self.cluster_id)
            )
        except WireError as exc:
            log.info("node %d: refusing a request from %s: %s", self.node_id, conn.peer, exc)
            conn.respond(header.api_key, header.api_version, header.correlation_id,
                         error_response_body(header.api_key, exc.error, str(exc)))
            return
        if self._produce_gate.refused(conn, header, message):  # reserved record headers
            return
        # AddRaftVoter: the new voter's ApiVersions first.
        if self.voter_endpoints.probing_new_voter(conn, header, message):
            return
        self._hand_to_core(conn, header, message)

    def _hand_to_core(self, conn: ServerConnection, header: RequestHeader, message: Any) -> None:
        self.stats.on_request(message)
        try:  # the core writes to the log as it handles a request (a leader's append)
            self.core.handle_request(wall_ms(), request_source(message), Token(conn, header),
                                     message)
        except (LogError, OSError) as exc:
            self._fail(exc)
            return
        self._drain()

    def submit_local(self, message: LocalRequest, callback: LocalCallback) -> None:
        """Hand ``message`` to the core as a client request from this process:
        ``callback(response, None)`` runs as soon as the core answers (when a Produce commits,
        times out or loses its leader), inside the node's handling of that answer (no loop
        turn in between), or ``callback(None, NodeStoppedError)`` if the node stops first. It
        must be quick and may submit again (that hand-over then completes on the next loop
        turn). Raises ``NodeStoppedError`` at once, without calling back, if the node is not
        running. ``local_requests.local_answer`` is the same for a coroutine."""
        self._hand_over(message, LocalToken(callback))

    def _hand_over(self, message: LocalRequest, token: LocalToken) -> None:
        core = self._core
        if core is None or self._stopping or self._failed is not None:
            raise NodeStoppedError(f"node {self.node_id} is not running")
        self._local.add(token)
        self.stats.on_request(message)
        try:
            core.handle_request(wall_ms(), -1, token, message)
        except (LogError, OSError) as exc:
            self._fail(exc)
            raise NodeStoppedError(f"node {self.node_id}: {exc}") from exc
        if self._settling_local:
            # Submitted from a local callback, in the middle of carrying out a Ready: the
            # core's next Ready waits for the next loop turn, so this one finishes first.
            if not self._drain_soon:
                self._drain_soon = True
                asyncio.get_running_loop().call_soon(self._drain_deferred)
        else:
            self._drain()

    def _drain_deferred(self) -> None:
        self._drain_soon = False
        self._drain()

    def _abort_local(self, reason: str) -> None:
        pending, self._local = self._local, set()
        for token in pending:
            token.settle(None, NodeStoppedError(f"node {self.node_id}: {reason}"))

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = -1
        if self._stopping or self._core is None:
            return
        try:
            self._core.poll(wall_ms())
        except (LogError, OSError) as exc:
            self._fail(exc)
            return
        self._drain()

    # ------------------------------------------------------------------ carrying out Readies

    def _drain(self) -> None:
        """Take the core's Ready and carry it out (or queue it behind a pending persist)."""
        core = self._core
        if core is None or self._failed is not None:
            return
        ready = core.take_ready()
        role_changed = False
        for event in ready.events:
            log.info("node %d: %s", self.node_id, event)
            self.stats.on_event(event)
            role_changed = role_changed or isinstance(event, RoleChanged)
        if role_changed and self._placement is not None:
            self._placement.on_role(core.role is Role.LEADER)
        if ready.persist is not None or self._backlog or self._persisting:
            self._backlog.append(ready)
            if not self._persisting:
                self._spawn(self._run_backlog(), "persist")
        else:
            self._dispatch(ready)
        self._arm_timer(ready.next_deadline_ms)

    async def _run_backlog(self) -> None:
        self._persisting = True
        loop = asyncio.get_running_loop()
        try:
            while self._backlog:
                ready = self._backlog.popleft()
                if ready.persist is not None:
                    state = ready.persist.to_json_dict(self.cluster_id, tuple(sorted(
                        self.config.voters)))
                    try:
                        await loop.run_in_executor(
                            self._worker, self.log.write_quorum_state, state
                        )
                    except Exception as exc:
                        self._fail(exc)
                        return
                self._dispatch(ready)
        finally:
            self._persisting = False

    def _dispatch(self, ready: Ready) -> None:
        for out in ready.sends:
            try:
                self._peer_requests.send(out)
            except Exception:
                # A request the codec refuses (a field out of its wire range) must not cost
                # the rest of this Ready (replies, other sends); the core's own request
                # timeout expires the lost one.
                log.exception("node %d: could not send %s to %d",
                              self.config.node_id, type(out.message).__name__, out.dest)
        for reply in ready.replies:
            token = reply.token
            if isinstance(token, LocalToken):
                self._local.discard(token)
                self._settling_local = True
                try:
                    token.settle(reply.message, None)
                finally:
                    self._settling_local = False
                continue
            assert isinstance(token, Token)
            try:
                if (
                    type(reply.message) is FetchResponse
                    and token.api_version == FETCH_VERSION
                    and reply.message.snapshot_id is None
                    and reply.message.log_start_offset < 0
                ):
                    token.conn.send_frame(
                        encode_fetch_response(reply.message, token.correlation_id)
                    )
                    continue
                body = response_to_wire(reply.message, self.cluster_id,
                                        self.voter_endpoints.endpoints())
                token.conn.respond(token.api_key, token.api_version, token.correlation_id, body)
            except Exception:
                log.exception("node %d: cannot answer %s", self.node_id, reply.message)
                token.conn.close()
        keeper = self._keeper
        if ready.snapshot_installed is not None and keeper is not None:
            try:
                keeper.on_snapshot_installed(ready.snapshot_installed)
            except Exception as exc:
                self._fail(exc)
                return
        if ready.high_watermark is not None:
            self.high_watermark = ready.high_watermark
            self.stats.on_high_watermark(ready.high_watermark)
            if keeper is not None:
                try:
                    keeper.on_high_watermark(ready.high_watermark)
                except Exception as exc:
                    self._fail(exc)
                    return
            for listener in self._hw_listeners:
                try:
                    listener(ready.high_watermark)
                except Exception:
                    log.exception("node %d: commit listener failed", self.node_id)
        # Last: an inline flush carries out the next Readies (nested) before returning, so
        # everything of this one must be done first (a nested Ready may move the HW further).
        if ready.flush_log:
            self._group_commit.want()

    def _arm_timer(self, deadline_ms: int) -> None:
        if self._stopping:
            return
        loop = asyncio.get_running_loop()
        if self._timer is not None:
            # A timer already due is kept: it runs on this loop turn, and its poll re-arms for
            # whatever is next. Once anything is overdue every Ready's deadline is "now"
            # (RaftCore.next_deadline), a new value each millisecond; re-arming on each let
            # the requests of two or more busy connections cancel the timer before it ever
            # ran, and parked Fetches went unanswered until the followers elected a new leader.
            if deadline_ms == self._timer_at or self._timer_due <= loop.time():
                return
            self._timer.cancel()
        delay = max(0.0, (deadline_ms - wall_ms()) / 1000)
        self._timer = loop.call_later(delay, self._on_timer)
        self._timer_at = deadline_ms
        self._timer_due = loop.time() + delay  # on the loop's clock, immune to wall-clock jumps

    # ------------------------------------------------------------------ queries

    def peer_connected(self, node_id: int) -> bool:
        return self._peer_requests.connected(node_id)

    def describe(self) -> dict[str, Any]:
        """A snapshot of this node's state (role, epoch, leader, offsets) for tools and tests."""
        core, the_log = self.core, self.log
        return {
            "node_id": self.node_id, "role": core.role.name.lower(), "epoch": core.epoch,
            "leader_id": core.known_leader(), "voted_id": core.voted_id,
            "high_watermark": self.high_watermark, "log_end_offset": the_log.end_offset(),
            "flushed_offset": the_log.flushed_offset(), "log_start_offset": the_log.start_offset(),
            "latest_snapshot": self.keeper.latest_snapshot_label(),
            "applied_offset": self.keeper.state.applied_offset,
            "storage_failure": None if self._failed is None else storage_failure_text(self._failed),
        }


__all__ = ["VERSIONS", "LocalRequest", "NodeStoppedError", "RaftNode", "wall_ms"]
