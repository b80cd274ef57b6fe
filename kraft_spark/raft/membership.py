"""KIP-853 in the core: the leader's single-member changes (every role adopts the voter set in
force with ``CoreState.voters_changed``, base.py).

Rules (Kafka's AddVoterHandler / RemoveVoterHandler, checked in this order):

1. only the leader changes the set; one change at a time: a change starts only when no other
   is pending, the leader has committed a record of its own epoch (its high watermark is past
   the epoch's LeaderChange record) and the newest VotersRecord is committed;
2. an added voter is an observer that fetches from the leader with the given directory id and
   is caught up (it reached the leader's log end within the last fetch timeout);
3. a change is in force from the moment its VotersRecord is appended (``voter_history``): the
   leader counts the new set for the high watermark and check-quorum at once;
4. the request is answered once the VotersRecord commits (or with REQUEST_TIMED_OUT at its
   timeout: it may still commit); a leader that removed itself steps down once it commits,
   handing over with EndQuorumEpoch, and follows the quorum as an observer.

The first change of a quorum started from a static voter list writes a KRaftVersionRecord
(kraft.version 1) before its VotersRecord: the static set with the directory ids the leader has
seen its voters fetch with (unknown ones stay NIL, matching any directory) and their endpoints
from the configuration. Kafka asks for ``kafka-features.sh upgrade`` first; here the first
change upgrades (documented deviation).
"""

from __future__ import annotations

import uuid

from kraft_spark.raft.base import CoreState
from kraft_spark.raft.events import VoterEvent, VoterStep
from kraft_spark.raft.leader import Leadership
from kraft_spark.raft.messages import (
    AddVoterRequest,
    ErrorCode,
    RemoveVoterRequest,
    UpdateVoterRequest,
)
from kraft_spark.raft.progress import ReplicaProgress
from kraft_spark.raft.state import Role
from kraft_spark.raft.voter_change import PendingVoterChange
from kraft_spark.raft.voter_records import kraft_version_batch, voters_batch
from kraft_spark.raft.voter_set import (
    KRAFT_VERSION_DYNAMIC,
    NIL_DIRECTORY,
    Voter,
    VoterSet,
    directory_text,
)


class VoterChanges:
    """The requests that change the voter set (AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter),
    as the leader handles them. The change in flight is the leader's
    (``LeaderState.voter_change``): the leader answers it when it commits, times out or is
    abandoned, and steps down once its own removal commits (leader.py)."""

    def __init__(self, core: CoreState, leadership: Leadership) -> None:
        self.core = core
        self.leadership = leadership

    # ------------------------------------------------------------------ safety rules (hooks)

    def _rule_change_blocked(self) -> str | None:
        """Why a change may not start now (None: it may)."""
        core = self.core
        ls = core.leader_state
        pending = ls.voter_change.pending if ls is not None else None
        if pending is not None:
            return ("Request timed out waiting for leader to handle previous voter change "
                    f"request ({pending.description} at offset {pending.offset})")
        if ls is None or core.high_watermark <= ls.epoch_start_offset:
            return ("Request timed out waiting for leader to establish HWM and fence previous "
                    "voter changes")
        latest = core.history.latest_offset()
        if latest >= core.high_watermark:
            return (f"Request timed out waiting for voters to commit the latest voter change at "
                    f"{latest} with HWM {core.high_watermark}")
        return None

    def _rule_caught_up(self, progress: ReplicaProgress) -> bool:
        """A new voter counts only once it holds the leader's log (rule 2)."""
        return progress.last_caught_up_ts >= self.core.now - self.core.config.fetch_timeout_ms

    def voter_directories(self) -> dict[int, uuid.UUID]:
        """Directory ids the leader has seen each replica fetch with (its own included)."""
        core = self.core
        ls = core.leader_state
        known = {core.node_id: core.directory_id}
        if ls is not None:
            for progress in (*ls.progress.voters.values(), *ls.progress.observers.values()):
                if progress.directory_id != NIL_DIRECTORY:
                    known.setdefault(progress.replica_id, progress.directory_id)
        return known

    # ------------------------------------------------------------------ requests

    def _precheck(self, token: object, cluster_id: str | None) -> bool:
        core = self.core
        if cluster_id is not None and cluster_id != core.cluster_id:
            core.reply(token, core.voter_change_response(
                ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"cluster id {cluster_id!r} is not this quorum's ({core.cluster_id!r})"))
            return False
        ls = core.leader_state
        if core.role is not Role.LEADER or ls is None or ls.voter_change.step_down_due:
            core.reply(token, core.voter_change_response(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, "not the leader"))
            return False
        blocked = self._rule_change_blocked()
        if blocked is not None:
            core.reply(token, core.voter_change_response(ErrorCode.REQUEST_TIMED_OUT, blocked))
            return False
        return True

    def _note_target(self, target: tuple[int, ...]) -> None:
        """A reassignment's step names where it goes; DescribeQuorum shows it until the set
        in force is that (or another leader takes over: the next step tells it again)."""
        ls = self.core.leader_state
        if ls is not None and target:
            ls.reassignment_target = tuple(sorted(set(target)))

    def handle_add_voter(self, token: object, req: AddVoterRequest) -> None:
        core = self.core
        if not self._precheck(token, req.cluster_id):
            return
        self._note_target(req.target_voters)
        ls = core.leader_state
        assert ls is not None
        if core.voter_set.get(req.voter_id) is not None:
            core.reply(token, core.voter_change_response(
                ErrorCode.DUPLICATE_VOTER,
                f"The voter id for {req.voter_id} is already part of the set of voters "
                f"{core.voter_set.describe()}."))
            return
        if req.directory_id == NIL_DIRECTORY or not req.endpoints:
            core.reply(token, core.voter_change_response(
                ErrorCode.INVALID_REQUEST,
                "a new voter needs its directory id and at least one listener"))
            return
        progress = ls.progress.observers.get(req.voter_id)
        if progress is None or progress.directory_id != req.directory_id:
            core.reply(token, core.voter_change_response(
                ErrorCode.REQUEST_TIMED_OUT,
                f"New voter {req.voter_id}@{directory_text(req.directory_id)} is not fetching "
                "from the leader: start it as an observer of this quorum first"))
            return
        if not self._rule_caught_up(progress):
            core.reply(token, core.voter_change_response(
                ErrorCode.REQUEST_TIMED_OUT,
                f"Aborted add voter operation for {req.voter_id} since it is lagging behind"))
            return
        new = self._upgraded_set().with_voter(
            Voter(req.voter_id, req.directory_id, req.endpoints))
        self._append_voter_change(new, token, req.timeout_ms, f"add voter {req.voter_id}")

    def handle_remove_voter(self, token: object, req: RemoveVoterRequest) -> None:
        core = self.core
        if not self._precheck(token, req.cluster_id):
            return
        self._note_target(req.target_voters)
        if self._listed_voter(token, req.voter_id, req.directory_id) is None:
            return
        if len(core.voter_set.voters) == 1:
            core.reply(token, core.voter_change_response(
                ErrorCode.INVALID_REQUEST,
                f"cannot remove {req.voter_id}: it is the last voter"))
            return
        new = self._upgraded_set().without(req.voter_id)
        timeout = core.config.request_timeout_ms
        self._append_voter_change(new, token, timeout, f"remove voter {req.voter_id}")

    def handle_update_voter(self, token: object, req: UpdateVoterRequest) -> None:
        core = self.core
        if not self._precheck(token, req.cluster_id):
            return
        if not core.history.dynamic:
            core.reply(token, core.voter_change_response(
                ErrorCode.NONE, "static voters (kraft.version 0): endpoints come from "
                "controller.quorum.voters"))
            return
        voter = self._listed_voter(token, req.voter_id, req.directory_id)
        if voter is None:
            return
        if not req.endpoints:
            core.reply(token, core.voter_change_response(
                ErrorCode.INVALID_REQUEST, "an updated voter needs at least one listener"))
            return
        if not req.min_kraft_version <= KRAFT_VERSION_DYNAMIC <= req.max_kraft_version:
            core.reply(token, core.voter_change_response(
                ErrorCode.INVALID_REQUEST,
                f"voter {req.voter_id} supports kraft.version {req.min_kraft_version}-"
                f"{req.max_kraft_version}, the quorum runs {KRAFT_VERSION_DYNAMIC}"))
            return
        if voter.endpoints == req.endpoints:
            core.reply(token, core.voter_change_response(ErrorCode.NONE, None))
            return
        new = core.voter_set.with_voter(Voter(voter.node_id, voter.directory_id, req.endpoints))
        self._append_voter_change(new, token, core.config.request_timeout_ms,
                                  f"update voter {req.voter_id} endpoints")

    def _listed_voter(
        self, token: object, voter_id: int, directory_id: uuid.UUID
    ) -> Voter | None:
        """The voter (voter_id, directory_id) of the set in force; None after answering
        VOTER_NOT_FOUND (Kafka's code) when the set has no such voter. A voter the set lists
        without a directory (a static set) is matched against the directory the leader has
        seen it fetch with, when it has: otherwise any directory id would match it, and a
        request naming another incarnation of that voter would remove the one running."""
        core = self.core
        voter = self._upgraded_set().get(voter_id)
        if voter is None or not voter.matches(voter_id, directory_id):
            core.reply(token, core.voter_change_response(
                ErrorCode.VOTER_NOT_FOUND,
                f"{voter_id}@{directory_text(directory_id)} is not part of the set "
                f"of voters {core.voter_set.describe()}"))
            return None
        return voter

    def _upgraded_set(self) -> VoterSet:
        """The set in force, with the directory ids learnt from Fetches where it has none."""
        return self.core.voter_set.with_directories(self.voter_directories())

    def _append_voter_change(
        self, new: VoterSet, token: object, timeout_ms: int, description: str
    ) -> None:
        core = self.core
        offset = core.log.end_offset()
        if not core.history.dynamic:
            core.log.append(kraft_version_batch(offset, core.epoch, KRAFT_VERSION_DYNAMIC,
                                                core.now))
            offset += 1
        batch = voters_batch(offset, core.epoch, new, core.now)
        core.log.append(batch)
        core.history.on_batch(batch)
        ls = core.leader_state
        assert ls is not None
        ls.voter_change.start(PendingVoterChange(token, offset, core.now + timeout_ms, description))
        core.events.append(VoterEvent(VoterStep.CHANGE_APPENDED,
                                      f"{description}: VotersRecord at offset {offset}"))
        core.voters_changed()
        core.request_flush()
        self.leadership.answer_parked(hw_moved=False)
        # A removal may commit on the offsets already seen.
        self.leadership.maybe_advance_high_watermark()
