"""Simulated watches: every node's real ``WatchHub``, fed by the real ``WatchFeed``
(``kraft_spark.store.watch_feed``, as a node's ``NodeStore`` feeds it) from the node's state
machine, and watch clients that open key and prefix watches on every node (voters and
observers), consume them at their own pace and resume.

A hub lives and dies with its node's process: a crash (or stop) drops it with every watch on it,
as the connections die; a restart makes a new one at the state the node loaded. A snapshot
installed under a hub ends the watches that needed what it skipped (``skip_to``).

A client:

* starts by loading its watch's keys from a node's state (a range read at the node's applied
  offset R, as a user does) and watching from R on that node;
* takes up to ``per_tick`` items every ``pace_us`` of virtual time: fast clients take everything,
  slow ones one or two items now and then, and the hub cuts them off (``max_queue`` here is
  small) with a ``Cancelled`` naming their cursor;
* resumes from its cursor (after the last event or progress it took: its ``Last-Event-ID``, maybe
  between the events of one offset), on a node drawn again (maybe the same), after a cut-off,
  when its node dies, and now and then for no reason (a hop);
* when told to resume past its cursor (a snapshot replaced the node's state), or when its cursor
  is below the node's log start (``BelowLogStart``), loads the state again from the node it
  reconnects to and watches on from there: a *snapshot reset*.

Driving: the hub and watchers are asyncio code; here no loop runs. A client steps a watcher's
``__anext__`` coroutine by hand, only when ``Watcher.ready`` says it returns without waiting (a
catch-up step reads the log synchronously; ``asyncio.sleep(0)`` yields None and is simply
resumed). The progress interval is beyond any run, so the wall clock (``time.monotonic``, which
the watcher reads for it) never decides anything: a seed replays exactly.

Every item a client takes is checked at once (``kraft_spark.sim.watch_check``).
"""

from __future__ import annotations

import random
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kraft_spark.log.errors import LogError
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import Batch
from kraft_spark.sim.node import SimNode
from kraft_spark.sim.watch_check import CommittedHistory, Point, StreamCheck
from kraft_spark.state.snapshot_file import label
from kraft_spark.store.watch import (
    BelowLogStart,
    Progress,
    Watcher,
    WatchEvent,
    WatchHub,
    WatchItem,
)
from kraft_spark.store.watch_feed import WatchFeed

if TYPE_CHECKING:
    from kraft_spark.sim.cluster import Cluster
    from kraft_spark.sim.snapshots import SimSnapshots

# Small queues, so that slow clients are cut off; small catch-up reads, so that a catch-up takes
# several and meets the writes published meanwhile; no progress by the wall clock.
HUB_OPTIONS: dict[str, Any] = {"max_queue": 24, "catch_up_events": 16,
                               "progress_interval_s": 1e12}
# (key, prefix) of each client's watch, in turn: every key, the lease holders' keys (a lock
# and the keys attached to its leases), one lock key, the appenders' keys, one of them, the
# keys attached to one lock's leases.
WATCHES: tuple[tuple[bytes | None, bytes | None], ...] = (
    (None, b""), (None, b"lock-"), (b"lock-a", None), (None, b"k"), (b"k3", None),
    (None, b"lock-b/"),
)
SLOW_SHARE = 0.4
FAST_PACE_US = (5_000, 40_000)
SLOW_PACE_US = (150_000, 700_000)
HOP_CHANCE = 0.03
# A consumer that stopped between the events of one offset (a lease's deletes) hops far more
# often: the resume from there is the moment an ``N.M`` id must get right, and it is rare
# otherwise (resume-skips-offset-rest was caught as late as the 66th seed with HOP_CHANCE).
MID_OFFSET_HOP_CHANCE = 0.5
START_US = (50_000, 2_000_000)


@dataclass
class WatchStats:
    """What the watches did in a run (the summary line's watch counters)."""

    delivered: int = 0  # events the clients took
    resumes: int = 0  # watches reopened from a cursor
    cutoffs: int = 0  # slow consumers cut off by their hub
    resets: int = 0  # states loaded again (past the first load)


@dataclass
class WatchClient:
    index: int
    key: bytes | None
    prefix: bytes | None
    pace_us: tuple[int, int]
    per_tick: int
    check: StreamCheck
    node: int = -1
    incarnation: int = -1
    watcher: Watcher | None = None
    loaded: bool = False  # False: the next connection loads the state first
    view: dict[bytes, bytes] = field(default_factory=dict)  # the watched keys, as received

    def matches(self, key: bytes) -> bool:
        if self.key is not None:
            return key == self.key
        assert self.prefix is not None
        return key.startswith(self.prefix)


class SimWatches:
    """Every node's watch feed, and the watch clients (``count`` of them)."""

    def __init__(self, cluster: Cluster, count: int, rng: random.Random,
                 hub_class: type[WatchHub] = WatchHub) -> None:
        snapshots = cluster.snapshots
        assert snapshots is not None, "watches need the nodes' state machines"
        self.cluster = cluster
        self.snapshots: SimSnapshots = snapshots
        self.rng = rng
        self.hub_class = hub_class
        self.stats = WatchStats()
        self.running = True
        self.feeds: dict[int, tuple[int, WatchFeed]] = {}  # node -> (incarnation, its feed)
        snapshots.apply_listeners.append(self._applied)
        snapshots.load_listeners.append(self._loaded)
        snapshots.commit_listeners.append(self._committed)
        cluster.watches = self
        for node in sorted(cluster.nodes.values(), key=lambda n: n.node_id):
            if node.alive:
                self.on_start(node)
        history = CommittedHistory(cluster.checker.committed)
        self.clients: list[WatchClient] = []
        for i in range(count):
            key, prefix = WATCHES[i % len(WATCHES)]
            slow = rng.random() < SLOW_SHARE
            name = f"watch client {i} ({'key' if key is not None else 'prefix'} "
            name += f"{key if key is not None else prefix!r}, {'slow' if slow else 'fast'})"
            client = WatchClient(i, key, prefix, SLOW_PACE_US if slow else FAST_PACE_US,
                                 rng.randint(1, 2) if slow else 64,
                                 StreamCheck(name, lambda k: False, history, snapshots.replay))
            client.check.matches = client.matches
            self.clients.append(client)
            cluster.at(rng.randint(*START_US), self._tick, client)

    # ------------------------------------------------------------------ the nodes' hubs

    def on_start(self, node: SimNode) -> None:
        node_id, snapshots = node.node_id, self.snapshots

        def newest() -> str | None:
            latest = snapshots.of(node_id).store.latest_id()
            return label(latest) if latest is not None else None

        feed = WatchFeed(lambda: snapshots.of(node_id).state, node.log, newest,
                         hub_class=self.hub_class, **HUB_OPTIONS)
        self.feeds[node_id] = (node.incarnation, feed)

    def on_crash(self, node: SimNode) -> None:
        """The process died: its hub with it; its watches' connections reset."""
        gone = self.feeds.pop(node.node_id, None)
        if gone is not None:
            self.stats.cutoffs += gone[1].hub.cancelled_slow
        for client in self.clients:
            if client.node == node.node_id and client.watcher is not None:
                client.watcher = None

    def _feed(self, node_id: int) -> WatchFeed | None:
        entry = self.feeds.get(node_id)
        node = self.cluster.nodes[node_id]
        if entry is None or entry[0] != node.incarnation:
            return None
        return entry[1]

    def _applied(self, node_id: int, batch: Batch) -> None:
        feed = self._feed(node_id)
        if feed is not None:
            feed.on_batch(batch)

    def _loaded(self, node_id: int, snapshot_id: OffsetAndEpoch) -> None:
        feed = self._feed(node_id)
        if feed is not None:
            feed.on_snapshot_loaded(snapshot_id)

    def _committed(self, node_id: int) -> None:
        feed = self._feed(node_id)
        if feed is not None:
            feed.on_commit()

    def _served_from(self, node_id: int) -> int:
        """The lowest offset the node's catch-up reads serve (``WatchFeed``'s reader)."""
        node = self.cluster.nodes[node_id]
        state = self.snapshots.of(node_id).state
        return max(node.log.start_offset(), state.outcome_horizon)

    # ------------------------------------------------------------------ the clients

    def _tick(self, client: WatchClient) -> None:
        if not self.running:
            return
        if client.watcher is None:
            self._connect(client)
        for _ in range(client.per_tick):
            if client.watcher is None or not self._take(client):
                break
        hop = MID_OFFSET_HOP_CHANCE if client.check.cursor[1] else HOP_CHANCE
        if client.watcher is not None and self.rng.random() < hop:
            self._drop(client)
        self.cluster.at(self.cluster.now + self.rng.randint(*client.pace_us), self._tick, client)

    def _connect(self, client: WatchClient) -> None:
        cluster = self.cluster
        nodes = [n for n in sorted(cluster.nodes) if cluster.nodes[n].alive
                 and not cluster.nodes[n].paused and self._feed(n) is not None]
        if not nodes:
            return
        node_id = self.rng.choice(nodes)
        feed = self._feed(node_id)
        assert feed is not None
        if not client.loaded:  # a range read of the watched keys, then watch from there
            state = self.snapshots.of(node_id).state
            client.view = {k: e.value for k, e in state.items() if client.matches(k)}
            client.check.loaded(state.applied_offset, dict(client.view))
            if client.check.segments > 1:
                self.stats.resets += 1
            client.loaded = True
        else:
            self.stats.resumes += 1
        offset, index = client.check.cursor
        client.watcher = feed.hub.watch(key=client.key, prefix=client.prefix,
                                        from_offset=offset, from_index=index)
        client.node, client.incarnation = node_id, cluster.nodes[node_id].incarnation

    def _drop(self, client: WatchClient) -> None:
        watcher, client.watcher = client.watcher, None
        if watcher is not None:
            _step(watcher.aclose())

    def _take(self, client: WatchClient) -> bool:
        """Take one item if one is at hand (False if none)."""
        watcher = client.watcher
        assert watcher is not None
        if not watcher.ready:
            return False
        try:
            item: WatchItem | None = _step(watcher.__anext__())
        except BelowLogStart:  # the cursor is below the node's log start: load again
            client.watcher, client.loaded = None, False
            return False
        except LogError:  # the watch's first read met a disk fault: the request failed
            client.watcher = None  # (once streaming, the watch ends with a Cancelled)
            return False
        except StopAsyncIteration:
            item = None
        check = client.check
        if isinstance(item, WatchEvent):
            check.event(item)
            self.stats.delivered += 1
            if item.value is None:
                client.view.pop(item.key, None)
            else:
                client.view[item.key] = item.value
        elif isinstance(item, Progress):
            check.progress((item.offset, item.index))
        else:
            client.watcher = None
            if item is not None:
                point: Point = (item.resume_offset, item.resume_index)
                if check.cancelled(point, self._served_from(client.node)):
                    client.loaded = False
            return False
        return True

    def stop(self) -> WatchStats:
        """End of the run: the counters (the hubs still up add their cut-offs)."""
        self.running = False
        for _, feed in self.feeds.values():
            self.stats.cutoffs += feed.hub.cancelled_slow
        self.feeds.clear()
        return self.stats


def _step(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never waits for anything to its end (a bare yield, as
    ``asyncio.sleep(0)``'s, is resumed at once)."""
    while True:
        try:
            coroutine.send(None)
        except StopIteration as done:
            return done.value
