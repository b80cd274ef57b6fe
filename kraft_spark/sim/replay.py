"""The replay of the committed log at any offset, for the *state-equals-replay* check, without
replaying from offset 0 each time.

A check asks for the state machine after the committed batches below an offset. Replaying from
the start for every check was quadratic in the run's length: with lease clients, 55 % of a run
went to it. Instead a few replay cursors move forward through the committed log (which only
ever grows at its end); a check takes the cursor furthest along that is not past its offset and
moves it on. Each node's checks come at rising offsets, so each ends up with a cursor of its
own. A cursor is a plain ``KeyValueState`` fed the same batches in the same order as a replay
from the start: the answer is the same, only cheaper."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from kraft_spark.raft.records import Batch
from kraft_spark.state.machine import KeyValueState

MAX_CURSORS = 12  # more than the nodes of any run (voters, observers, joiners)


@dataclass
class _Cursor:
    state: KeyValueState = field(default_factory=KeyValueState)
    applied: int = 0  # how many committed batches it has applied
    last_used: int = 0


class CommittedReplay:
    def __init__(self, committed: list[Batch]) -> None:
        self._committed = committed  # the checker's list, appended to as commits happen
        self._cursors: list[_Cursor] = []
        self._uses = 0

    def state_at(self, offset: int) -> KeyValueState:
        """The state after every committed batch whose base offset is below ``offset``. Valid
        until the next call (the cursor moves on)."""
        committed = self._committed
        target = bisect.bisect_left(committed, offset, key=lambda batch: batch.base_offset)
        usable = [c for c in self._cursors if c.applied <= target]
        if usable:
            cursor = max(usable, key=lambda c: c.applied)
        elif len(self._cursors) < MAX_CURSORS:
            cursor = _Cursor()
            self._cursors.append(cursor)
        else:  # every cursor is past the offset: start the least recently used one again
            cursor = min(self._cursors, key=lambda c: c.last_used)
            cursor.state, cursor.applied = KeyValueState(), 0
        self._uses += 1
        cursor.last_used = self._uses
        for batch in committed[cursor.applied:target]:
            cursor.state.apply(batch)
        cursor.applied = target
        return cursor.state
