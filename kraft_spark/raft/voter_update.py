"""KIP-853's UpdateRaftVoter (api key 82): a voter's listeners follow the voter.

A VotersRecord names where each voter listens. When a voter comes back on another port or
host (a Spark executor of a new barrier generation, a moved process), the record is stale.
The voter itself asks the leader to correct it:

* **Follower side.** A voter of a dynamic set (kraft.version 1) that follows a leader it has
  fetched from, and whose entry in the set in force lists other endpoints than the ones it
  listens on (``local_endpoints``, given by the shell; empty: unknown, never sent), sends
  UpdateRaftVoter to the leader, at most once per ``UPDATE_RETRY_MS`` and never with a request
  still out. The leader's VotersRecord then reaches it by Fetch, which ends the matter.
* **Leader side** (Kafka's UpdateVoterHandler, in its order): only the leader, one voter change
  at a time (as AddRaftVoter: ``MembershipMixin._precheck``); with a static set (kraft.version 0)
  there is nothing to update (endpoints come from ``controller.quorum.voters``): answered NONE;
  the voter must be in the set with that directory id (VOTER_NOT_FOUND), name at least one
  listener (INVALID_REQUEST), and support kraft.version 1 (INVALID_REQUEST). Endpoints equal to
  the set's are answered NONE at once; otherwise a VotersRecord with the new endpoints is
  appended and the request answered when it commits, like any change.
"""

from __future__ import annotations

from kraft_spark.raft.base import InFlight
from kraft_spark.raft.events import VoterEvent, VoterStep
from kraft_spark.raft.membership import MembershipMixin
from kraft_spark.raft.messages import ErrorCode, UpdateVoterRequest, VoterChangeResponse
from kraft_spark.raft.voter_set import KRAFT_VERSION_DYNAMIC, Endpoint, Voter

UPDATE_RETRY_MS = 5_000


class VoterUpdateMixin(MembershipMixin):
    local_endpoints: tuple[Endpoint, ...] = ()
    next_voter_update_at = 0
    voter_update_in_flight = False

    # ------------------------------------------------------------------ leader

    def handle_update_voter(self, token: object, req: UpdateVoterRequest) -> None:
        if not self._precheck(token, req.cluster_id):
            return
        if not self.history.dynamic:
            self.reply(token, self.voter_change_response(
                ErrorCode.NONE, "static voters (kraft.version 0): endpoints come from "
                "controller.quorum.voters"))
            return
        voter = self._listed_voter(token, req.voter_id, req.directory_id)
        if voter is None:
            return
        if not req.endpoints:
            self.reply(token, self.voter_change_response(
                ErrorCode.INVALID_REQUEST, "an updated voter needs at least one listener"))
            return
        if not req.min_kraft_version <= KRAFT_VERSION_DYNAMIC <= req.max_kraft_version:
            self.reply(token, self.voter_change_response(
                ErrorCode.INVALID_REQUEST,
                f"voter {req.voter_id} supports kraft.version {req.min_kraft_version}-"
                f"{req.max_kraft_version}, the quorum runs {KRAFT_VERSION_DYNAMIC}"))
            return
        if voter.endpoints == req.endpoints:
            self.reply(token, self.voter_change_response(ErrorCode.NONE, None))
            return
        new = self.voter_set.with_voter(Voter(voter.node_id, voter.directory_id, req.endpoints))
        self._append_voter_change(new, token, self.config.request_timeout_ms,
                                  f"update voter {req.voter_id} endpoints")

    # ------------------------------------------------------------------ follower

    def maybe_update_own_endpoints(self) -> None:
        """Called on a follower's poll: ask the leader to correct our listed endpoints."""
        if (
            not self.local_endpoints
            or self.following is None  # not a Follower
            or not self.following.fetched
            or not self.history.dynamic
            or self.voter_update_in_flight
            or self.now < self.next_voter_update_at
        ):
            return
        voter = self.voter_set.get(self.node_id)
        if voter is None or not voter.matches(self.node_id, self.directory_id):
            return
        if voter.endpoints == self.local_endpoints:
            return
        self.voter_update_in_flight = True
        self.next_voter_update_at = self.now + UPDATE_RETRY_MS
        self.events.append(VoterEvent(
            VoterStep.ENDPOINTS_ASKED,
            f"our listed endpoints {[str(e) for e in voter.endpoints]} are not ours "
            f"{[str(e) for e in self.local_endpoints]}: asking leader {self.leader_id}"))
        request = UpdateVoterRequest(
            self.cluster_id, self.epoch, self.node_id, self.directory_id, self.local_endpoints)
        self.send(self.leader_id, "update", request, self.config.request_timeout_ms)

    def handle_update_voter_response(self, resp: VoterChangeResponse) -> None:
        self.voter_update_in_flight = False
        if resp.error != ErrorCode.NONE:
            self.events.append(VoterEvent(VoterStep.ENDPOINTS_REFUSED,
                                          f"{resp.error.name} {resp.message}"))

    def on_update_voter_lost(self, pending: InFlight) -> None:
        """The request failed or timed out: retried after ``UPDATE_RETRY_MS``."""
        self.voter_update_in_flight = False
