"""The invariants (docs/reference/simulator.md), checked incrementally after every simulated
event.

The checker keeps the *committed log*: the batches below the largest high watermark any leader
has announced. Every other check is phrased against it, so each costs a few comparisons per
event instead of a scan of every log.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kraft_spark.raft.messages import NO_LEADER
from kraft_spark.raft.records import Batch
from kraft_spark.raft.voter_records import voters_in
from kraft_spark.sim.memlog import MemoryLog


class InvariantViolation(Exception):
    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


@dataclass(slots=True)
class NodeView:
    """What the checker remembers of one node between events.

    ``agree_end``: the node's visible log equals the committed log below this offset.
    ``durable_agree_end``: the same for what the node's disk would give back after a crash.
    Both only grow by comparing further batches, and shrink only when a truncation (or a crash)
    removed data, so each check costs a few comparisons.
    """

    agree_end: int = 0
    durable_agree_end: int = 0
    persisted_epoch: int = 0
    # The candidate this node durably voted for in ``persisted_epoch`` (NO_LEADER: none yet).
    voted_for: int = NO_LEADER
    incarnation: int = 0
    high_watermark: int = 0


@dataclass(slots=True)
class Checker:
    # The voter set of the committed log (KIP-853: its newest committed VotersRecord, else
    # the static set): the majority and electability checks are phrased against it.
    voters: tuple[int, ...]
    committed: list[Batch] = field(default_factory=list)
    committed_end: int = 0
    leaders: dict[int, int] = field(default_factory=dict)  # epoch -> leader id
    nodes: dict[int, NodeView] = field(default_factory=dict)
    committed_values: dict[bytes, int] = field(default_factory=dict)  # value -> offset
    commits: int = 0
    # (epoch of the leader that advanced the committed offset, committed end after it).
    commit_marks: list[tuple[int, int]] = field(default_factory=list)

    def view(self, node_id: int) -> NodeView:
        v = self.nodes.get(node_id)
        if v is None:
            v = self.nodes[node_id] = NodeView()
        return v

    # ------------------------------------------------------------------ agreement

    def _extend(self, batches: list[Batch], start: int) -> int:
        """How far ``batches`` (a log) agrees with the committed log, given that it agrees
        below ``start``."""
        if start >= self.committed_end:
            return start
        i = _index_of(batches, start)
        j = _index_of(self.committed, start)
        committed = self.committed
        while i < len(batches) and j < len(committed) and batches[i] == committed[j]:
            start = committed[j].next_offset
            i += 1
            j += 1
        return start

    def refresh(self, node_id: int, log: MemoryLog) -> NodeView:
        """Below its log start a node holds a snapshot instead of records; snapshots are of
        committed records only (checked where they are taken and installed), so agreement
        starts at the log start."""
        v = self.view(node_id)
        start = log.start_offset()
        if start > self.committed_end:
            raise InvariantViolation(
                "snapshot-committed",
                f"node {node_id}'s log starts at {start}, past the committed log "
                f"({self.committed_end})",
            )
        v.agree_end = self._extend(log.batches(), max(min(v.agree_end, log.end_offset()), start))
        if log.durable_truncated_to is not None:
            v.durable_agree_end = min(v.durable_agree_end, log.durable_truncated_to)
            log.durable_truncated_to = None
        durable_start = log.durable_start_offset()
        v.durable_agree_end = self._extend(
            log.durable_batches(), max(v.durable_agree_end, min(durable_start, start))
        )
        return v

    # ------------------------------------------------------------------ events

    def on_restart(self, node_id: int, log: MemoryLog, disk_lost: bool) -> None:
        v = self.view(node_id)
        v.incarnation += 1
        v.high_watermark = 0
        if disk_lost:
            v.persisted_epoch = 0
            v.voted_for = NO_LEADER
            v.durable_agree_end = 0
        if log.durable_truncated_to is not None:
            v.durable_agree_end = min(v.durable_agree_end, log.durable_truncated_to)
            log.durable_truncated_to = None
        # After a restart the visible log is the durable image.
        v.durable_agree_end = min(v.durable_agree_end, log.end_offset())
        v.agree_end = v.durable_agree_end

    def on_persist(self, node_id: int, epoch: int, voted_id: int = NO_LEADER) -> None:
        """Epochs never go back, and a voter votes for one candidate per epoch (Raft's election
        safety rests on it): once its quorum-state names a candidate in an epoch, no later
        write in that epoch names another, even after a restart (disk loss aside)."""
        v = self.view(node_id)
        if epoch < v.persisted_epoch:
            raise InvariantViolation(
                "monotonic-epoch",
                f"node {node_id} persisted epoch {epoch} after epoch {v.persisted_epoch}",
            )
        if epoch > v.persisted_epoch:
            v.voted_for = NO_LEADER
        if voted_id != NO_LEADER:
            if v.voted_for not in (NO_LEADER, voted_id):
                raise InvariantViolation(
                    "one-vote-per-epoch",
                    f"node {node_id} voted for {v.voted_for} and then for {voted_id} in epoch "
                    f"{epoch}",
                )
            v.voted_for = voted_id
        v.persisted_epoch = epoch

    def on_vote_given(self, voter: int, candidate: int, candidate_log: tuple[int, int],
                      voter_log: tuple[int, int]) -> None:
        """Raft's election restriction: a vote goes only to a candidate whose log, as its
        request states it (last epoch, end offset), is at least as up to date as the voter's."""
        if candidate_log < voter_log:
            raise InvariantViolation(
                "vote-for-up-to-date-log",
                f"node {voter} (log at epoch {voter_log[0]}, end {voter_log[1]}) voted for "
                f"{candidate} (epoch {candidate_log[0]}, end {candidate_log[1]})",
            )

    def on_leader(self, node_id: int, epoch: int, log: MemoryLog) -> None:
        other = self.leaders.get(epoch)
        if other is not None and other != node_id:
            raise InvariantViolation(
                "single-leader", f"nodes {other} and {node_id} both lead epoch {epoch}"
            )
        self.leaders[epoch] = node_id
        # Leader completeness: whatever leaders of earlier epochs committed, this one holds.
        required = max((end for e, end in self.commit_marks if e < epoch), default=0)
        v = self.refresh(node_id, log)
        if v.agree_end < required:
            raise InvariantViolation(
                "committed-durable",
                f"node {node_id} became leader of epoch {epoch} holding the committed log only "
                f"up to {v.agree_end}; earlier epochs committed up to {required}",
            )

    def on_high_watermark(
        self, node_id: int, hw: int, leader_epoch: int | None, log: MemoryLog
    ) -> None:
        """``leader_epoch`` is the node's epoch when it leads, else None."""
        v = self.view(node_id)
        if hw < v.high_watermark:
            raise InvariantViolation(
                "monotonic-high-watermark",
                f"node {node_id} moved its high watermark back from {v.high_watermark} to {hw}",
            )
        v.high_watermark = hw
        if hw > log.end_offset():
            raise InvariantViolation(
                "monotonic-high-watermark",
                f"node {node_id} high watermark {hw} beyond its log end {log.end_offset()}",
            )
        if leader_epoch is not None and hw > self.committed_end:
            v = self.refresh(node_id, log)
            if v.agree_end < self.committed_end:
                raise InvariantViolation(
                    "committed-consistent",
                    f"leader {node_id} moved the high watermark to {hw} on a log that departs "
                    f"from the committed log at {v.agree_end}",
                )
            for batch in log.read_unchecked(self.committed_end, 1 << 60):
                if batch.base_offset >= hw:
                    break
                self._commit(batch)
            self.commit_marks.append((leader_epoch, self.committed_end))
        elif hw > self.committed_end:
            raise InvariantViolation(
                "committed-consistent",
                f"follower {node_id} high watermark {hw} beyond any leader's "
                f"({self.committed_end})",
            )

    def _commit(self, batch: Batch) -> None:
        if batch.base_offset != self.committed_end:
            raise InvariantViolation(
                "committed-consistent",
                f"committed batch at {batch.base_offset}, expected {self.committed_end}",
            )
        self.committed.append(batch)
        self.committed_end = batch.next_offset
        self.commits += 1
        if batch.is_control:
            voters = voters_in(batch)
            if voters is not None:
                self.voters = voters.ids()
        if not batch.is_control:
            for i, record in enumerate(batch.records):
                if record.value is None:
                    continue
                first = self.committed_values.setdefault(record.value, batch.base_offset + i)
                if first != batch.base_offset + i:
                    raise InvariantViolation(
                        "acknowledged-exactly-once",
                        f"value {record.value!r} committed twice, at {first} and "
                        f"{batch.base_offset + i}",
                    )

    def check_log(self, node_id: int, log: MemoryLog) -> None:
        """Below its own high watermark a node's log is the committed log."""
        v = self.refresh(node_id, log)
        claimed = min(v.high_watermark, self.committed_end, log.end_offset())
        if v.agree_end < claimed:
            idx = _index_of(log.batches(), v.agree_end)
            held = log.batches()[idx] if idx < len(log.batches()) else None
            expected = self.committed[_index_of(self.committed, v.agree_end)]
            raise InvariantViolation(
                "committed-consistent",
                f"node {node_id} holds {_short(held)} below its high watermark "
                f"{v.high_watermark} where the committed log has {_short(expected)}",
            )

    def check_truncation(self, node_id: int, offset: int) -> None:
        """A truncation never removes what the node itself knows is committed (below its high
        watermark). It may remove records committed later by a newer leader that the node has
        not heard of: a node following an older epoch's leader follows that epoch's log, and
        fetches the records again from the newer leader."""
        hw = self.view(node_id).high_watermark
        if offset < hw:
            raise InvariantViolation(
                "committed-durable",
                f"node {node_id} truncated its log to {offset}, below its high watermark {hw}",
            )

    def check_majority(self, logs: dict[int, MemoryLog], excused: set[int],
                       leader_voters: tuple[int, ...] | None = None,
                       committing_voters: tuple[int, ...] | None = None) -> None:
        """A majority of voters durably hold the committed log; ``excused`` voters lost their
        disk and are still catching up (the disk-loss rule), and so count as holding it, in
        whichever set they belong to (a voter being added may lose its disk too).

        KIP-853: the voters are those of the committed log, or those in force at the current
        leader (``leader_voters``, its newest VotersRecord, committed or not): a leader commits
        on a majority of the set in force at it, which during a removal is no majority of the
        committed set (the two majorities overlap, which is what keeps it safe). Or those of
        the leader that committed it (``committing_voters``): its successor may not hold the
        removal it committed under (seed 945262), and replicates the records a moment later."""
        holding = {i for i, log in logs.items()
                   if self.refresh(i, log).durable_agree_end >= self.committed_end}
        sets = [self.voters] + [v for v in (leader_voters, committing_voters) if v]
        for voters in sets:
            if len((holding | excused) & set(voters)) >= len(voters) // 2 + 1:
                return
        ends = {i: self.view(i).durable_agree_end for i in logs}
        raise InvariantViolation(
            "majority-holds-high-watermark",
            f"only {len(holding)} of the voters {sets} durably hold the committed log up to "
            f"{self.committed_end} (durable agreement per node: {ends})",
        )

    def check_electable(
        self, logs: dict[int, MemoryLog], alive: dict[int, bool], non_voting: set[int]
    ) -> None:
        """Committed data is safe from elections: no voter that lacks part of the committed log
        could collect a majority of votes. A voter W grants V only if V's (last epoch, end) is
        at least W's own; here W is judged by its durable log (what it would have after a crash,
        the most permissive case) and V by the best log it can campaign with. Voters that lost
        their disk and have not caught up neither vote nor campaign (the disk-loss rule).
        """
        if not self.committed_end:
            return
        durable: dict[int, tuple[int, int]] = {}
        for node_id, log in logs.items():
            batches = log.durable_batches()
            durable[node_id] = (
                (batches[-1].epoch, batches[-1].next_offset) if batches
                else (log.durable_start_epoch(), log.durable_start_offset())
            )
        needed = len(self.voters) // 2 + 1
        for node_id, log in logs.items():
            if node_id in non_voting:
                continue
            v = self.refresh(node_id, log)
            if alive[node_id]:
                lacks, claim = (
                    v.agree_end < self.committed_end,
                    (log.model_last_epoch(), log.end_offset()),
                )
            else:
                lacks, claim = v.durable_agree_end < self.committed_end, durable[node_id]
            if not lacks:
                continue
            grants = [w for w in logs if w not in non_voting and durable[w] <= claim]
            if len(grants) >= needed:
                raise InvariantViolation(
                    "committed-durable",
                    f"voter {node_id} lacks committed records below {self.committed_end} yet "
                    f"voters {grants} would elect it with its log (last epoch, end) {claim}",
                )

    def on_ack(self, client: int, value: bytes, offset: int) -> None:
        if offset >= self.committed_end:
            raise InvariantViolation(
                "acknowledged-means-committed",
                f"client {client} was acknowledged offset {offset}, committed end is "
                f"{self.committed_end}",
            )
        at = self.committed_values.get(value)
        if at != offset:
            raise InvariantViolation(
                "acknowledged-means-committed",
                f"client {client} was told {value!r} is at {offset}; committed log has it at {at}",
            )


def _index_of(batches: list[Batch], offset: int) -> int:
    """Index of the first batch that ends after ``offset``."""
    lo, hi = 0, len(batches)
    while lo < hi:
        mid = (lo + hi) // 2
        if batches[mid].next_offset <= offset:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _short(batch: Batch | None) -> str:
    if batch is None:
        return "nothing"
    kind = "control" if batch.is_control else "data"
    return f"{kind} batch [{batch.base_offset}..{batch.last_offset}] epoch {batch.epoch}"
