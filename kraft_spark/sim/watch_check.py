"""The watch checker of the simulated watch clients (``kraft_spark.sim.watch_clients``).

The *committed history* is the committed log (the checker's, ``Checker.committed``) turned into
watch events by the state machine's judgement, as a node's feed turns it
(``kraft_spark.store.watch_feed``): a replay ``KeyValueState`` applies each committed batch, and
``batch_events`` takes its writes that took effect: puts and deletes, every key a lease revoked
or expired there deleted (numbered within their offset), never the records of a failed
conditional write. It is in (offset, index) order.

A client's stream is checked as it arrives, in *segments*: one starts where the client loaded
the state (a range read at the node's applied offset R, as a user does before watching from R,
or again when told that the log no longer holds what it missed); within a segment the client
resumes, after any cut-off, crash, hop or leader change, from its cursor. Invariants, each an
``InvariantViolation``:

* ``watch-stream``: within a segment, the events received are exactly the committed history's
  events that match the watch, from the segment's start to the client's cursor, in order,
  without a gap or a repeat, across every resume; a progress (everything before it reported)
  skips no matching event and never goes back.
* ``watch-reload``: the state a client loaded at offset R, filtered by its watch, is the replay
  of the committed log below R, filtered alike.
* ``watch-resume-point``: a watch that ends naming a resume point past the client's cursor
  (``Cancelled``: load a snapshot first) does so only when matching events between are no
  longer served by that node (below its log start, or replaced by a snapshot).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from kraft_spark.raft.records import Batch
from kraft_spark.sim.invariants import InvariantViolation
from kraft_spark.sim.replay import CommittedReplay
from kraft_spark.state.machine import KeyValueState
from kraft_spark.store.watch import WatchEvent, batch_events

Point = tuple[int, int]  # (offset, index): an event's identity, a cursor


def after(event: WatchEvent) -> Point:
    """The cursor just past ``event``."""
    return (event.offset + 1, 0) if event.last else (event.offset, event.index + 1)


class CommittedHistory:
    """The committed history's events, extended from the committed log as it grows."""

    def __init__(self, committed: list[Batch]) -> None:
        self._committed = committed  # the checker's list, appended to as commits happen
        self._applied = 0  # batches turned into events
        self._state = KeyValueState()
        self.events: list[WatchEvent] = []
        self._points: list[Point] = []

    def _extend(self, below: int) -> None:
        committed, state = self._committed, self._state
        while self._applied < len(committed) and committed[self._applied].base_offset < below:
            batch = committed[self._applied]
            state.apply(batch)
            new = batch_events(batch, _failed_size(state),
                               deleted_by=state.leases.deleted_at)
            self.events += new
            self._points += [(e.offset, e.index) for e in new]
            self._applied += 1

    def between(self, start: Point, end: Point, matches: Callable[[bytes], bool]
                ) -> list[WatchEvent]:
        """The matching events from ``start`` (included) to ``end`` (excluded)."""
        self._extend(end[0] + 1)
        lo = bisect.bisect_left(self._points, start)
        hi = bisect.bisect_left(self._points, end)
        return [e for e in self.events[lo:hi] if matches(e.key)]


def _failed_size(state: KeyValueState) -> Callable[[int], int]:
    def size(offset: int) -> int:
        failure = state.txn_failure(offset)
        return failure.size if failure is not None else 0
    return size


def _show(events: list[WatchEvent]) -> str:
    return ", ".join(f"{e.offset}.{e.index} {e.key!r}{'' if e.value is not None else ' (del)'}"
                     for e in events[:4]) + (" ..." if len(events) > 4 else "")


class StreamCheck:
    """One client's stream against the committed history (see the module doc)."""

    def __init__(self, name: str, matches: Callable[[bytes], bool], history: CommittedHistory,
                 replay: CommittedReplay) -> None:
        self.name = name
        self.matches = matches
        self.history = history
        self.replay = replay
        self.cursor: Point = (0, 0)
        self.segments = 0

    def loaded(self, offset: int, view: dict[bytes, bytes]) -> None:
        """The client loaded ``view`` (its watch's keys) at ``offset``: a new segment."""
        state = self.replay.state_at(offset)
        expected = {k: e.value for k, e in state.items() if self.matches(k)}
        if view != expected:
            diff = sorted(set(view.items()) ^ set(expected.items()))
            raise InvariantViolation(
                "watch-reload",
                f"{self.name} loaded the state at offset {offset}, which differs from the "
                f"replay of the committed log there in {len(diff)} entries, e.g. {diff[:2]}")
        self.cursor = (offset, 0)
        self.segments += 1

    def event(self, event: WatchEvent) -> None:
        here = (event.offset, event.index)
        if here < self.cursor:
            raise InvariantViolation(
                "watch-stream",
                f"{self.name} received {event.offset}.{event.index} {event.key!r} again, or "
                f"out of order: it had everything before {self.cursor[0]}.{self.cursor[1]}")
        expected = self.history.between(self.cursor, after(event), self.matches)
        if not expected or expected[-1] != event:
            raise InvariantViolation(
                "watch-stream",
                f"{self.name} received {_show([event])} (last={event.last}), which is not the "
                f"committed history's matching event there (from {self.cursor[0]}."
                f"{self.cursor[1]}: {_show(expected) or 'none'})")
        if len(expected) > 1:
            raise InvariantViolation(
                "watch-stream",
                f"{self.name} missed {len(expected) - 1} committed events before "
                f"{event.offset}.{event.index}: {_show(expected[:-1])}")
        self.cursor = after(event)

    def progress(self, point: Point) -> None:
        if point < self.cursor:
            raise InvariantViolation(
                "watch-stream",
                f"{self.name} was told everything before {point[0]}.{point[1]} was reported, "
                f"below its cursor {self.cursor[0]}.{self.cursor[1]}: resuming there repeats")
        missed = self.history.between(self.cursor, point, self.matches)
        if missed:
            raise InvariantViolation(
                "watch-stream",
                f"{self.name} was told everything before {point[0]}.{point[1]} was reported, "
                f"but missed {len(missed)} committed events: {_show(missed)}")
        self.cursor = point

    def cancelled(self, point: Point, served_from: int) -> bool:
        """The watch ended naming ``point``; ``served_from``: the lowest offset the node still
        serves. True when the client must load the state again (the point is past its
        cursor); raises when that skips events the node still serves."""
        if point <= self.cursor:
            self.progress(point)  # below the cursor: a violation; equal: a plain resume
            return False
        missed = self.history.between(self.cursor, point, self.matches)
        if missed and self.cursor[0] >= served_from:
            raise InvariantViolation(
                "watch-resume-point",
                f"{self.name}'s watch ended naming {point[0]}.{point[1]} to resume from, past "
                f"its cursor {self.cursor[0]}.{self.cursor[1]}, while the node still serves "
                f"from offset {served_from}: {len(missed)} events skipped: {_show(missed)}")
        return True
