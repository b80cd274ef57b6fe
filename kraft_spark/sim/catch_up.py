"""KIP-853's rule for adding a voter, checked against the truth of the simulation: a leader
adds a voter only if that node caught up with the leader's log of some moment of the recent past.

The leader judges from the Fetches it was sent (``ReplicaProgress.last_caught_up_ts``, within
a fetch timeout), by KIP-836's rule: a replica whose Fetch reaches where the leader's log ended
at its previous Fetch was caught up at that previous Fetch. The ledger knows every node's log
end at every moment, and checks the same thing in truth, when a leader appends a VotersRecord
that adds node X: for some time t in the last ``window_ms``, X's log end reached, at t or later,
the leader's log end at t. (Not "X's end equalled the leader's at one instant": under steady
appends and a slow network a follower one round behind never does, yet KIP-836 counts it caught
up; seed 655187 of the membership faults, a 960 ms Fetch round, was such a false alarm.) The
window is twice the fetch timeout: the leader's view lags the truth by a Fetch's travel time,
so a correct leader is never judged wrongly, while a leader that adds a node far behind
(``uncaught-voter``) is, at the moment it does so.

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

    def _highest_end_since(self, node_id: int, t: int) -> int:
        """The highest log end ``node_id`` had at ``t`` or later."""
        return max([self._end_at(node_id, t),
                    *(value for when, value in self._ends.get(node_id, ()) if when > t)])

    def check_added(self, leader: int, added: int, now_us: int) -> None:
        """``leader`` just appended a VotersRecord that adds ``added``."""
        start = now_us - self.window_us
        # The leader's end is a step function: the start of each step is its best moment (the
        # lowest t for that end, so the most time for the node to reach it).
        moments = {start, *(t for t, _ in self._ends.get(leader, ()) if start <= t <= now_us)}
        if any(self._highest_end_since(added, t) >= self._end_at(leader, t) for t in moments):
            return
        raise InvariantViolation(
            "add-only-caught-up-voter",
            f"leader {leader} added voter {added}, whose log end ({self._end_at(added, now_us)}) "
            f"was behind the leader's ({self._end_at(leader, now_us)}) for the whole last "
            f"{self.window_us // 1000} ms",
        )
