"""KIP-853's rule for adding a voter, checked against the truth of the simulation: a leader
adds a voter only if that node held the leader's whole log at some moment of the recent past.

The leader judges from the Fetches it was sent (``ReplicaProgress.last_caught_up_ts``, within
a fetch timeout); the ledger knows every node's log end at every moment, and checks, when a
leader appends a VotersRecord that adds node X, that at some time t in the last ``window_ms``
X's log end was at least the leader's. The window is twice the fetch timeout: the leader's view
lags the truth by a Fetch's travel time, so a correct leader is never judged wrongly, while a
leader that adds a node far behind (``uncaught-voter``) is, at the moment it does so.

Nodes whose log end fell (a crash losing unsynced writes, a disk loss, a truncation) keep their
earlier ends in the ledger: what counts is that they held the log within the window.
"""

from __future__ import annotations

from collections import deque

from kraft_spark.sim.invariants import InvariantViolation


class CatchUpLedger:
    def __init__(self, window_ms: int) -> None:
        self.window_us = window_ms * 1000
        self._ends: dict[int, deque[tuple[int, int]]] = {}  # node -> (time, log end) changes

    def note(self, node_id: int, now_us: int, end: int) -> None:
        changes = self._ends.setdefault(node_id, deque())
        if changes and changes[-1][1] == end:
            return
        changes.append((now_us, end))
        # Keep the last change before the window: it is the end in force when the window opens.
        while len(changes) > 1 and changes[1][0] <= now_us - self.window_us:
            changes.popleft()

    def _end_at(self, node_id: int, t: int) -> int:
        end = 0
        for when, value in self._ends.get(node_id, ()):
            if when > t:
                break
            end = value
        return end

    def check_added(self, leader: int, added: int, now_us: int) -> None:
        """``leader`` just appended a VotersRecord that adds ``added``."""
        start = now_us - self.window_us
        moments = {start, now_us}
        for node in (leader, added):
            moments.update(t for t, _ in self._ends.get(node, ()) if start <= t <= now_us)
        if any(self._end_at(added, t) >= self._end_at(leader, t) for t in moments):
            return
        raise InvariantViolation(
            "add-only-caught-up-voter",
            f"leader {leader} added voter {added}, whose log end ({self._end_at(added, now_us)}) "
            f"was behind the leader's ({self._end_at(leader, now_us)}) for the whole last "
            f"{self.window_us // 1000} ms",
        )
