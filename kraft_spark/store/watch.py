"""Watches: every committed write to a key, or to the keys under a prefix, in offset order,
exactly once per watch, resumable from any offset still in the log (etcd's Watch, over the
replicated log). Pure asyncio: the HTTP stream is ``api.watch_route``.

A node keeps one :class:`WatchHub` on its event loop. Each time its state applies committed
data it calls :meth:`WatchHub.publish` with the writes that took effect, in offset order; the
hub hands each write to the watchers it matches, found through two indexes (exact keys in a
dict, prefixes in a dict by prefix probed with each prefix length in use), so one publish costs
about ``events x (1 + prefix lengths in use) + matches``, not one read per watcher.

A :class:`Watcher` is an async iterator of :class:`WatchEvent` (a put, or a delete when
``value`` is None), :class:`Progress` (everything below its offset has been reported: after the
catch-up, and every ``progress_interval_s`` while nothing matches) and, last, at most one
:class:`Cancelled` (why the watch ended and the point to resume from).

**Identity.** One offset may hold several events: a lease revoked or expired there deletes
each of its keys, and a future multi-key write would too. An event is identified by ``(offset,
index)`` (``index`` numbers an offset's events from 0, the same on every node), and ordered by
it; a watcher's cursor is the next such pair it reports. Every resume point (a
``Last-Event-ID``, a progress event's id, a slow consumer's cut-off) is a cursor, so a consumer
that stopped between the events of one offset resumes with the rest of them
(:func:`event_id`, :func:`parse_event_id`, :func:`resume_id`).

**Catch-up.** A watch from an offset below the hub's applied offset is registered first (its
queue takes every matching write published from then on) and then reads the log from its offset
(``read_committed``, in chunks of ``catch_up_events``) until it reaches what its queue covers;
the queued writes below where the reads ended are dropped. Nothing is lost between the reads and
the queue, and nothing is reported twice. Should the queue overflow meanwhile (a long catch-up
under heavy writes), it is emptied and the catch-up simply reads further: a catching-up watcher
is never cut off for being slow, since the log still holds what it missed.

**Slow consumers.** A live watcher whose queue holds ``max_queue`` writes its consumer has not
taken is cut off at the next matching write: its queue is dropped, it leaves the indexes, and its
consumer gets a :class:`Cancelled` naming the offset to resume from. So memory is bounded per
watcher, and neither ``publish`` (synchronous, never waits) nor the other watchers ever wait for
it.

Not thread-safe: everything runs on the loop of the node that owns the hub.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import deque
from collections.abc import Sequence
from types import TracebackType
from typing import Final

# The items and the log reader live in their own modules; re-exported here, where watches
# are opened, for the callers that take everything from one place.
from kraft_spark.store.watch_items import (
    BelowLogStart,
    Cancelled,
    Progress,
    WatchEvent,
    WatchHubClosed,
    WatchItem,
    describe_resume_point,
    event_id,
    parse_event_id,
    resume_id,
)
from kraft_spark.store.watch_log import ReadCommitted, batch_events, log_reader

__all__ = [
    "BelowLogStart",
    "Cancelled",
    "Progress",
    "ReadCommitted",
    "WatchEvent",
    "WatchHub",
    "WatchHubClosed",
    "WatchItem",
    "Watcher",
    "batch_events",
    "event_id",
    "log_reader",
    "parse_event_id",
    "resume_id",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUE: Final = 1000
DEFAULT_PROGRESS_INTERVAL_S: Final = 5.0
DEFAULT_CATCH_UP_EVENTS: Final = 500
# Above any offset: a watcher whose floor is this takes nothing more from publish.
_NEVER: Final = 2**63


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(True)


class Watcher:
    """One watch: ``async for item in watcher`` (or ``await watcher.__anext__()``), one consumer
    at a time; ``await watcher.aclose()`` (or ``async with``) to stop early. Made by
    :meth:`WatchHub.watch`. Call :meth:`start` first to learn of :class:`BelowLogStart` before
    anything is streamed (else the first ``__anext__`` raises it)."""

    __slots__ = (
        "_catching_up", "_ended", "_final", "_floor", "_hub", "_last_out", "_out", "_queue",
        "_read_pos", "_started", "_waiter", "delivered", "key", "position", "position_index",
        "prefix",
    )

    def __init__(self, hub: WatchHub, key: bytes | None, prefix: bytes | None, start: int,
                 covered_from: int | None, *, start_index: int = 0) -> None:
        self._hub = hub
        self.key = key
        self.prefix = prefix
        # The cursor (position, position_index): the next event the stream reports. Every
        # matching event before it, in (offset, index) order, has been handed to the consumer,
        # and none after it; an event before it met again (a catch-up read and the queue both
        # hold it) is dropped, so nothing is handed out twice.
        self.position = start
        self.position_index = start_index
        self.delivered = 0  # writes handed to the consumer
        # Writes published at or above the floor go to the queue (while catching up: what the
        # queue covers; once live: where the catch-up ended, or the watch's start).
        self._floor = start if covered_from is None else covered_from
        self._catching_up = covered_from is not None
        self._read_pos = start  # catch-up: the next offset to read from the log
        self._started = not self._catching_up
        self._queue: deque[WatchEvent] = deque()  # from publish
        self._out: deque[WatchItem] = deque()  # ready before the queue: catch-up, progress
        self._final: Cancelled | None = None  # handed out last
        self._ended = False  # out of the hub: nothing more will be queued
        self._waiter: asyncio.Future[bool] | None = None
        self._last_out = time.monotonic()
        if not self._catching_up:
            self._out.append(Progress(start, start_index))

    def __repr__(self) -> str:
        what = f"key={self.key!r}" if self.key is not None else f"prefix={self.prefix!r}"
        state = "ended" if self._ended else "catching up" if self._catching_up else "live"
        return (f"Watcher({what}, position={self.position}.{self.position_index}, "
                f"{state})")

    @property
    def cursor(self) -> tuple[int, int]:
        """``(offset, index)`` of the next event to report (see ``position``)."""
        return self.position, self.position_index

    @property
    def catching_up(self) -> bool:
        return self._catching_up

    @property
    def ended(self) -> bool:
        """Out of the hub: what is left to hand out is all there will be."""
        return self._ended

    @property
    def ready(self) -> bool:
        """``__anext__`` would return without waiting for a write: an item is out, a catch-up
        step is due (it reads the log, never waits), the end, or a queued write not yet
        handed out (the queue is in order: its last one decides). For a driver without an
        event loop (the simulator steps ``__anext__`` by hand only when this holds)."""
        queue = self._queue
        return (bool(self._out) or self._catching_up or self._ended
                or bool(queue and not self._already_out(queue[-1])))

    def matches(self, key: bytes) -> bool:
        if self.key is not None:
            return key == self.key
        assert self.prefix is not None
        return key.startswith(self.prefix)

    # ------------------------------------------------------------------ consuming

    async def start(self) -> None:
        """Read the first catch-up chunk now. Raises :class:`BelowLogStart` (or what the read
        raised) with the watcher closed. Does nothing for a watch without catch-up, or twice."""
        if not self._started and self._catching_up:
            await self._catch_up_step()

    def __aiter__(self) -> Watcher:
        return self

    async def __anext__(self) -> WatchItem:
        while True:
            if self._out:
                item = self._out.popleft()
                if isinstance(item, WatchEvent) and self._already_out(item):
                    continue
                return self._hand_out(item)
            if self._catching_up:
                await self._catch_up_step()
                continue
            if self._queue:
                event = self._queue.popleft()
                if self._already_out(event):
                    continue
                return self._hand_out(event)
            if self._ended:
                final, self._final = self._final, None
                if final is None:
                    raise StopAsyncIteration
                return final
            if await self._idle():
                # Nothing queued: every matching write below the hub's applied offset is out.
                return self._hand_out(Progress(max(self.position, self._hub.applied_offset)))

    def poll(self) -> WatchItem | None:
        """The next item if one is ready without reading the log or waiting (else None): a
        consumer gathers the events of one write published together (etcd's one response
        per revision) and leaves the rest to ``__anext__``."""
        while self._out:
            item = self._out.popleft()
            if not (isinstance(item, WatchEvent) and self._already_out(item)):
                return self._hand_out(item)
        while self._queue and not self._catching_up:
            event = self._queue.popleft()
            if not self._already_out(event):
                return self._hand_out(event)
        return None

    async def aclose(self) -> None:
        """Stop: leave the hub; an iteration in progress ends. Idempotent."""
        self._final = None
        self._out.clear()
        self._end(None, drop_pending=True)

    async def __aenter__(self) -> Watcher:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    def _already_out(self, event: WatchEvent) -> bool:
        return (event.offset, event.index) < (self.position, self.position_index)

    def _hand_out(self, item: WatchItem) -> WatchItem:
        if isinstance(item, WatchEvent):
            if item.last:
                self.position, self.position_index = item.offset + 1, 0
            else:
                self.position, self.position_index = item.offset, item.index + 1
            self.delivered += 1
            self._hub.events_delivered += 1
        elif isinstance(item, Progress):
            if (item.offset, item.index) > self.cursor:
                self.position, self.position_index = item.offset, item.index
            # What the consumer is told is where it stands: resuming there neither repeats
            # nor skips an event (also between the events of one offset).
            item = Progress(self.position, self.position_index)
        self._last_out = time.monotonic()
        return item

    async def _idle(self) -> bool:
        """Wait for a write, the end, or the progress interval (then True)."""
        if self._waiter is not None:
            raise RuntimeError("a Watcher serves one consumer at a time")
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiter = waiter
        timer = loop.call_later(self._hub.progress_interval_s, _expire, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(False)

    # ------------------------------------------------------------------ catch-up

    async def _catch_up_step(self) -> None:
        pos = self._read_pos
        if pos >= self._floor:  # the queue holds every matching write from here on
            self._go_live()
            return
        hub = self._hub
        if (self._started and not self._out
                and time.monotonic() - self._last_out >= hub.progress_interval_s):
            self._out.append(Progress(pos))
            return
        try:
            events, next_offset = await hub._read_committed(pos, hub.catch_up_events)
        except BelowLogStart as exc:
            if not self._started:
                await self.aclose()
                raise
            self._end(Cancelled(str(exc), exc.log_start_offset), drop_pending=False)
            return
        except Exception as exc:
            if not self._started:
                await self.aclose()
                raise
            log.exception("watch %r: reading the log from offset %d failed", self, pos)
            self._end(Cancelled(
                f"this node failed to read its log at offset {pos} ({type(exc).__name__}: "
                f"{exc}): resume from offset {pos}, through another node if it persists", pos,
            ), drop_pending=False)
            return
        if not self._catching_up:  # ended while reading
            return
        self._started = True
        hub.catch_up_reads += 1
        if next_offset <= pos:
            log.warning("watch %r: the log returned nothing at offset %d, below the applied "
                        "offset %d", self, pos, self._floor)
            self._end(Cancelled(
                f"this node's log returned nothing at offset {pos}, below its applied offset "
                f"{self._floor}: resume from offset {pos}, through another node if it persists",
                pos,
            ), drop_pending=False)
            return
        out = self._out
        before = len(out)
        for event in events:
            if pos <= event.offset < next_offset and self.matches(event.key):
                out.append(event)
        self._read_pos = next_offset
        if len(out) == before:
            await asyncio.sleep(0)  # a long stretch without a match: let the loop breathe

    def _go_live(self) -> None:
        self._catching_up = False
        pos = self._read_pos
        queue = self._queue
        while queue and queue[0].offset < pos:  # already read from the log
            queue.popleft()
        self._floor = pos
        self._out.append(Progress(pos if queue else max(pos, self._hub.applied_offset)))

    # ------------------------------------------------------------------ from the hub

    def _offer(self, event: WatchEvent, next_offset: int) -> None:
        """``event`` matches this watch (``publish`` found it through the indexes)."""
        if event.offset < self._floor:
            return
        queue = self._queue
        if len(queue) >= self._hub.max_queue:
            if self._catching_up:
                # The log still holds them: the catch-up reads further instead.
                queue.clear()
                self._floor = next_offset
                self._hub.catch_up_overflows += 1
                return
            self._hub.cancelled_slow += 1
            self._end(Cancelled(
                f"slow consumer: resume from {describe_resume_point(*self.cursor)} (this "
                f"watch fell {self._hub.max_queue} writes behind and was cut off so as not to "
                "hold up the others)", *self.cursor,
            ), drop_pending=True)
            return
        queue.append(event)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(False)

    def _end(self, final: Cancelled | None, *, drop_pending: bool) -> None:
        """Leave the hub; hand out ``final`` after what is pending (dropped if asked; while
        catching up, only what was read from the log is handed out)."""
        if self._ended:
            return
        if drop_pending or self._catching_up:
            # While catching up, the queue starts past what was read: handing it out would
            # leave a gap.
            self._queue.clear()
        if drop_pending:
            self._out.clear()
        self._ended = True
        self._catching_up = False
        self._floor = _NEVER
        self._final = final
        self._hub._unregister(self)
        self._wake()


class WatchHub:
    """The watches of one node (see the module doc). ``applied_offset``: the state's applied
    offset when the hub is made; then :meth:`publish` advances it."""

    # The watchers it makes (a subclass of the simulator's injected bugs makes broken ones).
    watcher_class: type[Watcher] = Watcher

    def __init__(self, read_committed: ReadCommitted, *, applied_offset: int,
                 max_queue: int = DEFAULT_MAX_QUEUE,
                 progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S,
                 catch_up_events: int = DEFAULT_CATCH_UP_EVENTS) -> None:
        if applied_offset < 0:
            raise ValueError(f"applied_offset must be >= 0, got {applied_offset}")
        if max_queue < 1:
            raise ValueError(f"max_queue must be >= 1, got {max_queue}")
        if not progress_interval_s > 0:
            raise ValueError(f"progress_interval_s must be > 0, got {progress_interval_s}")
        if catch_up_events < 1:
            raise ValueError(f"catch_up_events must be >= 1, got {catch_up_events}")
        self._read_committed = read_committed
        self._applied = applied_offset
        self.max_queue = max_queue
        self.progress_interval_s = progress_interval_s
        self.catch_up_events = catch_up_events
        self._all: dict[Watcher, None] = {}
        self._by_key: dict[bytes, dict[Watcher, None]] = {}
        self._by_prefix: dict[bytes, dict[Watcher, None]] = {}
        self._prefix_lengths: list[int] = []  # sorted, distinct
        self._length_groups: dict[int, int] = {}  # prefix length -> prefixes of that length
        self._publishing = False
        self._leaving: list[Watcher] = []  # cut off during a publish: unindexed after it
        self._closed = False
        # Counters (plain ints, for metrics).
        self.watches_opened = 0
        self.events_published = 0
        self.events_delivered = 0
        self.cancelled_slow = 0
        self.catch_up_reads = 0
        self.catch_up_overflows = 0

    @property
    def applied_offset(self) -> int:
        """Every write below it has been published."""
        return self._applied

    @property
    def watchers(self) -> int:
        return len(self._all)

    @property
    def closed(self) -> bool:
        return self._closed

    def watch(self, *, key: bytes | None = None, prefix: bytes | None = None,
              from_offset: int | None = None, from_index: int = 0) -> Watcher:
        """A watch on ``key`` or on the keys under ``prefix`` (b"": all keys) from
        ``from_offset`` (None: from the applied offset, i.e. from now on), skipping the first
        ``from_index`` events of that offset (a resume between the events of one offset).
        Registered at once: nothing published after this call is missed. Raises
        WatchHubClosed, or ValueError."""
        if (key is None) == (prefix is None):
            raise ValueError("watch exactly one of key and prefix")
        if from_offset is not None and from_offset < 0:
            raise ValueError(f"from_offset must be >= 0, got {from_offset}")
        if from_index < 0 or (from_index and from_offset is None):
            raise ValueError(f"from_index {from_index} needs a from_offset and must be >= 0")
        if self._closed:
            raise WatchHubClosed("this node no longer serves watches (it is stopping): watch "
                                 "through another node")
        applied = self._applied
        if from_offset is None or from_offset >= applied:
            watcher = self.watcher_class(
                self, key, prefix, applied if from_offset is None else from_offset, None,
                start_index=from_index)
        else:
            watcher = self.watcher_class(self, key, prefix, from_offset, applied,
                                         start_index=from_index)
        self._all[watcher] = None
        if key is not None:
            self._by_key.setdefault(key, {})[watcher] = None
        else:
            assert prefix is not None
            group = self._by_prefix.get(prefix)
            if group is None:
                group = self._by_prefix[prefix] = {}
                groups = self._length_groups.get(len(prefix), 0)
                self._length_groups[len(prefix)] = groups + 1
                if not groups:
                    bisect.insort(self._prefix_lengths, len(prefix))
            group[watcher] = None
        self.watches_opened += 1
        return watcher

    def publish(self, events: Sequence[WatchEvent], next_offset: int) -> None:
        """The node's state applied committed data up to ``next_offset`` (exclusive); ``events``
        are the writes that took effect since the last call, in ``(offset, index)`` order (no
        control records, keyless records or failed conditional writes; several at one offset
        when one record deleted several keys). Synchronous and never waits: call it on the
        hub's loop. Raises ValueError, before any event takes effect, on an event out of
        order."""
        applied = self._applied
        if next_offset < applied:
            raise ValueError(f"publish up to offset {next_offset}, below the hub's applied "
                             f"offset {applied}: offsets must only grow")
        if self._closed:
            self._applied = next_offset
            return
        last = (applied - 1, _NEVER)  # before any event of the applied offset
        for event in events:  # checked before any takes effect
            here = (event.offset, event.index)
            if not (last < here and event.offset < next_offset):
                raise ValueError(
                    f"write {here} published after {last} up to offset {next_offset}: writes "
                    f"must be in (offset, index) order, from the hub's applied offset "
                    f"{applied}, below next_offset")
            last = here
        by_key, by_prefix, lengths = self._by_key, self._by_prefix, self._prefix_lengths
        self._publishing = True
        try:
            for event in events:
                key = event.key
                group = by_key.get(key)
                if group is not None:
                    for watcher in group:
                        watcher._offer(event, next_offset)
                if lengths:
                    size = len(key)
                    for length in lengths:
                        if length > size:
                            break
                        group = by_prefix.get(key[:length])
                        if group is not None:
                            for watcher in group:
                                watcher._offer(event, next_offset)
        finally:
            self._publishing = False
            leaving, self._leaving = self._leaving, []
            for watcher in leaving:
                self._unindex(watcher)
        self.events_published += len(events)
        self._applied = next_offset

    def skip_to(self, offset: int, snapshot: str | None) -> None:
        """The node replaced its state with ``snapshot`` ending at ``offset`` (a snapshot
        installed from the leader): the writes between the applied offset and ``offset`` will
        never be published, so every watch that still needed them ends, after what it has
        queued, with a :class:`Cancelled` saying to load the snapshot and resume at
        ``offset``. Nothing happens when ``offset`` is not past the applied offset."""
        if offset <= self._applied:
            return
        what = f"snapshot {snapshot}" if snapshot else "a snapshot"
        for watcher in list(self._all):
            if watcher._catching_up or watcher._floor < offset:
                watcher._end(Cancelled(
                    f"this node replaced its state with {what} and no longer has the writes "
                    f"below offset {offset}: load {what} first, then watch from offset "
                    f"{offset}", offset,
                ), drop_pending=False)
        self._applied = offset

    def close(self) -> None:
        """End every watch (each gets a :class:`Cancelled` to resume elsewhere); refuse new
        ones. Idempotent."""
        self._closed = True
        self.abort("this node stopped serving watches (it is shutting down)")

    def abort(self, why: str, applied_offset: int | None = None) -> None:
        """End every watch at what its consumer has received (each gets a
        :class:`Cancelled` to resume from there: the log still holds the rest), e.g. after a
        publish failed, so that no event is silently lost; then take ``applied_offset`` as
        published, so watches opened from now on start past what failed."""
        for watcher in list(self._all):
            watcher._end(Cancelled(
                f"{why}: resume from {describe_resume_point(*watcher.cursor)} through this or "
                "another node",
                *watcher.cursor,
            ), drop_pending=True)
        if applied_offset is not None and applied_offset > self._applied:
            self._applied = applied_offset

    # ------------------------------------------------------------------ indexes

    def _unregister(self, watcher: Watcher) -> None:
        if self._all.pop(watcher, False) is False:
            return  # not here (any more)
        if self._publishing:
            self._leaving.append(watcher)  # the indexes are being iterated
        else:
            self._unindex(watcher)

    def _unindex(self, watcher: Watcher) -> None:
        if watcher.key is not None:
            index, name = self._by_key, watcher.key
        else:
            assert watcher.prefix is not None
            index, name = self._by_prefix, watcher.prefix
        group = index.get(name)
        if group is None:
            return
        group.pop(watcher, None)
        if not group:
            del index[name]
            if index is self._by_prefix:
                groups = self._length_groups[len(name)] - 1
                if groups:
                    self._length_groups[len(name)] = groups
                else:
                    del self._length_groups[len(name)]
                    self._prefix_lengths.remove(len(name))
