"""``NodeStore``: the store API of one node (voter or observer), on the node's event loop.

Reads come from the node's own state machine (``KeyValueState``), never through the leader's
loop for the data itself, so readers spread over every node:

* **serializable**: the local applied state at once, with the offset it reflects;
* **linearizable** (the default): first the read index (``kraft_spark.raft.read_index``): from
  the local core when this node leads, else asked of the leader over the wire (ReadIndex, api
  key 10000), then the answer waits until the local state has applied that offset. A node
  that cannot get a confirmed read index does not answer (``NoLeaderError``: HTTP 503).

Conditional writes are judged by the state machine where they land in the log; ``outcome``
waits until the local state has applied a write and tells whether its conditions held.

Watches: every batch the state applies is turned into watch events (the writes that took
effect: not those of a failed conditional write) and published to this node's ``WatchHub``
once per high-watermark move; a snapshot that replaces the state ends the watches that needed
the writes it skipped.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from kraft_spark.client.client import AsyncQuorumClient
from kraft_spark.client.errors import ClientError, NoLeaderError
from kraft_spark.client.lease_countdown import lease_countdown
from kraft_spark.client.reads import read_index
from kraft_spark.log.segmented_log import SegmentedLog
from kraft_spark.net.local_requests import LocalSubmitter, local_answer
from kraft_spark.net.state_keeper import StateKeeper
from kraft_spark.raft.messages import ErrorCode, ReadIndexRequest, ReadIndexResponse
from kraft_spark.state.machine import Entry, FailedTxn, KeyValueState
from kraft_spark.store.history import DEFAULT_RETENTION, History
from kraft_spark.store.lease_clock import CountdownAnswer, CountdownRequest, CountdownStatus
from kraft_spark.store.leases import Lease
from kraft_spark.store.past_reads import PastRead, read_at
from kraft_spark.store.read_batch import ReadIndexBatcher
from kraft_spark.store.watch import WatchHub, WatchItem
from kraft_spark.store.watch_feed import WatchFeed

# At most this many keys per range page.
MAX_RANGE_LIMIT = 10_000
# A read-index request shared by a batch of reads gives up after this long.
READ_INDEX_TIMEOUT_S = 5.0


class ReadTimeoutError(ClientError):
    """The state did not apply the read's offset in time (HTTP 504)."""


@dataclass(frozen=True, slots=True)
class KvRead:
    """What a read saw: the entries (key order) and the offset the answer reflects (every
    committed write below it, none at or above it)."""

    offset: int
    entries: list[tuple[bytes, Entry]]
    more: bool = False
    # The highest commit offset this node has heard of: a serializable answer may miss the
    # writes between ``offset`` and it (and any the leader committed since it last heard).
    known_committed: int = 0


class WatchStream(Protocol):
    """An open watch: ``start`` (raises ``BelowLogStart``), then its items, ``aclose``."""

    async def start(self) -> None: ...

    def __aiter__(self) -> AsyncIterator[WatchItem]: ...

    async def aclose(self) -> None: ...


class WatchSource(Protocol):
    """Where watches are opened (``WatchHub``, or ``cross_loop.LoopHub``)."""

    def watch(self, *, key: bytes | None = None, prefix: bytes | None = None,
              from_offset: int | None = None, from_index: int = 0) -> WatchStream: ...


class KvStore(Protocol):
    """What the HTTP API's store routes need (``NodeStore``, or a proxy to one)."""

    async def get(self, key: bytes, *, linearizable: bool, timeout_s: float) -> KvRead: ...

    async def range(self, prefix: bytes, *, after: bytes | None, limit: int,
                    linearizable: bool, timeout_s: float) -> KvRead: ...

    async def outcome(self, base_offset: int, end_offset: int,
                      timeout_s: float) -> FailedTxn | None: ...

    async def range_at(self, start: bytes, end: bytes, revision: int, *, after: bytes | None,
                       limit: int, linearizable: bool, timeout_s: float) -> PastRead: ...

    async def leases(self, *, linearizable: bool, timeout_s: float,
                     only: int | None = None) -> tuple[int, list[Lease]]: ...

    async def lease_countdown(self, request: CountdownRequest) -> CountdownAnswer: ...

    def watch_hub(self) -> WatchSource | None: ...


class StoreNode(LocalSubmitter, Protocol):
    """What the store needs of a ``RaftNode``."""

    cluster_id: str
    high_watermark: int

    @property
    def is_leader(self) -> bool: ...

    @property
    def keeper(self) -> StateKeeper: ...

    @property
    def log(self) -> SegmentedLog: ...

    def add_commit_listener(self, callback: Callable[[int], None]) -> None: ...


class NodeStore:
    """``KvStore`` of one node; create it on the node's loop after the node started.
    ``forwarder``: the client that reaches the leader (read indexes of followers/observers).
    Leases are expired by the voters' ``lease_expiry.LeaseExpirer``, not here."""

    def __init__(self, node: StoreNode, forwarder: Callable[[], AsyncQuorumClient], *,
                 history_revisions: int = DEFAULT_RETENTION) -> None:
        self._node = node
        self._forwarder = forwarder
        self._batcher = ReadIndexBatcher(self._read_index)
        keeper = node.keeper
        self._keeper = keeper
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._feed = WatchFeed(lambda: keeper.state, node.log, keeper.latest_snapshot_label,
                               history_revisions=history_revisions)
        self._hub = self._feed.hub
        keeper.apply_listeners.append(self._feed.on_batch)
        keeper.load_listeners.append(self._feed.on_snapshot_loaded)
        node.add_commit_listener(self._on_commit)
        self.linearizable_reads = 0
        self.serializable_reads = 0

    # ------------------------------------------------------------------ applying

    def _on_commit(self, _high_watermark: int) -> None:
        # The feed publishes what the state applied (never raising); then the reads and
        # writes waiting for it go on.
        self._release_waiters(self._feed.on_commit())

    def _release_waiters(self, applied: int) -> None:
        waiters = self._waiters
        while waiters and waiters[0][0] <= applied:
            _, _, future = heapq.heappop(waiters)
            if not future.done():
                future.set_result(None)

    async def wait_applied(self, offset: int, timeout_s: float) -> None:
        """Until the local state has applied everything below ``offset``."""
        if self._keeper.state.applied_offset >= offset:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (offset, next(self._order), future))
        try:
            await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise ReadTimeoutError(
                f"this node's state did not reach offset {offset} within {timeout_s:g} s (it is "
                f"at {self._keeper.state.applied_offset}): it may be cut off from the leader; "
                "retry, or read from another node") from None

    # ------------------------------------------------------------------ reads

    async def read_offset(self, *, linearizable: bool, timeout_s: float) -> int:
        """The offset a read may answer at: the applied offset (serializable), or the read
        index once applied here (linearizable)."""
        if not linearizable:
            self.serializable_reads += 1
            return self._keeper.state.applied_offset
        offset = await self._batcher.read_index(timeout_s)
        await self.wait_applied(offset, timeout_s)
        self.linearizable_reads += 1
        return offset

    async def _read_index(self, timeout_s: float = READ_INDEX_TIMEOUT_S) -> int:
        if self._node.is_leader:
            request = ReadIndexRequest(max(1, int(timeout_s * 1000)))
            response = await asyncio.wait_for(local_answer(self._node, request), timeout_s + 1)
            assert isinstance(response, ReadIndexResponse)
            if response.error == ErrorCode.NONE:
                return response.read_offset
            if response.error != ErrorCode.NOT_LEADER_OR_FOLLOWER:
                raise NoLeaderError(f"the leader could not confirm its leadership in time "
                                    f"({response.error.name})")
        offset, _ = await read_index(self._forwarder(), timeout_s=timeout_s)
        return offset

    async def get(self, key: bytes, *, linearizable: bool, timeout_s: float) -> KvRead:
        await self.read_offset(linearizable=linearizable, timeout_s=timeout_s)
        # The answer reflects the state as applied now (at or past the read index).
        state = self._keeper.state
        entry = state.get(key)
        return KvRead(state.applied_offset, [(key, entry)] if entry else [],
                      known_committed=max(self._node.high_watermark, state.applied_offset))

    async def range(self, prefix: bytes, *, after: bytes | None, limit: int,
                    linearizable: bool, timeout_s: float) -> KvRead:
        await self.read_offset(linearizable=linearizable, timeout_s=timeout_s)
        state = self._keeper.state
        keys = sorted(k for k, _ in state.items() if k.startswith(prefix))
        start = bisect.bisect_right(keys, after) if after is not None else 0
        page = keys[start:start + limit]
        entries = [(k, e) for k in page if (e := state.get(k)) is not None]
        return KvRead(state.applied_offset, entries, start + limit < len(keys),
                      max(self._node.high_watermark, state.applied_offset))

    async def range_at(self, start: bytes, end: bytes, revision: int, *, after: bytes | None,
                       limit: int, linearizable: bool, timeout_s: float) -> PastRead:
        """The range at ``revision`` (0: now), current or from the MVCC history
        (``kraft_spark.store.past_reads``); after the read index when ``linearizable``."""
        await self.read_offset(linearizable=linearizable, timeout_s=timeout_s)
        state = self._keeper.state
        return read_at(state.get, state.items, state.applied_offset, self.history, start=start,
                       end=end, revision=revision, after=after, limit=limit)

    # ------------------------------------------------------------------ writes, watches

    async def outcome(self, base_offset: int, end_offset: int,
                      timeout_s: float) -> FailedTxn | None:
        """The failure of the write at ``base_offset`` once applied here, or None if it
        applied; raises ``OutcomeUnknown`` if it is older than the outcome window."""
        await self.wait_applied(end_offset, timeout_s)
        return self._keeper.state.txn_failure(base_offset)

    def watch_hub(self) -> WatchHub | None:
        return self._hub

    @property
    def history(self) -> History:
        """This node's MVCC history (etcd's past revisions), as applied now."""
        return self._feed.history

    def applied_state(self) -> KeyValueState:
        """This node's state machine as applied now (``applied_offset``): read it without
        yielding to the loop, or it may move (etcd's API takes one view per request)."""
        return self._keeper.state

    @property
    def log_start_offset(self) -> int:
        return self._node.log.start_offset()

    async def leases(self, *, linearizable: bool, timeout_s: float,
                     only: int | None = None) -> tuple[int, list[Lease]]:
        """The leases in force (offset the answer reflects, leases by id); ``only``: just
        that lease, if it is in force (no walk over every lease)."""
        await self.read_offset(linearizable=linearizable, timeout_s=timeout_s)
        state = self._keeper.state
        leases = state.leases.leases
        if only is not None:
            return state.applied_offset, [leases[only]] if only in leases else []
        return state.applied_offset, [leases[i] for i in sorted(leases)]

    async def lease_countdown(self, request: CountdownRequest) -> CountdownAnswer:
        """A keep-alive or TimeToLive, answered by the leader's countdown: this node's own
        desk when it leads (``store.lease_keepalive``), else the leader's over the wire."""
        desk = getattr(self._node, "lease_desk", None)
        if desk is not None and self._node.is_leader:
            answer: CountdownAnswer = await desk.answer(request)
            if answer.status is not CountdownStatus.NOT_LEADER:
                return answer
        return await lease_countdown(self._forwarder(), request)

    def close(self) -> None:
        self._hub.close()
        for _, _, future in self._waiters:
            if not future.done():
                future.cancel()
        self._waiters.clear()
