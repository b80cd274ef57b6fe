"""``LeaderReads``: the leader answers ReadIndex requests (``kraft_spark.raft.read_index``
explains the technique and why it is safe). The confirmations themselves are counted where
Fetches are handled (``Leadership.handle_fetch_request``) and settled where the high watermark
moves; this module takes the request in and makes the voters fetch again at once."""

from __future__ import annotations

from kraft_spark.raft.base import CoreState
from kraft_spark.raft.leader import Leadership
from kraft_spark.raft.leader_state import LeaderState, ParkedFetch
from kraft_spark.raft.messages import ErrorCode, ReadIndexRequest, ReadIndexResponse


class LeaderReads:
    """The leader's side of ReadIndex requests."""

    def __init__(self, core: CoreState, leadership: Leadership) -> None:
        self.core = core
        self.leadership = leadership

    def handle_read_index(self, token: object, req: ReadIndexRequest) -> None:
        core = self.core
        ls = core.leader_state
        if ls is None:
            core.reply(token, ReadIndexResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                core.known_leader(), core.epoch))
            return
        ls.reads.add(token, core.now + max(1, req.timeout_ms))
        self.leadership.settle_reads(ls)
        if ls.reads.pending:
            self._release_parked_voters(ls)

    def _release_parked_voters(self, ls: LeaderState) -> None:
        """Answer the voters' parked Fetches now (empty if nothing is new), so they fetch again
        at once and confirm the reads waiting; observers stay parked."""
        voters = self.core.voters
        keep: list[ParkedFetch] = []
        for parked in ls.parked:
            if parked.request.replica_id in voters:
                self.leadership.complete_fetch(parked.token, parked.request)
            else:
                keep.append(parked)
        ls.parked = keep
