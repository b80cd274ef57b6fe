"""The durability checks run after every event: the committed log is durably on a majority of
the voters, and no voter lacking part of it could be elected. Voters catching up after a disk
loss are excused from the first and vote in neither (the disk-loss rule)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kraft_spark.raft.voter_records import voters_in
from kraft_spark.sim.invariants import Checker
from kraft_spark.sim.memlog import MemoryLog
from kraft_spark.sim.node import SimNode


def catching_up(nodes: Mapping[int, SimNode], members: Iterable[int]) -> set[int]:
    """Nodes of ``members`` that lost their disk and have not caught up yet. A node's ``wiped``
    mark is cleared here once its core says it caught up."""
    found = set()
    for i in members:
        node = nodes[i]
        if node.wiped:
            if node.alive and node.core is not None and not node.core.pending_catch_up:
                node.wiped = False
            else:
                found.add(i)
    return found


def newest_voters(log: MemoryLog, committed: tuple[int, ...]) -> tuple[int, ...]:
    """The set of the newest VotersRecord in ``log``, committed or not; the committed set when
    the log holds none (the newest is then in a snapshot, below the high watermark)."""
    for batch in reversed(log.batches()):
        if batch.is_control and (voters := voters_in(batch)) is not None:
            return voters.ids()
    return committed


class DurabilityCheck:
    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self._last_leader_voters: tuple[int, ...] | None = None
        # The set in force at the leader when the committed end last grew, and that end.
        self._committing_voters: tuple[int, ...] | None = None
        self._committed_end = 0

    def check(self, nodes: Mapping[int, SimNode], voter_ids: tuple[int, ...],
              leader: SimNode | None) -> None:
        """``voter_ids``: the committed set; ``leader``: the current leader, if any. The set in
        force at it is read from its log (its newest VotersRecord), not asked of its core: a
        core that is wrong about it (``committed-voters-only``) must not set the bar."""
        if leader is not None:
            self._last_leader_voters = newest_voters(leader.log, voter_ids)
        # With no leader (it just crashed), the set the last one committed with: its newest
        # VotersRecord may not be committed, yet it is what justified the high watermark.
        in_force = self._last_leader_voters
        if self.checker.committed_end > self._committed_end:
            self._committed_end = self.checker.committed_end
            self._committing_voters = in_force
        members = {*voter_ids, *(in_force or ()), *(self._committing_voters or ())}
        # Excused per id, in both sets: a voter being added (in the leader's set only) may
        # lose its disk right after the change commits, and catches up like any other.
        excused = catching_up(nodes, members)
        # A node that is not its id's voter (a lost disk came back under a new directory id,
        # KIP-853) neither votes nor campaigns until it is removed and added again: excused,
        # like a voter catching up after a disk loss.
        excused |= {i for i in members
                    if (core := nodes[i].core) is not None and not core.is_voter}
        self.checker.check_majority({i: nodes[i].log for i in members}, excused, in_force,
                                    self._committing_voters)
        self.checker.check_electable({i: nodes[i].log for i in voter_ids},
                                     {i: nodes[i].alive for i in voter_ids},
                                     excused & set(voter_ids))
