"""Deliberately broken cores, each breaking one safety rule, to prove the checker can fail.

``kraft-spark sim --inject-bug NAME`` runs one of these instead of the real core; each must be
caught within 200 seeds with ``--faults all`` (tests/sim/test_injected_bugs.py). A rule of one
of the core's parts is broken in a subclass of that part, which the broken core makes instead
(``RaftCore.*_class``).
"""

from __future__ import annotations

from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.elections import Elections
from kraft_spark.raft.follower import Fetching
from kraft_spark.raft.leader import Leadership
from kraft_spark.raft.leader_state import LeaderState
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.membership import VoterChanges
from kraft_spark.raft.messages import NO_LEADER, VoteRequest
from kraft_spark.raft.progress import ReplicaProgress
from kraft_spark.raft.quorum import majority_offset
from kraft_spark.raft.read_index import PendingRead
from kraft_spark.raft.vote_rules import VoteDecision, decide_vote
from kraft_spark.raft.voter_set import VoterSet


class _DoubleVoteElections(Elections):
    def _rule_decide_vote(self, req: VoteRequest) -> VoteDecision:
        return decide_vote(
            candidate_id=req.candidate_id,
            voters=self.core.voters,
            may_vote=self.core.may_vote,
            voted_id=NO_LEADER,
            leader_known=False,
            log_ok=self._rule_vote_log_ok(req),
        )


class DoubleVote(RaftCore):
    """Grants a vote to any candidate with a good log, even after voting in this epoch."""

    elections_class = _DoubleVoteElections


class _StaleLogElections(Elections):
    def _rule_vote_log_ok(self, req: VoteRequest) -> bool:
        return True


class StaleLogVote(RaftCore):
    """Skips the log up-to-date check when granting votes."""

    elections_class = _StaleLogElections


class _CommitOldEpochLeadership(Leadership):
    def _rule_may_commit(self, ls: LeaderState, offset: int) -> bool:
        return True


class CommitOldEpoch(RaftCore):
    """Commits records of earlier epochs before one of its own epoch is on a majority."""

    leadership_class = _CommitOldEpochLeadership


class _MinorityLeadership(Leadership):
    def _rule_majority_offset(self, ls: LeaderState) -> int:
        offsets = [self._rule_local_durable_offset()]
        offsets += [max(p.end_offset, 0) for p in ls.progress.voters.values()]
        offsets.sort(reverse=True)
        return offsets[max(len(offsets) // 2 - 1, 0)]


class MinorityHighWatermark(RaftCore):
    """Takes the high watermark from a minority of voters."""

    leadership_class = _MinorityLeadership


class _UnflushedLeadership(Leadership):
    def _rule_local_durable_offset(self) -> int:
        return self.core.log.end_offset()


class AckBeforeFsync(RaftCore):
    """Reports offsets it has not fsync'd: Fetch before flush, and the leader's own end."""

    leadership_class = _UnflushedLeadership

    def _rule_fetch_waits_for_flush(self) -> bool:
        return False


class _NoTruncateFetching(Fetching):
    def _rule_apply_diverging(self, diverging: OffsetAndEpoch) -> None:
        return None


class NoTruncate(RaftCore):
    """Ignores DivergingEpoch: keeps a divergent suffix and fetches on."""

    fetching_class = _NoTruncateFetching


class _ConcurrentVoterChanges(VoterChanges):
    def _rule_change_blocked(self) -> str | None:
        return None


class ConcurrentVoterChanges(RaftCore):
    """KIP-853: starts a voter change while another is uncommitted (or before its own epoch
    committed anything)."""

    voter_changes_class = _ConcurrentVoterChanges


class CommittedVotersOnly(RaftCore):
    """KIP-853: uses only committed VotersRecords (the set in force lags the log)."""

    def _rule_voters_in_force(self) -> VoterSet:
        return self.history.at(self.high_watermark)


class _UncaughtVoterChanges(VoterChanges):
    def _rule_caught_up(self, progress: ReplicaProgress) -> bool:
        return True


class UncaughtVoter(RaftCore):
    """KIP-853: adds a voter that has not caught up with the leader's log."""

    voter_changes_class = _UncaughtVoterChanges


BUGS: dict[str, type[RaftCore]] = {
    "double-vote": DoubleVote,
    "stale-log-vote": StaleLogVote,
    "commit-old-epoch": CommitOldEpoch,
    "minority-hw": MinorityHighWatermark,
    "ack-before-fsync": AckBeforeFsync,
    "no-truncate": NoTruncate,
    "concurrent-voter-changes": ConcurrentVoterChanges,
    "committed-voters-only": CommittedVotersOnly,
    "uncaught-voter": UncaughtVoter,
}


class _UnconfirmedReadLeadership(Leadership):
    def _rule_read_confirmed(self, ls: LeaderState) -> list[PendingRead]:
        return ls.reads.take_all()


class UnconfirmedRead(RaftCore):
    """Answers read indexes at once, without a majority confirming it still leads: a deposed
    leader serves stale reads. Only a linearizability check of reads notices (not in BUGS:
    those are caught by the log invariants; this one by ``store clients`` histories)."""

    leadership_class = _UnconfirmedReadLeadership


# Bugs of reads, caught by checking the store clients' histories (tests/sim/test_store_sim.py).
STORE_BUGS: dict[str, type[RaftCore]] = {"unconfirmed-read": UnconfirmedRead}


class _UncountedFollowerLeadership(Leadership):
    def _rule_majority_offset(self, ls: LeaderState) -> int:
        progress = ls.progress
        forgotten = max(progress.voters, default=None)
        offsets = [0 if i == forgotten else max(p.end_offset, 0)
                   for i, p in progress.voters.items()]
        if progress.local_is_voter:
            offsets.append(self._rule_local_durable_offset())
        return majority_offset(offsets)


class UncountedFollower(RaftCore):
    """Forgets to count one follower's fetch progress (the voter of the highest id but its
    own) toward the high watermark: safe (it only commits less), but with three voters the
    other follower's failure alone stops every commit. Only ``liveness-partial`` sees it: at
    the heal every voter is back and commits resume."""

    leadership_class = _UncountedFollowerLeadership


BUGS["uncounted-follower"] = UncountedFollower
