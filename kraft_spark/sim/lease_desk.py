"""The leaders' lease desks in the simulator: keep-alives answered by the leader's countdown,
with no log write, as ``kraft_spark.store.lease_keepalive`` answers them, on every node's real
``LeaseClock`` (``sim.lease_expiry``, the one its expirer ticks).

A holder's keep-alive (a ``CountdownRequest``) goes to a node beside its core (the cluster's
``side_door``). The node asks its own core for a read index (the leader proves it still leads,
after the request arrived), waits until its state applied it, and asks the clock; when the
clock says the lease's last checkpoint set a remaining TTL, a checkpoint clearing it is
appended to its own core first and the answer waits for its commit. A node that does not lead
answers NOT_LEADER with its leader hint, which the holder follows (a follower forwards it, in
the real node: one hop either way).

Injected bug (``KEEPS_CHECKPOINT_BUG``): the keep-alive is acknowledged without the clearing
checkpoint, so the log still holds the lease's old remaining TTL; a new leader counts from it
and expires the lease while its holder, kept alive, holds the lock (``lease-kept-alive``,
``lock-exclusive``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kraft_spark.raft.messages import (
    ErrorCode,
    ProduceRequest,
    ProduceResponse,
    ReadIndexRequest,
    ReadIndexResponse,
)
from kraft_spark.raft.state import Role
from kraft_spark.store.lease_clock import (
    CountdownAnswer,
    CountdownRequest,
    CountdownStatus,
    LeaseClock,
    checkpoint_record,
)

if TYPE_CHECKING:
    from kraft_spark.sim.cluster import Cluster
    from kraft_spark.sim.node import SimNode

KEEPS_CHECKPOINT_BUG: Final = "keepalive-keeps-checkpoint"
POLL_US: Final = 1_000
READ_INDEX_TIMEOUT_MS: Final = 5_000


@dataclass(slots=True)
class _Ask:
    node_id: int
    incarnation: int
    src: int  # the holder's client id
    request_id: int
    src_incarnation: int | None
    request: CountdownRequest
    deadline_us: int
    answer: CountdownAnswer | None = None  # given once the clearing checkpoint committed


class SimLeaseDesk:
    def __init__(self, cluster: Cluster, clock_of: Callable[[SimNode], LeaseClock],
                 desk_ids: dict[int, int], bug: str | None) -> None:
        self.cluster = cluster
        self.clock_of = clock_of  # the node's clock, the one its expirer ticks
        self.desk_ids = desk_ids  # node id -> the client id its own requests come from
        self.bug = bug
        self._pending: dict[int, _Ask] = {}  # the request id of its core request -> the ask
        self.renewals = 0
        self.clears = 0
        cluster.side_door = self.door

    def door(self, node: SimNode, src: int, request_id: int, message: Any,
             src_incarnation: int | None) -> bool:
        """Serve ``message`` beside the core when it is a lease countdown request."""
        if not isinstance(message, CountdownRequest):
            return False
        ask = _Ask(node.node_id, node.incarnation, src, request_id, src_incarnation, message,
                   self.cluster.now + message.timeout_ms * 1000)
        core = node.core
        if core is None or core.role is not Role.LEADER:
            self._reply(ask, CountdownAnswer(CountdownStatus.NOT_LEADER,
                                             core.leader_id if core is not None else -1))
            return True
        self._submit(node, ReadIndexRequest(READ_INDEX_TIMEOUT_MS), ask)
        return True

    def _submit(self, node: SimNode, message: Any, ask: _Ask) -> None:
        cluster = self.cluster
        cluster._seq += 1
        self._pending[cluster._seq] = ask
        cluster._deliver(node.node_id, None, self.desk_ids[node.node_id], 0,
                         ("req", cluster._seq, message, None))

    def _reply(self, ask: _Ask, answer: CountdownAnswer) -> None:
        node = self.cluster.nodes[ask.node_id]
        if not node.alive or node.incarnation != ask.incarnation:
            return  # the process died with the request: the holder's attempt times out
        if answer.status is CountdownStatus.OK and ask.request.renew:
            self.renewals += 1
        self.cluster._send(ask.node_id, ask.src, ("resp", ask.request_id, answer),
                           ask.src_incarnation)

    def receive(self, payload: Any) -> None:
        """Its core's answer to a desk request."""
        _, request_id, message = payload
        ask = self._pending.pop(request_id, None)
        if ask is None:
            return
        error = getattr(message, "error", ErrorCode.NONE)
        if error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            self._reply(ask, CountdownAnswer(CountdownStatus.NOT_LEADER, message.leader_id))
        elif error != ErrorCode.NONE:
            self._reply(ask, CountdownAnswer(CountdownStatus.TIMED_OUT))
        elif isinstance(message, ReadIndexResponse):
            self._when_applied(ask, message.read_offset, message.leader_epoch)
        elif isinstance(message, ProduceResponse) and ask.answer is not None:
            self.clears += 1
            self._reply(ask, ask.answer)

    def _when_applied(self, ask: _Ask, offset: int, epoch: int) -> None:
        """Once the node applied the read index, the clock answers (as the real desk)."""
        cluster = self.cluster
        node = cluster.nodes[ask.node_id]
        if not node.alive or node.incarnation != ask.incarnation or cluster.now >= ask.deadline_us:
            return
        assert cluster.snapshots is not None
        state = cluster.snapshots.of(ask.node_id).state
        if node.paused or state.applied_offset < offset:
            cluster.at(cluster.now + POLL_US, self._when_applied, ask, offset, epoch)
            return
        answer, clear = self.clock_of(node).countdown(epoch, state.leases, ask.request)
        if clear and answer.status is CountdownStatus.OK and self.bug != KEEPS_CHECKPOINT_BUG:
            ask.answer = answer
            record = checkpoint_record({ask.request.lease_id: 0}, cluster.now // 1000)
            self._submit(node, ProduceRequest((record,), timeout_ms=READ_INDEX_TIMEOUT_MS), ask)
            return
        self._reply(ask, answer)
